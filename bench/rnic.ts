// RNIC throughput over loopback TCP: RDMA Write and RDMA Read at 16 KiB, 256 KiB and 1 MiB,
// CRC on and off, next to a plain Node socket pair pumping the same bytes with the same write
// sizes. Both ends of every run live in this process (one event loop), for the plain pair too.
// Writes bench/results/rnic.json: [{ op: "write"|"read"|"tcp", transport, crc, loss, size, gbps }, ...]
// plus informational "tcp-onread" rows and CPU time per GiB. RoCE rows run the RC transport over
// loopback UDP (path MTU 4096), loss-free and through an ImpairedLink dropping 1 % of packets,
// next to a plain Node UDP socket pair pumping datagrams of one RoCE packet's size ("udp": what
// node:dgram itself can carry, one datagram per send, the RoCE rows' ceiling).
//
//   node --import tsx bench/rnic.ts [--mib-per-run N] [--trials N] [--sizes 16384,262144] [--output path]

import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import dgram from 'node:dgram';
import net from 'node:net';
import { parseCommandLine } from '../host/commands/command-line.ts';
import { Access, createRnic, ImpairedLink, UdpLink, type AnyQueuePair, type CompletionQueue, type MemoryRegion } from '../host/rnic/verbs.ts';

interface Row {
  /**
   * tcp: the plain socket pair ('data' events, Node's default). tcp-onread: the same with the
   * receiver reading into one reused 64 KiB buffer through `onread`, the cheapest way Node
   * offers to drain a socket (a stricter baseline, informational).
   */
  op: 'write' | 'read' | 'tcp' | 'tcp-onread' | 'udp';
  /** iwarp: RDMAP/DDP/MPA over TCP; roce: IB RC over RoCEv2 on a UDP socket. */
  transport: 'iwarp' | 'roce';
  crc: boolean;
  /** Fraction of packets the RoCE link drops on purpose (0 for TCP rows). */
  loss: number;
  size: number;
  gbps: number;
  /** Best of `trials` interleaved runs, each moving `bytes`. */
  bytes: number;
  trials: number;
  /** Least CPU time (user + system, both ends) this process spent per GiB moved. */
  cpuMsPerGiB: number;
}

const parsed = parseCommandLine(
  'bench/rnic',
  'usage: node --import tsx bench/rnic.ts [--mib-per-run 128] [--trials 3] [--sizes 16384,262144,1048576] [--output path]',
  process.argv.slice(2),
  {
    'mib-per-run': { type: 'string', default: '128' },
    trials: { type: 'string', default: '3' },
    sizes: { type: 'string', default: `${16 * 1024},${256 * 1024},${1024 * 1024}` },
    output: { type: 'string', default: defaultOutput() },
  },
);
if (typeof parsed === 'number') process.exit(parsed);
const { values } = parsed;

/** bench/results/rnic.json of the source tree, whether this runs from bench/ or dist/bench/. */
function defaultOutput(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  const root = here.endsWith(join('dist', 'bench')) ? join(here, '..', '..') : join(here, '..');
  return join(root, 'bench', 'results', 'rnic.json');
}

const bytesPerRun = Number(values['mib-per-run']) * 1024 * 1024;
const trials = Number(values.trials);
const sizes = values.sizes.split(',').map(Number);
if (!(bytesPerRun > 0) || !(trials > 0) || sizes.some((size) => !(size > 0))) {
  console.error('bench/rnic: --mib-per-run, --trials and --sizes must be positive numbers');
  process.exit(2);
}

const gbps = (bytes: number, nanoseconds: bigint): number => (bytes * 8) / Number(nanoseconds);

