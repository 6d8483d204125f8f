// Trace replay for `kbtp bench --trace`: each hash id of a Mooncake-format trace is a block (one
// handle, `blockSize` octets); a request LOADs the blocks of its prefix that the cache holds and
// ALLOC_STOREs the blocks it does not. With a capacity, the least recently used blocks are FREEd
// to make room, as an LRU KV cache would.
//
// Counting rule (the one of the trace's README, test/fixtures/README.md): a request's blocks count as hits only up to
// its first miss, since a prefix must be contiguous to be reused. A block after the first miss
// that the cache does hold is a miss that moves no data (the engine recomputes it; the cache
// keeps it and it counts as used). Every decision is made when the request is issued, in trace
// order, so concurrency changes timing but never the hit rate: a load of a block whose store is
// still in flight waits for that store.
import { UsageError } from '../errors.ts';
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { connect, type KbtpSession } from '../kbtp/initiator.ts';
import { KbtpStatusError } from '../kbtp/errors.ts';
import type { RunningTarget } from '../kbtp/server/target.ts';
import { BlockMaker, type ExpectedBlock } from './blocks.ts';
import { LatencyHistogram } from './histogram.ts';
import { formatSize, stack } from './report.ts';
import { spawnTarget, transportOf } from './spawn.ts';
import type { Transport } from '../kbtp/server/target-config.ts';
import { formatTable, percent } from '../report/table.ts';
import { barChart } from '../report/svg.ts';

export interface Trace {
  readonly requests: number;
  /** Arrival time of each request, milliseconds from the start of the trace. */
  readonly timestamps: Float64Array;
  /** Block ids of request r are blockIds[starts[r] .. starts[r + 1]). */
  readonly starts: Uint32Array;
  readonly blockIds: Uint32Array;
}

export class TraceError extends UsageError {}

/** Parses a Mooncake-format trace: one JSON object a line with timestamp and hash_ids. */
export function parseTrace(text: string, source: string, maxRequests = Infinity): Trace {
  const timestamps: number[] = [];
  const starts: number[] = [0];
  const ids: number[] = [];
  const lines = text.split('\n');
  for (let index = 0; index < lines.length && timestamps.length < maxRequests; index++) {
    const line = lines[index]?.trim() ?? '';
    if (line === '') continue;
    let record: unknown;
    try {
      record = JSON.parse(line);
    } catch {
      throw new TraceError(`${source}:${index + 1}: not JSON; each line must be {"timestamp": ms, "hash_ids": [...]}`);
    }
    const { timestamp, hash_ids: hashIds } = (record ?? {}) as { timestamp?: unknown; hash_ids?: unknown };
    if (!Array.isArray(hashIds)) throw new TraceError(`${source}:${index + 1}: missing "hash_ids" array`);
    if (timestamp !== undefined && (typeof timestamp !== 'number' || !Number.isFinite(timestamp) || timestamp < 0)) {
      throw new TraceError(`${source}:${index + 1}: "timestamp" must be a non-negative number of milliseconds`);
    }
    for (const id of hashIds) {
      if (typeof id !== 'number' || !Number.isInteger(id) || id < 0 || id > 0xffffffff) {
        throw new TraceError(`${source}:${index + 1}: hash id ${JSON.stringify(id)} is not an integer in 0..2^32-1`);
      }
      ids.push(id);
    }
    timestamps.push(typeof timestamp === 'number' ? timestamp : 0);
    starts.push(ids.length);
  }
  if (timestamps.length === 0) throw new TraceError(`${source}: no requests`);
  return { requests: timestamps.length, timestamps: Float64Array.from(timestamps), starts: Uint32Array.from(starts), blockIds: Uint32Array.from(ids) };
}

