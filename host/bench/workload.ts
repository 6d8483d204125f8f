// Runs one benchmark phase: every session keeps `inFlight` requests outstanding over its own set
// of handles, drawing operations from the phase's mix, for a duration or a count. Each handle is
// used by one request at a time, so every LOAD knows exactly which block it must find and checks
// it (blocks.ts). Latencies go into per-operation histograms; throughput counts the requests that
// completed inside the measured window.
import { performance } from 'node:perf_hooks';
import type { KbtpSession } from '../kbtp/initiator.ts';
import { BatchError, KbtpStatusError } from '../kbtp/errors.ts';
import { InternalError, UsageError, withContext } from '../errors.ts';
import { statusName } from '../kbtp/wire/messages.ts';
import { BlockMaker, type ExpectedBlock } from './blocks.ts';
import { LatencyHistogram } from './histogram.ts';
import { OpPicker, sealingFor, type OpName, type Phase } from './mix.ts';
import type { PhaseCpu, ThreadCpu, ThreadCpuSample } from './thread-cpu.ts';
import { turn, type TurnParticipant } from '../rnic/turn.ts';
import { COUNT_FROM } from '../util/counter.ts';

/** Operations that move a block's data (FREE moves none). */
const MOVES_DATA: ReadonlySet<OpName> = new Set(['load', 'store', 'alloc-store', 'direct-load', 'direct-alloc']);

export class OpStats {
  readonly histogram = new LatencyHistogram();
  /** Whether a request of this operation moves a block's data (looked up once: per request it was a Set probe). */
  readonly movesData: boolean;
  /** Requests that succeeded (and, for loads, passed the check) inside the measured window. */
  count = 0;
  /** COUNT_FROM: a phase of 16 KiB requests passes 2^31 octets after 131,072 of them. */
  bytes = COUNT_FROM;
  /** KBTP statuses and transport failures, by name. */
  readonly errors = new Map<string, number>();
  /** Loads that returned data other than what was stored. */
  corrupt = 0;
  firstProblem: string | undefined;

  constructor(readonly op: OpName) {
    this.movesData = MOVES_DATA.has(op);
  }

  problem(kind: string, message: string): void {
    this.errors.set(kind, (this.errors.get(kind) ?? 0) + 1);
    this.firstProblem ??= message;
  }

  get errorCount(): number {
    let total = 0;
    for (const count of this.errors.values()) total += count;
    return total;
  }
}

export interface PhaseResult {
  size: number;
  sessions: number;
  inFlight: number;
  /** Length of the measured window. */
  seconds: number;
  ops: OpStats[];
  /** CPU per request by thread over the measured window (when a sampler was given, on Linux). */
  cpu?: PhaseCpu;
}

export interface Progress {
  elapsedMs: number;
  plannedMs: number | undefined;
  completed: number;
  planned: number | undefined;
  bytes: number;
  errors: number;
}

export interface PhaseOptions {
  sessions: readonly KbtpSession[];
  size: number;
  phase: Phase;
  /** Requests each session keeps outstanding (at most its pipeline depth). */
  inFlight: number;
  /** Handles per session, at least `inFlight`. Session s uses firstHandle + s * keys onward. */
  keysPerSession: number;
  firstHandle: bigint;
  /** Run for this long after the warm-up... */
  durationMs?: number;
  /** ...or until this many requests (over all sessions) completed; no warm-up then. */
  count?: number;
  warmupMs?: number;
  onProgress?: (progress: Progress) => void;
  progressIntervalMs?: number;
  /**
   * A LOAD-only or STORE-only phase issues each session's `inFlight` requests together through
   * loadMany/storeMany (one batch at a time per session, as redis-benchmark -P pipelines) instead
   * of `inFlight` independent loadInto()/storeFrom() calls. Each request's latency is its batch's.
   */
  batched?: boolean;
  /** Samples this process's threads at the measured window's start and the phase's end (PhaseResult.cpu). */
  threadCpu?: ThreadCpu;
}

