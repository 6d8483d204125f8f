// Cache policies decide two things the hardware fixes at tape-out: how the lines are divided
// among the kinds (one shared pool, or fixed partitions), and what a deregistration drops.
// Victims inside a pool are always picked by recency (LRU per set). New policies plug in with
// registerPolicy(); the model only sees the SramPolicy interface.
import { EntryKind, KIND_COUNT, KIND_NAMES, TRANSLATION_MASK } from './kinds.ts';
import { UsageError } from '../errors.ts';

/** A group of lines shared by some kinds. A pool of 0 lines caches nothing: its kinds always miss. */
export interface PoolSpec {
  readonly kinds: readonly EntryKind[];
  readonly lines: number;
}

export interface CacheGeometry {
  readonly lines: number;
  /** Ways per set; 0 means fully associative. */
  readonly associativity: number;
}

/** What a policy may do to the model when a region is deregistered. Both return the lines dropped (never written back). */
export interface InvalidationTarget {
  /** Drops every line whose kind is in `kindMask` (bit 1 << kind). */
  invalidateKinds(kindMask: number): number;
  /** Drops the MPT line and the MTT lines of one region. */
  invalidateRegion(stag: number): number;
}

export interface SramPolicy {
  readonly name: string;
  readonly description: string;
  /** Divides the cache's lines into pools. Every kind appears in exactly one pool. */
  layout(geometry: CacheGeometry): PoolSpec[];
  /** Called on each deregistration of region `stag`. */
  deregister(target: InvalidationTarget, stag: number): void;
}

/** Lines per kind name for the partitioned policy, e.g. { QPC: 1024, MTT: 768 }. */
export type Partition = Partial<Record<string, number>>;

export interface PolicyOptions {
  readonly partition?: Partition;
}

export type PolicyFactory = (options: PolicyOptions) => SramPolicy;

const ALL_KINDS: readonly EntryKind[] = Array.from({ length: KIND_COUNT }, (_, kind) => kind as EntryKind);

function sharedPool(geometry: CacheGeometry): PoolSpec[] {
  return [{ kinds: ALL_KINDS, lines: geometry.lines }];
}

/**
 * The seed's hardware: one unpartitioned pool, and a deregistration invalidates every MPT/MTT
 * line, not only the departing region's (what Kong et al., NSDI 2023, attribute their
 * measurements to).
 */
export const sharedLru: PolicyFactory = () => ({
  name: 'shared-lru',
  description: 'one pool for every kind, LRU victims; a deregistration drops every MPT/MTT line',
  layout: sharedPool,
  deregister(target) {
    target.invalidateKinds(TRANSLATION_MASK);
  },
});

/** Same pool as shared-lru, but the NIC can find the departing region's lines and drops only those. */
export const hwAssisted: PolicyFactory = () => ({
  name: 'hw-assisted',
  description: "one pool for every kind, LRU victims; a deregistration drops only that region's MPT/MTT lines",
  layout: sharedPool,
  deregister(target, stag) {
    target.invalidateRegion(stag);
  },
});

/**
 * Default split for the partitioned policy: half the lines for QP contexts, 3/8 for MTT, 1/16
 * for MPT, 1/32 each for CQC and EQC, none for BLOCK. An assumption (no source gives a split);
 * it only has to be a plausible fixed guess, which is what partitioning commits to.
 */
const DEFAULT_SHARES: ReadonlyArray<readonly [EntryKind, number]> = [
  [EntryKind.MPT, 1 / 16],
  [EntryKind.MTT, 3 / 8],
  [EntryKind.CQC, 1 / 32],
  [EntryKind.EQC, 1 / 32],
];

export function defaultPartition(geometry: CacheGeometry): Record<string, number> {
  const granule = geometry.associativity > 0 ? geometry.associativity : 1;
  const result: Record<string, number> = {};
  let given = 0;
  for (const [kind, share] of DEFAULT_SHARES) {
    const lines = Math.floor((geometry.lines * share) / granule) * granule;
    result[KIND_NAMES[kind]!] = lines;
    given += lines;
  }
  result.QPC = geometry.lines - given;
  result.BLOCK = 0;
  return result;
}

/** A fixed number of lines per kind; a deregistration still drops every translation line. */
export const partitioned: PolicyFactory = (options) => ({
  name: 'partitioned',
  description: 'a fixed number of lines per kind, LRU victims within each; a deregistration drops every MPT/MTT line',
  layout(geometry) {
    const split = options.partition ?? defaultPartition(geometry);
    for (const name of Object.keys(split)) {
      if (!KIND_NAMES.includes(name)) {
        throw new UsageError(`partition names unknown kind '${name}'; use ${KIND_NAMES.join(', ')}`);
      }
    }
    const pools = ALL_KINDS.map((kind) => ({ kinds: [kind], lines: split[KIND_NAMES[kind]!] ?? 0 }));
    const total = pools.reduce((sum, pool) => sum + pool.lines, 0);
    if (total !== geometry.lines) {
      throw new UsageError(`partition gives ${total} lines but the cache has ${geometry.lines}; make the per-kind counts add up to lines`);
    }
    return pools;
  },
  deregister(target) {
    target.invalidateKinds(TRANSLATION_MASK);
  },
});

const factories = new Map<string, PolicyFactory>([
  ['shared-lru', sharedLru],
  ['partitioned', partitioned],
  ['hw-assisted', hwAssisted],
]);

export function registerPolicy(name: string, factory: PolicyFactory): void {
  factories.set(name, factory);
}

export function policyNames(): string[] {
  return [...factories.keys()];
}

export function createPolicy(name: string, options: PolicyOptions = {}): SramPolicy {
  const factory = factories.get(name);
  if (factory === undefined) {
    throw new UsageError(`unknown policy '${name}'; use one of ${policyNames().join(', ')}`);
  }
  return factory(options);
}
