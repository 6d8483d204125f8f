// The durable tier (kbtp-v1 section 12): sealed blocks in page-aligned slots of one data file,
// their entries in an append-only journal of checksummed msgpack records, and a checkpoint of the
// whole index written now and then so that recovery replays little. One committer writes a group
// of queued requests at a time and makes the whole group durable with one fdatasync of each file
// it touched (group commit); requests that arrive meanwhile form the next group. The in-memory
// index changes only after a group is durable, so whatever the tier says it holds is on disk.
// docs/TIER.md gives the format and the reasoning.
import { crc32c } from '@node-rs/crc32';
import path from 'node:path';
import { EXIT_FAILURE, KbtpError } from '../errors.ts';
import { nodeFiles, errorCode, type FileLayer, type TierFile } from './files.ts';
import { columnBytes, encodeFrame, JOURNAL_MAGIC, type BatchRecord, type GroupBodyRecord } from './records.ts';
import { encodeCheckpoint, type Checkpoint } from './checkpoint.ts';
import { sizeTier, type TierSizing } from './capacity.ts';
import { generationLater } from './generations.ts';
import { recoverTier, sequenceName, CHECKPOINT_PATTERN, JOURNAL_PATTERN, type BlockRecord, type RecoveryReport } from './recovery.ts';

export interface TierTenant {
  /** First handle index (from the table's base handle) of the tenant's store range. */
  first: number;
  count: number;
  /** Blocks the tenant may keep on the tier; past it, its least recently used blocks are dropped. */
  durableQuota: number;
}

/** What dropping a block needs from the table: the target answers from its engine. */
export interface DropGate {
  /**
   * The tier would drop `index` to make room. 'claimed': the block lives on the tier alone and
   * its handle is now held for the drop; 'skip': not now (resident, busy); 'recent': it was used
   * since the tier last ordered it (it moves to the most recently used end).
   */
  claim(index: number): 'claimed' | 'skip' | 'recent';
  /** The drop is durable (the entry must become not VALID with `generation`), or failed (undefined). */
  settle(index: number, generation: number | undefined): void;
}

export interface TierOptions {
  directory: string;
  capacityBytes: number;
  blockSize: number;
  handleBase: bigint;
  handleCount: number;
  /** Tenants in handle-index space; a handle outside every range belongs to none and has no quota but the capacity. */
  tenants: TierTenant[];
  files?: FileLayer;
  drops?: DropGate;
  /** Told how far recovery is in open(): journals replayed of all (for the log of a long recovery). */
  recoveryProgress?: (journalsDone: number, journals: number) => void;
  /** Most records in one group commit. */
  maxBatch?: number;
}

export type TierErrorCode = 'ENOSPC' | 'EIO' | 'CHECKSUM' | 'NOT_HELD' | 'CLOSED';

/** A request the tier could not make durable or serve; the request changed nothing (code KBTP_TIER). */
export class TierError extends KbtpError {
  constructor(
    /** Why: no space, an I/O error, a block failing its checksum, a block not held, the tier closed. */
    readonly reason: TierErrorCode,
    message: string,
  ) {
    super('KBTP_TIER', message, EXIT_FAILURE);
  }
}

export interface ScrubResult {
  /** Blocks read and checked. */
  checked: number;
  /** Blocks whose data failed its checksum, with the Generation they were sealed with. */
  corrupt: Array<{ index: number; generation: number }>;
  /** Blocks whose read failed with an I/O error. */
  unreadable: Array<{ index: number; generation: number }>;
  /** Where the next slice starts; 0 when this one reached the end of the data file. */
  nextSlot: number;
  /** The data file's extent in slots when the slice began (progress: nextSlot / highSlot). */
  highSlot: number;
}

export interface CheckpointResult {
  /** False when nothing changed since the last checkpoint. */
  written: boolean;
  /** Free slots at the end of the data file given back to the file system. */
  trimmedSlots: number;
  /** The journal now written to (recovery starts there). */
  journal: number;
}

export interface TierStats {
  capacityBytes: number;
  /** Octets of the data directory's files: data file extent, journals and checkpoints. */
  bytesUsed: number;
  blocksDurable: number;
  maxBlocks: number;
  drops: number;
  fsyncs: number;
  groupCommits: number;
  /** Records per group commit: total (divide by groupCommits for the mean) and largest. */
  batchRecords: number;
  batchLargest: number;
  /** Group commits by records: 1, 2-3, 4-7, 8-15, 16-31, 32+. */
  batchHistogram: number[];
  checksumFailures: number;
  writeErrors: number;
  readErrors: number;
  recovery: RecoveryReport;
}

type Op =
  | { kind: 'seal'; index: number; generation: number; data: Uint8Array; crc: number; tenant: number; slot: number; done: Settle }
  | { kind: 'unbind'; index: number; generation: number; why: 'free' | 'lost' | 'undo'; done: Settle }
  | { kind: 'drop'; index: number; generation: number; tenant: number }
  | { kind: 'reserve'; index: number; mark: number; done: Settle };

interface Settle {
  resolve(): void;
  reject(error: Error): void;
}

const HISTOGRAM_EDGES = [1, 2, 4, 8, 16, 32];

