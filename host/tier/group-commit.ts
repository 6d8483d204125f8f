// Group commit (docs/TIER.md, "Group commit"): one committer writes a group of queued requests
// at a time (the seals' data into their slots, then the group's journal frames) and makes the
// whole group durable with one fdatasync of each file it touched; requests that arrive meanwhile
// form the next group. A failed group is superseded by a new checkpoint and journal naming it void
// before it is answered. Maintenance (maintenance.ts) runs as the committer between two groups.
import { errorCode } from './files.ts';
import { columnBytes, encodeFrame, JOURNAL_MAGIC, type BatchRecord, type GroupBodyRecord } from './records.ts';
import { generationLater } from './generations.ts';
import { TierError } from './tier-types.ts';
import { CheckpointWriter } from './checkpoint-writer.ts';
import { monotonicMs } from '../util/clock.ts';

export type Op =
  | { kind: 'seal'; index: number; generation: number; data: Uint8Array; crc: number; tenant: number; slot: number; done: Settle }
  | { kind: 'unbind'; index: number; generation: number; why: 'free' | 'lost' | 'undo'; done: Settle }
  | { kind: 'drop'; index: number; generation: number; tenant: number }
  | { kind: 'reserve'; index: number; mark: number; done: Settle };

export interface Settle {
  resolve(): void;
  reject(error: Error): void;
}

const HISTOGRAM_EDGES = [1, 2, 4, 8, 16, 32];

/**
 * While a group forms, its seals' data is written whenever this much has gathered, so that most
 * of it is in the page cache before the group closes (its sync then waits for little), in one
 * vectored write per run of consecutive slots rather than one write per block.
 */
const WRITE_RUN_OCTETS = 4 << 20;

function dataOctets(ops: readonly Op[]): number {
  let octets = 0;
  for (const op of ops) if (op.kind === 'seal') octets += op.data.length;
  return octets;
}

/** The settle of a request nobody waits for (an undo written again). */
const UNANSWERED: Settle = { resolve: () => undefined, reject: () => undefined };
const ignoreOutcome = (): void => undefined;

export abstract class GroupCommit extends CheckpointWriter {
  protected queue: Op[] = [];
  /** Seals waiting for a slot that a drop in flight will free. */
  protected waiting: Op[] = [];
  protected dropsInFlight = 0;
  protected readonly dropping = new Set<number>();
  protected committing = false;
  /** Undos that failed, by handle index: their Generation; written again with the next group. */
  protected readonly undoRetries = new Map<number, number>();
  /** Wakes the commit loop when a request is queued while it waits on a group's sync. */
  protected arrived: (() => void) | undefined;
  /** Settles when the data writes started so far have ended (writeData: one at a time). */
  private dataWrites: Promise<void> = Promise.resolve();
  /** Maintenance tasks (scrub repair, checkpoint, tenant changes) waiting for the committer. */
  protected readonly exclusiveWaiters: Array<() => void> = [];

