// Source of the batched UDP socket's send worker thread (plain JavaScript: workers do not load
// TypeScript under tsx), with the layout constants written into it, and how batched-udp-socket.ts
// starts it.

import { Worker } from 'node:worker_threads';
import {
  BLOCK_MESSAGES,
  BLOCK_START,
  DATAGRAMS_SENT,
  EAGAIN,
  EINTR,
  EINVAL,
  EIO,
  EMSGSIZE,
  ENOBUFS,
  ENOPROTOOPT,
  GSO_OFF_ERRNO,
  MESSAGES_SENT,
  MESSAGE_PACKETS,
  MMSGHDR,
  MSG_DONTWAIT,
  SENDER_SLEEPING,
  SEND_BLOCKED,
  SEND_BLOCKS,
  SEND_CALLS,
  SEND_CLOSING,
  SEND_ERRORS,
  SIMULATED_FULL,
  SOCKADDR_IN,
  SUBMITTED,
  WRITTEN,
} from './batched-udp-layout.ts';

/** What the worker posts once it runs (its other messages go to the socket). */
const WORKER_READY = -1;

/**
 * Starts the socket's worker from its source: `started` resolves once it runs (or has
 * ended), `exited` when it ends; its other messages go to `onMessage`, an error that ends it to
 * `onError`.
 */
export function startWorker<Message>(
  source: string,
  workerData: Record<string, unknown>,
  onMessage: (value: Message) => void,
  onError: (message: string) => void,
): { started: Promise<void>; exited: Promise<void> } {
  // The parent's --import hooks (tsx) would only slow the worker's start: it is plain JS.
  const worker = new Worker(source, { eval: true, execArgv: [], workerData, stdout: false, stderr: false });
  let ready: () => void = () => undefined;
  const started = new Promise<void>((resolve) => (ready = resolve));
  worker.on('message', (value: Message | typeof WORKER_READY) => {
    if (value === WORKER_READY) ready();
    else onMessage(value);
  });
  const exited = new Promise<void>((resolve) => {
    worker.once('exit', () => {
      ready();
      resolve();
    });
    worker.once('error', (error: Error) => onError(error.message));
  });
  return { started, exited };
}

/**
 * Source of the send worker: writes each submitted block with sendmmsg (the records hold
 * absolute addresses), waits 1 ms and tries again while the socket buffer is full, turns GSO off
 * when the kernel refuses a GSO message, and reports any other failed message (errno and
 * destination) to the main thread, which tells the socket's error handler.
 */
export const SEND_WORKER = `
'use strict';
const { workerData, parentPort } = require('node:worker_threads');
const koffi = require(workerData.koffiPath);
const libc = koffi.load('libc.so.6');
const sendmmsg = libc.func('int sendmmsg(int, intptr_t, unsigned int, int)');
const memmove = libc.func('intptr_t memmove(void *, void *, size_t)');
const { fd, blockBytes, namesAt } = workerData;
const control = new Int32Array(workerData.control);
const bytes = new Uint8Array(workerData.blocks);
const base = Number(memmove(bytes, bytes, 0));
parentPort.postMessage(${WORKER_READY}); // ready
for (;;) {
  const submitted = Atomics.load(control, ${SUBMITTED});
  const written = Atomics.load(control, ${WRITTEN});
  if (submitted === written) {
    if (Atomics.load(control, ${SEND_CLOSING}) !== 0) break;
    // Announce the sleep, then look once more: a submission after the announcement wakes it,
    // one before it is seen here (sequentially consistent atomics).
    Atomics.store(control, ${SENDER_SLEEPING}, 1);
    if (Atomics.load(control, ${SUBMITTED}) === submitted && Atomics.load(control, ${SEND_CLOSING}) === 0) {
      Atomics.wait(control, ${SUBMITTED}, submitted, 200);
    }
    Atomics.store(control, ${SENDER_SLEEPING}, 0);
    continue;
  }
  const block = written % ${SEND_BLOCKS};
  const blockAt = block * blockBytes;
  const count = control[${BLOCK_MESSAGES} + block];
  const packets = ${MESSAGE_PACKETS} + block * workerData.sendBatch;
  let sent = control[${BLOCK_START} + block];
  while (sent < count && Atomics.load(control, ${SEND_CLOSING}) < 2) {
    let taken;
    let errno = 0;
    if (Atomics.load(control, ${SIMULATED_FULL}) > 0) {
      Atomics.sub(control, ${SIMULATED_FULL}, 1);
      taken = -1;
      errno = ${EAGAIN};
    } else {
      taken = sendmmsg(fd, base + blockAt + sent * ${MMSGHDR}, count - sent, ${MSG_DONTWAIT});
      if (taken < 0) errno = koffi.errno();
    }
    Atomics.add(control, ${SEND_CALLS}, 1);
    if (taken > 0) {
      let datagrams = 0;
      for (let m = sent; m < sent + taken; m++) datagrams += control[packets + m];
      Atomics.add(control, ${DATAGRAMS_SENT}, datagrams);
      Atomics.add(control, ${MESSAGES_SENT}, taken);
      sent += taken;
      continue;
    }
    if (errno === ${EAGAIN} || errno === ${ENOBUFS} || errno === ${EINTR}) {
      // The socket buffer is full: try again shortly (UDP has no writability event to wait for).
      Atomics.add(control, ${SEND_BLOCKED}, 1);
      Atomics.wait(control, ${SEND_CLOSING}, Atomics.load(control, ${SEND_CLOSING}), 1);
      continue;
    }
    const failed = sent++;
    if (control[packets + failed] > 1 && (errno === ${EINVAL} || errno === ${EMSGSIZE} || errno === ${ENOPROTOOPT} || errno === ${EIO})) {
      // This kernel or route cannot segment (no UDP_SEGMENT, or a segment above the route's
      // MTU): the main thread sends one datagram per message from now on; RC retransmits this one.
      Atomics.compareExchange(control, ${GSO_OFF_ERRNO}, 0, errno);
      continue;
    }
    // This message cannot go (e.g. EMSGSIZE, an unreachable destination): drop and report it.
    Atomics.add(control, ${SEND_ERRORS}, 1);
    const name = blockAt + namesAt + failed * ${SOCKADDR_IN};
    parentPort.postMessage({ errno, address: bytes[name + 4] + '.' + bytes[name + 5] + '.' + bytes[name + 6] + '.' + bytes[name + 7], port: (bytes[name + 2] << 8) | bytes[name + 3] });
  }
  Atomics.store(control, ${WRITTEN}, (written + 1) | 0);
  Atomics.notify(control, ${WRITTEN});
}
`;