/** The settle of a request nobody waits for (an undo written again). */
const UNANSWERED: Settle = { resolve: () => undefined, reject: () => undefined };

export class DurableTier {
  readonly sizing: TierSizing;
  readonly recovery: RecoveryReport;
  private readonly files: FileLayer;
  private readonly blocks: Map<number, BlockRecord>;
  private readonly marks: Uint16Array;
  private readonly freeSlots: number[] = [];
  private highSlot: number;
  private readonly tenantHeld: number[];
  private journal!: TierFile;
  private journalSequence: number;
  /** Number of the next group commit; every attempt takes one, so a journal's groups are consecutive. */
  private groupSequence: number;
  private journalSize = 0;
  /** Octets of the current journal's first frames (see writeCheckpoint); the journal limit counts the records after them. */
  private journalHeader = 0;
  private checkpointBytes = 0;
  /** Octets of the previous checkpoint and the journal after it, kept for a fallback. */
  private retainedBytes = 0;
  private previousCheckpoint: number;
  private queue: Op[] = [];
  /** Seals waiting for a slot that a drop in flight will free. */
  private waiting: Op[] = [];
  private dropsInFlight = 0;
  private readonly tenantDropsInFlight: number[];
  private readonly dropping = new Set<number>();
  private committing = false;
  private needsCheckpoint = false;
  private closed = false;
  private readonly counters = {
    drops: 0,
    fsyncs: 0,
    groupCommits: 0,
    batchRecords: 0,
    batchLargest: 0,
    checksumFailures: 0,
    writeErrors: 0,
    readErrors: 0,
    histogram: [0, 0, 0, 0, 0, 0],
  };
  private readonly maxBatch: number;
  private readonly resumeGenerations: Uint16Array;
  /** Undos that failed, by handle index: their Generation; written again with the next group. */
  private readonly undoRetries = new Map<number, number>();
  /** Failed groups whose records may lie in the current journal: the next journal names them void. */
  private voidGroups: number[] = [];
  /** Wakes the commit loop when a request is queued while it waits on a group's sync. */
  private arrived: (() => void) | undefined;
  /** Maintenance tasks (scrub repair, checkpoint, tenant changes) waiting for the committer. */
  private readonly exclusiveWaiters: Array<() => void> = [];

  private constructor(
    private readonly options: TierOptions,
    private readonly data: TierFile,
    sizing: TierSizing,
    state: Awaited<ReturnType<typeof recoverTier>>,
    seconds: number,
  ) {
    this.files = options.files ?? nodeFiles;
    this.sizing = sizing;
    this.blocks = state.blocks;
    this.marks = state.marks;
    this.resumeGenerations = state.resume;
    this.highSlot = state.highSlot;
    this.journalSequence = state.nextSequence;
    this.groupSequence = state.nextGroup;
    this.previousCheckpoint = state.usedCheckpoint;
    this.recovery = { ...state.report, seconds };
    this.maxBatch = options.maxBatch ?? 256;
    this.tenantHeld = options.tenants.map(() => 0);
    this.tenantDropsInFlight = options.tenants.map(() => 0);
    const used = new Uint8Array(this.highSlot);
    for (const block of this.blocks.values()) {
      used[block.slot] = 1;
      if (block.tenant >= 0) this.tenantHeld[block.tenant] = (this.tenantHeld[block.tenant] ?? 0) + 1;
    }
    // Lowest slots last, so they are taken first and the data file stays compact.
    for (let slot = this.highSlot - 1; slot >= 0; slot--) if (used[slot] === 0) this.freeSlots.push(slot);
  }

  /** Opens (creating, or recovering) the tier in options.directory. Nothing is served before this resolves. */
  static async open(options: TierOptions): Promise<DurableTier> {
    const started = process.hrtime.bigint();
    const files = options.files ?? nodeFiles;
    const sizing = sizeTier(options.capacityBytes, options.blockSize, options.handleCount);
    await files.makeDirectory(options.directory);
    const data = await files.open(path.join(options.directory, 'blocks'), true);
    const tenantOf = tenantLookup(options.tenants);
    const state = await recoverTier({
      files,
      directory: options.directory,
      data,
      blockSize: options.blockSize,
      slotSize: sizing.slotSize,
      handleBase: options.handleBase,
      handleCount: options.handleCount,
      maxSlots: sizing.maxSlots,
      tenantOf,
      durableQuota: (tenant) => options.tenants[tenant]?.durableQuota ?? Number.POSITIVE_INFINITY,
      ...(options.recoveryProgress === undefined ? {} : { progress: options.recoveryProgress }),
    });
    const tier = new DurableTier(options, data, sizing, state, 0);
    // The restart's marks and the recovered index become the new checkpoint before anything is served.
    await tier.writeCheckpoint();
    // A smaller capacity than before: the data file shrinks to the cap (blocks past it were left out).
    if ((await data.size()) > sizing.maxSlots * sizing.slotSize) {
      await data.truncate(sizing.maxSlots * sizing.slotSize);
      await data.datasync();
    }
    (tier.recovery as { seconds: number }).seconds = Number(process.hrtime.bigint() - started) / 1e9;
    return tier;
  }