  protected enqueue(make: (done: Settle) => Op): Promise<void> {
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
  protected arrival(): Promise<void> {
    return new Promise((resolve) => {
      this.arrived = resolve;
    });
  }

  protected wakeCommitter(): void {
    const wake = this.arrived;
    this.arrived = undefined;
    wake?.();
  }

  /**
   * The committer. Two groups overlap: while one writes its journal and syncs, the next one
   * forms, and the next group holds whatever arrived during that sync, however the requests
   * trickle in (a loop that waited for a sync before taking anything would make every other group
   * a group of one). A group's data is written a few MiB at a time as the group forms (see
   * WRITE_RUN_OCTETS) and the rest when it closes: its seals took the lowest free slots in turn
   * (free-slots.ts), so each of those writes is one vectored write per run of consecutive slots
   * rather than one write per block as each request arrived (each write costs the main thread a
   * promise and a hand-over to libuv's threads, and concurrent writes to one file contend for its
   * lock). Journal records and syncs stay strictly one group after the
   * other: a group's records are written only once the group before it is durable or failed.
   */
  protected async commitLoop(): Promise<void> {
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
        // Data is written in runs of WRITE_RUN_OCTETS while the group forms, the rest when it closes.
        const writes: Array<Promise<void>> = [];
        let unwritten = [...batch];
        while (previous !== undefined && !previous.done) {
          if (dataOctets(unwritten) >= WRITE_RUN_OCTETS) {
            writes.push(this.writeData(unwritten));
            unwritten = [];
          }
          await Promise.race([previous.settled, this.arrival()]);
          if (this.queue.length === 0 || batch.length >= this.maxBatch) continue;
          const more = this.admit(this.queue.splice(0, this.maxBatch - batch.length));
          batch.push(...more);
          unwritten.push(...more);
        }
        if (unwritten.length > 0) writes.push(this.writeData(unwritten));
        const group = { settled: this.finish(batch, settledAll(writes)), done: false };
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
  protected admit(candidates: Op[]): Op[] {
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
      const slot = this.freeSlots.take() ?? (this.highSlot < this.sizing.maxSlots ? this.highSlot++ : -1);
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
  protected claimDrop(tenant: number | undefined, batch: Op[]): boolean {
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
  protected groupFrames(batch: Op[]): Buffer {
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
  protected journalFull(records: number): boolean {
    return this.journalSize - this.journalHeader > this.sizing.journalLimit - 64 * (records + 1) - 64;
  }

  /** One group from start to end (maintenance, which holds the committer). */
  protected commit(batch: Op[]): Promise<void> {
    return this.finish(batch, this.writeData(batch));
  }

  /**
   * Writes the seals' data into their slots; seals in consecutive slots go out in one vectored
   * write (a full block fills its slot exactly). One data write is in flight at a time, across
   * calls: concurrent writes to the one file wait for each other on its inode's lock in the
   * kernel, each wait a sleep and a wake-up of a libuv thread (docs/TIER.md, session 8). Resolves
   * when this call's writes have ended, and rejects (with the first error) only then, so that no
   * write is still running into a slot that a failure gives back.
   */
  protected writeData(batch: Op[]): Promise<void> {
    const written = this.dataWrites.then(() => this.writeDataNow(batch));
    // The next call waits for this one to end, whether it failed or not (its caller sees the failure).
    this.dataWrites = written.then(ignoreOutcome, ignoreOutcome);
    return written;
  }

  private async writeDataNow(batch: Op[]): Promise<void> {
    const seals = batch.filter((op): op is Extract<Op, { kind: 'seal' }> => op.kind === 'seal').sort((a, b) => a.slot - b.slot);
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
        await (run.length === 1 ? this.data.write(first.data, first.slot * this.sizing.slotSize) : this.data.writev(run, first.slot * this.sizing.slotSize));
      i = j;
    }
  }

  /**
   * The group's records after its data writes, then one fdatasync of each file it touched; the
   * group is answered when durable, or failed. Never rejects.
   */
  protected async finish(batch: Op[], dataWritten: Promise<void>): Promise<void> {
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
      const syncStart = monotonicMs();
      const syncs = [this.journal.datasync()];
      if (sealed) syncs.push(this.data.datasync());
      await settledAll(syncs);
      this.counters.syncMilliseconds += monotonicMs() - syncStart;
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
        await this.cutFailedGroup();
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

  /**
   * A failed group that no checkpoint supersedes (the one written for it failed too): its records
   * may lie in the journal a restart replays, with nothing naming them void. Cut them off: the
   * journal ends where the last durable group ended. No later group writes to this journal (each
   * first writes the checkpoint that is still owed), so the cut stays where it is. Should the cut
   * fail as well, only a successful checkpoint before a crash keeps the group from counting.
   */
  protected async cutFailedGroup(): Promise<void> {
    try {
      await this.journal.truncate(this.journalSize);
      await this.journal.datasync();
      this.counters.fsyncs += 1;
    } catch {
      this.counters.writeErrors += 1;
    }
  }

  /** The group is durable: the index follows, and the requests are answered. */
  protected applyDurable(op: Op): void {
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

  protected endDrop(op: Extract<Op, { kind: 'drop' }>, generation: number | undefined): void {
    this.dropping.delete(op.index);
    this.dropsInFlight -= 1;
    if (op.tenant >= 0) this.tenantDropsInFlight[op.tenant] = (this.tenantDropsInFlight[op.tenant] ?? 0) - 1;
    this.options.drops?.settle(op.index, generation);
  }

  protected fail(ops: Op[], error: unknown): void {
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
  protected forgetUndone(ops: Op[]): void {
    for (const op of ops) {
      if (op.kind !== 'unbind' || op.why !== 'undo') continue;
      // The handle was held since the seal that this undoes: the block held is that seal's.
      this.release(op.index);
      this.undoRetries.set(op.index, op.generation);
    }
  }

  /** Undos to write again (see forgetUndone), as requests nobody waits for. */
  protected takeUndoRetries(): Op[] {
    const retries: Op[] = [];
    for (const [index, generation] of this.undoRetries) retries.push({ kind: 'unbind', index, generation, why: 'undo', done: UNANSWERED });
    this.undoRetries.clear();
    return retries;
  }

  /**
   * Runs `work` as the committer: no group is in flight and none starts meanwhile, so no slot is
   * taken or given back under it. A running commit loop hands over between two groups.
   */
  protected async exclusive<T>(work: () => Promise<T>): Promise<T> {
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
  protected releaseCommitter(): void {
    const next = this.exclusiveWaiters.shift();
    if (next !== undefined) {
      next();
      return;
    }
    this.committing = false;
    if (this.queue.length > 0 || this.waiting.length > 0) void this.commitLoop();
  }
}

/** Waits for every promise to settle, then rejects with the first rejection, if any. */
async function settledAll(promises: ReadonlyArray<Promise<unknown>>): Promise<void> {
  const results = await Promise.allSettled(promises);
  for (const result of results) if (result.status === 'rejected') throw result.reason;
}