export function loadTrace(path: string, maxRequests = Infinity): Trace {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new TraceError(`cannot read trace ${path} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  return parseTrace(text, path, maxRequests);
}

export function distinctBlocks(trace: Trace): number {
  return new Set(trace.blockIds).size;
}

/** What the counting rule gives with an LRU of `capacity` blocks, without any target. */
export function modelHitRate(trace: Trace, capacity = Infinity): { references: number; hits: number; anyHits: number } {
  const lru = new Map<number, true>();
  let hits = 0;
  let anyHits = 0;
  for (let r = 0; r < trace.requests; r++) {
    let inPrefix = true;
    for (let at = trace.starts[r] ?? 0; at < (trace.starts[r + 1] ?? 0); at++) {
      const id = trace.blockIds[at] ?? 0;
      if (lru.has(id)) {
        anyHits += 1;
        if (inPrefix) hits += 1;
        lru.delete(id);
      } else {
        inPrefix = false;
        if (lru.size >= capacity) {
          const oldest = lru.keys().next();
          if (oldest.done !== true) lru.delete(oldest.value);
        }
      }
      lru.set(id, true);
    }
  }
  return { references: trace.blockIds.length, hits, anyHits };
}

export interface ReplayOptions {
  path: string;
  /** host:port; undefined spawns a target sized for the replay. */
  target?: string;
  tenant?: string;
  secret?: string;
  workers?: number;
  /** A spawned target's CPU wake-latency request while busy (undefined: the target's default; null: none). */
  cpuWakeLatencyUs?: number | null;
  /** A spawned target's Max Inline (undefined: spawn.ts's default). */
  maxInline?: number;
  /** RDMA binding of the sessions and of a spawned target (default iwarp). */
  transport?: Transport;
  sessions?: number;
  blockSize: number;
  /** Replay timestamps this many times faster; 0 issues requests as fast as concurrency allows. */
  timeScale?: number;
  /** Blocks the replay keeps (LRU); default: every distinct block of the replayed requests. */
  capacity?: number;
  requests?: number;
  /** Requests in flight per session. */
  concurrency?: number;
  /** Requests each session pipelines to the target (default 32). */
  pipeline?: number;
  onProgress?: (
    label: string,
    progress: { elapsedMs: number; plannedMs: number | undefined; completed: number; planned: number; bytes: number; errors: number },
  ) => void;
  log?: (line: string) => void;
}

interface Percentiles {
  count: number;
  p50Us: number;
  p99Us: number;
  p999Us: number;
  meanUs: number;
}

export interface ReplayResult {
  trace: string;
  rule: string;
  requests: number;
  references: number;
  distinctBlocks: number;
  blockSize: number;
  capacity: number;
  unbounded: boolean;
  timeScale: number;
  sessions: number;
  concurrency: number;
  hits: number;
  misses: number;
  /** Prefix hits / references (the README's rule). */
  hitRate: number;
  /** The same rule computed without the target (an LRU model): the replay must agree. */
  modelHitRate: number;
  /** Present blocks after a request's first miss (not counted as hits). */
  presentAfterMiss: number;
  seconds: number;
  blocksPerSec: number;
  bytesPerSec: number;
  loadedBytes: number;
  storedBytes: number;
  load: Percentiles;
  store: Percentiles;
  free: Percentiles;
  request: Percentiles;
  /** With time compression: how late requests started against their scaled timestamp. */
  lateStartP99Ms: number;
  errors: Record<string, number>;
  corrupt: number;
  firstError?: string;
}

interface Entry {
  handle: bigint;
  expected: ExpectedBlock | undefined;
  /** Resolves when the block is stored (undefined once it is). */
  storing: Promise<boolean> | undefined;
  /** Requests using the block right now; an LRU victim must have none. */
  users: number;
}

function percentiles(histogram: LatencyHistogram): Percentiles {
  const us = (q: number): number => +(histogram.percentileNs(q) / 1e3).toFixed(1);
  return { count: histogram.count, p50Us: us(0.5), p99Us: us(0.99), p999Us: us(0.999), meanUs: +(histogram.meanNs / 1e3).toFixed(1) };
}

export async function replayTrace(options: ReplayOptions): Promise<ReplayResult> {
  const trace = loadTrace(options.path, options.requests ?? Infinity);
  const distinct = distinctBlocks(trace);
  const capacity = Math.min(options.capacity ?? distinct, distinct);
  const unbounded = capacity >= distinct;
  const sessionCount = options.sessions ?? 1;
  const concurrency = options.concurrency ?? 8;
  const pipeline = options.pipeline ?? 32;
  const log = options.log ?? (() => undefined);
  const model = modelHitRate(trace, capacity);
  // Handles beyond the capacity let new blocks be stored while the FREEs that make room are in
  // flight; the LRU directory itself never holds more than `capacity` blocks it can evict.
  let longest = 0;
  for (let r = 0; r < trace.requests; r++) longest = Math.max(longest, (trace.starts[r + 1] ?? 0) - (trace.starts[r] ?? 0));
  const handles = Math.min(distinct, capacity + sessionCount * concurrency * longest);

  let target: RunningTarget | undefined;
  let address = options.target;
  if (address === undefined) {
    target = await spawnTarget({
      blockSize: options.blockSize,
      blocks: handles + 16,
      workers: options.workers ?? 1,
      credits: pipeline,
      sessions: sessionCount,
      ...(options.cpuWakeLatencyUs !== undefined ? { cpuWakeLatencyUs: options.cpuWakeLatencyUs } : {}),
      ...(options.maxInline !== undefined ? { maxInline: options.maxInline } : {}),
      ...transportOf(options),
      log,
    });
    address = `127.0.0.1:${target.port}`;
  }
  const sessions: KbtpSession[] = [];
  try {
    for (let i = 0; i < sessionCount; i++) {
      sessions.push(await connect(address, { tenant: options.tenant ?? 'default', secret: options.secret ?? '', pipeline, ...transportOf(options) }));
    }
    const hello = sessions[0]?.hello;
    if (hello === undefined) throw new TraceError('no session');
    if (options.blockSize > hello.blockSize)
      throw new TraceError(`${formatSize(options.blockSize)} trace blocks do not fit the target's ${hello.blockSize}-octet blocks`);
    if (handles > hello.quota || BigInt(handles) > hello.storeCount) {
      throw new TraceError(
        `the replay needs ${handles} blocks (capacity ${capacity} plus room for the requests in flight), more than the tenant's ` +
          `quota (${hello.quota}) or store range (${hello.storeCount} handles); give a smaller --capacity or --concurrency, or a bigger target`,
      );
    }
    return await replay(trace, options, sessions, { capacity, handles, unbounded, distinct, concurrency, modelHits: model.hits, storeFirst: hello.storeFirst });
  } finally {
    await Promise.all(sessions.map((session) => session.close(1000).catch(() => undefined)));
    if (target !== undefined) await target.stop(1000);
  }
}