  /** Blocks on the tier, least recently used first. */
  *entries(): IterableIterator<[number, { generation: number; dataLength: number }]> {
    for (const [index, block] of this.blocks) yield [index, { generation: block.generation, dataLength: block.dataLength }];
  }

  holds(index: number): boolean {
    return this.blocks.has(index);
  }

  /** The Generation a handle's entry starts at after open() when the tier does not hold it. */
  resumeGeneration(index: number): number {
    return this.resumeGenerations[index] ?? 1;
  }

  /** The highest Generation of the handle that may be shown before another durable record. */
  generationMark(index: number): number {
    return this.marks[index] ?? 1;
  }

  /** Marks the block most recently used. */
  touch(index: number): void {
    const block = this.blocks.get(index);
    if (block === undefined) return;
    this.blocks.delete(index);
    this.blocks.set(index, block);
  }

  /**
   * Makes the block's data and entry durable. `data` must not change until this settles. `crc`,
   * when the caller has it, is the CRC32C of `data` (the target's workers compute it where the
   * data is still in cache); otherwise the tier computes it.
   */
  seal(index: number, generation: number, data: Uint8Array, crc: number = crc32c(data)): Promise<void> {
    return this.enqueue((done) => ({
      kind: 'seal',
      index,
      generation,
      data,
      crc,
      tenant: tenantLookup(this.options.tenants)(index),
      slot: -1,
      done,
    }));
  }

  /** Makes the handle's unbinding durable (FREE of a sealed block, or a block found lost). */
  unbind(index: number, generation: number, why: 'free' | 'lost' | 'undo' = 'free'): Promise<void> {
    return this.enqueue((done) => ({ kind: 'unbind', index, generation, why, done }));
  }

  /** Durably raises the handle's Generation mark to `mark`. */
  reserve(index: number, mark: number): Promise<void> {
    return this.enqueue((done) => ({ kind: 'reserve', index, mark, done }));
  }

  /** Reads the block into `into` (at least its Data Length long) and checks its checksum. */
  async read(index: number, into: Uint8Array): Promise<{ generation: number; dataLength: number }> {
    const block = this.blocks.get(index);
    if (block === undefined) throw new TierError('NOT_HELD', `handle index ${index} is not on the tier`);
    const view = into.subarray(0, block.dataLength);
    let got: number;
    try {
      got = await this.data.read(view, block.slot * this.sizing.slotSize);
    } catch (error) {
      this.counters.readErrors += 1;
      throw new TierError(errorCode(error) === 'ENOSPC' ? 'ENOSPC' : 'EIO', `reading block of handle index ${index}: ${String(error)}`);
    }
    if (got !== block.dataLength || crc32c(view) !== block.crc) {
      this.counters.checksumFailures += 1;
      throw new TierError('CHECKSUM', `block of handle index ${index} fails its checksum; it is not served`);
    }
    return { generation: block.generation, dataLength: block.dataLength };
  }

  stats(): TierStats {
    const c = this.counters;
    return {
      capacityBytes: this.options.capacityBytes,
      bytesUsed: this.highSlot * this.sizing.slotSize + this.journalSize + this.checkpointBytes + this.retainedBytes,
      blocksDurable: this.blocks.size,
      maxBlocks: this.sizing.maxSlots,
      drops: c.drops,
      fsyncs: c.fsyncs,
      groupCommits: c.groupCommits,
      batchRecords: c.batchRecords,
      batchLargest: c.batchLargest,
      batchHistogram: [...c.histogram],
      checksumFailures: c.checksumFailures + this.recovery.checksumFailures,
      writeErrors: c.writeErrors,
      readErrors: c.readErrors,
      recovery: this.recovery,
    };
  }

  /** Waits for queued requests, then closes the files. Later requests fail with CLOSED. */
  async close(): Promise<void> {
    this.closed = true;
    while (this.committing || this.queue.length > 0 || this.waiting.length > 0) await new Promise((resolve) => setTimeout(resolve, 5));
    await this.journal.close();
    await this.data.close();
  }

  // --- group commit ----------------------------------------------------------------------------

  private enqueue(make: (done: Settle) => Op): Promise<void> {
    if (this.closed) return Promise.reject(new TierError('CLOSED', 'the durable tier is closed'));
    return new Promise<void>((resolve, reject) => {
      const op = make({ resolve, reject });
      // A newer record about the handle supersedes an undo still to be written again.
      this.undoRetries.delete(op.index);
      this.queue.push(op);
      if (!this.committing) void this.commitLoop();
      else this.wakeCommitter();
    });
  }

  /** Resolves at the next request queued (the commit loop waits on it beside a group's sync). */
  private arrival(): Promise<void> {
    return new Promise((resolve) => {
      this.arrived = resolve;
    });
  }

  private wakeCommitter(): void {
    const wake = this.arrived;
    this.arrived = undefined;
    wake?.();
  }

