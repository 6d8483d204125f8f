// The Node.js floor of a kbtp request (issue 16): what Node itself costs per request, per thread,
// in the exchange a kbtp LOAD or STORE makes on loopback, with no protocol at all. A worker thread
// (as the target's connections run in one) answers each LOAD's 64-octet request with [16, size, 4,
// 64] octets (a LOAD's DDP header, block, CRC field and COMPLETION Send) and each STORE's [80, size,
// 4] (the Send's header with the request, block, CRC field) with a 64-octet COMPLETION, every
// answer a read completed in one writev through HandleWriter; the main thread (as kbtp bench's
// sessions) reads with `onread` into a reused buffer and writes each batch of requests through
// HandleWriter: the same system calls as kbtp's requests (a read and a write per side, libuv's
// epoll calls), the same Node glue, none of the RNIC, initiator, engine or benchmark JavaScript.
// CPU per request per thread from /proc/self/task/TID/schedstat, as kbtp bench reports its own;
// latency per request as kbtp bench times it (a batch's requests each take the batch's time).
// make compare runs it under every row (node_floor_*): a goal beyond these figures is beyond what
// any Node program without a native addon reaches on this machine (session 14).
//
//   make bench-build && node dist/bench/compare/node-floor.js [--op load|store] [--size 16K] [--sessions 1] [--in-flight 1] [--seconds 3] [--rounds 1]
//
// With --sessions N the client keeps N connections busy (make compare's x16 rows); with
// --in-flight K each writes K requests together and awaits all K answers (kbtp bench's batched
// rows, redis-benchmark -P K).
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
/** The LOAD answer's parts besides the block: DDP tagged header, CRC field, COMPLETION Send. */
const ANSWER_OVERHEAD = 16 + 4 + 64;
/** A STORE's request besides the block: the Send's DDP header with the request, CRC field; its answer a COMPLETION. */
const STORE_OVERHEAD = 16 + 64 + 4;
const STORE_ANSWER = 64;

/** The shape of one floor run: make compare's row it stands under. */
export interface FloorShape {
  /** load: a REQUEST-octet request, the block back; store: the block out, a STORE_ANSWER-octet answer back. */
  op: 'load' | 'store';
  size: number;
  /** Connections, each keeping `inFlight` requests in flight. */
  sessions: number;
  /**
   * Requests per connection written together (one writev) and awaited together, as kbtp bench's
   * batched rows (loadMany/storeMany) and redis-benchmark -P do; each request's latency is its batch's.
   */
  inFlight: number;
}

/** Octets of one request and of one answer on the wire for `shape`. */
export function floorWire(shape: Pick<FloorShape, 'op' | 'size'>): { request: number; answer: number } {
  return shape.op === 'load' ? { request: REQUEST, answer: shape.size + ANSWER_OVERHEAD } : { request: shape.size + STORE_OVERHEAD, answer: STORE_ANSWER };
}

// Plain JavaScript (workers do not start from TypeScript under tsx); the writer is the built one.
// The server answers every whole request a read completed with one write of all their answers
// (kbtp's target writes everything an event-loop turn produced at once) and counts what it read
// and answered, reported when asked so that the client can account for every octet.
const SERVER = `
const net = require('node:net');
const { readFileSync } = require('node:fs');
const { parentPort, workerData } = require('node:worker_threads');
const fail = (message) => parentPort.postMessage({ error: message });
import(workerData.writer).then(({ HandleWriter }) => {
  const { requestBytes, readBuffer, inFlight } = workerData;
  const block = new Uint8Array(workerData.size).fill(7);
  const parts = workerData.op === 'load' ? [new Uint8Array(16), block, new Uint8Array(4), new Uint8Array(64)] : [new Uint8Array(${STORE_ANSWER})];
  const chunks = [];
  for (let i = 0; i < inFlight; i++) chunks.push(...parts);
  let octets = 0;
  let served = 0;
  const server = net.createServer({ pauseOnConnect: true }, (accepted) => {
    // The handle moves to a socket made with onread, as SocketChannel does.
    const handle = accepted._handle;
    accepted._handle = null;
    accepted.destroy();
    let pending = 0;
    let writer;
    const socket = new net.Socket({ handle, readable: true, writable: true, onread: { buffer: Buffer.alloc(readBuffer), callback: (length) => {
      octets += length;
      pending += length;
      let whole = Math.floor(pending / requestBytes);
      pending -= whole * requestBytes;
      served += whole;
      while (whole > 0) {
        const now = Math.min(whole, inFlight);
        const status = writer.write(chunks, now * parts.length);
        if (status < 0) fail('the server write failed: errno ' + -status);
        whole -= now;
      }
      return true;
    } } });
    socket.setNoDelay(true);
    writer = HandleWriter.for(socket, (error) => { if (error !== undefined) fail('the server write failed: ' + error.message); });
    socket.on('error', () => socket.destroy());
  });
  server.listen(0, '127.0.0.1', () => {
    const tid = Number(readFileSync('/proc/thread-self/stat', 'utf8').split(' ')[0]);
    parentPort.postMessage({ port: server.address().port, tid });
  });
  parentPort.on('message', (message) => {
    if (message === 'count') parentPort.postMessage({ served, octets });
    else server.close(() => process.exit(0));
  });
}, (error) => fail(String(error)));
`;