async function replay(
  trace: Trace,
  options: ReplayOptions,
  sessions: readonly KbtpSession[],
  plan: { capacity: number; handles: number; unbounded: boolean; distinct: number; concurrency: number; modelHits: number; storeFirst: bigint },
): Promise<ReplayResult> {
  const { blockSize } = options;
  const timeScale = options.timeScale ?? 0;
  const maker = new BlockMaker(blockSize);
  const buffers: Uint8Array[] = [];
  const directory = new Map<number, Entry>(); // insertion order = LRU order
  const freeHandles: bigint[] = [];
  for (let i = plan.handles - 1; i >= 0; i--) freeHandles.push(plan.storeFirst + BigInt(i));
  /** Frees in flight; a store that needs a handle waits for one of them. */
  const handleWaiters: Array<(handle: bigint) => void> = [];
  const histograms = { load: new LatencyHistogram(), store: new LatencyHistogram(), free: new LatencyHistogram(), request: new LatencyHistogram() };
  const late = new LatencyHistogram();
  const errors = new Map<string, number>();
  let firstError: string | undefined;
  let corrupt = 0;
  let hits = 0;
  let presentAfterMiss = 0;
  let loadedBytes = 0;
  let storedBytes = 0;
  let completedRequests = 0;
  let version = 0;

  const problem = (kind: string, message: string): void => {
    errors.set(kind, (errors.get(kind) ?? 0) + 1);
    firstError ??= message;
  };
  const failureKind = (error: unknown): string => (error instanceof KbtpStatusError ? error.statusName : 'TRANSPORT');

  const releaseHandle = (handle: bigint): void => {
    const waiter = handleWaiters.shift();
    if (waiter !== undefined) waiter(handle);
    else freeHandles.push(handle);
  };
  const takeHandle = (): bigint | Promise<bigint> => {
    const handle = freeHandles.pop();
    if (handle !== undefined) return handle;
    return new Promise((resolve) => handleWaiters.push(resolve));
  };

  const touch = (id: number, entry: Entry): void => {
    directory.delete(id);
    directory.set(id, entry);
  };

  /** Makes room for one block: FREEs the least recently used block no request is using. */
  const evictOne = (session: KbtpSession): boolean => {
    for (const [id, entry] of directory) {
      if (entry.users > 0 || entry.storing !== undefined) continue;
      directory.delete(id);
      const began = performance.now();
      void session.free(entry.handle).then(
        () => {
          histograms.free.record((performance.now() - began) * 1e6);
          releaseHandle(entry.handle);
        },
        (error: unknown) => {
          problem(failureKind(error), `FREE handle ${entry.handle}: ${error instanceof Error ? error.message : String(error)}`);
        },
      );
      return true;
    }
    return false; // every held block is in use by a request in flight
  };

  const load = async (session: KbtpSession, entry: Entry): Promise<void> => {
    if (entry.storing !== undefined && !(await entry.storing)) return; // its store failed; already counted
    const expected = entry.expected;
    const began = performance.now();
    try {
      const { data } = await session.load(entry.handle);
      histograms.load.record((performance.now() - began) * 1e6);
      const wrong = expected === undefined ? `handle ${entry.handle}: no block was stored` : maker.check(data, expected, entry.handle);
      if (wrong !== undefined) {
        corrupt += 1;
        problem('CORRUPT', wrong);
      } else {
        loadedBytes += data.length;
      }
    } catch (error) {
      problem(failureKind(error), `LOAD handle ${entry.handle}: ${error instanceof Error ? error.message : String(error)}`);
    } finally {
      entry.users -= 1;
    }
  };

  const store = async (session: KbtpSession, entry: Entry, finish: (ok: boolean) => void, handle: bigint | Promise<bigint>): Promise<void> => {
    entry.handle = await handle;
    const buffer = buffers.pop() ?? maker.buffer();
    const expected = maker.make(buffer, entry.handle, ++version);
    const began = performance.now();
    let ok = false;
    try {
      await session.allocStore(entry.handle, buffer, { seal: true });
      histograms.store.record((performance.now() - began) * 1e6);
      entry.expected = expected;
      storedBytes += blockSize;
      ok = true;
    } catch (error) {
      problem(failureKind(error), `ALLOC_STORE handle ${entry.handle}: ${error instanceof Error ? error.message : String(error)}`);
    } finally {
      buffers.push(buffer);
      entry.storing = undefined;
      entry.users -= 1;
      finish(ok);
    }
  };

  /** Plans request r now (hits, misses, LRU order), then carries it out. */
  const runRequest = async (r: number, session: KbtpSession): Promise<void> => {
    const began = performance.now();
    const loads: Entry[] = [];
    const stores: Array<{ entry: Entry; finish: (ok: boolean) => void; handle: bigint | Promise<bigint> }> = [];
    let inPrefix = true;
    for (let at = trace.starts[r] ?? 0; at < (trace.starts[r + 1] ?? 0); at++) {
      const id = trace.blockIds[at] ?? 0;
      const present = directory.get(id);
      if (present !== undefined) {
        touch(id, present);
        if (inPrefix) {
          hits += 1;
          present.users += 1;
          loads.push(present);
        } else {
          presentAfterMiss += 1;
        }
        continue;
      }
      inPrefix = false;
      if (directory.size >= plan.capacity) evictOne(session);
      let finish: (ok: boolean) => void = () => undefined;
      const entry: Entry = {
        handle: 0n,
        expected: undefined,
        storing: new Promise<boolean>((resolve) => {
          finish = resolve;
        }),
        users: 1,
      };
      directory.set(id, entry);
      stores.push({ entry, finish, handle: takeHandle() });
    }
    await Promise.all(loads.map((entry) => load(session, entry)));
    await Promise.all(stores.map(({ entry, finish, handle }) => store(session, entry, finish, handle)));
    // Blocks that were in use when room was needed can go now.
    while (directory.size > plan.capacity && evictOne(session));
    histograms.request.record((performance.now() - began) * 1e6);
    completedRequests += 1;
  };

  const start = performance.now();
  const firstTimestamp = trace.timestamps[0] ?? 0;
  const lastTimestamp = trace.timestamps[trace.requests - 1] ?? 0;
  let nextRequest = 0;
  const timer =
    options.onProgress === undefined
      ? undefined
      : setInterval(() => {
          options.onProgress?.('trace replay', {
            elapsedMs: performance.now() - start,
            plannedMs: timeScale > 0 ? (lastTimestamp - firstTimestamp) / timeScale : undefined,
            completed: completedRequests,
            planned: trace.requests,
            bytes: loadedBytes + storedBytes,
            errors: [...errors.values()].reduce((a, b) => a + b, 0),
          });
        }, 1000);
  // Each lane is one request in flight on one session; lanes take requests in trace order.
  const lane = async (session: KbtpSession): Promise<void> => {
    while (nextRequest < trace.requests) {
      const r = nextRequest++;
      if (timeScale > 0) {
        const due = start + ((trace.timestamps[r] ?? 0) - firstTimestamp) / timeScale;
        const wait = due - performance.now();
        if (wait > 1) await new Promise((resolve) => setTimeout(resolve, wait));
        late.record(Math.max(0, performance.now() - due) * 1e6);
      }
      await runRequest(r, session);
    }
  };
  try {
    await Promise.all(sessions.flatMap((session) => Array.from({ length: plan.concurrency }, () => lane(session))));
  } finally {
    if (timer !== undefined) clearInterval(timer);
  }
  const seconds = Math.max(1e-9, (performance.now() - start) / 1000);
  const references = trace.blockIds.length;
  const moved = histograms.load.count + histograms.store.count;
  const result: ReplayResult = {
    trace: options.path,
    rule: "a request's blocks count as hits only up to its first miss; hit rate = prefix hits / block references",
    requests: trace.requests,
    references,
    distinctBlocks: plan.distinct,
    blockSize,
    capacity: plan.capacity,
    unbounded: plan.unbounded,
    timeScale,
    sessions: sessions.length,
    concurrency: plan.concurrency,
    hits,
    misses: references - hits,
    hitRate: hits / references,
    modelHitRate: plan.modelHits / references,
    presentAfterMiss,
    seconds: +seconds.toFixed(3),
    blocksPerSec: +(moved / seconds).toFixed(1),
    bytesPerSec: Math.round((loadedBytes + storedBytes) / seconds),
    loadedBytes,
    storedBytes,
    load: percentiles(histograms.load),
    store: percentiles(histograms.store),
    free: percentiles(histograms.free),
    request: percentiles(histograms.request),
    lateStartP99Ms: timeScale > 0 ? +(late.percentileNs(0.99) / 1e6).toFixed(2) : 0,
    errors: Object.fromEntries(errors),
    corrupt,
  };
  if (firstError !== undefined) result.firstError = firstError;
  return result;
}