  /**
   * The committer. Two groups overlap: while one writes its journal and syncs, the next one
   * forms, and each request that joins it has its data written at once, so a group's sync finds
   * its data already written and the next group holds whatever arrived during that sync, however
   * the requests trickle in (a loop that waited for a sync before taking anything would make
   * every other group a group of one). Journal records and syncs stay strictly one group after
   * the other: a group's records are written only once the group before it is durable or failed.
   */
  private async commitLoop(): Promise<void> {
    this.committing = true;
    /** The group writing its journal and syncing (finish() never rejects), and whether it is done. */
    let previous: { settled: Promise<void>; done: boolean } | undefined;
    try {
      // A maintenance task waiting for the committer (see exclusive()) goes between two groups.
      while (this.exclusiveWaiters.length === 0) {
        if (this.queue.length === 0 && this.waiting.length === 0) {
          if (previous === undefined) break;
          if (!previous.done) await Promise.race([previous.settled, this.arrival()]);
          if (previous.done) previous = undefined;
          continue;
        }
        const candidates = [...this.takeUndoRetries(), ...this.waiting, ...this.queue.splice(0, this.maxBatch)];
        this.waiting = [];
        const batch = this.admit(candidates);
        if (batch.length === 0) {
          // Only seals waiting for drops: those of the group in flight may free their slots.
          if (previous !== undefined) {
            await previous.settled;
            previous = undefined;
          } else if (this.dropsInFlight === 0) this.fail(this.waiting.splice(0), new TierError('EIO', 'no block can be dropped'));
          continue;
        }
        let writes = this.writeData(batch);
        while (previous !== undefined && !previous.done) {
          await Promise.race([previous.settled, this.arrival()]);
          if (this.queue.length === 0 || batch.length >= this.maxBatch) continue;
          const more = this.admit(this.queue.splice(0, this.maxBatch - batch.length));
          if (more.length === 0) continue;
          batch.push(...more);
          const written = writes;
          const moreWritten = this.writeData(more);
          writes = Promise.all([written, moreWritten]).then(() => undefined);
        }
        const group = { settled: this.finish(batch, writes), done: false };
        void group.settled.then(() => {
          group.done = true;
          this.wakeCommitter();
        });
        previous = group;
      }
      if (previous !== undefined) await previous.settled;
    } finally {
      this.releaseCommitter();
    }
  }

  /** Gives each seal a slot, or claims a drop and makes it wait; returns the group to write. */
  private admit(candidates: Op[]): Op[] {
    const batch: Op[] = [];
    for (const op of candidates) {
      if (op.kind !== 'seal') {
        batch.push(op);
        continue;
      }
      const tenant = this.options.tenants[op.tenant];
      const replacing = this.blocks.get(op.index);
      const sameTenant = replacing !== undefined ? 1 : 0;
      if (tenant !== undefined && (this.tenantHeld[op.tenant] ?? 0) - sameTenant >= tenant.durableQuota) {
        // Over the tenant's Durable Quota: its least recently used block on the tier alone goes.
        if ((this.tenantDropsInFlight[op.tenant] ?? 0) > 0 || this.claimDrop(op.tenant, batch)) this.waiting.push(op);
        else op.done.reject(new TierError('ENOSPC', `tenant's Durable Quota of ${tenant.durableQuota} blocks is full and none of its blocks can be dropped`));
        continue;
      }
      const slot = this.freeSlots.pop() ?? (this.highSlot < this.sizing.maxSlots ? this.highSlot++ : -1);
      if (slot < 0) {
        if (this.dropsInFlight > this.waiting.length || this.claimDrop(undefined, batch)) this.waiting.push(op);
        else op.done.reject(new TierError('ENOSPC', `the tier is full (${this.sizing.maxSlots} blocks) and no block can be dropped`));
        continue;
      }
      op.slot = slot;
      if (op.tenant >= 0) this.tenantHeld[op.tenant] = (this.tenantHeld[op.tenant] ?? 0) + 1;
      batch.push(op);
    }
    return batch;
  }

  /** Claims the least recently used droppable block (of `tenant`, or of anyone) into `batch`. */
  private claimDrop(tenant: number | undefined, batch: Op[]): boolean {
    const gate = this.options.drops;
    // A block found 'recent' moves to the end and comes round again (Map iteration sees it): two rounds at most.
    let budget = 2 * this.blocks.size;
    for (const [index, block] of this.blocks) {
      if (budget-- <= 0) break;
      if ((tenant !== undefined && block.tenant !== tenant) || this.dropping.has(index)) continue;
      const answer = gate === undefined ? 'claimed' : gate.claim(index);
      if (answer === 'recent') {
        this.touch(index);
        continue;
      }
      if (answer === 'skip') continue;
      this.dropping.add(index);
      this.dropsInFlight += 1;
      if (block.tenant >= 0) this.tenantDropsInFlight[block.tenant] = (this.tenantDropsInFlight[block.tenant] ?? 0) + 1;
      // Dropped exactly as if freed: not VALID with the next Generation (kbtp-v1 section 12).
      batch.push({ kind: 'drop', index, generation: block.generation === 0xffff ? 1 : block.generation + 1, tenant: block.tenant });
      return true;
    }
    return false;
  }