export interface FloorFigures {
  /** Requests answered inside the measured window. */
  requests: number;
  requestsPerSecond: number;
  /** Block data moved inside the window, Gbit/s (1e9 bits per second), as make compare's rows. */
  gbps: number;
  /** CPU per request, microseconds: the main thread (client) and the worker (server). */
  clientUsPerOp: number;
  serverUsPerOp: number;
  p50Us: number;
  p99Us: number;
  /**
   * Every request of the run, warm-up included, each side's count: all of them answered before
   * the figures are returned (nodeFloor throws when any octet or request is unaccounted for).
   */
  accounting: { issued: number; answered: number; served: number; clientOctets: number; serverOctets: number };
}

/** How long a run goes: `seconds` measured after `warmupMs`, or exactly `requests` requests, all measured. */
export type FloorLength = { seconds: number; warmupMs?: number } | { requests: number };

/** dist/host/rnic/handle-writer.js, found from the built tree (dist/bench/compare) or the source tree (bench/compare). */
function builtWriter(): string {
  for (const relative of ['../../host/rnic/handle-writer.js', '../../dist/host/rnic/handle-writer.js']) {
    const url = new URL(relative, import.meta.url);
    if (existsSync(url)) return url.href;
  }
  throw new UsageError('dist/host/rnic/handle-writer.js is missing: run make bench-build first');
}

const threadNs = (tid: number): number => Number(readFileSync(`/proc/self/task/${tid}/schedstat`, 'utf8').split(' ')[0]);

/** A read buffer that takes a batch's octets in few reads, from 64 KiB up to 1 MiB. */
const readBufferFor = (batchOctets: number): number => Math.min(1024 * 1024, Math.max(64 * 1024, batchOctets));

/** Waits for the worker's next message of the kind `accept` picks out; a message with `error` rejects. */
function nextMessage<T>(worker: Worker, accept: (message: Record<string, unknown>) => T | undefined, what: string, timeoutMs: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => settle(new Error(`node floor: no ${what} from the server thread in ${timeoutMs} ms`)), timeoutMs);
    const onMessage = (message: Record<string, unknown>): void => {
      if (typeof message.error === 'string') return settle(new Error(`node floor: ${message.error}`));
      const value = accept(message);
      if (value !== undefined) settle(undefined, value);
    };
    const onError = (error: Error): void => settle(error);
    const settle = (error: Error | undefined, value?: T): void => {
      clearTimeout(timer);
      worker.off('message', onMessage);
      worker.off('error', onError);
      if (error !== undefined) reject(error);
      else resolve(value as T);
    };
    worker.on('message', onMessage);
    worker.once('error', onError);
  });
}

/**
 * One run of `shape` over loopback: the server in a worker thread, `shape.sessions` connections on
 * this thread, each writing `shape.inFlight` requests with one writev and the next batch once all
 * of their answers have been read. Ends by letting every batch in flight finish and checking that
 * each side read exactly what the other wrote.
 */