/** A plain TCP socket pair: one side writes `size`-byte chunks, the other counts bytes. */
async function tcpRun(size: number, total: number): Promise<number> {
  const chunk = Buffer.alloc(size, 0x5a);
  let received = 0;
  let finish: () => void = () => undefined;
  const done = new Promise<void>((resolve) => (finish = resolve));
  const server = net.createServer((socket) => {
    socket.on('data', (data: Buffer) => {
      received += data.length;
      if (received >= total) finish();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const client = net.connect((server.address() as net.AddressInfo).port, '127.0.0.1');
  client.setNoDelay(true);
  await new Promise<void>((resolve) => client.once('connect', resolve));
  const started = process.hrtime.bigint();
  let sent = 0;
  while (sent < total) {
    const ok = client.write(chunk);
    sent += size;
    if (!ok) await new Promise<void>((resolve) => client.once('drain', resolve));
  }
  await done;
  const elapsed = process.hrtime.bigint() - started;
  client.destroy();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return gbps(total, elapsed);
}

/** The same pump, received through `onread` into one reused buffer (no allocation per read). */
async function tcpOnreadRun(size: number, total: number): Promise<number> {
  const chunk = Buffer.alloc(size, 0x5a);
  let received = 0;
  let finish: () => void = () => undefined;
  const done = new Promise<void>((resolve) => (finish = resolve));
  let sender: net.Socket | undefined;
  const connected = new Promise<void>((resolve) => {
    const server = net.createServer((socket) => {
      sender = socket;
      socket.setNoDelay(true);
      server.close();
      resolve();
    });
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as net.AddressInfo).port;
      receiver = net.connect({
        port,
        host: '127.0.0.1',
        onread: {
          buffer: Buffer.alloc(64 * 1024),
          callback: (length: number) => {
            received += length;
            if (received >= total) finish();
            return true;
          },
        },
      });
    });
  });
  let receiver: net.Socket | undefined;
  await connected;
  const started = process.hrtime.bigint();
  let sent = 0;
  while (sent < total) {
    const ok = sender!.write(chunk);
    sent += size;
    if (!ok) await new Promise<void>((resolve) => sender!.once('drain', resolve));
  }
  await done;
  const elapsed = process.hrtime.bigint() - started;
  receiver?.destroy();
  sender?.destroy();
  return gbps(total, elapsed);
}

/** Octets of one RoCE packet at path MTU 4096 in the middle of a message: BTH, payload, ICRC. */
const ROCE_PACKET = 12 + 4096 + 4;

/**
 * A plain UDP socket pair: one side sends ROCE_PACKET-octet datagrams, one per send() as the
 * RoCE link does, the other counts them. Like the RC transport it keeps a bounded number in
 * flight (the receiver answers every 64th datagram; a loopback socket drops what overflows its
 * buffer), so it measures what node:dgram carries, not how much the kernel can discard.
 */
async function udpRun(total: number): Promise<number> {
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
  const count = Math.ceil(total / ROCE_PACKET);
  const datagram = Buffer.alloc(ROCE_PACKET, 0x5a);
  const credit = Buffer.alloc(4);
  const window = 128;
  let received = 0;
  let acknowledged = 0;
  let sent = 0;
  let finish: () => void = () => undefined;
  const done = new Promise<void>((resolve) => (finish = resolve));
  const pump = (): void => {
    while (sent < count && sent - acknowledged < window) {
      sender.send(datagram, receiverPort, '127.0.0.1');
      sent++;
    }
  };
  receiver.on('message', () => {
    received++;
    if (received === count) finish();
    else if (received % 64 === 0) receiver.send(credit, senderPort, '127.0.0.1');
  });
  sender.on('message', () => {
    acknowledged += 64;
    pump();
  });
  // A datagram the kernel dropped would stall the window: top it up from a timer.
  const refill = setInterval(() => {
    acknowledged = Math.max(acknowledged, received);
    pump();
  }, 5);
  const started = process.hrtime.bigint();
  pump();
  await done;
  const elapsed = process.hrtime.bigint() - started;
  clearInterval(refill);
  await Promise.all([sender, receiver].map((socket) => new Promise<void>((resolve) => socket.close(() => resolve()))));
  return gbps(count * ROCE_PACKET, elapsed);
}

interface RdmaPair {
  client: { qp: AnyQueuePair; cq: CompletionQueue; mr: MemoryRegion };
  server: { qp: AnyQueuePair; cq: CompletionQueue; mr: MemoryRegion };
  close(): Promise<void>;
}

async function rdmaPair(crc: boolean, regionSize: number): Promise<RdmaPair> {
  const make = (name: string) => {
    const rnic = createRnic({ name });
    const pd = rnic.allocPd();
    const mr = rnic.registerMemory(pd, new SharedArrayBuffer(regionSize), { access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead });
    const cq = rnic.createCq({ depth: 65536 });
    const qp = rnic.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 65536, ird: 16, ord: 16 });
    return { rnic, qp, cq, mr };
  };
  const server = make('target');
  const client = make('initiator');
  const listener = await server.rnic.listen({ host: '127.0.0.1', port: 0 });
  const accepted = listener.next().then((request) => request.accept(server.qp, { crc }));
  await client.rnic.connect(client.qp, { host: '127.0.0.1', port: listener.port, crc });
  await accepted;
  return {
    client,
    server,
    async close() {
      client.qp.destroy();
      server.qp.destroy();
      await listener.close();
    },
  };
}