  /**
   * The group's two frames: its marker, naming every record's kind, handle and Generation, then
   * the records themselves as columns. Either frame alone tells recovery which handles the group
   * was about (docs/TIER.md).
   */
  private groupFrames(batch: Op[]): Buffer {
    const q = this.groupSequence++;
    const n = batch.length;
    const h = new Uint32Array(n);
    const g = new Uint16Array(n);
    const l = new Uint32Array(n);
    const s = new Uint32Array(n);
    const c = new Uint32Array(n);
    let t = '';
    for (let i = 0; i < n; i++) {
      const op = batch[i] as Op;
      h[i] = op.index;
      if (op.kind === 'seal') {
        t += 's';
        g[i] = op.generation;
        l[i] = op.data.length;
        s[i] = op.slot;
        c[i] = op.crc;
      } else if (op.kind === 'reserve') {
        t += 'r';
        g[i] = op.mark;
      } else {
        t += 'u';
        g[i] = op.generation;
      }
    }
    const marker: BatchRecord = { k: 'b', q, t, h: columnBytes(h), g: columnBytes(g) };
    const body: GroupBodyRecord = { k: 'g', q, t, h: columnBytes(h), g: columnBytes(g), l: columnBytes(l), s: columnBytes(s), c: columnBytes(c) };
    return Buffer.concat([encodeFrame(JOURNAL_MAGIC, marker), encodeFrame(JOURNAL_MAGIC, body)]);
  }

  /** Whether a group of `records` could take the journal past its limit (a bound of 64 octets a record). */
  private journalFull(records: number): boolean {
    return this.journalSize - this.journalHeader > this.sizing.journalLimit - 64 * (records + 1) - 64;
  }

  /** One group from start to end (maintenance, which holds the committer). */
  private commit(batch: Op[]): Promise<void> {
    return this.finish(batch, this.writeData(batch));
  }

  /**
   * Starts writing the seals' data into their slots; seals in consecutive slots go out in one
   * vectored write (a full block fills its slot exactly). Resolves when every write has ended, and
   * rejects (with the first error) only then, so that no write is still running into a slot that a
   * failure gives back.
   */
  private async writeData(batch: Op[]): Promise<void> {
    const seals = batch.filter((op): op is Extract<Op, { kind: 'seal' }> => op.kind === 'seal').sort((a, b) => a.slot - b.slot);
    const writes: Array<Promise<void>> = [];
    for (let i = 0; i < seals.length; ) {
      const first = seals[i];
      if (first === undefined) break;
      const run: Uint8Array[] = [first.data];
      let j = i + 1;
      let previous = first;
      while (j < seals.length && run.length < 64) {
        const next = seals[j];
        if (next === undefined || next.slot !== previous.slot + 1 || previous.data.length !== this.sizing.slotSize) break;
        run.push(next.data);
        previous = next;
        j += 1;
      }
      if (run.some((part) => part.length > 0))
        writes.push(
          run.length === 1 ? this.data.write(first.data, first.slot * this.sizing.slotSize) : this.data.writev(run, first.slot * this.sizing.slotSize),
        );
      i = j;
    }
    await settledAll(writes);
  }

  /**
   * The group's records after its data writes, then one fdatasync of each file it touched; the
   * group is answered when durable, or failed. Never rejects.
   */
  private async finish(batch: Op[], dataWritten: Promise<void>): Promise<void> {
    // After a failed group, or with the journal near its limit: a new checkpoint and journal first.
    if (this.needsCheckpoint || this.journalFull(batch.length)) {
      try {
        await this.writeCheckpoint();
      } catch (error) {
        this.counters.writeErrors += 1;
        await dataWritten.catch(() => undefined);
        this.fail(batch, error);
        return;
      }
    }
    const group = this.groupSequence;
    const journalBytes = this.groupFrames(batch);
    const sealed = batch.some((op) => op.kind === 'seal');
    try {
      await settledAll([this.journal.write(journalBytes, this.journalSize), dataWritten]);
      const syncs = [this.journal.datasync()];
      if (sealed) syncs.push(this.data.datasync());
      await settledAll(syncs);
      this.counters.fsyncs += syncs.length;
    } catch (error) {
      this.counters.writeErrors += 1;
      // What reached the journal of this group is unknown. Before the group is answered, a new
      // checkpoint and journal supersede this one, and the new journal names the group void, so
      // none of it comes back at a restart, even one that falls back on the checkpoint before.
      // If that checkpoint cannot be written now, the next group tries again first.
      this.voidGroups.push(group);
      this.forgetUndone(batch);
      this.needsCheckpoint = true;
      try {
        await this.writeCheckpoint();
      } catch {
        this.counters.writeErrors += 1;
      }
      this.fail(batch, error);
      return;
    }
    this.journalSize += journalBytes.length;
    const c = this.counters;
    c.groupCommits += 1;
    c.batchRecords += batch.length;
    c.batchLargest = Math.max(c.batchLargest, batch.length);
    let bucket = 0;
    while (bucket + 1 < HISTOGRAM_EDGES.length && batch.length >= (HISTOGRAM_EDGES[bucket + 1] ?? Infinity)) bucket += 1;
    c.histogram[bucket] = (c.histogram[bucket] ?? 0) + 1;
    for (const op of batch) this.applyDurable(op);
  }