export async function nodeFloor(shape: FloorShape, length: FloorLength): Promise<FloorFigures> {
  const { op, size, sessions, inFlight } = shape;
  if (!Number.isInteger(size) || size < 1) throw new UsageError(`node floor: a block size of at least 1 octet, not ${size}`);
  if (!Number.isInteger(sessions) || sessions < 1) throw new UsageError(`node floor: at least 1 session, not ${sessions}`);
  if (!Number.isInteger(inFlight) || inFlight < 1) throw new UsageError(`node floor: at least 1 request in flight, not ${inFlight}`);
  const limit = 'requests' in length ? length.requests : Infinity;
  if ('requests' in length && (!Number.isInteger(limit) || limit < 1)) throw new UsageError(`node floor: at least 1 request, not ${limit}`);
  const wire = floorWire(shape);
  const writerUrl = builtWriter();
  const worker = new Worker(SERVER, {
    eval: true,
    workerData: { op, size, writer: writerUrl, inFlight, requestBytes: wire.request, readBuffer: readBufferFor(wire.request * inFlight) },
  });
  // A server failure reported at any time ends the run through `failed` (checked at every batch).
  let failed: Error | undefined;
  const listenForFailure = (message: Record<string, unknown>): void => {
    if (typeof message.error === 'string') failed ??= new Error(`node floor: ${message.error}`);
  };
  worker.on('message', listenForFailure);
  const sockets: net.Socket[] = [];
  try {
    const { port, tid } = await nextMessage(
      worker,
      (message) => (typeof message.port === 'number' && typeof message.tid === 'number' ? { port: message.port, tid: message.tid } : undefined),
      'port',
      30_000,
    );
    // One request's parts: a LOAD's request alone, or a STORE's header, block and CRC field.
    const parts = op === 'load' ? [new Uint8Array(REQUEST).fill(1)] : [new Uint8Array(16 + 64).fill(1), new Uint8Array(size).fill(3), new Uint8Array(4)];
    const chunks: Uint8Array[] = [];
    for (let i = 0; i < inFlight; i++) chunks.push(...parts);
    const histogram = new LatencyHistogram();
    let measureFrom = 'requests' in length ? 0 : Infinity;
    let endAt = Infinity;
    let stopping = false;
    let measured = 0;
    let issued = 0;
    let answered = 0;
    let clientOctets = 0;
    let running = sessions;
    let drained: () => void = () => undefined;
    const allDrained = new Promise<void>((resolve) => {
      drained = resolve;
    });
    const writers: HandleWriter[] = [];
    const writeFailed = (error: Error | undefined): void => {
      if (error !== undefined) failed ??= new Error(`node floor: a client write failed: ${error.message}`);
    };
    /** Writes a batch on `session`: as many requests as in flight, fewer when the run's count is nearly reached. */
    const sendBatch = (session: number): number => {
      const batch = Math.min(inFlight, limit - issued);
      if (stopping || failed !== undefined || batch < 1) {
        running -= 1;
        if (running === 0) drained();
        return 0;
      }
      issued += batch;
      const status = writers[session]!.write(chunks, batch * parts.length);
      if (status < 0) failed ??= new Error(`node floor: a client write failed: errno ${-status}`);
      return batch;
    };
    for (let session = 0; session < sessions; session++) {
      let pending = 0;
      let got = 0;
      let batch = 0;
      let began = 0;
      const connected = net.connect({
        host: '127.0.0.1',
        port,
        onread: {
          buffer: Buffer.alloc(readBufferFor(wire.answer * inFlight)),
          callback: (length: number): boolean => {
            clientOctets += length;
            pending += length;
            if (pending < wire.answer) return true;
            const whole = Math.floor(pending / wire.answer);
            pending -= whole * wire.answer;
            got += whole;
            answered += whole;
            if (got > batch) failed ??= new Error(`node floor: ${got} answers to a batch of ${batch} on connection ${session}`);
            if (got < batch) return true;
            const now = performance.now();
            if (began >= measureFrom && now <= endAt) {
              measured += batch;
              // Each request of the batch took the batch's time, as kbtp bench records a loadMany's.
              const ns = (now - began) * 1e6;
              for (let i = 0; i < batch; i++) histogram.record(ns);
            }
            got = 0;
            began = performance.now();
            batch = sendBatch(session);
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
      const writer = HandleWriter.for(connected, writeFailed);
      if (writer === undefined) throw new UsageError('this Node offers no socket handle to write to (HandleWriter)');
      writers.push(writer);
      connected.on('error', (error) => {
        failed ??= error;
      });
      // The first batch; later ones go from the read callback.
      const first = (): void => {
        began = performance.now();
        batch = sendBatch(session);
      };
      setImmediate(first);
    }
    let client0 = threadNs(process.pid);
    let server0 = threadNs(tid);
    let started = performance.now();
    let client = 0;
    let server = 0;
    if (!('requests' in length)) {
      await new Promise((resolve) => setTimeout(resolve, length.warmupMs ?? 500));
      client0 = threadNs(process.pid);
      server0 = threadNs(tid);
      started = performance.now();
      measureFrom = started;
      endAt = started + length.seconds * 1000;
      await new Promise((resolve) => setTimeout(resolve, length.seconds * 1000));
      // CPU over the window only, not over the batches still finishing after it.
      client = threadNs(process.pid) - client0;
      server = threadNs(tid) - server0;
      stopping = true;
    }
    const budgetMs = 30_000 + ('requests' in length ? 0 : length.seconds * 1000);
    let timer: NodeJS.Timeout | undefined;
    const drainedInTime = await Promise.race([
      allDrained.then(() => true),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), budgetMs);
      }),
    ]);
    clearTimeout(timer);
    if ('requests' in length) {
      client = threadNs(process.pid) - client0;
      server = threadNs(tid) - server0;
    }
    const ended = 'requests' in length ? performance.now() : endAt;
    const elapsed = Math.max(1e-9, (ended - started) / 1000);
    if (failed !== undefined) throw failed;
    if (!drainedInTime) throw new Error(`node floor: ${issued - answered} of ${issued} requests unanswered after ${budgetMs} ms`);
    const counting = nextMessage(
      worker,
      (message) => (typeof message.served === 'number' && typeof message.octets === 'number' ? { served: message.served, octets: message.octets } : undefined),
      'count',
      10_000,
    );
    worker.postMessage('count');
    const { served, octets: serverOctets } = await counting;
    const accounting = { issued, answered, served, clientOctets, serverOctets };
    if (served !== issued || answered !== issued || serverOctets !== issued * wire.request || clientOctets !== issued * wire.answer) {
      throw new Error(
        `node floor: octets or requests unaccounted for: ${JSON.stringify(accounting)}; ` +
          `expected ${issued} requests of ${wire.request} octets and as many answers of ${wire.answer}`,
      );
    }
    return {
      requests: measured,
      requestsPerSecond: measured / elapsed,
      gbps: (measured * size * 8) / elapsed / 1e9,
      clientUsPerOp: client / Math.max(1, measured) / 1000,
      serverUsPerOp: server / Math.max(1, measured) / 1000,
      p50Us: histogram.percentileNs(0.5) / 1000,
      p99Us: histogram.percentileNs(0.99) / 1000,
      accounting,
    };
  } finally {
    worker.off('message', listenForFailure);
    for (const socket of sockets) socket.destroy();
    worker.postMessage('stop');
    await new Promise((resolve) => worker.once('exit', resolve));
  }
}

