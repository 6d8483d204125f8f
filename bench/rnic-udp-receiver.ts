// The receiving end of bench/rnic.ts's two-thread UDP row (bench/rnic-udp-threads.ts): a
// BatchedUdpSocket on a worker thread of its own, as the RoCE two-thread rows' responder has,
// counting the datagrams it takes in shared memory and crediting the sender with one datagram
// per CREDIT_EVERY, as bench/udp-pairs.ts's one-thread pump does. It stays until told to close.
import { parentPort, workerData } from 'node:worker_threads';
import { BatchedUdpSocket } from '../host/rnic/rc/batched-udp-socket.ts';
import { osThreadId } from './rnic-counters.ts';

export interface UdpReceiverSetup {
  /** Int32Array over it: [0] datagrams taken since the sender last reset it, [1] the run's datagrams (the last is credited too). */
  received: SharedArrayBuffer;
  creditEvery: number;
}

/** What the receiver posts: its port and OS thread id (0 where unknown) once listening, then `closed`. */
export type UdpReceiverMessage = { type: 'listening'; port: number; threadId: number } | { type: 'closed' };

/** What it is told: where credits go (the sender's port), or to close. */
export type UdpReceiverCommand = { type: 'sender'; port: number } | { type: 'close' };

async function main(): Promise<void> {
  const port = parentPort;
  if (port === null) throw new Error('bench/rnic-udp-receiver runs as a worker thread');
  const setup = workerData as UdpReceiverSetup;
  const received = new Int32Array(setup.received);
  const socket = await BatchedUdpSocket.open();
  const credit = new Uint8Array(4);
  const empty = new Uint8Array(0);
  let sender = { address: '127.0.0.1', port: 0 };
  socket.setReceiver(() => {
    const count = Atomics.add(received, 0, 1) + 1;
    if ((count % setup.creditEvery === 0 || count === Atomics.load(received, 1)) && sender.port !== 0) socket.send(sender, credit, empty, empty);
  });
  port.on('message', (command: UdpReceiverCommand) => {
    if (command.type === 'sender') sender = { address: '127.0.0.1', port: command.port };
    else
      void socket.close().then(() => {
        port.postMessage({ type: 'closed' } satisfies UdpReceiverMessage);
        port.close();
      });
  });
  port.postMessage({ type: 'listening', port: socket.local.port, threadId: osThreadId() } satisfies UdpReceiverMessage);
}

main().catch((error: unknown) => {
  // Thrown from a tick of its own, so the worker's 'error' event carries it to bench/rnic.
  process.nextTick(() => {
    throw error;
  });
});
