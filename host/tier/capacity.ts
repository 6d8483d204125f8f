// How a configured capacity in octets splits into data slots and room for metadata, so that the
// data directory never grows past the capacity: data file <= slots x slot size, two journals of
// at most their header and the journal limit each, two checkpoints of at most their bound each.
import { EXIT_USAGE, KbtpError } from '../errors.ts';

/** Data slots are whole pages, so a block's write never shares a page with another block. */
export const PAGE = 4096;

export interface TierSizing {
  slotSize: number;
  maxSlots: number;
  /** A journal is rotated (a checkpoint written) before its records would grow past this. */
  journalLimit: number;
  /** Upper bound of a journal's first frames (a void record and the copy of the marks). */
  journalHeaderBound: number;
  /** Upper bound of one checkpoint file. */
  checkpointBound: number;
}

/** A durable capacity that cannot hold the tier (a configuration error, code KBTP_CONFIG). */
export class TierCapacityError extends KbtpError {
  constructor(message: string) {
    super('KBTP_CONFIG', message, EXIT_USAGE);
  }
}

/** Octets a checkpoint takes per block (five columns) and per handle (its mark), plus its frame. */
const CHECKPOINT_PER_BLOCK = 18;
const CHECKPOINT_FIXED = 1024;
/** A journal's first frames beside the marks: their headers and a void record of a few groups. */
const JOURNAL_HEADER_FIXED = 1024;

export function sizeTier(capacityBytes: number, blockSize: number, handleCount: number): TierSizing {
  if (!Number.isSafeInteger(capacityBytes) || capacityBytes <= 0) {
    throw new TierCapacityError(`durable capacity must be a positive number of octets, got ${capacityBytes}`);
  }
  const slotSize = Math.ceil(blockSize / PAGE) * PAGE;
  const journalLimit = Math.min(64 << 20, Math.max(256 << 10, Math.floor(capacityBytes / 64)));
  const journalHeaderBound = JOURNAL_HEADER_FIXED + 2 * handleCount;
  const fixed = 2 * (journalLimit + journalHeaderBound) + 2 * (CHECKPOINT_FIXED + 2 * handleCount);
  const maxSlots = Math.floor((capacityBytes - fixed) / (slotSize + 2 * CHECKPOINT_PER_BLOCK));
  if (maxSlots < 1) {
    const needed = fixed + slotSize + 2 * CHECKPOINT_PER_BLOCK;
    throw new TierCapacityError(
      `durable capacity ${capacityBytes} octets holds no block of ${blockSize} octets ` +
        `(journals and checkpoints for ${handleCount} handles need ${fixed}); give at least ${needed}`,
    );
  }
  return { slotSize, maxSlots, journalLimit, journalHeaderBound, checkpointBound: CHECKPOINT_FIXED + 2 * handleCount + CHECKPOINT_PER_BLOCK * maxSlots };
}
