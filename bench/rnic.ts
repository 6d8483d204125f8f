// RNIC throughput over loopback TCP: RDMA Write and RDMA Read at 16 KiB, 256 KiB and 1 MiB,
// CRC on and off, next to a plain Node socket pair pumping the same bytes with the same write
// sizes. Both ends of every run live in this process (one event loop), for the plain pair too.
// Writes bench/results/rnic.json: [{ op: "write"|"read"|"tcp", transport, crc, loss, size, gbps }, ...]
// plus informational "tcp-onread" rows and CPU time per GiB; RoCE Write/Read rows carry their
// throughput as a fraction of iWARP's with the CRC on and off (`ofIwarp`) and, lossy, of loss-free. RoCE rows run the RC transport over
// loopback UDP (path MTU 4096), loss-free and through an ImpairedLink dropping 1 % of packets,
// over the batched UDP link (link: "batched": sendmmsg/recvmmsg with GSO/GRO, the default where
// koffi loads), and loss-free once more over node:dgram's UdpLink (link: "dgram") for comparison;
// next to plain UDP socket pairs pumping datagrams of one RoCE packet's size (bench/udp-pairs.ts:
// "udp" through node:dgram, "udp-batched" through the batched socket: what each carries without RC),
// and the batched pair once more with its receiver on a thread of its own ("udp-batched", threads:
// 2; bench/rnic-udp-threads.ts): what the link carries where the two-thread RoCE rows run it;
// with --rows udp,threads also in the shapes of RC Writes and Reads of each size ("udp-batched",
// shape: "write" | "read": a Write's FIRST longer by its RETH, a Read's FIRST and LAST by their
// AETH, every packet of a short Write or Read so (ONLY packets), so GSO sends a message of its own
// for each FIRST): the link's own ceiling for the two-thread RoCE rows, with RC's work left out.
//
//   node --import tsx bench/rnic.ts [--mib-per-run N] [--threads-mib-per-run N] [--trials N] [--sizes 16384,262144] [--rows iwarp,roce] [--ops read] [--counters] [--output path]
//
// --rows runs some of the rows only (a quicker A/B): tcp (both plain TCP pairs), udp (the plain
// UDP pairs, the batched one on one thread and on two), iwarp (Write/Read, CRC off and on), roce (loss-free, the default link), roce-loss
// (1 % loss), roce-dgram (over node:dgram); --ops write or read measures one RDMA operation
// only. Ratios are printed where both of their rows ran. threads: Writes and Reads with the responder on a
// worker thread of its own (bench/rnic-responder.ts), iWARP (CRC off) and RoCE: the shape of a
// deployed target, whose initiators run elsewhere, so a round trip crosses what a deployed one
// crosses (with both ends on one thread, one thread does the work of both: docs/RNIC.md). Each of
// their trials moves --threads-mib-per-run (default 1 GiB, or --mib-per-run when that is given):
// 128 MiB lasted a few scheduler slices, too short to judge 0.8 by (bench/rnic-run-length.ts).
// --counters adds to every RDMA row the CPU time per GiB of the requester's thread, the
// responder's (two-thread rows) and the others, and to RoCE rows each side's RC and link counters
// (bench/rnic-counters.ts), printed under the row and kept in its JSON (`counters`).

import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import net from 'node:net';
import { parseCommandLine } from '../host/commands/command-line.ts';
import { loadBatchedUdp } from '../host/rnic/rc/batched-udp-libc.ts';
import { ImpairedLink, openUdpLink, type AnyQueuePair, type CompletionQueue, type MemoryRegion, type UdpLinkKind } from '../host/rnic/verbs.ts';
import { batchedPair, dgramPair, udpPairRun } from './udp-pairs.ts';
import { twoThreadUdpPair } from './rnic-udp-threads.ts';
import { iwarpEndpoint, roceEndpoint, type Endpoint } from './rnic-endpoint.ts';
import { spawnWorker } from '../host/util/spawn-worker.ts';
import type { ResponderCommand, ResponderMessage, ResponderSetup } from './rnic-responder.ts';
import {
  addCounters,
  addThreadCpu,
  counterLines,
  countersBetween,
  roceSideCounters,
  rowCounters,
  threadCpuBetween,
  threadSampler,
  type RoceSideCounters,
  type RowCounters,
  type RowThreadCpu,
} from './rnic-counters.ts';
import { checkoutRoot } from './checkout-root.ts';
import { DEFAULT_MIB_PER_RUN, DEFAULT_THREADS_MIB_PER_RUN, runLengths } from './rnic-run-length.ts';

