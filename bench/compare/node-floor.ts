// The Node.js floor of a 1-in-flight request (issue 16, session 9): what Node itself costs per
// request, per thread, in the exchange a kbtp LOAD makes on loopback, with no protocol at all. A
// worker thread (as the target's connections run in one) answers each 64-octet request with one
// writev of [16, size, 4, 64] octets (a LOAD's DDP header, block, CRC field and COMPLETION Send)
// through HandleWriter; the main thread (as kbtp bench's sessions) reads the answer with
// `onread` into a reused buffer and writes the next request through HandleWriter: the same system
// calls as kbtp's request (a read and a write per side, libuv's epoll calls), the same Node glue,
// none of the RNIC, initiator, engine or benchmark JavaScript. CPU per request per thread from
// /proc/self/task/TID/schedstat, as kbtp bench reports its own; kbtp's figures minus these are
// what kbtp's JavaScript costs on each side, and these against Redis's say what Node allows.
//
//   make bench-build && node dist/bench/compare/node-floor.js [--size 16K] [--sessions 1] [--seconds 3] [--rounds 1]
//
// With --sessions N the client keeps N connections with one request in flight each (make compare's
// x16 rows): both threads then stay busy, and the request rate is what Node's own per-read and
// per-write cost allows, the ceiling for any protocol written on it.
//
// The worker thread loads the built dist/host/rnic/handle-writer.js (workers do not run TypeScript).
import net from 'node:net';
import { existsSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { Worker } from 'node:worker_threads';
import { parseCommandLine } from '../../host/commands/command-line.ts';
import { parseInteger, parseSizes, UsageError } from '../../host/bench/options.ts';
import { LatencyHistogram } from '../../host/bench/histogram.ts';
import { HandleWriter } from '../../host/rnic/handle-writer.ts';

const REQUEST = 64;
/** The answer's parts besides the block: DDP tagged header, CRC field, COMPLETION Send. */
const ANSWER_OVERHEAD = 16 + 4 + 64;

// Plain JavaScript (workers do not start from TypeScript under tsx); the writer is the built one.
const SERVER = `
const net = require('node:net');
const { readFileSync } = require('node:fs');
const { parentPort, workerData } = require('node:worker_threads');
import(workerData.writer).then(({ HandleWriter }) => {
  const parts = [new Uint8Array(16), new Uint8Array(workerData.size).fill(7), new Uint8Array(4), new Uint8Array(64)];
  const server = net.createServer({ pauseOnConnect: true }, (accepted) => {
    // The handle moves to a socket made with onread, as SocketChannel does.
    const handle = accepted._handle;
    accepted._handle = null;
    accepted.destroy();
    let pending = 0;
    let writer;
    const socket = new net.Socket({ handle, readable: true, writable: true, onread: { buffer: Buffer.alloc(65536), callback: (length) => {
      pending += length;
      while (pending >= ${REQUEST}) { pending -= ${REQUEST}; writer.write(parts, 4); }
      return true;
    } } });
    socket.setNoDelay(true);
    writer = HandleWriter.for(socket, () => undefined);
    socket.on('error', () => socket.destroy());
  });
  server.listen(0, '127.0.0.1', () => {
    const tid = Number(readFileSync('/proc/thread-self/stat', 'utf8').split(' ')[0]);
    parentPort.postMessage({ port: server.address().port, tid });
  });
  parentPort.on('message', () => server.close(() => process.exit(0)));
});
`;

export interface FloorFigures {
  requests: number;
  requestsPerSecond: number;
  /** CPU per request, microseconds: the main thread (client) and the worker (server). */
  clientUsPerOp: number;
  serverUsPerOp: number;
  p50Us: number;
  p99Us: number;
}

/** dist/host/rnic/handle-writer.js, found from the built tree (dist/bench/compare) or the source tree (bench/compare). */
function builtWriter(): string {
  for (const relative of ['../../host/rnic/handle-writer.js', '../../dist/host/rnic/handle-writer.js']) {
    const url = new URL(relative, import.meta.url);
    if (existsSync(url)) return url.href;
  }
  throw new UsageError('dist/host/rnic/handle-writer.js is missing: run make bench-build first');
}

const threadNs = (tid: number): number => Number(readFileSync(`/proc/self/task/${tid}/schedstat`, 'utf8').split(' ')[0]);

/** One run: `seconds` measured after `warmupMs`, `sessions` connections with one request in flight each. */
export async function nodeFloor(size: number, seconds: number, warmupMs = 500, sessions = 1): Promise<FloorFigures> {
  const writerUrl = builtWriter();
  const worker = new Worker(SERVER, { eval: true, workerData: { size, writer: writerUrl } });
  const sockets: net.Socket[] = [];
  try {
    const { port, tid } = await new Promise<{ port: number; tid: number }>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
    const request = [new Uint8Array(REQUEST).fill(1)];
    const whole = size + ANSWER_OVERHEAD;
    const histogram = new LatencyHistogram();
    let answered = 0;
    let measuring = false;
    const writers: HandleWriter[] = [];
    const sentAt: number[] = [];
    for (let session = 0; session < sessions; session++) {
      let received = 0;
      const connected = net.connect({
        host: '127.0.0.1',
        port,
        onread: {
          buffer: Buffer.alloc(65536),
          callback: (length: number): boolean => {
            received += length;
            if (received >= whole) {
              received -= whole;
              const now = performance.now();
              if (measuring) {
                answered += 1;
                histogram.record((now - sentAt[session]!) * 1e6);
              }
              sentAt[session] = now;
              writers[session]!.write(request, 1);
            }
            return true;
          },
        },
      } as net.NetConnectOpts);
      sockets.push(connected);
      connected.setNoDelay(true);
      await new Promise<void>((resolve, reject) => {
        connected.once('connect', resolve);
        connected.once('error', reject);
      });
      const writer = HandleWriter.for(connected, () => undefined);
      if (writer === undefined) throw new UsageError('this Node offers no socket handle to write to (HandleWriter)');
      writers.push(writer);
      sentAt.push(0);
    }
    for (let session = 0; session < sessions; session++) {
      sentAt[session] = performance.now();
      writers[session]!.write(request, 1);
    }
    await new Promise((resolve) => setTimeout(resolve, warmupMs));
    const client0 = threadNs(process.pid);
    const server0 = threadNs(tid);
    const started = performance.now();
    measuring = true;
    await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
    measuring = false;
    const elapsed = (performance.now() - started) / 1000;
    const client = threadNs(process.pid) - client0;
    const server = threadNs(tid) - server0;
    const requests = Math.max(1, answered);
    return {
      requests: answered,
      requestsPerSecond: answered / elapsed,
      clientUsPerOp: client / requests / 1000,
      serverUsPerOp: server / requests / 1000,
      p50Us: histogram.percentileNs(0.5) / 1000,
      p99Us: histogram.percentileNs(0.99) / 1000,
    };
  } finally {
    for (const socket of sockets) socket.destroy();
    worker.postMessage('stop');
    await new Promise((resolve) => worker.once('exit', resolve));
  }
}

async function main(): Promise<number> {
  const usage = 'usage: node dist/bench/compare/node-floor.js [--size 16K] [--sessions 1] [--seconds 3] [--rounds 1]';
  const parsed = parseCommandLine('bench/compare/node-floor', usage, process.argv.slice(2), {
    size: { type: 'string' },
    sessions: { type: 'string' },
    seconds: { type: 'string' },
    rounds: { type: 'string' },
  });
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const [size = 16 * 1024] = parseSizes(values.size ?? '16K', '--size');
  const seconds = parseInteger(values.seconds, '--seconds', 3, 1);
  const rounds = parseInteger(values.rounds, '--rounds', 1, 1);
  const sessions = parseInteger(values.sessions, '--sessions', 1, 1);
  console.log(`node floor: ${size}-octet answers to ${REQUEST}-octet requests, ${sessions} connection(s) x 1 in flight, ${seconds} s per round`);
  for (let round = 1; round <= rounds; round++) {
    const before = loadavg()[0]!.toFixed(2);
    const figures = await nodeFloor(size, seconds, 500, sessions);
    console.log(
      `round ${round}: ${figures.requestsPerSecond.toFixed(0)} req/s, p50 ${figures.p50Us.toFixed(1)} us, p99 ${figures.p99Us.toFixed(1)} us, ` +
        `CPU per request client ${figures.clientUsPerOp.toFixed(2)} us, server ${figures.serverUsPerOp.toFixed(2)} us (load ${before} -> ${loadavg()[0]!.toFixed(2)})`,
    );
  }
  return 0;
}

if (import.meta.url === new URL(process.argv[1] ?? '', 'file:').href) {
  main().then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      console.error(`node-floor: ${error instanceof Error ? error.message : String(error)}`);
      process.exitCode = error instanceof UsageError ? 2 : 1;
    },
  );
}
