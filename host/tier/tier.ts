// The durable tier (kbtp-v1 section 12): sealed blocks in page-aligned slots of one data file,
// their entries in an append-only journal of checksummed msgpack records, and a checkpoint of the
// whole index written now and then so that recovery replays little. One committer writes a group
// of queued requests at a time and makes the whole group durable with one fdatasync of each file
// it touched (group commit); requests that arrive meanwhile form the next group. The in-memory
// index changes only after a group is durable, so whatever the tier says it holds is on disk.
// docs/TIER.md gives the format and the reasoning.
import { crc32c } from './checksum.ts';
import path from 'node:path';
import { nodeFiles, errorCode, type TierFile } from './files.ts';
import { sizeTier, type TierSizing } from './capacity.ts';
import { recoverTier } from './recovery.ts';
import { TierError, type TierOptions, type TierStats } from './tier-types.ts';
import { tenantLookup } from './tenant-lookup.ts';
import type { RecoveredTier } from './tier-state.ts';
import { TierMaintenance } from './maintenance.ts';

export { TierError } from './tier-types.ts';
export type { TierTenant, DropGate, TierOptions, TierErrorCode, ScrubResult, CheckpointResult, TierStats } from './tier-types.ts';

/**
 * The durable tier, in layers, each in a file of its own: its state (tier-state.ts), checkpoints
 * (checkpoint-writer.ts), group commit (group-commit.ts), maintenance (maintenance.ts), and here
 * what the target uses: open (recovery), seal, unbind, reserve, read, figures, close.
 */
export class DurableTier extends TierMaintenance {
  private constructor(options: TierOptions, data: TierFile, sizing: TierSizing, state: RecoveredTier, seconds: number) {
    super(options, data, sizing, state, seconds);
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
      tenant: this.tenantOf(index),
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
      syncMilliseconds: c.syncMilliseconds,
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
}
