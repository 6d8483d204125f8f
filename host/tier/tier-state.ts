// The durable tier's state, shared by its layers (checkpoint-writer.ts, group-commit.ts,
// maintenance.ts, tier.ts): the in-memory index of the blocks on the tier (handle index -> slot,
// Generation, Data Length, CRC32C, tenant, in least-recently-used order), the per-handle Generation
// marks, the free slots, the current journal and the tier's figures. It changes only once a group
// is durable (group-commit.ts), so whatever it says the tier holds is on disk.
import { nodeFiles, type FileLayer, type TierFile } from './files.ts';
import { FreeSlots } from './free-slots.ts';
import type { TierSizing } from './capacity.ts';
import type { BlockRecord, RecoveryReport, recoverTier } from './recovery.ts';
import type { TierOptions } from './tier-types.ts';
import { tenantLookup } from './tenant-lookup.ts';

export type RecoveredTier = Awaited<ReturnType<typeof recoverTier>>;

export abstract class TierState {
  readonly sizing: TierSizing;
  readonly recovery: RecoveryReport;
  protected readonly files: FileLayer;
  protected readonly blocks: Map<number, BlockRecord>;
  protected readonly marks: Uint16Array;
  protected readonly freeSlots = new FreeSlots();
  protected highSlot: number;
  protected readonly tenantHeld: number[];
  /** Handle index -> tenant index (-1 for none), for the tenants as configured now (setTenants replaces it). */
  protected tenantOf: (index: number) => number;
  protected journal!: TierFile;
  protected journalSequence: number;
  /** Number of the next group commit; every attempt takes one, so a journal's groups are consecutive. */
  protected groupSequence: number;
  protected journalSize = 0;
  /** Octets of the current journal's first frames (see writeCheckpoint); the journal limit counts the records after them. */
  protected journalHeader = 0;
  protected checkpointBytes = 0;
  /** Octets of the previous checkpoint and the journal after it, kept for a fallback. */
  protected retainedBytes = 0;
  protected previousCheckpoint: number;
  protected readonly tenantDropsInFlight: number[];
  protected needsCheckpoint = false;
  protected closed = false;
  protected readonly counters = {
    drops: 0,
    fsyncs: 0,
    groupCommits: 0,
    syncMilliseconds: 0,
    batchRecords: 0,
    batchLargest: 0,
    checksumFailures: 0,
    writeErrors: 0,
    readErrors: 0,
    histogram: [0, 0, 0, 0, 0, 0],
  };
  protected readonly maxBatch: number;
  protected readonly resumeGenerations: Uint16Array;
  /** Failed groups whose records may lie in the current journal: the next journal names them void. */
  protected voidGroups: number[] = [];

  protected constructor(
    protected readonly options: TierOptions,
    protected readonly data: TierFile,
    sizing: TierSizing,
    state: RecoveredTier,
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
    this.tenantOf = tenantLookup(options.tenants);
    this.tenantHeld = options.tenants.map(() => 0);
    this.tenantDropsInFlight = options.tenants.map(() => 0);
    const used = new Uint8Array(this.highSlot);
    for (const block of this.blocks.values()) {
      used[block.slot] = 1;
      if (block.tenant >= 0) this.tenantHeld[block.tenant] = (this.tenantHeld[block.tenant] ?? 0) + 1;
    }
    for (let slot = 0; slot < this.highSlot; slot++) if (used[slot] === 0) this.freeSlots.push(slot);
  }

  /** Marks the block most recently used. */
  touch(index: number): void {
    const block = this.blocks.get(index);
    if (block === undefined) return;
    this.blocks.delete(index);
    this.blocks.set(index, block);
  }

  /** Forgets the handle's block on the tier; its slot is free for the next group. */
  protected release(index: number): void {
    const old = this.blocks.get(index);
    if (old === undefined) return;
    this.blocks.delete(index);
    this.freeSlots.push(old.slot);
    if (old.tenant >= 0) this.tenantHeld[old.tenant] = (this.tenantHeld[old.tenant] ?? 0) - 1;
  }
}
