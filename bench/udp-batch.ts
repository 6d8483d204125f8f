// What batching UDP system calls buys a RoCE link, measured without the RC layer: a socket
// pair moving 4112-octet datagrams (one RoCE packet at path MTU 4096) with a bounded window, as
// bench/rnic.ts's "udp" row does, (a) through node:dgram (one send, one callback and one Buffer
// per datagram) and (b) through BatchedUdpSocket (sendmmsg from a queue flushed once per turn,
// recvmmsg in a worker into a shared ring). Prints CPU seconds per GiB (both ends, every thread of
// this process: the load-robust figure) and wall-clock Gbit/s, interleaved A/B over `--runs`.
//
//   node --import tsx bench/udp-batch.ts [--mib 256] [--runs 3]

import dgram from 'node:dgram';
import { parseCommandLine } from '../host/commands/command-line.ts';
import { BatchedUdpSocket } from '../host/rnic/rc/batched-udp-socket.ts';

const DATAGRAM = 4112;
const WINDOW = 128;
const CREDIT_EVERY = 32;

const parsed = parseCommandLine('bench/udp-batch', 'usage: node --import tsx bench/udp-batch.ts [--mib 256] [--runs 3]', process.argv.slice(2), {
  mib: { type: 'string', default: '256' },
  runs: { type: 'string', default: '3' },
});
if (typeof parsed === 'number') process.exit(parsed);
const totalBytes = Number(parsed.values.mib) * 2 ** 20;
const runs = Number(parsed.values.runs);

/** Moves `count` datagrams with `send`, the receiver granting credit every CREDIT_EVERY; returns when all arrived. */
interface Pair {
  send(datagram: Uint8Array): void;
  sendCredit(): void;
  onData(handler: () => void): void;
  onCredit(handler: () => void): void;
  close(): Promise<void>;
}

async function dgramPair(): Promise<Pair> {
  const open = async (): Promise<dgram.Socket> => {
    const socket = dgram.createSocket('udp4');
    await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
    socket.setRecvBufferSize(4 << 20);
    socket.setSendBufferSize(4 << 20);
    return socket;
  };
  const sender = await open();
  const receiver = await open();
  const senderPort = sender.address().port;
  const receiverPort = receiver.address().port;
  const credit = Buffer.alloc(4);
  return {
    send: (datagram) => sender.send(datagram, receiverPort, '127.0.0.1'),
    sendCredit: () => receiver.send(credit, senderPort, '127.0.0.1'),
    onData: (handler) => receiver.on('message', handler),
    onCredit: (handler) => sender.on('message', handler),
    close: async () => {
      await Promise.all([sender, receiver].map((socket) => new Promise<void>((resolve) => socket.close(() => resolve()))));
    },
  };
}

async function batchedPair(): Promise<Pair> {
  const sender = await BatchedUdpSocket.open();
  const receiver = await BatchedUdpSocket.open();
  const credit = new Uint8Array(4);
  const empty = new Uint8Array(0);
  return {
    send: (datagram) => sender.send(receiver.local, datagram, empty, empty),
    sendCredit: () => receiver.send(sender.local, credit, empty, empty),
    onData: (handler) => receiver.setReceiver(handler),
    onCredit: (handler) => sender.setReceiver(handler),
    close: async () => {
      if (process.env.UDP_BATCH_STATS) console.log(JSON.stringify(sender.stats), JSON.stringify(receiver.stats));
      await Promise.all([sender.close(), receiver.close()]);
    },
  };
}

/** Returns the datagrams that arrived (the kernel may drop a few when a receive buffer overflows). */
async function pump(pair: Pair, count: number): Promise<number> {
  // Off-heap like a registered region, so the batched sender points at it instead of copying.
  const datagram = new Uint8Array(new SharedArrayBuffer(DATAGRAM)).fill(0x5a);
  let received = 0;
  let acknowledged = 0;
  let sent = 0;
  let finish: () => void = () => undefined;
  const done = new Promise<void>((resolve) => (finish = resolve));
  const fill = (): void => {
    while (sent < count && sent - acknowledged < WINDOW) {
      pair.send(datagram);
      sent++;
    }
  };
  pair.onData(() => {
    received++;
    if (received === count) finish();
    else if (received % CREDIT_EVERY === 0) pair.sendCredit();
  });
  pair.onCredit(() => {
    acknowledged += CREDIT_EVERY;
    fill();
  });
  // A datagram the kernel dropped would stall the window: top it up from a timer, and end once
  // everything was sent and nothing more arrives.
  let lastReceived = -1;
  const refill = setInterval(() => {
    if (sent === count && received === lastReceived) finish();
    lastReceived = received;
    acknowledged = Math.max(acknowledged, received);
    fill();
  }, 20);
  fill();
  await done;
  clearInterval(refill);
  return received;
}

interface Result {
  cpuSecondsPerGiB: number;
  gbps: number;
  lost: number;
}

async function measure(open: () => Promise<Pair>): Promise<Result> {
  const pair = await open();
  const count = Math.ceil(totalBytes / DATAGRAM);
  await pump(pair, Math.min(count, 4096)); // warm-up: JIT, socket buffers
  await pair.close();
  const measured = await open();
  const cpu = process.cpuUsage();
  const started = process.hrtime.bigint();
  const received = await pump(measured, count);
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const used = process.cpuUsage(cpu);
  await measured.close();
  const gib = (received * DATAGRAM) / 2 ** 30;
  if (process.env.UDP_BATCH_STATS) console.log(`user ${(used.user / 1e6 / gib).toFixed(2)} s/GiB, system ${(used.system / 1e6 / gib).toFixed(2)} s/GiB`);
  return { cpuSecondsPerGiB: (used.user + used.system) / 1e6 / gib, gbps: (received * DATAGRAM * 8) / seconds / 1e9, lost: count - received };
}

async function main(): Promise<void> {
  for (let run = 1; run <= runs; run++) {
    const plain = await measure(dgramPair);
    const batched = await measure(batchedPair);
    console.log(
      `run ${run}: node:dgram ${plain.cpuSecondsPerGiB.toFixed(2)} CPU-s/GiB ${plain.gbps.toFixed(2)} Gb/s (${plain.lost} lost); ` +
        `batched ${batched.cpuSecondsPerGiB.toFixed(2)} CPU-s/GiB ${batched.gbps.toFixed(2)} Gb/s (${batched.lost} lost); ` +
        `CPU ratio dgram/batched ${(plain.cpuSecondsPerGiB / batched.cpuSecondsPerGiB).toFixed(2)}`,
    );
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(`bench/udp-batch: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exit(1);
  },
);