/** Two RNICs joined by RC over loopback UDP. With loss, each side's link drops that fraction of what it sends. */
async function rocePair(loss: number, regionSize: number): Promise<RdmaPair> {
  const make = async (name: string, seed: number) => {
    const rnic = createRnic({ name });
    const udp = await UdpLink.open();
    await rnic.openRoce({ link: loss > 0 ? new ImpairedLink(udp, { loss, seed }) : udp });
    const pd = rnic.allocPd();
    const mr = rnic.registerMemory(pd, new SharedArrayBuffer(regionSize), { access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead });
    const cq = rnic.createCq({ depth: 65536 });
    const qp = rnic.createRcQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 65536, ird: 16, ord: 16 });
    return { rnic, qp, cq, mr };
  };
  const server = await make('target', 3);
  const client = await make('initiator', 5);
  const listener = await server.rnic.listenRc({ host: '127.0.0.1', port: 0 });
  // Loss-free, the IB default ACK timeout (~67 ms); lossy, 10 ms, so a lost last packet of a
  // burst costs little on loopback.
  const setup = loss > 0 ? { pathMtu: 4096 as const, ackTimeoutMs: 10 } : { pathMtu: 4096 as const };
  const accepted = listener.next().then((request) => request.accept(server.qp, setup));
  await client.rnic.connectRc(client.qp, { host: '127.0.0.1', port: listener.port, ...setup });
  await accepted;
  await listener.close();
  return {
    client,
    server,
    async close() {
      await client.rnic.close();
      await server.rnic.close();
    },
  };
}

async function drain(cq: CompletionQueue, count: number): Promise<void> {
  let seen = 0;
  while (seen < count) {
    const completions = cq.poll(count - seen);
    for (const completion of completions) {
      if (completion.status !== 0) throw new Error(`completion failed: ${completion.error ?? completion.status}`);
    }
    seen += completions.length;
    if (seen < count) await cq.wait();
  }
}

/** RDMA Writes of `size` octets, then a Send; timed until the Send arrives (all Writes placed). */
async function writeRun(pair: RdmaPair, size: number, total: number): Promise<number> {
  const { client, server } = pair;
  const count = Math.ceil(total / size);
  // Keep about 16 MiB in flight; signal every 16th Write so the send queue keeps moving.
  const window = Math.max(4, Math.ceil((16 << 20) / size));
  const signalEvery = Math.max(1, Math.min(16, window >> 1));
  server.qp.postRecv({ wrId: 0, sgList: [] });
  const started = process.hrtime.bigint();
  let posted = 0;
  let signaled = 0;
  let completed = 0;
  while (posted < count) {
    while (posted < count && posted - completed * signalEvery < window) {
      const last = posted === count - 1;
      const signal = last || (posted + 1) % signalEvery === 0;
      client.qp.postSend({
        wrId: posted,
        opcode: 'RDMA_WRITE',
        sgList: [{ lkey: client.mr.lkey, offset: 0, length: size }],
        remote: { stag: server.mr.rkey, taggedOffset: 0 },
        signaled: signal,
      });
      if (signal) signaled++;
      posted++;
    }
    if (posted < count) {
      await drain(client.cq, 1);
      completed++;
    }
  }
  client.qp.postSend({ wrId: 'end' as unknown as number, opcode: 'SEND', sgList: [], signaled: false });
  await drain(server.cq, 1);
  const elapsed = process.hrtime.bigint() - started;
  await drain(client.cq, signaled - completed);
  return gbps(count * size, elapsed);
}