interface Row {
  /**
   * tcp: the plain socket pair ('data' events, Node's default). tcp-onread: the same with the
   * receiver reading into one reused 64 KiB buffer through `onread`, the cheapest way Node
   * offers to drain a socket (a stricter baseline, informational).
   */
  op: 'write' | 'read' | 'tcp' | 'tcp-onread' | 'udp' | 'udp-batched';
  /** iwarp: RDMAP/DDP/MPA over TCP; roce: IB RC over RoCEv2 on a UDP socket. */
  transport: 'iwarp' | 'roce';
  crc: boolean;
  /** Fraction of packets the RoCE link drops on purpose (0 for TCP rows). */
  loss: number;
  /**
   * RoCE rows: the UDP link under RC: batched (sendmmsg/recvmmsg with GSO/GRO, the default) or
   * dgram (node:dgram, the fallback, kept for comparison).
   */
  link?: 'batched' | 'dgram';
  size: number;
  gbps: number;
  /** Best of `trials` interleaved runs, each moving `bytes` (two-thread rows: --threads-mib-per-run). */
  bytes: number;
  trials: number;
  /** Least CPU time (user + system, both ends) this process spent per GiB moved. */
  cpuMsPerGiB: number;
  /**
   * RoCE Write/Read rows: throughput as a fraction of the same operation and size over iWARP
   * with its CRC on (kbtp's iWARP default; RoCE always carries its ICRC) and with it off.
   */
  ofIwarp?: { crcOn: number; crcOff: number };
  /** RoCE rows with loss: throughput as a fraction of the same row loss-free. */
  ofLossFree?: number;
  /** 2: the responder (udp-batched: the receiver) ran on a worker thread of its own; absent: both ends on this thread. */
  threads?: 2;
  /** udp-batched two-thread rows: datagrams in the sizes of the packets of RC Writes or Reads of `size` (udp-pairs.ts DatagramShape), Gbit/s of their payload. */
  shape?: 'write' | 'read';
  /** Those rows: throughput as a fraction of the two-thread iWARP row of the same operation (CRC off). */
  shapeOfIwarpTwoThreads?: number;
  /** Two-thread RoCE rows: throughput as a fraction of the two-thread iWARP row of the same operation (CRC off). */
  ofIwarpTwoThreads?: number;
  /** --counters: CPU by thread and (RoCE) each side's RC and link counters, summed over the row's runs. */
  counters?: RowCounters;
  /**
   * iWARP Write/Read rows: the TCP congestion control of the pair's two sockets as `ss` reports
   * it ('reno', 'bbr', both as 'bbr/reno' where the ends differ; 'unknown' without ss). Under BBR,
   * loopback TCP is paced at about the rate a CPU-bound pair reaches, and the pacing timers cost
   * this VM enough CPU that iWARP's Reads run in a slow and a fast mode, 2-3x apart
   * (docs/notes/2026-12-02/issue-15-session13.md): the RoCE/iWARP ratios depend on it.
   */
  tcpCongestionControl?: string;
}

/** The host's default TCP congestion control (net.ipv4.tcp_congestion_control), or 'unknown'. */
function hostCongestionControl(): string {
  try {
    return readFileSync('/proc/sys/net/ipv4/tcp_congestion_control', 'utf8').trim() || 'unknown';
  } catch {
    return 'unknown';
  }
}

/**
 * The congestion control of the established TCP connections on loopback port `port` (both ends of
 * an iWARP pair: what the library set, or the host's default), from `ss -ti`; 'unknown' where ss
 * is missing or says nothing.
 */
function pairCongestionControl(port: number): string {
  try {
    const out = execFileSync('ss', ['-tinH', 'state', 'established', `( sport = :${port} or dport = :${port} )`], { encoding: 'utf8', timeout: 5000 });
    const names = new Set<string>();
    for (const match of out.matchAll(/\s([a-z][a-z0-9_]*)\s+wscale:/g)) names.add(match[1]!);
    return names.size === 0 ? 'unknown' : [...names].sort().join('/');
  } catch {
    return 'unknown';
  }
}

/** What --rows can name. */
const ROW_GROUPS = ['tcp', 'udp', 'iwarp', 'roce', 'roce-loss', 'roce-dgram', 'threads'] as const;
type RowGroup = (typeof ROW_GROUPS)[number];

const parsed = parseCommandLine(
  'bench/rnic',
  `usage: node --import tsx bench/rnic.ts [--mib-per-run ${DEFAULT_MIB_PER_RUN}] [--threads-mib-per-run ${DEFAULT_THREADS_MIB_PER_RUN}] [--trials 3] [--sizes 16384,262144,1048576] [--rows ${ROW_GROUPS.join(',')}] [--ops write,read] [--counters] [--output path]\n` +
    `  --threads-mib-per-run: MiB per trial of the rows with the responder on its own thread (default ${DEFAULT_THREADS_MIB_PER_RUN},\n` +
    '  or --mib-per-run when that is given): shorter trials last a few scheduler slices\n' +
    "  --counters: per RDMA row, CPU per GiB by thread (requester, responder, others) and, RoCE, each side's packets, ACKs, NAKs,\n" +
    '  retransmissions, timer expiries, system calls and wake-ups (printed under the row, kept in its JSON as `counters`)',
  process.argv.slice(2),
  {
    // No defaults here: runLengths tells a flag given from one left out.
    'mib-per-run': { type: 'string' },
    'threads-mib-per-run': { type: 'string' },
    trials: { type: 'string', default: '3' },
    sizes: { type: 'string', default: `${16 * 1024},${256 * 1024},${1024 * 1024}` },
    rows: { type: 'string', default: ROW_GROUPS.join(',') },
    ops: { type: 'string', default: 'write,read' },
    counters: { type: 'boolean', default: false },
    output: { type: 'string', default: defaultOutput() },
  },
);
if (typeof parsed === 'number') process.exit(parsed);
const { values } = parsed;

