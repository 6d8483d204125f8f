// Layout of the model's counters. They live in Float64Arrays (exact up to 2^53) indexed by
// these field numbers, so counting an access is a couple of adds and never allocates; the
// plain-object views below are built only when someone asks for a report.
import { KIND_COUNT, KIND_NAMES, EntryKind } from './kinds.ts';

/** Per-kind fields. Hits, misses, inserts and time belong to the kind accessed; evictions, write-backs and invalidations to the kind of the line that went. */
export const K_HITS = 0;
export const K_MISSES = 1;
export const K_EVICTIONS = 2;
export const K_WRITEBACKS = 3;
export const K_INVALIDATIONS = 4;
export const K_INSERTS = 5;
/** Write-backs that an access of this kind had to wait for (its time, not the victim's). */
export const K_WRITEBACKS_PAID = 6;
export const KIND_FIELDS = 7;

/**
 * Per-owner fields: hits and misses per kind, then what the owner's accesses paid and lost.
 * Time is not accumulated: it is hits x hit cost + misses x miss cost + write-backs paid x
 * write-back cost, computed when a report is built, which keeps two adds off every access.
 */
export const O_HITS = 0; // + kind
export const O_MISSES = KIND_COUNT; // + kind
/** Write-backs this owner's accesses had to wait for. */
export const O_WRITEBACKS = 2 * KIND_COUNT;
/** Lines holding this owner's entries that another owner's access evicted. */
export const O_LINES_LOST = 2 * KIND_COUNT + 1;
/** Lines holding this owner's entries dropped by an invalidation (anyone's deregistration, a QP destruction). */
export const O_LINES_DROPPED = 2 * KIND_COUNT + 2;
export const OWNER_FIELDS = 2 * KIND_COUNT + 3;

/** Modelled time of a count of hits, misses and write-backs waited for. */
export interface TimeCosts {
  readonly hitNs: number;
  readonly missNs: number;
  readonly writeBackNs: number;
}

export interface KindStats {
  hits: number;
  misses: number;
  /** Lines of this kind given to another entry. */
  evictions: number;
  /** Dirty lines of this kind written back (PCIe writes). */
  writeBacks: number;
  /** Lines of this kind dropped by a deregistration or QP destruction. */
  invalidations: number;
  /** Lines filled by a control operation (registration, QP creation) rather than a miss. */
  inserts: number;
  timeNs: number;
}

export interface SramStats {
  accesses: number;
  hits: number;
  misses: number;
  hitRate: number;
  /** One PCIe read per miss. */
  pcieReads: number;
  /** One PCIe write per dirty write-back. */
  pcieWrites: number;
  pcieCrossings: number;
  timeNs: number;
  registrations: number;
  deregistrations: number;
  perKind: Record<string, KindStats>;
}

export interface OwnerStats {
  owner: number;
  hits: number;
  misses: number;
  hitRate: number;
  translationLookups: number;
  translationMisses: number;
  pcieReads: number;
  pcieWrites: number;
  timeNs: number;
  linesLost: number;
  linesDropped: number;
  perKind: Record<string, { hits: number; misses: number }>;
}

export function kindStatsFrom(counters: Float64Array, kind: number, costs: TimeCosts): KindStats {
  const base = kind * KIND_FIELDS;
  const hits = counters[base + K_HITS]!;
  const misses = counters[base + K_MISSES]!;
  return {
    hits,
    misses,
    evictions: counters[base + K_EVICTIONS]!,
    writeBacks: counters[base + K_WRITEBACKS]!,
    invalidations: counters[base + K_INVALIDATIONS]!,
    inserts: counters[base + K_INSERTS]!,
    timeNs: hits * costs.hitNs + misses * costs.missNs + counters[base + K_WRITEBACKS_PAID]! * costs.writeBackNs,
  };
}

export function ownerStatsFrom(counters: Float64Array, ownerIndex: number, owner: number, costs: TimeCosts): OwnerStats {
  const base = ownerIndex * OWNER_FIELDS;
  const perKind: Record<string, { hits: number; misses: number }> = {};
  let hits = 0;
  let misses = 0;
  for (let kind = 0; kind < KIND_COUNT; kind++) {
    const kindHits = counters[base + O_HITS + kind] ?? 0;
    const kindMisses = counters[base + O_MISSES + kind] ?? 0;
    perKind[KIND_NAMES[kind]!] = { hits: kindHits, misses: kindMisses };
    hits += kindHits;
    misses += kindMisses;
  }
  const translation = (kind: EntryKind) => perKind[KIND_NAMES[kind]!]!;
  const mpt = translation(EntryKind.MPT);
  const mtt = translation(EntryKind.MTT);
  const writeBacks = counters[base + O_WRITEBACKS] ?? 0;
  return {
    owner,
    hits,
    misses,
    hitRate: hits + misses === 0 ? 0 : hits / (hits + misses),
    translationLookups: mpt.hits + mpt.misses + mtt.hits + mtt.misses,
    translationMisses: mpt.misses + mtt.misses,
    pcieReads: misses,
    pcieWrites: writeBacks,
    timeNs: hits * costs.hitNs + misses * costs.missNs + writeBacks * costs.writeBackNs,
    linesLost: counters[base + O_LINES_LOST] ?? 0,
    linesDropped: counters[base + O_LINES_DROPPED] ?? 0,
    perKind,
  };
}