/** RDMA Reads of `size` octets, up to ORD outstanding; timed until the last completes. */
async function readRun(pair: RdmaPair, size: number, total: number): Promise<number> {
  const { client, server } = pair;
  const count = Math.ceil(total / size);
  const window = 16;
  const started = process.hrtime.bigint();
  let posted = 0;
  let completed = 0;
  while (completed < count) {
    while (posted < count && posted - completed < window) {
      client.qp.postSend({
        wrId: posted,
        opcode: 'RDMA_READ',
        sgList: [{ lkey: client.mr.lkey, offset: 0, length: size }],
        remote: { stag: server.mr.rkey, taggedOffset: 0 },
      });
      posted++;
    }
    const before = completed;
    for (const completion of client.cq.poll(1024)) {
      if (completion.status !== 0) throw new Error(`read failed: ${completion.error ?? completion.status}`);
      completed++;
    }
    if (completed === before) await client.cq.wait();
  }
  const elapsed = process.hrtime.bigint() - started;
  void server;
  return gbps(count * size, elapsed);
}

interface Measurement {
  gbps: number;
  cpuMsPerGiB: number;
}

/** Runs `run` and measures wall-clock throughput and this process's CPU time per GiB moved. */
async function measure(bytes: number, run: () => Promise<number>): Promise<Measurement> {
  const cpu = process.cpuUsage();
  const gbpsMeasured = await run();
  const used = process.cpuUsage(cpu);
  return { gbps: gbpsMeasured, cpuMsPerGiB: (used.user + used.system) / 1000 / (bytes / 2 ** 30) };
}

