// Sources of the batched UDP socket's two worker threads (plain JavaScript: workers do not load
// TypeScript under tsx), with the layout constants written into them, and how
// batched-udp-socket.ts starts them.

import { Worker } from 'node:worker_threads';
import {
  BLOCK_MESSAGES,
  BLOCK_START,
  CLOSING,
  CMSG_ROOM,
  CONSUMED,
  DATAGRAMS_SENT,
  EAGAIN,
  EINTR,
  EINVAL,
  EIO,
  EMSGSIZE,
  ENOBUFS,
  ENOPROTOOPT,
  GSO_OFF_ERRNO,
  IOVEC,
  MESSAGES_SENT,
  MESSAGE_PACKETS,
  MMSGHDR,
  MSG_CONTROL,
  MSG_CONTROLLEN,
  MSG_DONTWAIT,
  MSG_FLAGS,
  MSG_IOV,
  MSG_IOVLEN,
  MSG_LEN,
  MSG_NAME,
  MSG_NAMELEN,
  MSG_TRUNC,
  PRODUCED,
  PRODUCER_LOCK,
  PARKED,
  PARK_MS,
  OWN_TAKES,
  SENDER_SLEEPING,
  SEND_BLOCKED,
  SEND_BLOCKS,
  SEND_CALLS,
  SEND_CLOSING,
  SEND_ERRORS,
  SIMULATED_FULL,
  SOCKADDR_IN,
  SOL_UDP,
  SUBMITTED,
  UDP_GRO,
  VERDICTS_PER_SLOT,
  WAKE_PENDING,
  WORKER_ERRNO,
  WRITTEN,
  IcrcVerdict,
} from './batched-udp-layout.ts';

/** What a worker posts once it runs (its other messages go to the socket). */
const WORKER_READY = -1;

