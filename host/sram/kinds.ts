// The kinds of entry the on-NIC SRAM holds. They are small integers so the model can keep a
// line's kind in its integer record and index per-kind counters without a lookup.

export const EntryKind = {
  /** Queue-pair context: next PSN/MSN, queue pointers. Modified on-chip, so it can be dirty. */
  QPC: 0,
  /** Memory protection table entry: one per region (STag), never modified on-chip. */
  MPT: 1,
  /** Memory translation table entry: one per page of a region, never modified on-chip. */
  MTT: 2,
  /** Completion-queue context: its producer index moves on-chip, so it can be dirty. */
  CQC: 3,
  /** Event-queue context: likewise dirty when an event is raised. */
  EQC: 4,
  /** A KV block held by the SRAM tier of an in-network cache device. */
  BLOCK: 5,
} as const;

export type EntryKind = (typeof EntryKind)[keyof typeof EntryKind];

export const KIND_COUNT = 6;

export const KIND_NAMES: readonly string[] = ['QPC', 'MPT', 'MTT', 'CQC', 'EQC', 'BLOCK'];

/**
 * Kinds the NIC may modify in place. A translation is only ever read on-chip, so dropping its
 * line is free; the others can hold state newer than the backing table's copy.
 */
export const WRITABLE_KINDS: readonly EntryKind[] = [EntryKind.QPC, EntryKind.CQC, EntryKind.EQC, EntryKind.BLOCK];

export function kindName(kind: number): string {
  return KIND_NAMES[kind] ?? `kind${kind}`;
}

/** Bit mask of the translation kinds (bit 1 << kind), for invalidations. */
export const TRANSLATION_MASK = (1 << EntryKind.MPT) | (1 << EntryKind.MTT);