async function main(): Promise<number> {
  const usage = 'usage: node dist/bench/compare/node-floor.js [--op load|store] [--size 16K] [--sessions 1] [--in-flight 1] [--seconds 3] [--rounds 1]';
  const parsed = parseCommandLine('bench/compare/node-floor', usage, process.argv.slice(2), {
    op: { type: 'string' },
    size: { type: 'string' },
    sessions: { type: 'string' },
    'in-flight': { type: 'string' },
    seconds: { type: 'string' },
    rounds: { type: 'string' },
  });
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const op = values.op ?? 'load';
  if (op !== 'load' && op !== 'store') throw new UsageError(`--op: load or store, not '${op}'`);
  const [size = 16 * 1024] = parseSizes(values.size ?? '16K', '--size');
  const seconds = parseInteger(values.seconds, '--seconds', 3, 1);
  const rounds = parseInteger(values.rounds, '--rounds', 1, 1);
  const sessions = parseInteger(values.sessions, '--sessions', 1, 1);
  const inFlight = parseInteger(values['in-flight'], '--in-flight', 1, 1);
  const wire = floorWire({ op, size });
  console.log(
    `node floor: ${op.toUpperCase()}, ${wire.request}-octet requests and ${wire.answer}-octet answers, ` +
      `${sessions} connection(s) x ${inFlight} in flight, ${seconds} s per round`,
  );
  for (let round = 1; round <= rounds; round++) {
    const before = loadavg()[0]!.toFixed(2);
    const figures = await nodeFloor({ op, size, sessions, inFlight }, { seconds });
    console.log(
      `round ${round}: ${figures.requestsPerSecond.toFixed(0)} req/s, ${figures.gbps.toFixed(2)} Gbit/s, p50 ${figures.p50Us.toFixed(1)} us, p99 ${figures.p99Us.toFixed(1)} us, ` +
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