  /** The group is durable: the index follows, and the requests are answered. */
  private applyDurable(op: Op): void {
    const mark = this.marks[op.index] ?? 1;
    if (op.kind === 'reserve') {
      this.marks[op.index] = generationLater(mark, op.mark);
      op.done.resolve();
      return;
    }
    this.marks[op.index] = generationLater(mark, op.generation);
    this.release(op.index);
    if (op.kind === 'seal') {
      this.blocks.set(op.index, { generation: op.generation, dataLength: op.data.length, slot: op.slot, crc: op.crc, tenant: op.tenant });
      op.done.resolve();
    } else if (op.kind === 'drop') {
      this.counters.drops += 1;
      this.endDrop(op, op.generation);
    } else {
      op.done.resolve();
    }
  }

  /** Forgets the handle's block on the tier; its slot is free for the next group. */
  private release(index: number): void {
    const old = this.blocks.get(index);
    if (old === undefined) return;
    this.blocks.delete(index);
    this.freeSlots.push(old.slot);
    if (old.tenant >= 0) this.tenantHeld[old.tenant] = (this.tenantHeld[old.tenant] ?? 0) - 1;
  }

  private endDrop(op: Extract<Op, { kind: 'drop' }>, generation: number | undefined): void {
    this.dropping.delete(op.index);
    this.dropsInFlight -= 1;
    if (op.tenant >= 0) this.tenantDropsInFlight[op.tenant] = (this.tenantDropsInFlight[op.tenant] ?? 0) - 1;
    this.options.drops?.settle(op.index, generation);
  }

  private fail(ops: Op[], error: unknown): void {
    const code = errorCode(error) === 'ENOSPC' ? 'ENOSPC' : 'EIO';
    const reason = error instanceof Error ? error.message : String(error);
    this.forgetUndone(ops);
    for (const op of ops) {
      if (op.kind === 'drop') {
        this.endDrop(op, undefined);
        continue;
      }
      if (op.kind === 'seal' && op.slot >= 0) {
        this.freeSlots.push(op.slot);
        if (op.tenant >= 0) this.tenantHeld[op.tenant] = (this.tenantHeld[op.tenant] ?? 0) - 1;
        op.slot = -1;
      }
      op.done.reject(new TierError(code, `durable tier: ${reason}`));
    }
  }

  /**
   * An undo (a BIND's seal whose ticket was taken meanwhile, kbtp-v1 section 12) that could not be
   * made durable: the BIND fails all the same, so its block must not come back. The tier forgets
   * the block now (the checkpoint written after a failed group leaves it out) and writes the undo
   * again with its next group, unless a newer request about the handle comes first. Its slot is
   * free at once: should an older journal ever be replayed (a corrupt checkpoint), the seal there
   * points at data that fails its checksum, and a block failing its checksum is never served.
   */
  private forgetUndone(ops: Op[]): void {
    for (const op of ops) {
      if (op.kind !== 'unbind' || op.why !== 'undo') continue;
      // The handle was held since the seal that this undoes: the block held is that seal's.
      this.release(op.index);
      this.undoRetries.set(op.index, op.generation);
    }
  }

  /** Undos to write again (see forgetUndone), as requests nobody waits for. */
  private takeUndoRetries(): Op[] {
    const retries: Op[] = [];
    for (const [index, generation] of this.undoRetries) retries.push({ kind: 'unbind', index, generation, why: 'undo', done: UNANSWERED });
    this.undoRetries.clear();
    return retries;
  }

  // --- checkpoints -----------------------------------------------------------------------------