/** bench/results/rnic.json of the source tree, whether this runs from bench/ or dist/bench/. */
function defaultOutput(): string {
  return join(checkoutRoot, 'bench', 'results', 'rnic.json');
}

const lengths = runLengths(values['mib-per-run'], values['threads-mib-per-run']);
if (typeof lengths === 'string') {
  console.error(`bench/rnic: ${lengths}`);
  process.exit(2);
}
const { bytesPerRun, threadsBytesPerRun } = lengths;
const trials = Number(values.trials);
const sizes = values.sizes.split(',').map(Number);
if (!(trials > 0) || sizes.some((size) => !(size > 0))) {
  console.error('bench/rnic: --trials and --sizes must be positive numbers');
  process.exit(2);
}
const rowNames = values.rows.split(',').filter((name) => name !== '');
const unknownRow = rowNames.find((name) => !(ROW_GROUPS as readonly string[]).includes(name));
if (unknownRow !== undefined || rowNames.length === 0) {
  console.error(`bench/rnic: --rows takes a list of ${ROW_GROUPS.join(', ')}${unknownRow === undefined ? '' : ` (not ${unknownRow})`}`);
  process.exit(2);
}
const rowsRun = new Set(rowNames as RowGroup[]);
const opNames = values.ops.split(',').filter((name) => name !== '');
if (opNames.length === 0 || opNames.some((name) => name !== 'write' && name !== 'read')) {
  console.error('bench/rnic: --ops takes write, read or both');
  process.exit(2);
}
/** The RDMA operations measured, Write before Read whatever the order given. */
const ops = new Set((['write', 'read'] as const).filter((op) => opNames.includes(op)));
const countersWanted = values.counters === true;
/** What each path is warmed up with before anything is timed (no more than a run: a short --mib-per-run stays short). */
const warmUpBytes = Math.min(32 << 20, bytesPerRun);
/** The two-thread pairs' warm-up: longer, so that V8's compilers are done before their first trial. */
const threadsWarmUpBytes = Math.min(128 << 20, threadsBytesPerRun);

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

interface RdmaPair {
  client: { qp: AnyQueuePair; cq: CompletionQueue; mr: MemoryRegion };
  server: { qp: AnyQueuePair; cq: CompletionQueue; mr: MemoryRegion };
  /** iWARP: the listener's port (both ends' sockets are found by it). */
  port?: number;
  /** RoCE: both sides' counters now (--counters). */
  counters?: () => Promise<PairCounters>;
  close(): Promise<void>;
}

/** Each side's RC and link counters at one moment (RoCE pairs). */
interface PairCounters {
  requester: RoceSideCounters;
  responder: RoceSideCounters | undefined;
}

async function rdmaPair(crc: boolean, regionSize: number): Promise<RdmaPair> {
  const server = iwarpEndpoint('target', regionSize);
  const client = iwarpEndpoint('initiator', regionSize);
  const listener = await server.rnic.listen({ host: '127.0.0.1', port: 0 });
  const accepted = listener.next().then((request) => request.accept(server.qp, { crc }));
  await client.rnic.connect(client.qp, { host: '127.0.0.1', port: listener.port, crc });
  await accepted;
  return {
    client,
    server,
    port: listener.port,
    async close() {
      client.qp.destroy();
      server.qp.destroy();
      await listener.close();
    },
  };
}

