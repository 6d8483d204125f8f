// The plain Node.js baseline for kbtp's large blocks: a server thread answering each 16-octet
// request on a TCP connection with a block of `size` octets from one preallocated buffer, and
// `connections` clients on the main thread keeping one request each in flight, reading with
// `onread` into a fixed buffer (as kbtp's RNIC does). No protocol, no copies but the kernel's:
// what Node itself moves over loopback in the pattern a 1-in-flight LOAD has (node_socket_gbps).
import net from 'node:net';
import { Worker } from 'node:worker_threads';

const REQUEST = 16;

// The server runs in a worker thread, as the target's connections do; plain JS (no tsx in workers).
const SERVER = `
const net = require('node:net');
const { parentPort, workerData } = require('node:worker_threads');
const block = Buffer.alloc(workerData.size, 7);
const server = net.createServer((socket) => {
  socket.setNoDelay(true);
  let pending = 0;
  socket.on('data', (chunk) => {
    pending += chunk.length;
    while (pending >= ${REQUEST}) { pending -= ${REQUEST}; socket.write(block); }
  });
  socket.on('error', () => socket.destroy());
});
server.listen(0, '127.0.0.1', () => parentPort.postMessage(server.address().port));
parentPort.on('message', () => server.close(() => process.exit(0)));
`;

/** Gbit/s of block data received over `seconds` (after `warmupMs`), `connections` x 1 request in flight. */
export async function nodeSocketGbps(size: number, connections: number, seconds: number, warmupMs = 500): Promise<number> {
  const worker = new Worker(SERVER, { eval: true, workerData: { size } });
  try {
    const port = await new Promise<number>((resolve, reject) => {
      worker.once('message', (message: number) => resolve(message));
      worker.once('error', reject);
    });
    const request = Buffer.alloc(REQUEST, 1);
    let measuring = false;
    let bytes = 0;
    let stopped = false;
    const sockets: net.Socket[] = [];
    const done: Array<Promise<void>> = [];
    for (let i = 0; i < connections; i++) {
      let received = 0;
      const readBuffer = Buffer.alloc(256 * 1024);
      const socket = net.connect({
        host: '127.0.0.1',
        port,
        onread: {
          buffer: readBuffer,
          callback: (length: number) => {
            received += length;
            if (measuring) bytes += length;
            if (received >= size) {
              received -= size;
              if (!stopped) socket.write(request);
            }
            return true;
          },
        },
      } as net.NetConnectOpts);
      socket.setNoDelay(true);
      sockets.push(socket);
      done.push(
        new Promise<void>((resolve, reject) => {
          socket.once('connect', () => {
            socket.write(request);
            resolve();
          });
          socket.once('error', reject);
        }),
      );
    }
    await Promise.all(done);
    await new Promise((resolve) => setTimeout(resolve, warmupMs));
    measuring = true;
    const started = performance.now();
    await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
    measuring = false;
    const elapsed = (performance.now() - started) / 1000;
    stopped = true;
    for (const socket of sockets) socket.destroy();
    return (bytes * 8) / elapsed / 1e9;
  } finally {
    worker.postMessage('stop');
    await new Promise((resolve) => {
      const timer = setTimeout(() => void worker.terminate().then(resolve), 2000);
      worker.once('exit', () => {
        clearTimeout(timer);
        resolve(undefined);
      });
    });
  }
}