  /**
   * Writes the index as it is durable now and starts a new journal: the new journal exists (and
   * its directory entry is durable) before the checkpoint that names it is renamed into place.
   */
  private async writeCheckpoint(): Promise<void> {
    const { directory } = this.options;
    const sequence = this.journalSequence + (this.journal === undefined ? 0 : 1);
    const count = this.blocks.size;
    const columns = {
      index: new Uint32Array(count),
      generation: new Uint16Array(count),
      dataLength: new Uint32Array(count),
      slot: new Uint32Array(count),
      crc: new Uint32Array(count),
    };
    let i = 0;
    for (const [index, block] of this.blocks) {
      columns.index[i] = index;
      columns.generation[i] = block.generation;
      columns.dataLength[i] = block.dataLength;
      columns.slot[i] = block.slot;
      columns.crc[i] = block.crc;
      i += 1;
    }
    const checkpoint: Checkpoint = {
      blockSize: this.options.blockSize,
      slotSize: this.sizing.slotSize,
      handleBase: this.options.handleBase,
      handleCount: this.options.handleCount,
      journal: sequence,
      highSlot: this.highSlot,
      group: this.groupSequence,
      marks: this.marks,
      blocks: columns,
    };
    const bytes = encodeCheckpoint(checkpoint);
    const journal = await this.files.open(path.join(directory, sequenceName('journal', sequence)), true);
    // The journal's first frames, durable before the checkpoint that names it: the failed groups of
    // the journal it follows, named void (VoidRecord), then a copy of the marks (MarksRecord).
    const header = Buffer.concat([
      ...(this.voidGroups.length === 0 ? [] : [encodeFrame(JOURNAL_MAGIC, { k: 'v', j: this.journalSequence, q: [...this.voidGroups] })]),
      encodeFrame(JOURNAL_MAGIC, { k: 'm', m: columnBytes(this.marks) }),
    ]);
    try {
      await journal.truncate(0);
      await journal.write(header, 0);
      await journal.datasync();
      this.counters.fsyncs += 1;
      const temporary = path.join(directory, `${sequenceName('checkpoint', sequence)}.tmp`);
      const file = await this.files.open(temporary, true);
      try {
        await file.truncate(0);
        await file.write(bytes, 0);
        await file.datasync();
      } finally {
        await file.close();
      }
      await this.files.rename(temporary, path.join(directory, sequenceName('checkpoint', sequence)));
      await this.files.syncDirectory(directory);
      this.counters.fsyncs += 2;
    } catch (error) {
      await journal.close().catch(() => undefined);
      throw error;
    }
    const oldJournal = this.journal as TierFile | undefined;
    this.retainedBytes = oldJournal === undefined ? 0 : this.checkpointBytes + this.journalSize;
    this.journal = journal;
    this.journalSequence = sequence;
    this.journalSize = header.length;
    this.journalHeader = header.length;
    this.voidGroups = [];
    this.checkpointBytes = bytes.length;
    this.needsCheckpoint = false;
    await oldJournal?.close().catch(() => undefined);
    // Keep the checkpoint before this one and the journals after it: a checkpoint that fails its
    // checksum at the next start falls back to them. Everything older goes.
    const keepFrom = this.previousCheckpoint >= 0 ? this.previousCheckpoint : sequence;
    this.previousCheckpoint = sequence;
    for (const name of await this.files.list(directory)) {
      const checkpointMatch = CHECKPOINT_PATTERN.exec(name);
      const journalMatch = JOURNAL_PATTERN.exec(name);
      const number = Number(checkpointMatch?.[1] ?? journalMatch?.[1] ?? NaN);
      if ((Number.isFinite(number) && number < keepFrom) || name.endsWith('.tmp')) {
        await this.files.remove(path.join(directory, name)).catch(() => undefined);
      }
    }
  }

  // --- maintenance (the appliance's scheduled jobs and SIGHUP) ---------------------------------

  /**
   * Runs `work` as the committer: no group is in flight and none starts meanwhile, so no slot is
   * taken or given back under it. A running commit loop hands over between two groups.
   */
  private async exclusive<T>(work: () => Promise<T>): Promise<T> {
    if (this.closed) throw new TierError('CLOSED', 'the durable tier is closed');
    if (this.committing) await new Promise<void>((resolve) => this.exclusiveWaiters.push(resolve));
    this.committing = true;
    try {
      return await work();
    } finally {
      this.releaseCommitter();
    }
  }

  /** The committer is done: to the next maintenance task, or back to the queue, or idle. */
  private releaseCommitter(): void {
    const next = this.exclusiveWaiters.shift();
    if (next !== undefined) {
      next();
      return;
    }
    this.committing = false;
    if (this.queue.length > 0 || this.waiting.length > 0) void this.commitLoop();
  }

  /**
   * Re-reads up to `maxBlocks` blocks in slot order from `fromSlot` and checks their CRC32C, while
   * the tier serves. A block that changed during its read (freed, its slot reused) is not a
   * failure; one still the same that fails is counted and returned, for the caller to repair or
   * give up. Reads that fail with an I/O error are returned apart: they may be passing.
   */
  async scrub(fromSlot: number, maxBlocks: number): Promise<ScrubResult> {
    if (this.closed) throw new TierError('CLOSED', 'the durable tier is closed');
    const high = this.highSlot;
    const owner = new Int32Array(high).fill(-1);
    for (const [index, block] of this.blocks) if (block.slot < high) owner[block.slot] = index;
    const scratch = new Uint8Array(this.sizing.slotSize);
    const result: ScrubResult = { checked: 0, corrupt: [], unreadable: [], nextSlot: 0, highSlot: high };
    let slot = Math.min(Math.max(0, fromSlot), high);
    for (; slot < high && result.checked < maxBlocks; slot++) {
      // Closing (the node stops): the slice ends here, and a read the close cut short is no finding.
      if (this.closed) break;
      const index = owner[slot] ?? -1;
      const block = index < 0 ? undefined : this.blocks.get(index);
      if (block === undefined || block.slot !== slot) continue;
      const view = scratch.subarray(0, block.dataLength);
      let got: number;
      try {
        got = await this.data.read(view, slot * this.sizing.slotSize);
      } catch {
        if (this.closed) break;
        if (this.blocks.get(index) !== block) continue;
        this.counters.readErrors += 1;
        result.unreadable.push({ index, generation: block.generation });
        continue;
      }
      result.checked += 1;
      if (got === block.dataLength && crc32c(view) === block.crc) continue;
      if (this.blocks.get(index) !== block) continue;
      this.counters.checksumFailures += 1;
      result.corrupt.push({ index, generation: block.generation });
    }
    result.nextSlot = slot >= high ? 0 : slot;
    return result;
  }

