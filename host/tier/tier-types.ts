// The durable tier's public shapes: its options, the gate through which it drops blocks, what its
// maintenance returns, its figures, and TierError. Apart from the tier's code so that every layer
// of it (tier-state.ts .. tier.ts) and its users share one definition.
import { EXIT_FAILURE, KbtpError } from '../errors.ts';
import type { FileLayer } from './files.ts';
import type { RecoveryReport } from './recovery.ts';

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
  /**
   * Milliseconds that group commits spent in their fdatasyncs (from the first sync's start to the
   * last one's end), summed: against the wall clock of a busy spell, the share of it that the disk
   * was kept writing back; the rest is each group's close and the hand-overs between groups.
   */
  syncMilliseconds: number;
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