async function main(): Promise<void> {
  const largest = Math.max(...sizes);
  // Warm up every path (JIT, socket buffer autotuning) before anything is timed.
  await tcpRun(largest, 32 << 20);
  await tcpOnreadRun(largest, 32 << 20);
  await udpRun(32 << 20);
  const pairs = new Map<boolean, RdmaPair>();
  for (const crc of [false, true]) pairs.set(crc, await rdmaPair(crc, largest));
  const roce = new Map<number, RdmaPair>();
  for (const loss of [0, 0.01]) roce.set(loss, await rocePair(loss, largest));
  for (const pair of [...pairs.values(), ...roce.values()]) {
    await writeRun(pair, largest, 32 << 20);
    await readRun(pair, largest, 32 << 20);
  }
  type Key = `${Row['op']}/${Row['transport']}/${boolean}/${number}`;
  type Case = { op: Row['op']; transport: Row['transport']; crc: boolean; loss: number; run: (size: number) => Promise<number> };
  const cases: Case[] = [
    { op: 'tcp', transport: 'iwarp', crc: false, loss: 0, run: (size) => tcpRun(size, bytesPerRun) },
    { op: 'tcp-onread', transport: 'iwarp', crc: false, loss: 0, run: (size) => tcpOnreadRun(size, bytesPerRun) },
    { op: 'udp', transport: 'roce', crc: false, loss: 0, run: () => udpRun(bytesPerRun) },
    { op: 'write', transport: 'iwarp', crc: false, loss: 0, run: (size) => writeRun(pairs.get(false)!, size, bytesPerRun) },
    { op: 'write', transport: 'iwarp', crc: true, loss: 0, run: (size) => writeRun(pairs.get(true)!, size, bytesPerRun) },
    { op: 'read', transport: 'iwarp', crc: false, loss: 0, run: (size) => readRun(pairs.get(false)!, size, bytesPerRun) },
    { op: 'read', transport: 'iwarp', crc: true, loss: 0, run: (size) => readRun(pairs.get(true)!, size, bytesPerRun) },
    // RoCE always carries the ICRC (crc: true), the iWARP rows' CRC-on counterpart.
    { op: 'write', transport: 'roce', crc: true, loss: 0, run: (size) => writeRun(roce.get(0)!, size, bytesPerRun) },
    { op: 'read', transport: 'roce', crc: true, loss: 0, run: (size) => readRun(roce.get(0)!, size, bytesPerRun) },
    { op: 'write', transport: 'roce', crc: true, loss: 0.01, run: (size) => writeRun(roce.get(0.01)!, size, bytesPerRun) },
    { op: 'read', transport: 'roce', crc: true, loss: 0.01, run: (size) => readRun(roce.get(0.01)!, size, bytesPerRun) },
  ];
  const key = (entry: Case): Key => `${entry.op}/${entry.transport}/${entry.crc}/${entry.loss}`;
  const rows: Row[] = [];
  for (const size of sizes) {
    // Trials interleave the cases, so a burst of load from elsewhere hits them alike; each
    // case keeps its best run.
    const bestOf = new Map<Key, Measurement>();
    for (let trial = 0; trial < trials; trial++) {
      for (const entry of cases) {
        const result = await measure(bytesPerRun, () => entry.run(size));
        const previous = bestOf.get(key(entry));
        bestOf.set(key(entry), {
          gbps: Math.max(previous?.gbps ?? 0, result.gbps),
          cpuMsPerGiB: Math.min(previous?.cpuMsPerGiB ?? Infinity, result.cpuMsPerGiB),
        });
      }
    }
    for (const entry of cases) {
      const measured = bestOf.get(key(entry))!;
      rows.push({
        op: entry.op,
        transport: entry.transport,
        crc: entry.crc,
        loss: entry.loss,
        size,
        gbps: round(measured.gbps),
        bytes: bytesPerRun,
        trials,
        cpuMsPerGiB: Math.round(measured.cpuMsPerGiB),
      });
      console.log(
        `${entry.op.padEnd(5)} ${entry.transport.padEnd(5)} crc=${String(entry.crc).padEnd(5)} loss=${String(entry.loss).padEnd(4)} size=${String(size).padStart(8)}  ${measured.gbps.toFixed(2).padStart(6)} Gb/s  ${measured.cpuMsPerGiB.toFixed(0).padStart(5)} ms CPU/GiB`,
      );
    }
    const tcp = bestOf.get('tcp/iwarp/false/0')!.gbps;
    const onread = bestOf.get('tcp-onread/iwarp/false/0')!.gbps;
    const write = bestOf.get('write/iwarp/false/0')!.gbps;
    console.log(
      `size ${size}: RDMA Write (CRC off) at ${((100 * write) / tcp).toFixed(0)}% of the plain socket pair, ` +
        `${((100 * write) / onread).toFixed(0)}% of the onread socket pair`,
    );
    const udp = bestOf.get('udp/roce/false/0')!.gbps;
    for (const op of ['write', 'read'] as const) {
      const iwarp = bestOf.get(`${op}/iwarp/false/0`)!.gbps;
      const iwarpCrc = bestOf.get(`${op}/iwarp/true/0`)!.gbps;
      const clean = bestOf.get(`${op}/roce/true/0`)!.gbps;
      const lossy = bestOf.get(`${op}/roce/true/0.01`)!.gbps;
      console.log(
        `size ${size}: RoCE ${op} at ${(clean / iwarp).toFixed(2)} of iWARP (target 0.8; ${(clean / iwarpCrc).toFixed(2)} of iWARP with CRC), ` +
          `${(clean / udp).toFixed(2)} of the UDP socket pair; at 1% loss ${(lossy / clean).toFixed(2)} of loss-free (target 0.5)`,
      );
    }
  }
  for (const pair of [...pairs.values(), ...roce.values()]) await pair.close();
  const output = values.output;
  mkdirSync(dirname(output), { recursive: true });
  writeFileSync(output, `${JSON.stringify(rows, null, 2)}\n`);
  console.log(`wrote ${output}`);
}

function round(value: number): number {
  return Math.round(value * 100) / 100;
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(`bench/rnic: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exit(1);
  },
);