/** A FIFO of handle indices; round-robin reuse spreads requests over every handle. */
class IndexQueue {
  private readonly items: Int32Array;
  private head = 0;
  private length = 0;
  constructor(capacity: number) {
    this.items = new Int32Array(Math.max(1, capacity));
  }
  get size(): number {
    return this.length;
  }
  push(index: number): void {
    this.items[(this.head + this.length) % this.items.length] = index;
    this.length += 1;
  }
  shift(): number | undefined {
    if (this.length === 0) return undefined;
    const index = this.items[this.head];
    this.head = (this.head + 1) % this.items.length;
    this.length -= 1;
    return index;
  }
}

/** What one session's handles hold, as far as the benchmark stored them. */
class SessionBlocks {
  readonly expected: Array<ExpectedBlock | undefined>;
  readonly idleBound: IndexQueue;
  readonly idleFree: IndexQueue;
  version = 0;
  failed: Error | undefined;

  constructor(
    readonly session: KbtpSession,
    readonly firstHandle: bigint,
    readonly keys: number,
  ) {
    this.expected = new Array<ExpectedBlock | undefined>(keys).fill(undefined);
    this.idleBound = new IndexQueue(keys);
    this.idleFree = new IndexQueue(keys);
  }

  /** Each index's handle, made once (a BigInt sum per request allocates). */
  private readonly handles: bigint[] = [];

  handle(index: number): bigint {
    let handle = this.handles[index];
    if (handle === undefined) {
      handle = this.firstHandle + BigInt(index);
      this.handles[index] = handle;
    }
    return handle;
  }
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function isStatus(error: unknown, name: string): boolean {
  return error instanceof KbtpStatusError && error.statusName === name;
}

/** Binds every handle of a session (untimed), freeing leftovers of an earlier run first. */
async function prefill(blocks: SessionBlocks, maker: BlockMaker, sealed: boolean, parallel: number): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    const buffer = maker.buffer();
    while (next < blocks.keys) {
      const index = next++;
      const handle = blocks.handle(index);
      const expected = maker.make(buffer, handle, ++blocks.version);
      try {
        await blocks.session.allocStore(handle, buffer, { seal: sealed });
      } catch (error) {
        if (!isStatus(error, 'ALREADY_VALID')) throw withContext(`preparing handle ${handle}`, error);
        await blocks.session.free(handle);
        await blocks.session.allocStore(handle, buffer, { seal: sealed });
      }
      blocks.expected[index] = expected;
      blocks.idleBound.push(index);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, parallel) }, worker));
}

/** Frees every handle the phase left bound (untimed), so the next phase starts from an empty pool. */
export async function cleanup(blocks: { session: KbtpSession; handles: bigint[] }, parallel: number): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < blocks.handles.length) {
      const handle = blocks.handles[next++];
      if (handle === undefined) continue;
      try {
        await blocks.session.free(handle);
      } catch (error) {
        if (!isStatus(error, 'NOT_VALID')) throw error;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, parallel) }, worker));
}

/** The operation that can run now: the one drawn, or the one that makes it possible next time. */
function feasible(op: OpName, blocks: SessionBlocks, phase: Phase): OpName {
  const needsFree = op === 'alloc-store' || op === 'direct-alloc';
  if (needsFree) return blocks.idleFree.size > 0 ? op : 'free';
  if (blocks.idleBound.size > 0) return op;
  return phase.some((item) => item.op === 'direct-alloc') && !phase.some((item) => item.op === 'alloc-store') ? 'direct-alloc' : 'alloc-store';
}