export function formatReplay(result: ReplayResult): string {
  const summary = [
    `trace replay: ${result.trace}`,
    `  ${result.requests} requests, ${result.references} block references, ${result.distinctBlocks} distinct blocks of ${formatSize(result.blockSize)}`,
    `  capacity ${result.unbounded ? `unbounded (${result.capacity} blocks)` : `${result.capacity} blocks (LRU)`}, ` +
      `${result.sessions} session${result.sessions === 1 ? '' : 's'} x ${result.concurrency} requests in flight, ` +
      `${result.timeScale > 0 ? `timestamps compressed ${result.timeScale}x (p99 late start ${result.lateStartP99Ms} ms)` : 'no pacing'}`,
    `  rule: ${result.rule}`,
    `  hit rate ${percent(result.hitRate, 2)} (${result.hits} hits, ${result.misses} misses; LRU model without the target: ${percent(result.modelHitRate, 2)}); ` +
      `${result.presentAfterMiss} held blocks after a first miss`,
    `  ${result.seconds} s: ${result.blocksPerSec.toFixed(0)} blocks/s, ${(result.bytesPerSec / 1e9).toFixed(3)} GB/s ` +
      `(loaded ${(result.loadedBytes / 1e9).toFixed(3)} GB, stored ${(result.storedBytes / 1e9).toFixed(3)} GB)`,
    `  errors: ${
      Object.keys(result.errors).length === 0
        ? 'none'
        : Object.entries(result.errors)
            .map(([k, v]) => `${v} ${k}`)
            .join(', ')
    }` + `${result.firstError !== undefined ? ` (first: ${result.firstError})` : ''}`,
  ];
  const table = formatTable({
    title: '',
    columns: ['latency', 'count', 'p50 us', 'p99 us', 'p99.9 us', 'mean us'],
    rows: (['load', 'store', 'free', 'request'] as const).map((name) => {
      const p = result[name];
      return [name === 'request' ? 'request (all its blocks)' : name.toUpperCase(), p.count, p.p50Us, p.p99Us, p.p999Us, p.meanUs];
    }),
  });
  return `${summary.join('\n')}\n${table.trimStart()}`;
}

export function chartReplay(result: ReplayResult): string {
  const groups = ['LOAD', 'ALLOC_STORE', 'FREE', 'request'];
  const picks = [result.load, result.store, result.free, result.request];
  const latency = barChart({
    title: `trace replay latency (hit rate ${percent(result.hitRate, 1)}, ${formatSize(result.blockSize)} blocks)`,
    yLabel: 'microseconds',
    groups,
    series: [
      { name: 'p50', values: picks.map((p) => p.p50Us) },
      { name: 'p99', values: picks.map((p) => p.p99Us) },
      { name: 'p99.9', values: picks.map((p) => p.p999Us) },
    ],
  });
  return stack([latency]);
}