/**
 * Starts one of the socket's workers from its source: `started` resolves once it runs (or has
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

/** Source code of the receive worker (plain JS: workers do not load TypeScript under tsx). */
export const RECEIVE_WORKER = `
'use strict';
const { workerData, parentPort } = require('node:worker_threads');
const koffi = require(workerData.koffiPath);
const libc = koffi.load('libc.so.6');
const recvmmsg = libc.func('int recvmmsg(int, intptr_t, unsigned int, int, intptr_t)');
const memmove = libc.func('intptr_t memmove(void *, void *, size_t)');
const { fd, slots, slotBytes, batch, records, iovecs, addresses, controls, data, verdicts } = workerData;
const ring = workerData.ring;
const control = new Int32Array(ring, 0, 16);
const bytes = new Uint8Array(ring);
const words = new Uint32Array(ring);
const base = Number(memmove(bytes, bytes, 0));
const put64 = (offset, value) => { words[offset >>> 2] = value % 4294967296; words[(offset >>> 2) + 1] = Math.floor(value / 4294967296); };
for (let i = 0; i < slots; i++) {
  const record = records + i * ${MMSGHDR};
  put64(record + ${MSG_NAME}, base + addresses + i * ${SOCKADDR_IN});
  put64(record + ${MSG_IOV}, base + iovecs + i * ${IOVEC});
  put64(record + ${MSG_IOVLEN}, 1);
  put64(record + ${MSG_CONTROL}, base + controls + i * ${CMSG_ROOM});
  put64(iovecs + i * ${IOVEC}, base + data + i * slotBytes);
  put64(iovecs + i * ${IOVEC} + 8, slotBytes);
}
const poll = libc.func('int poll(intptr_t, unsigned long, int)');
const pollfd = workerData.pollfd;
words[pollfd >>> 2] = fd;
bytes[pollfd + 4] = 1; // events = POLLIN
// ICRC check (checkRoceIcrc): the prefix (LRH stand-in, masked IPv4 and UDP headers with this
// socket as destination) gets each datagram's source and lengths; its CRC is kept per source
// and length. The BTH's masked octet is set to ones in the slot for the one native call over
// the packet, then restored.
const crc32 = workerData.crc32Path === undefined ? undefined : require(workerData.crc32Path).crc32;
// ISA-L's CRC-32 where the main thread found libisal.so.2: it reads the slot in place, ~8x faster.
let isalCrc;
if (crc32 !== undefined && workerData.isal === true) {
  try {
    isalCrc = koffi.load('libisal.so.2').func('uint32_t crc32_gzip_refl(uint32_t, intptr_t, uint64_t)');
  } catch {
    isalCrc = undefined;
  }
}
const prefix = workerData.icrcPrefix;
let prefixKey = -1;
let prefixLength = -1;
let prefixCrc = 0;
const SOL_UDP = ${SOL_UDP};
const UDP_GRO = ${UDP_GRO};
function check(slot) {
  const record = records + slot * ${MMSGHDR};
  const length = words[(record + ${MSG_LEN}) >>> 2];
  const at = verdicts + slot * ${VERDICTS_PER_SLOT};
  bytes.fill(0, at, at + ${VERDICTS_PER_SLOT});
  if ((words[(record + ${MSG_FLAGS}) >>> 2] & ${MSG_TRUNC}) !== 0 || length > slotBytes) return;
  let segment = length;
  const cmsg = controls + slot * ${CMSG_ROOM};
  if (words[(record + ${MSG_CONTROLLEN}) >>> 2] >= 20 && words[(cmsg + 8) >>> 2] === SOL_UDP && words[(cmsg + 12) >>> 2] === UDP_GRO && words[(cmsg + 16) >>> 2] > 0) {
    segment = words[(cmsg + 16) >>> 2];
  }
  const name = addresses + slot * ${SOCKADDR_IN};
  const key = ((bytes[name + 4] << 24) | (bytes[name + 5] << 16) | (bytes[name + 6] << 8) | bytes[name + 7]) >>> 0;
  const source = key * 65536 + ((bytes[name + 2] << 8) | bytes[name + 3]);
  const first = data + slot * slotBytes;
  for (let k = 0, offset = 0; offset < length && k < ${VERDICTS_PER_SLOT}; k++, offset += segment) {
    const size = Math.min(segment, length - offset);
    if (size < 16) continue; // shorter than BTH + ICRC: left to the receiver's checks
    if (source !== prefixKey || size !== prefixLength) {
      prefixKey = source;
      prefixLength = size;
      const total = 28 + size;
      prefix[10] = total >>> 8;
      prefix[11] = total & 0xff;
      prefix.set(bytes.subarray(name + 4, name + 8), 20);
      prefix[28] = bytes[name + 2];
      prefix[29] = bytes[name + 3];
      prefix[32] = (size + 8) >>> 8;
      prefix[33] = (size + 8) & 0xff;
      prefixCrc = crc32(prefix, 0);
    }
    const packet = first + offset;
    const congestion = bytes[packet + 4];
    bytes[packet + 4] = 0xff;
    const crc = isalCrc !== undefined ? isalCrc(prefixCrc, base + packet, size - 4) : crc32(bytes.subarray(packet, packet + size - 4), prefixCrc);
    bytes[packet + 4] = congestion;
    const end = packet + size - 4;
    const carried = (bytes[end] | (bytes[end + 1] << 8) | (bytes[end + 2] << 16) | (bytes[end + 3] << 24)) >>> 0;
    bytes[at + k] = crc === carried ? ${IcrcVerdict.Good} : ${IcrcVerdict.Bad};
  }
}
parentPort.postMessage(${WORKER_READY}); // ready: open() resolves only now, so no packet waits for a worker to start
while (Atomics.load(control, ${CLOSING}) === 0) {
  if (slots - ((Atomics.load(control, ${PRODUCED}) - Atomics.load(control, ${CONSUMED})) | 0) === 0) {
    Atomics.wait(control, ${CONSUMED}, Atomics.load(control, ${CONSUMED}), 200);
    continue;
  }
  // Wait in poll, not in recvmmsg: the datagrams stay in the kernel's queue until a producer
  // holding the lock takes them, so the main thread can take them itself (receiveNow).
  const ready = poll(base + pollfd, 1, 200);
  if (Atomics.load(control, ${CLOSING}) !== 0) break;
  if (ready <= 0) continue;
  while (Atomics.compareExchange(control, ${PRODUCER_LOCK}, 0, 1) !== 0) Atomics.wait(control, ${PRODUCER_LOCK}, 1, 50);
  const produced = Atomics.load(control, ${PRODUCED});
  const free = slots - ((produced - Atomics.load(control, ${CONSUMED})) | 0);
  const start = (produced >>> 0) % slots;
  const count = Math.min(free, slots - start, batch);
  let got = 0;
  if (count > 0) {
    // The kernel overwrites both lengths with what it wrote: give every slot its full room again.
    for (let i = start; i < start + count; i++) {
      const record = records + i * ${MMSGHDR};
      words[(record + ${MSG_NAMELEN}) >>> 2] = ${SOCKADDR_IN};
      put64(record + ${MSG_CONTROLLEN}, ${CMSG_ROOM});
    }
    got = recvmmsg(fd, base + records + start * ${MMSGHDR}, count, ${MSG_DONTWAIT}, 0);
    if (got > 0 && crc32 !== undefined) for (let i = start; i < start + got; i++) check(i);
    if (got > 0) Atomics.store(control, ${PRODUCED}, (produced + got) | 0);
  }
  const errno = got < 0 ? koffi.errno() : 0;
  Atomics.store(control, ${PRODUCER_LOCK}, 0);
  Atomics.notify(control, ${PRODUCER_LOCK});
  if (got > 0) {
    if (Atomics.compareExchange(control, ${WAKE_PENDING}, 0, 1) === 0) parentPort.postMessage(0);
    continue;
  }
  if (got === 0 || errno === ${EAGAIN}) {
    // The main thread took them: it reads this socket itself while its own sockets write to it
    // (receiveOwn). Waiting in poll now would be woken by each of those datagrams again, so the
    // worker sleeps, and sleeps again as long as the main thread took some meanwhile.
    for (let seen = -1; Atomics.load(control, ${CLOSING}) === 0; ) {
      const taken = Atomics.load(control, ${OWN_TAKES});
      if (taken === seen) break;
      seen = taken;
      Atomics.wait(control, ${PARKED}, 0, ${PARK_MS});
    }
    continue;
  }
  if (errno === ${EINTR}) continue;
  Atomics.store(control, ${WORKER_ERRNO}, errno);
  parentPort.postMessage(errno);
  break;
}
`;

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