export async function runPhase(options: PhaseOptions): Promise<PhaseResult> {
  const { sessions, size, phase, inFlight } = options;
  const keys = options.keysPerSession;
  if (keys < inFlight) throw new UsageError(`${keys} handles per session cannot keep ${inFlight} requests in flight; use at least ${inFlight}`);
  for (const session of sessions) {
    if (inFlight > session.depth) throw new UsageError(`${inFlight} requests in flight exceed the session's pipeline depth ${session.depth}`);
    if (size > session.hello.blockSize) throw new UsageError(`${size}-octet blocks do not fit the target's ${session.hello.blockSize}-octet blocks`);
  }
  if (options.durationMs === undefined && options.count === undefined) throw new UsageError('give a duration or a count');
  const sealed = sealingFor(phase);
  const maker = new BlockMaker(size);
  const stats = new Map<OpName, OpStats>();
  const statsOf = (op: OpName): OpStats => {
    let entry = stats.get(op);
    if (entry === undefined) {
      entry = new OpStats(op);
      stats.set(op, entry);
    }
    return entry;
  };
  for (const item of phase) statsOf(item.op);

  const all = sessions.map((session, index) => new SessionBlocks(session, options.firstHandle + BigInt(index * keys), keys));
  /**
   * Load buffers are registered with their session so loaded blocks land in them directly (no
   * copy out of the slot's staging area), as an application that reuses its buffers would do;
   * deregistered when the phase ends.
   */
  const registered: Array<{ session: KbtpSession; buffer: Uint8Array }> = [];
  const loadBuffer = (session: KbtpSession): Uint8Array => {
    const buffer = new Uint8Array(size);
    session.registerLoadBuffer(buffer);
    registered.push({ session, buffer });
    return buffer;
  };
  // Store buffers too: a STORE of a registered buffer is sent from it (inline, or read by the
  // target's RDMA Read) without the initiator's copy into a request slot.
  const storeBuffer = (session: KbtpSession): Uint8Array => {
    const buffer = maker.buffer();
    session.registerLoadBuffer(buffer);
    registered.push({ session, buffer });
    return buffer;
  };
  await Promise.all(all.map((blocks) => prefill(blocks, maker, sealed, inFlight)));

  const warmupMs = options.count !== undefined ? 0 : (options.warmupMs ?? 0);
  const start = performance.now();
  const measureFrom = start + warmupMs;
  const endAt = options.durationMs !== undefined ? measureFrom + options.durationMs : Infinity;
  const countLimit = options.count ?? Infinity;
  let issued = 0;
  let completed = 0;
  /** In a typed array: a double held by a closure's variable is a new heap number per add, and past 2^31 octets it is one. */
  const completedBytes = new Float64Array(1);
  let problems = 0;
  /** Every request answered (in the window or not, with any outcome): the CPU figures' divisor. */
  let answered = 0;
  let lastCompletion = start;
  /** Whether the phase is over; `now` when the caller read the clock a moment ago (a chain's completion did). */
  const stopped = (now = performance.now()): boolean => now >= endAt || issued >= countLimit;

  /** Counts a failed request; a failure other than a KBTP status ends the session's workers. */
  const failedRequest = (blocks: SessionBlocks, entry: OpStats, handle: bigint, error: unknown): void => {
    problems += 1;
    if (error instanceof KbtpStatusError) {
      entry.problem(error.statusName, `${entry.op} handle ${handle}: ${error.message}`);
    } else {
      entry.problem('TRANSPORT', `${entry.op} handle ${handle}: ${describe(error)}`);
      blocks.failed = error instanceof Error ? error : new InternalError(String(error));
    }
  };
  /** Checks a loaded block against what the benchmark stored there; counts it as CORRUPT if not. */
  const loadedRight = (entry: OpStats, data: Uint8Array, expected: ExpectedBlock | undefined, handle: bigint, stamp?: Uint8Array): boolean => {
    const wrong = expected === undefined ? `handle ${handle}: loaded a block the benchmark never stored` : maker.check(data, expected, handle, stamp);
    if (wrong === undefined) return true;
    problems += 1;
    entry.corrupt += 1;
    entry.problem('CORRUPT', wrong);
    return false;
  };
  /** Records a request that succeeded, if it ran inside the measured window. */
  const succeeded = (entry: OpStats, began: number, ended: number): void => {
    if (began < measureFrom || ended > endAt) return;
    entry.count += 1;
    entry.histogram.record((ended - began) * 1e6);
    const moved = entry.movesData ? size : 0;
    entry.bytes += moved;
    completed += 1;
    completedBytes[0] = (completedBytes[0] ?? 0) + moved;
    lastCompletion = ended;
  };

  /**
   * One of a session's `inFlight` request chains of a LOAD-only or STORE-only phase, through the
   * callback calls loadInto/storeFrom (issue 16): no promise or result object per request, so the
   * client's CPU per request is the initiator's and not the workload loop's. Each completion
   * checks and records its request and issues the chain's next; `ended` resolves when the chain
   * stops (window over, count reached, or the session failed).
   */
  const runChain = (blocks: SessionBlocks, op: 'load' | 'store', ended: () => void, broke: (error: Error) => void): void => {
    const entry = statsOf(op);
    const session = blocks.session;
    // Compared once: the operation's name comes from the command line (not an internalized
    // string), so each comparison per request was a call to compare its characters.
    const loading = op === 'load';
    const buffer = loading ? loadBuffer(session) : storeBuffer(session);
    const stamp = maker.stampOf(buffer);
    const loadOptions = { allowUnsealed: !sealed };
    let index = -1;
    let handle = 0n;
    let made: ExpectedBlock | undefined;
    let began = 0;
    // The request answered last, checked and recorded by settle() once the next one is written.
    let answeredIndex = -1;
    let answeredHandle = 0n;
    let answeredMade: ExpectedBlock | undefined;
    let answeredBegan = 0;
    let answeredAt = 0;
    let answeredLength = 0;
    const settle = (): void => {
      if (
        loading &&
        !(answeredLength === size
          ? loadedRight(entry, buffer, blocks.expected[answeredIndex], answeredHandle, stamp)
          : loadedRight(entry, buffer.subarray(0, answeredLength), blocks.expected[answeredIndex], answeredHandle))
      )
        return;
      if (answeredMade !== undefined) blocks.expected[answeredIndex] = answeredMade;
      succeeded(entry, answeredBegan, answeredAt);
    };
    const settler: TurnParticipant = { endTurn: settle };
    const done = (error: Error | undefined, dataLength: number): void => {
      const finished = performance.now();
      answered += 1;
      if (error !== undefined) {
        // A failed request changes nothing at the target (kbtp-v1 section 6); a transport failure
        // (blocks.failed) must be seen before the next request, so failures are counted at once.
        failedRequest(blocks, entry, handle, error);
        blocks.idleBound.push(index);
        next(finished);
        return;
      }
      answeredIndex = index;
      answeredHandle = handle;
      answeredMade = made;
      answeredBegan = began;
      answeredAt = finished;
      answeredLength = dataLength;
      blocks.idleBound.push(index);
      // Checking the block (a memcmp of all of it) and recording the latency ran before the next
      // request, so on the client's critical path: the next request is written only at the end
      // of the event-loop turn that delivered this answer (host/rnic/turn.ts). They run at that
      // end instead, after the write, while the next request is on the wire (issue 16, session
      // 4), as a participant enlisted behind the channel that next() enlists: before anything
      // next() sets off (the next answer landing in `buffer` comes in a later delivery, the
      // chain's end resolves a promise). Until session 9 a promise reaction did this: a microtask
      // checkpoint per request on the client.
      next(finished);
      turn.flushLater(settler);
    };
    // `now`: the completion's clock reading, good enough to tell whether the window is over (a
    // second reading per request cost ~150 instructions on the client; `began` is read afresh).
    const next = (now?: number): void => {
      if (blocks.failed !== undefined || stopped(now)) return ended();
      const taken = blocks.idleBound.shift();
      // Thrown here it would reach the initiator's completion handler, so it ends the phase instead.
      if (taken === undefined) return broke(new InternalError('internal: no idle handle although keys >= requests in flight'));
      index = taken;
      handle = blocks.handle(index);
      issued += 1;
      if (!loading) made = maker.make(buffer, handle, ++blocks.version);
      began = performance.now();
      if (loading) session.loadInto(handle, buffer, done, loadOptions);
      else session.storeFrom(handle, buffer, done);
    };
    next();
  };

  const runWorker = async (blocks: SessionBlocks, seed: number): Promise<void> => {
    const picker = new OpPicker(phase, seed);
    const buffer = maker.buffer();
    const session = blocks.session;
    // Loads land in a buffer of the worker's own: no allocation (and page faults) per request.
    const loadOptions = { allowUnsealed: !sealed, into: loadBuffer(session) };
    while (blocks.failed === undefined && !stopped()) {
      const op = feasible(picker.next(), blocks, phase);
      const fromFree = op === 'alloc-store' || op === 'direct-alloc';
      const index = fromFree ? blocks.idleFree.shift() : blocks.idleBound.shift();
      if (index === undefined) throw new InternalError('internal: no idle handle although keys >= requests in flight');
      const handle = blocks.handle(index);
      const expected = blocks.expected[index];
      let made: ExpectedBlock | undefined;
      let data: Uint8Array | undefined;
      let bound = !fromFree;
      issued += 1;
      const began = performance.now();
      let ok = true;
      const entry = statsOf(op);
      try {
        switch (op) {
          case 'load':
            data = (await session.load(handle, loadOptions)).data;
            break;
          case 'direct-load':
            data = (await session.directLoad(handle)).data;
            break;
          case 'store':
            made = maker.make(buffer, handle, ++blocks.version);
            await session.store(handle, buffer);
            break;
          case 'alloc-store':
            made = maker.make(buffer, handle, ++blocks.version);
            await session.allocStore(handle, buffer, { seal: sealed });
            bound = true;
            break;
          case 'direct-alloc':
            made = maker.make(buffer, handle, ++blocks.version);
            await session.directAllocStore(handle, buffer, { seal: sealed });
            bound = true;
            break;
          case 'free':
            await session.free(handle);
            bound = false;
            break;
        }
      } catch (error) {
        ok = false;
        failedRequest(blocks, entry, handle, error);
      }
      const ended = performance.now();
      answered += 1;
      if (ok && data !== undefined) ok = loadedRight(entry, data, expected, handle);
      if (ok) {
        if (made !== undefined) blocks.expected[index] = made;
        if (!bound) blocks.expected[index] = undefined;
        succeeded(entry, began, ended);
        (bound ? blocks.idleBound : blocks.idleFree).push(index);
      } else {
        // A failed request changes nothing at the target (kbtp-v1 section 6).
        (fromFree ? blocks.idleFree : blocks.idleBound).push(index);
      }
    }
  };

  /** One session's batches: take `inFlight` idle handles, load or store them all at once, check, repeat. */
  const runBatches = async (blocks: SessionBlocks): Promise<void> => {
    const op = phase[0]!.op;
    const entry = statsOf(op);
    const session = blocks.session;
    const indices: number[] = [];
    const handles: bigint[] = [];
    const buffers = Array.from({ length: inFlight }, () => (op === 'load' ? loadBuffer(session) : storeBuffer(session)));
    // Each buffer's stamp, for check(): made once, not a view per checked block (issue 16).
    const stamps = buffers.map((buffer) => maker.stampOf(buffer));
    const lengths = new Uint32Array(inFlight);
    const made: Array<ExpectedBlock | undefined> = new Array(inFlight).fill(undefined);
    const loadOptions = { allowUnsealed: !sealed, lengths };
    // Which requests of the batch failed (cleared per batch; filled only when one did).
    const failedAt = new Set<number>();
    while (blocks.failed === undefined && !stopped()) {
      indices.length = 0;
      handles.length = 0;
      for (let i = 0; i < inFlight && issued < countLimit; i++) {
        const index = blocks.idleBound.shift();
        if (index === undefined) throw new InternalError('internal: no idle handle although keys >= requests in flight');
        indices.push(index);
        handles.push(blocks.handle(index));
        if (op === 'store') made[i] = maker.make(buffers[i]!, handles[i]!, ++blocks.version);
        issued += 1;
      }
      failedAt.clear();
      // The last batch of a --count run may be short.
      const given = handles.length === inFlight ? buffers : buffers.slice(0, handles.length);
      const began = performance.now();
      try {
        if (op === 'load') await session.loadMany(handles, given, loadOptions);
        else await session.storeMany(handles, given);
      } catch (error) {
        if (error instanceof BatchError) {
          for (const failure of error.failures) {
            failedAt.add(failure.index);
            entry.problem(statusName(failure.status), `${op} handle ${failure.handle}: ${error.message}`);
          }
        } else {
          for (let i = 0; i < handles.length; i++) failedAt.add(i);
          entry.problem('TRANSPORT', `${op} of ${handles.length} handles from ${handles[0]}: ${describe(error)}`);
          blocks.failed = error instanceof Error ? error : new InternalError(String(error));
        }
        problems += failedAt.size;
      }
      const ended = performance.now();
      answered += handles.length;
      for (let i = 0; i < handles.length; i++) {
        const index = indices[i]!;
        blocks.idleBound.push(index);
        if (failedAt.has(i)) continue;
        if (op === 'load') {
          const expected = blocks.expected[index];
          const whole = lengths[i] === size;
          const data = whole ? buffers[i]! : buffers[i]!.subarray(0, lengths[i]);
          if (!loadedRight(entry, data, expected, handles[i]!, whole ? stamps[i] : undefined)) continue;
        } else {
          blocks.expected[index] = made[i];
        }
        succeeded(entry, began, ended);
      }
    }
  };
  const only = phase.length === 1 ? phase[0]!.op : undefined;
  const single = only === 'load' || only === 'store' ? only : undefined;
  const batched = options.batched === true && single !== undefined;

  const report = (): void =>
    options.onProgress?.({
      elapsedMs: performance.now() - start,
      plannedMs: options.durationMs === undefined ? undefined : options.durationMs + warmupMs,
      completed,
      planned: options.count,
      bytes: completedBytes[0] ?? 0,
      errors: problems,
    });
  const timer = options.onProgress === undefined ? undefined : setInterval(report, options.progressIntervalMs ?? 1000);
  // The CPU window opens with the measured one (after the warm-up) and closes when the last
  // request is answered; the requests answered in between divide it.
  const threadCpu = options.threadCpu;
  let cpuFrom: { sample: ThreadCpuSample; answered: number } | undefined;
  const openCpuWindow = (): void => {
    if (threadCpu !== undefined && cpuFrom === undefined) cpuFrom = { sample: threadCpu.sample(), answered };
  };
  const cpuTimer = threadCpu !== undefined && warmupMs > 0 ? setTimeout(openCpuWindow, warmupMs) : undefined;
  if (cpuTimer === undefined) openCpuWindow();
  let cpu: PhaseCpu | undefined;
  try {
    if (batched) await Promise.all(all.map((blocks) => runBatches(blocks)));
    else if (single !== undefined)
      await Promise.all(
        all.flatMap((blocks) => Array.from({ length: inFlight }, () => new Promise<void>((resolve, reject) => runChain(blocks, single, resolve, reject)))),
      );
    else await Promise.all(all.flatMap((blocks, s) => Array.from({ length: inFlight }, (_, w) => runWorker(blocks, 1 + s * 977 + w * 131))));
    if (threadCpu !== undefined && cpuFrom !== undefined) cpu = threadCpu.between(cpuFrom.sample, threadCpu.sample(), answered - cpuFrom.answered);
  } finally {
    if (timer !== undefined) clearInterval(timer);
    if (cpuTimer !== undefined) clearTimeout(cpuTimer);
    for (const { session, buffer } of registered) {
      try {
        session.deregisterLoadBuffer(buffer);
      } catch {
        // A LOAD into it that timed out is still on the wire: the buffer stays registered until its session closes.
      }
    }
  }
  report(); // every phase shows at least its final state
  // A duration run measures its whole window; a count run ends with its last completion.
  const seconds = Math.max(1e-9, (options.durationMs !== undefined ? options.durationMs : lastCompletion - measureFrom) / 1000);

  const failed = all.find((blocks) => blocks.failed !== undefined)?.failed;
  if (failed === undefined) {
    await Promise.all(
      all.map((blocks) =>
        cleanup(
          { session: blocks.session, handles: blocks.expected.flatMap((expected, index) => (expected === undefined ? [] : [blocks.handle(index)])) },
          inFlight,
        ),
      ),
    );
  }
  return { size, sessions: sessions.length, inFlight, seconds, ops: [...stats.values()], ...(cpu !== undefined ? { cpu } : {}) };
}