/** Two RNICs joined by RC over loopback UDP. With loss, each side's link drops that fraction of what it sends. */
async function rocePair(loss: number, regionSize: number, udpLink: UdpLinkKind): Promise<RdmaPair> {
  const make = async (name: string, seed: number) => {
    const udp = await openUdpLink({ udpLink });
    const end = await roceEndpoint(name, regionSize, loss > 0 ? new ImpairedLink(udp, { loss, seed }) : udp);
    return { ...end, counters: () => roceSideCounters(end.rnic, end.qp, udp) };
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
    counters: async () => ({ requester: client.counters(), responder: server.counters() }),
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
async function writeRun(pair: RequesterPair, size: number, total: number): Promise<number> {
  const { client, remoteKey } = pair;
  const count = Math.ceil(total / size);
  // Keep about 16 MiB in flight; signal every 16th Write so the send queue keeps moving.
  const window = Math.max(4, Math.ceil((16 << 20) / size));
  const signalEvery = Math.max(1, Math.min(16, window >> 1));
  const sendArrived = await pair.expectSend();
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
        remote: { stag: remoteKey, taggedOffset: 0 },
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
  await sendArrived();
  const elapsed = process.hrtime.bigint() - started;
  await drain(client.cq, signaled - completed);
  return gbps(count * size, elapsed);
}

/**
 * The requester's end and the responder's region key, all a Read run needs; a Write run also asks
 * the responder for a receive (`expectSend`) and waits for the Send that ends the run in it.
 */
interface RequesterPair {
  client: { qp: AnyQueuePair; cq: CompletionQueue; mr: MemoryRegion };
  remoteKey: number;
  /** Posts a receive at the responder; resolves, once it is posted, to a wait for its completion. */
  expectSend(): Promise<() => Promise<void>>;
  /** RoCE: both sides' counters now (--counters). */
  counters?: () => Promise<PairCounters>;
  /** The responder's OS thread id when it runs on a thread of its own (the two-thread rows). */
  responderThread?: number;
  /** iWARP: the responder's listening port (both ends' sockets are found by it). */
  port?: number;
  close(): Promise<void>;
}

const requesterPairOf = (pair: RdmaPair): RequesterPair => ({
  client: pair.client,
  remoteKey: pair.server.mr.rkey,
  ...(pair.port === undefined ? {} : { port: pair.port }),
  ...(pair.counters === undefined ? {} : { counters: pair.counters }),
  async expectSend() {
    pair.server.qp.postRecv({ wrId: 0, sgList: [] });
    return () => drain(pair.server.cq, 1);
  },
  close: () => pair.close(),
});

/**
 * A requester on this thread and a responder on a worker thread of its own (bench/rnic-responder.ts),
 * iWARP or RoCE over the default UDP link, ORD/IRD 16 as in the one-thread pairs.
 */
async function twoThreadPair(transport: 'iwarp' | 'roce', regionSize: number, udpLink: UdpLinkKind): Promise<RequesterPair> {
  const extension = import.meta.url.endsWith('.ts') ? '.ts' : '.js';
  const setup: ResponderSetup = { transport, crc: false, regionSize, udpLink };
  const worker = spawnWorker(new URL(`./rnic-responder${extension}`, import.meta.url), { workerData: setup });
  const failed = new Promise<never>((_, reject) => worker.once('error', reject));
  const next = (): Promise<ResponderMessage> => Promise.race([new Promise<ResponderMessage>((resolve) => worker.once('message', resolve)), failed]);
  const tell = (command: ResponderCommand): void => worker.postMessage(command);
  const listening = await next();
  if (listening.type !== 'listening') throw new Error('bench/rnic: the responder thread did not listen');
  let end: Endpoint<AnyQueuePair>;
  let counters: (() => Promise<PairCounters>) | undefined;
  if (transport === 'roce') {
    const link = await openUdpLink({ udpLink });
    const roce = await roceEndpoint('initiator', regionSize, link);
    await roce.rnic.connectRc(roce.qp, { host: '127.0.0.1', port: listening.port, pathMtu: 4096 });
    end = roce;
    counters = async () => {
      const requester = roceSideCounters(roce.rnic, roce.qp, link);
      tell({ type: 'counters' });
      const reply = await next();
      if (reply.type !== 'counters') throw new Error(`bench/rnic: the responder thread answered ${reply.type} when asked for its counters`);
      return { requester, responder: reply.counters };
    };
  } else {
    const iwarp = iwarpEndpoint('initiator', regionSize);
    await iwarp.rnic.connect(iwarp.qp, { host: '127.0.0.1', port: listening.port, crc: false });
    end = iwarp;
  }
  const { rnic, qp, cq, mr } = end;
  return {
    client: { qp, cq, mr },
    remoteKey: listening.rkey,
    ...(counters === undefined ? {} : { counters }),
    ...(listening.threadId > 0 ? { responderThread: listening.threadId } : {}),
    ...(transport === 'iwarp' ? { port: listening.port } : {}),
    async expectSend() {
      tell({ type: 'expect-send' });
      if ((await next()).type !== 'ready') throw new Error('bench/rnic: the responder thread did not post its receive');
      return async () => {
        const received = await next();
        if (received.type !== 'received' || received.status !== 0)
          throw new Error(`bench/rnic: the closing Send failed at the responder (${JSON.stringify(received)})`);
      };
    },
    async close() {
      if (transport === 'roce') await rnic.close();
      else qp.destroy();
      const closed = next();
      tell({ type: 'close' });
      await closed;
      await worker.terminate();
    },
  };
}

/** RDMA Reads of `size` octets, up to ORD outstanding; timed until the last completes. */
/** A Write or a Read run: `total` octets in operations of `size`. */
function rdmaRun(op: 'write' | 'read', pair: RequesterPair, size: number, total: number): Promise<number> {
  return op === 'write' ? writeRun(pair, size, total) : readRun(pair, size, total);
}

async function readRun(pair: RequesterPair, size: number, total: number): Promise<number> {
  const { client, remoteKey } = pair;
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
        remote: { stag: remoteKey, taggedOffset: 0 },
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
  return gbps(count * size, elapsed);
}

interface Measurement {
  gbps: number;
  cpuMsPerGiB: number;
}

/** --counters: what a row's runs added up to. */
interface CountedRuns {
  bytes: number;
  requester?: RoceSideCounters;
  responder?: RoceSideCounters;
  cpu?: RowThreadCpu;
}

/** What a row's CPU is split by (--counters): its pair, whose other end may run on a thread of its own. */
interface ThreadSplit {
  responderThread?: number;
}

const samplers = new Map<ThreadSplit, ReturnType<typeof threadSampler>>();
/** One thread sampler per pair, the responder's thread told apart when it has one. */
function samplerFor(pair: ThreadSplit): ReturnType<typeof threadSampler> {
  if (!samplers.has(pair)) samplers.set(pair, threadSampler(pair.responderThread));
  return samplers.get(pair);
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
  const running = (group: RowGroup): boolean => rowsRun.has(group);
  // Warm up every path (JIT, socket buffer autotuning) before anything is timed.
  if (running('tcp')) {
    await tcpRun(largest, warmUpBytes);
    await tcpOnreadRun(largest, warmUpBytes);
  }
  // The batched link where koffi loads (it does on Linux x64/arm64 with glibc); elsewhere the
  // RoCE rows run over node:dgram only and say so.
  const batchedUnavailable = loadBatchedUdp();
  const batched = !(batchedUnavailable instanceof Error);
  if (!batched) console.log(`bench/rnic: batched UDP unavailable (${batchedUnavailable.message}); RoCE rows over node:dgram only`);
  const mainLink: UdpLinkKind = batched ? 'batched' : 'dgram';
  // Pairs stay open across runs, as the RDMA pairs do: a run measures moving data, not opening sockets.
  const plainUdp = running('udp') ? await dgramPair() : undefined;
  const batchedUdp = running('udp') && batched ? await batchedPair() : undefined;
  if (plainUdp !== undefined) await udpPairRun(plainUdp, warmUpBytes);
  if (batchedUdp !== undefined) await udpPairRun(batchedUdp, warmUpBytes);
  const twoThreadUdp = running('udp') && batched ? await twoThreadUdpPair() : undefined;
  if (twoThreadUdp !== undefined) await udpPairRun(twoThreadUdp, threadsWarmUpBytes);
  const pairs = new Map<boolean, RdmaPair>();
  if (running('iwarp')) for (const crc of [false, true]) pairs.set(crc, await rdmaPair(crc, largest));
  type RoceKey = `${UdpLinkKind}/${number}`;
  const roce = new Map<RoceKey, RdmaPair>();
  if (running('roce')) roce.set(`${mainLink}/0`, await rocePair(0, largest, mainLink));
  if (running('roce-loss')) roce.set(`${mainLink}/0.01`, await rocePair(0.01, largest, mainLink));
  if (running('roce-dgram') && batched) roce.set('dgram/0', await rocePair(0, largest, 'dgram'));
  for (const pair of [...pairs.values(), ...roce.values()]) for (const op of ops) await rdmaRun(op, requesterPairOf(pair), largest, warmUpBytes);
  const twoThreads = new Map<'iwarp' | 'roce', RequesterPair>();
  if (running('threads')) {
    for (const transport of ['iwarp', 'roce'] as const) twoThreads.set(transport, await twoThreadPair(transport, largest, mainLink));
    for (const pair of twoThreads.values()) for (const op of ops) await rdmaRun(op, pair, largest, threadsWarmUpBytes);
  }
  type Key = `${Row['op']}/${Row['transport']}/${boolean}/${number}/${string}`;
  type Case = {
    op: Row['op'];
    transport: Row['transport'];
    crc: boolean;
    loss: number;
    link?: Row['link'];
    threads?: 2;
    shape?: 'write' | 'read';
    run: (size: number) => Promise<number>;
    /** RDMA rows: the pair the run uses (--counters asks it for its counters and responder thread). */
    pair?: RequesterPair;
    /** Other two-thread rows: what their CPU is split by (--counters). */
    split?: ThreadSplit;
  };
  const rdmaCases = (transport: Row['transport'], crc: boolean, loss: number, pair: RdmaPair, link?: Row['link']): Case[] =>
    [...ops].map((op) => {
      const requesterPair = requesterPairOf(pair);
      return {
        op,
        transport,
        crc,
        loss,
        ...(link === undefined ? {} : { link }),
        run: (size: number) => rdmaRun(op, requesterPair, size, bytesPerRun),
        pair: requesterPair,
      };
    });
  const cases: Case[] = [];
  if (running('tcp')) {
    cases.push({ op: 'tcp', transport: 'iwarp', crc: false, loss: 0, run: (size) => tcpRun(size, bytesPerRun) });
    cases.push({ op: 'tcp-onread', transport: 'iwarp', crc: false, loss: 0, run: (size) => tcpOnreadRun(size, bytesPerRun) });
  }
  if (plainUdp !== undefined) cases.push({ op: 'udp', transport: 'roce', crc: false, loss: 0, run: () => udpPairRun(plainUdp, bytesPerRun) });
  if (batchedUdp !== undefined) cases.push({ op: 'udp-batched', transport: 'roce', crc: false, loss: 0, run: () => udpPairRun(batchedUdp, bytesPerRun) });
  if (twoThreadUdp !== undefined) {
    const split = twoThreadUdp.receiverThread === undefined ? {} : { responderThread: twoThreadUdp.receiverThread };
    cases.push({ op: 'udp-batched', transport: 'roce', crc: false, loss: 0, threads: 2, run: () => udpPairRun(twoThreadUdp, threadsBytesPerRun), split });
    if (running('threads')) {
      for (const op of ops) {
        cases.push({
          op: 'udp-batched',
          transport: 'roce',
          crc: false,
          loss: 0,
          threads: 2,
          shape: op,
          run: (size) => udpPairRun(twoThreadUdp, threadsBytesPerRun, { kind: op, size }),
          split,
        });
      }
    }
  }
  // Write then Read, CRC off then on, as before --rows: the order the interleaved trials keep.
  for (const op of ops) for (const [crc, pair] of pairs) cases.push(...rdmaCases('iwarp', crc, 0, pair).filter((entry) => entry.op === op));
  // RoCE always carries the ICRC (crc: true), the iWARP rows' CRC-on counterpart.
  for (const [roceKey, pair] of roce) {
    const [link, loss] = roceKey.split('/') as [UdpLinkKind, string];
    cases.push(...rdmaCases('roce', true, Number(loss), pair, link === 'dgram' ? 'dgram' : 'batched'));
  }
  for (const op of ops) {
    for (const [transport, pair] of twoThreads) {
      cases.push({
        op,
        transport,
        crc: transport === 'roce',
        loss: 0,
        ...(transport === 'roce' ? { link: mainLink } : {}),
        threads: 2,
        run: (size) => rdmaRun(op, pair, size, threadsBytesPerRun),
        pair,
      });
    }
  }
  const key = (entry: Case): Key =>
    `${entry.op}/${entry.transport}/${entry.crc}/${entry.loss}/${entry.link ?? ''}${entry.threads === 2 ? '+2t' : ''}${entry.shape === undefined ? '' : `+${entry.shape}`}`;
  const rows: Row[] = [];
  // What each iWARP pair's sockets run (the library's choice or the host's default), asked once.
  const congestionByPort = new Map<number, string>();
  const congestionOf = (pair: RequesterPair | undefined): string | undefined => {
    const port = pair?.port;
    if (port === undefined) return undefined;
    if (!congestionByPort.has(port)) congestionByPort.set(port, pairCongestionControl(port));
    return congestionByPort.get(port);
  };
  const iwarpPairs = cases.filter((entry) => entry.transport === 'iwarp').map((entry) => entry.pair);
  const used = new Set(iwarpPairs.map(congestionOf).filter((name) => name !== undefined));
  if (used.size > 0) {
    const names = [...used].join(', ');
    console.log(
      `bench/rnic: iWARP runs over loopback TCP with congestion control ${names} (host default ${hostCongestionControl()})${used.has('bbr') ? '; BBR paces loopback TCP: iWARP Reads flip between a slow and a fast mode' : ''}`,
    );
  }
  for (const size of sizes) {
    // Trials interleave the cases, so a burst of load from elsewhere hits them alike; each
    // case keeps its best run.
    const bestOf = new Map<Key, Measurement>();
    const counted = new Map<Key, CountedRuns>();
    for (let trial = 0; trial < trials; trial++) {
      for (const entry of cases) {
        const pair = countersWanted ? entry.pair : undefined;
        const split = countersWanted ? (entry.pair ?? entry.split) : undefined;
        const sampler = split === undefined ? undefined : samplerFor(split);
        const countersBefore = await pair?.counters?.();
        const cpuBefore = sampler?.sample();
        const bytes = entry.threads === 2 ? threadsBytesPerRun : bytesPerRun;
        const result = await measure(bytes, () => entry.run(size));
        const cpuAfter = sampler?.sample();
        const countersAfter = await pair?.counters?.();
        if (split !== undefined) {
          const sum = counted.get(key(entry)) ?? { bytes: 0 };
          sum.bytes += bytes;
          if (cpuBefore !== undefined && cpuAfter !== undefined)
            sum.cpu = addThreadCpu(sum.cpu, threadCpuBetween(cpuBefore, cpuAfter, split.responderThread !== undefined));
          if (countersBefore !== undefined && countersAfter !== undefined) {
            sum.requester = addCounters(sum.requester, countersBetween(countersBefore.requester, countersAfter.requester));
            if (countersBefore.responder !== undefined && countersAfter.responder !== undefined)
              sum.responder = addCounters(sum.responder, countersBetween(countersBefore.responder, countersAfter.responder));
          }
          counted.set(key(entry), sum);
        }
        const previous = bestOf.get(key(entry));
        bestOf.set(key(entry), {
          gbps: Math.max(previous?.gbps ?? 0, result.gbps),
          cpuMsPerGiB: Math.min(previous?.cpuMsPerGiB ?? Infinity, result.cpuMsPerGiB),
        });
      }
    }
    const at = (k: Key): Measurement | undefined => bestOf.get(k);
    /** a / b of two rows' throughput, when both ran. */
    const ratio = (a: Measurement | undefined, b: Measurement | undefined): number | undefined =>
      a === undefined || b === undefined ? undefined : a.gbps / b.gbps;
    const cpu = (m: Measurement | undefined): string => (m === undefined ? '-' : (m.cpuMsPerGiB / 1000).toFixed(2));
    for (const entry of cases) {
      const measured = bestOf.get(key(entry))!;
      const runs = counted.get(key(entry));
      const counters = runs === undefined ? undefined : rowCounters(runs.bytes, runs.requester, runs.responder, runs.cpu);
      const rdma = entry.transport === 'roce' && (entry.op === 'write' || entry.op === 'read') && entry.threads === undefined;
      const ofTwoThreadIwarp =
        entry.transport === 'roce' && entry.threads === 2 && entry.shape === undefined ? ratio(measured, at(`${entry.op}/iwarp/false/0/+2t`)) : undefined;
      const shapeOfIwarp = entry.shape === undefined ? undefined : ratio(measured, at(`${entry.shape}/iwarp/false/0/+2t`));
      const crcOn = rdma ? ratio(measured, at(`${entry.op}/iwarp/true/0/`)) : undefined;
      const crcOff = rdma ? ratio(measured, at(`${entry.op}/iwarp/false/0/`)) : undefined;
      const ofLossFree = rdma && entry.loss > 0 ? ratio(measured, at(`${entry.op}/roce/true/0/${entry.link ?? ''}`)) : undefined;
      rows.push({
        op: entry.op,
        transport: entry.transport,
        crc: entry.crc,
        loss: entry.loss,
        ...(entry.link === undefined ? {} : { link: entry.link }),
        size,
        gbps: round(measured.gbps),
        bytes: entry.threads === 2 ? threadsBytesPerRun : bytesPerRun,
        trials,
        cpuMsPerGiB: Math.round(measured.cpuMsPerGiB),
        ...(crcOn !== undefined && crcOff !== undefined ? { ofIwarp: { crcOn: round(crcOn), crcOff: round(crcOff) } } : {}),
        ...(ofLossFree !== undefined ? { ofLossFree: round(ofLossFree) } : {}),
        ...(entry.threads === 2 ? { threads: 2 as const } : {}),
        ...(ofTwoThreadIwarp !== undefined ? { ofIwarpTwoThreads: round(ofTwoThreadIwarp) } : {}),
        ...(entry.shape === undefined ? {} : { shape: entry.shape }),
        ...(shapeOfIwarp !== undefined ? { shapeOfIwarpTwoThreads: round(shapeOfIwarp) } : {}),
        ...(counters === undefined ? {} : { counters }),
        ...(entry.transport === 'iwarp' && (entry.op === 'write' || entry.op === 'read')
          ? { tcpCongestionControl: congestionOf(entry.pair) ?? 'unknown' }
          : {}),
      });
      console.log(
        `${entry.op.padEnd(11)} ${entry.transport.padEnd(5)} ${`${entry.link ?? ''}${entry.threads === 2 ? ' 2thr' : ''}${entry.shape === undefined ? '' : ` ${entry.shape}`}`.padEnd(12)} crc=${String(entry.crc).padEnd(5)} loss=${String(entry.loss).padEnd(4)} size=${String(size).padStart(8)}  ${measured.gbps.toFixed(2).padStart(6)} Gb/s  ${measured.cpuMsPerGiB.toFixed(0).padStart(5)} ms CPU/GiB`,
      );
      if (counters !== undefined) for (const line of counterLines(counters)) console.log(line);
    }
    const write = at('write/iwarp/false/0/');
    const tcp = ratio(write, at('tcp/iwarp/false/0/'));
    const onread = ratio(write, at('tcp-onread/iwarp/false/0/'));
    if (tcp !== undefined && onread !== undefined) {
      console.log(
        `size ${size}: RDMA Write (CRC off) at ${(100 * tcp).toFixed(0)}% of the plain socket pair, ${(100 * onread).toFixed(0)}% of the onread socket pair`,
      );
    }
    const udp = at('udp/roce/false/0/');
    const pair = at('udp-batched/roce/false/0/');
    if (udp !== undefined && pair !== undefined) {
      console.log(
        `size ${size}: UDP pairs: batched ${cpu(pair)} CPU-s/GiB, node:dgram ${cpu(udp)} ` +
          `(${(udp.cpuMsPerGiB / pair.cpuMsPerGiB).toFixed(2)}x); ${pair.gbps.toFixed(2)} vs ${udp.gbps.toFixed(2)} Gb/s`,
      );
    }
    const udpTwoThreads = at('udp-batched/roce/false/0/+2t');
    if (udpTwoThreads !== undefined) {
      const roceOf = [...ops].map((op) => `${op} ${fixed(ratio(at(`${op}/roce/true/0/${mainLink}+2t`), udpTwoThreads))}`).join(', ');
      console.log(
        `size ${size}: batched UDP pair, receiver on its own thread: ${udpTwoThreads.gbps.toFixed(2)} Gb/s, ${cpu(udpTwoThreads)} CPU-s/GiB` +
          ` (one thread: ${fixed(at('udp-batched/roce/false/0/')?.gbps)} Gb/s); RoCE on two threads of it: ${roceOf}`,
      );
    }
    for (const op of ops) {
      const twoThreadIwarp = at(`${op}/iwarp/false/0/+2t`);
      const twoThreadRoce = at(`${op}/roce/true/0/${mainLink}+2t`);
      if (twoThreadIwarp === undefined || twoThreadRoce === undefined) continue;
      const shaped = at(`udp-batched/roce/false/0/+2t+${op}`);
      console.log(
        `size ${size}: responder on its own thread: RoCE ${op} ${twoThreadRoce.gbps.toFixed(2)} Gb/s at ${fixed(ratio(twoThreadRoce, twoThreadIwarp))} of iWARP's ` +
          `(CRC off, ${twoThreadIwarp.gbps.toFixed(2)} Gb/s); CPU-s/GiB RoCE ${cpu(twoThreadRoce)}, iWARP ${cpu(twoThreadIwarp)}` +
          (shaped === undefined
            ? ''
            : `; UDP alone in its packets' sizes ${shaped.gbps.toFixed(2)} Gb/s (${fixed(ratio(shaped, twoThreadIwarp))} of iWARP's; RoCE at ${fixed(ratio(twoThreadRoce, shaped))} of it)`),
      );
    }
    for (const op of ops) {
      const iwarp = at(`${op}/iwarp/false/0/`);
      const iwarpCrc = at(`${op}/iwarp/true/0/`);
      const clean = at(`${op}/roce/true/0/${mainLink}`);
      const lossy = at(`${op}/roce/true/0.01/${mainLink}`);
      const dgram = at(`${op}/roce/true/0/dgram`);
      if (clean === undefined && lossy === undefined) continue;
      console.log(
        `size ${size}: RoCE ${op} (${mainLink}) at ${fixed(ratio(clean, iwarpCrc))} of iWARP with its CRC on (the default; target 0.8) and ` +
          `${fixed(ratio(clean, iwarp))} of iWARP with it off, ` +
          `at 1% loss ${fixed(ratio(lossy, clean))} of loss-free (target 0.5); CPU-s/GiB RoCE ${cpu(clean)}, iWARP ${cpu(iwarp)} (CRC on ${cpu(iwarpCrc)})` +
          (batched && dgram !== undefined ? `; over node:dgram ${fixed(ratio(dgram, iwarp))} of iWARP, ${cpu(dgram)} CPU-s/GiB` : ''),
      );
    }
  }
  // The aim of issue 15, every size at once: RoCE within 0.8 of iWARP, and at 1 % loss at least half of loss-free.
  console.log('RoCE throughput as a fraction of iWARP (CRC on / CRC off) and at 1 % loss of loss-free:');
  for (const op of ops) {
    const cells = sizes.map((size) => {
      const clean = rows.find((row) => row.op === op && row.transport === 'roce' && row.loss === 0 && row.link === mainLink && row.size === size);
      const lossy = rows.find((row) => row.op === op && row.transport === 'roce' && row.loss > 0 && row.size === size);
      const of = clean?.ofIwarp;
      return `${size >= 1 << 20 ? `${size >> 20} MiB` : `${size >> 10} KiB`} ${fixed(of?.crcOn)} / ${fixed(of?.crcOff)}, loss ${fixed(lossy?.ofLossFree)}`;
    });
    console.log(`  ${op.padEnd(5)} ${cells.join('; ')}`);
  }
  for (const op of twoThreads.size > 0 ? ops : []) {
    const cells = sizes.map((size) => {
      const row = rows.find((entry) => entry.op === op && entry.transport === 'roce' && entry.threads === 2 && entry.size === size);
      return `${size >= 1 << 20 ? `${size >> 20} MiB` : `${size >> 10} KiB`} ${fixed(row?.ofIwarpTwoThreads)}`;
    });
    console.log(`  ${op}, responder on its own thread (RoCE / iWARP CRC off): ${cells.join('; ')}`);
  }
  for (const op of twoThreads.size > 0 && twoThreadUdp !== undefined ? ops : []) {
    const cells = sizes.map((size) => {
      const row = rows.find((entry) => entry.shape === op && entry.size === size);
      return `${size >= 1 << 20 ? `${size >> 20} MiB` : `${size >> 10} KiB`} ${fixed(row?.shapeOfIwarpTwoThreads)}`;
    });
    console.log(`  ${op}, UDP alone in RoCE's packet sizes, receiver on its own thread (the two-thread rows' ceiling / iWARP CRC off): ${cells.join('; ')}`);
  }
  for (const pair of [...pairs.values(), ...roce.values(), ...twoThreads.values()]) await pair.close();
  await plainUdp?.close();
  await batchedUdp?.close();
  await twoThreadUdp?.close();
  const output = values.output;
  mkdirSync(dirname(output), { recursive: true });
  writeFileSync(output, `${JSON.stringify(rows, null, 2)}\n`);
  console.log(`wrote ${output}`);
}

function fixed(value: number | undefined): string {
  return value === undefined ? '-' : value.toFixed(2);
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