  /**
   * Rewrites a block's slot from a good copy of its data (the pool's, for a resident block whose
   * copy on the tier failed a scrub). Only when the copy matches the CRC32C the block was sealed
   * with and the tier still holds that block; false otherwise.
   */
  repair(index: number, generation: number, data: Uint8Array): Promise<boolean> {
    return this.exclusive(async () => {
      const block = this.blocks.get(index);
      if (block === undefined || block.generation !== generation || block.dataLength !== data.length || crc32c(data) !== block.crc) return false;
      try {
        await this.data.write(data, block.slot * this.sizing.slotSize);
        await this.data.datasync();
      } catch (error) {
        this.counters.writeErrors += 1;
        throw new TierError(errorCode(error) === 'ENOSPC' ? 'ENOSPC' : 'EIO', `repairing block of handle index ${index}: ${String(error)}`);
      }
      this.counters.fsyncs += 1;
      return true;
    });
  }

  /**
   * Writes a checkpoint now (recovery then replays nothing older; older journals go) and gives the
   * free slots at the end of the data file back to the file system. Nothing is written when no
   * record was journalled since the last checkpoint and no slot can be given back.
   */
  checkpoint(): Promise<CheckpointResult> {
    return this.exclusive(async () => {
      let high = 0;
      for (const block of this.blocks.values()) high = Math.max(high, block.slot + 1);
      const trimmedSlots = this.highSlot - high;
      if (trimmedSlots === 0 && this.journalSize === this.journalHeader && !this.needsCheckpoint)
        return { written: false, trimmedSlots: 0, journal: this.journalSequence };
      if (trimmedSlots > 0) {
        // Slots past the last block are forgotten: a later seal takes them again through highSlot.
        this.highSlot = high;
        const kept = this.freeSlots.filter((slot) => slot < high);
        this.freeSlots.length = 0;
        this.freeSlots.push(...kept);
      }
      try {
        await this.writeCheckpoint();
        // The checkpoint that no longer names them is durable; only now may the file shrink.
        if (trimmedSlots > 0) {
          await this.data.truncate(high * this.sizing.slotSize);
          await this.data.datasync();
          this.counters.fsyncs += 1;
        }
      } catch (error) {
        this.counters.writeErrors += 1;
        this.needsCheckpoint = true;
        throw new TierError(errorCode(error) === 'ENOSPC' ? 'ENOSPC' : 'EIO', `checkpoint: ${String(error)}`);
      }
      return { written: true, trimmedSlots, journal: this.journalSequence };
    });
  }

  /**
   * Replaces the tenants' store ranges and Durable Quotas while serving (SIGHUP). A tenant now over
   * its quota has its least recently used blocks that live on the tier alone dropped at once;
   * blocks also resident in the pool stay until they are demoted and the tenant seals again.
   */
  setTenants(tenants: TierTenant[]): Promise<{ dropped: number; overQuota: number }> {
    return this.exclusive(async () => {
      const lookup = tenantLookup(tenants);
      this.options.tenants = tenants;
      this.tenantHeld.length = 0;
      this.tenantDropsInFlight.length = 0;
      for (let i = 0; i < tenants.length; i++) {
        this.tenantHeld.push(0);
        this.tenantDropsInFlight.push(0);
      }
      for (const [index, block] of this.blocks) {
        block.tenant = lookup(index);
        if (block.tenant >= 0) this.tenantHeld[block.tenant] = (this.tenantHeld[block.tenant] ?? 0) + 1;
      }
      // Seals queued under the old ranges count against the new ones.
      for (const op of [...this.queue, ...this.waiting]) if (op.kind === 'seal') op.tenant = lookup(op.index);
      let dropped = 0;
      let overQuota = 0;
      for (const [position, tenant] of tenants.entries()) {
        let excess = (this.tenantHeld[position] ?? 0) - tenant.durableQuota;
        while (excess > 0) {
          const batch: Op[] = [];
          while (batch.length < Math.min(excess, this.maxBatch)) {
            if (!this.claimDrop(position, batch)) break;
          }
          if (batch.length === 0) break;
          if (this.journalFull(batch.length)) await this.writeCheckpoint();
          const before = this.counters.drops;
          await this.commit(batch);
          const done = this.counters.drops - before;
          dropped += done;
          excess -= done;
          if (done === 0) break;
        }
        overQuota += Math.max(0, excess);
      }
      return { dropped, overQuota };
    });
  }
}

/** Waits for every promise to settle, then rejects with the first rejection, if any. */
async function settledAll(promises: ReadonlyArray<Promise<unknown>>): Promise<void> {
  const results = await Promise.allSettled(promises);
  for (const result of results) if (result.status === 'rejected') throw result.reason;
}

/** Handle index -> tenant index (-1 for none), by binary search over the sorted store ranges. */
function tenantLookup(tenants: readonly TierTenant[]): (index: number) => number {
  const sorted = tenants
    .map((tenant, position) => ({ ...tenant, position }))
    .filter((t) => t.count > 0)
    .sort((a, b) => a.first - b.first);
  return (index) => {
    let low = 0;
    let high = sorted.length - 1;
    while (low <= high) {
      const middle = (low + high) >> 1;
      const tenant = sorted[middle];
      if (tenant === undefined) break;
      if (index < tenant.first) high = middle - 1;
      else if (index >= tenant.first + tenant.count) low = middle + 1;
      else return tenant.position;
    }
    return -1;
  };
}
