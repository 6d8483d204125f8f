// The engine's configuration: what the host asks for, checked before any memory is made, with
// errors that name the field and say how to fix it.
import { EXIT_USAGE, KbtpError } from '../errors.ts';

export type RingMode = 'masked' | 'unmasked';

export interface PartitionConfig {
  /** Blocks carved out of the pool for this partition; its owner's Allocation Quota. */
  blocks: number;
  /** Ring order of the partition ring (N = 2^order >= blocks); the smallest that fits by default. */
  ringOrder?: number;
}

export interface HandleRange {
  first: bigint;
  count: bigint;
}

export interface TenantConfig {
  name: string;
  /** Handles the tenant may STORE, ALLOC_STORE, FREE and BIND. Ranges of tenants never overlap. */
  storeRange: HandleRange;
  /** Handles the tenant may LOAD. */
  loadScope: HandleRange;
  /** Allocation Quota in blocks. */
  quota: number;
  /** Index of the partition whose ring the tenant allocates from; the shared ring when absent. */
  partition?: number;
  /** Tenants of one trust domain may see each other's freed blocks; the tenant's name by default. */
  trustDomain?: string;
  /** kbtp-v1 section 12: 'demote' (default with a durable tier) or 'none' (the draft's behaviour). */
  eviction?: EvictionPolicy;
}

export type EvictionPolicy = 'none' | 'demote';

export interface EngineConfig {
  blockSize: number;
  blockCount: number;
  /** Order n of the shared ring, N = 2^n >= its blocks. */
  ringOrder?: number;
  ringMode?: RingMode;
  handleBase?: bigint;
  handleCount?: number;
  maxInline?: number;
  partitions?: PartitionConfig[];
  tenants?: TenantConfig[];
  /** Threads that run requests; each gets its own arena of sessions and request contexts. */
  threads?: number;
  sessionsPerThread?: number;
  requestsPerThread?: number;
  /** A durable tier keeps sealed blocks (kbtp-v1 section 12): sealing and freeing wait for it. */
  durable?: boolean;
  /** Staging blocks for sealing requests (durable only); default: 64 MiB of them, 4 to 256. */
  stagingBlocks?: number;
}

export interface ResolvedPartition {
  blocks: number;
  ringOrder: number;
  firstBlock: number;
}

export interface ResolvedTenant {
  name: string;
  storeRange: HandleRange;
  loadScope: HandleRange;
  quota: number;
  partition: number | undefined;
  trustDomain: string;
  eviction: EvictionPolicy;
}

export interface ResolvedEngineConfig {
  blockSize: number;
  blockCount: number;
  sharedBlocks: number;
  ringOrder: number;
  ringMode: RingMode;
  handleBase: bigint;
  handleCount: number;
  maxInline: number;
  partitions: ResolvedPartition[];
  tenants: ResolvedTenant[];
  threads: number;
  sessionsPerThread: number;
  requestsPerThread: number;
  durable: boolean;
  /** 0 without a durable tier. */
  stagingBlocks: number;
}

export class EngineConfigError extends KbtpError {
  constructor(
    readonly field: string,
    problem: string,
    fix: string,
  ) {
    super('KBTP_CONFIG', `engine config: ${field}: ${problem}; ${fix}`, EXIT_USAGE);
  }
}

/** Smallest n >= 1 with 2^n >= count (kbtp-v1 section 10: n >= 1). */
export function ringOrderFor(count: number): number {
  let order = 1;
  while (2 ** order < count) order += 1;
  return order;
}

const MAX_RING_ORDER = 27; // 2^27 slots of 16 octets already fill half of a 32-bit memory

function positiveInteger(field: string, value: number, fix: string): void {
  if (!Number.isSafeInteger(value) || value <= 0) throw new EngineConfigError(field, `must be a positive integer, got ${value}`, fix);
}

function checkRingOrder(field: string, order: number, blocks: number): void {
  if (!Number.isInteger(order) || order < 1 || order > MAX_RING_ORDER) {
    throw new EngineConfigError(
      field,
      `must be an integer from 1 to ${MAX_RING_ORDER}, got ${order}`,
      'n >= 1 keeps the Slot Offset field clear of the ticket (kbtp-v1 section 10)',
    );
  }
  if (2 ** order < blocks) {
    throw new EngineConfigError(
      field,
      `N = 2^${order} = ${2 ** order} is smaller than the ring's ${blocks} blocks`,
      `use at least ${ringOrderFor(blocks)} (draft 3.3: N >= F)`,
    );
  }
}

function checkRange(field: string, range: HandleRange): void {
  if (
    typeof range?.first !== 'bigint' ||
    typeof range?.count !== 'bigint' ||
    range.first < 0n ||
    range.count < 0n ||
    range.first >= 2n ** 64n ||
    range.count >= 2n ** 64n
  ) {
    throw new EngineConfigError(field, 'must be { first, count } as non-negative bigints within 64 bits', 'give e.g. { first: 0n, count: 1024n }');
  }
}

export function resolveEngineConfig(config: EngineConfig): ResolvedEngineConfig {
  positiveInteger('blockSize', config.blockSize, 'give the block size in octets, e.g. 65536');
  if (config.blockSize % 8 !== 0) {
    throw new EngineConfigError(
      'blockSize',
      `${config.blockSize} is not a multiple of 8`,
      `use ${Math.ceil(config.blockSize / 8) * 8}: blocks stay 8-octet aligned for atomics and copies`,
    );
  }
  positiveInteger('blockCount', config.blockCount, 'give the number of blocks F, e.g. 4096');
  const maxInline = config.maxInline ?? Math.min(config.blockSize, 65536);
  if (!Number.isSafeInteger(maxInline) || maxInline < 0 || maxInline > config.blockSize) {
    throw new EngineConfigError(
      'maxInline',
      `must be an integer from 0 to blockSize (${config.blockSize}), got ${maxInline}`,
      'inline data larger than a block could never be stored',
    );
  }
  const handleCount = config.handleCount ?? config.blockCount * 4;
  positiveInteger('handleCount', handleCount, 'give the number of handles the table serves');
  const handleBase = config.handleBase ?? 0n;
  if (typeof handleBase !== 'bigint' || handleBase < 0n || handleBase + BigInt(handleCount) > 2n ** 64n) {
    throw new EngineConfigError('handleBase', 'must be a non-negative bigint with handleBase + handleCount <= 2^64', 'give e.g. 0n');
  }
  const ringMode = config.ringMode ?? 'masked';
  if (ringMode !== 'masked' && ringMode !== 'unmasked') {
    throw new EngineConfigError(
      'ringMode',
      `must be 'masked' or 'unmasked', got ${String(ringMode)}`,
      "'masked' is RFC 7306 (iWARP); 'unmasked' is the InfiniBand form (draft 9.2)",
    );
  }

  let nextBlock = config.blockCount;
  const partitions: ResolvedPartition[] = [];
  (config.partitions ?? []).forEach((partition, index) => {
    const field = `partitions[${index}]`;
    positiveInteger(`${field}.blocks`, partition.blocks, "give the partition size in blocks (its owner's quota)");
    const ringOrder = partition.ringOrder ?? ringOrderFor(partition.blocks);
    checkRingOrder(`${field}.ringOrder`, ringOrder, partition.blocks);
    nextBlock -= partition.blocks;
    if (nextBlock < 0) {
      throw new EngineConfigError(
        `${field}.blocks`,
        `partitions take more than the ${config.blockCount} blocks of the pool`,
        'shrink the partitions or grow blockCount',
      );
    }
    partitions.push({ blocks: partition.blocks, ringOrder, firstBlock: nextBlock });
  });
  const sharedBlocks = nextBlock;
  const ringOrder = config.ringOrder ?? ringOrderFor(sharedBlocks);
  checkRingOrder('ringOrder', ringOrder, sharedBlocks);

  const tenantsIn = config.tenants ?? [
    {
      name: 'default',
      storeRange: { first: handleBase, count: BigInt(handleCount) },
      loadScope: { first: handleBase, count: BigInt(handleCount) },
      quota: sharedBlocks,
    },
  ];
  const tenants: ResolvedTenant[] = [];
  const durable = config.durable ?? false;
  let sharedQuota = 0;
  const partitionOwners = new Map<number, string>();
  tenantsIn.forEach((tenant, index) => {
    const field = `tenants[${index}]`;
    if (typeof tenant.name !== 'string' || tenant.name.length === 0 || Buffer.byteLength(tenant.name) > 64) {
      throw new EngineConfigError(
        `${field}.name`,
        'must be a non-empty string of at most 64 UTF-8 octets',
        'HELLO carries the tenant name in at most 64 octets',
      );
    }
    checkRange(`${field}.storeRange`, tenant.storeRange);
    checkRange(`${field}.loadScope`, tenant.loadScope);
    if (!Number.isSafeInteger(tenant.quota) || tenant.quota < 0) {
      throw new EngineConfigError(`${field}.quota`, `must be a non-negative integer, got ${tenant.quota}`, 'give the quota in blocks');
    }
    if (tenant.partition !== undefined) {
      const partition = partitions[tenant.partition];
      if (partition === undefined) {
        throw new EngineConfigError(
          `${field}.partition`,
          `no partition ${tenant.partition}`,
          `use an index below ${partitions.length} or declare the partition`,
        );
      }
      if (partition.blocks !== tenant.quota) {
        throw new EngineConfigError(
          `${field}.quota`,
          `is ${tenant.quota} but partition ${tenant.partition} holds ${partition.blocks} blocks`,
          "a partition ring is exactly its owner's quota (draft 3.4): make them equal",
        );
      }
      const owner = partitionOwners.get(tenant.partition);
      if (owner !== undefined) {
        throw new EngineConfigError(
          `${field}.partition`,
          `partition ${tenant.partition} already belongs to tenant '${owner}'`,
          'give each tenant its own partition',
        );
      }
      partitionOwners.set(tenant.partition, tenant.name);
    } else {
      sharedQuota += tenant.quota;
    }
    for (const other of tenants) {
      const overlap =
        tenant.storeRange.first < other.storeRange.first + other.storeRange.count &&
        other.storeRange.first < tenant.storeRange.first + tenant.storeRange.count &&
        tenant.storeRange.count > 0n &&
        other.storeRange.count > 0n;
      if (overlap) {
        throw new EngineConfigError(
          `${field}.storeRange`,
          `overlaps the store range of tenant '${other.name}'`,
          'store ranges never overlap, so every handle has one owner (kbtp-v1 section 11)',
        );
      }
      if (other.name === tenant.name) {
        throw new EngineConfigError(`${field}.name`, `'${tenant.name}' is used twice`, 'give each tenant its own name');
      }
    }
    const eviction = tenant.eviction ?? (durable ? 'demote' : 'none');
    if (eviction !== 'none' && eviction !== 'demote') {
      throw new EngineConfigError(
        `${field}.eviction`,
        `must be 'none' or 'demote', got ${String(eviction)}`,
        "'demote' moves least recently used sealed blocks to the durable tier; 'none' answers NO_SPACE at the quota",
      );
    }
    if (eviction === 'demote' && !durable) {
      throw new EngineConfigError(`${field}.eviction`, "'demote' needs a durable tier to demote to", "configure a durable tier (--data-dir) or use 'none'");
    }
    tenants.push({
      name: tenant.name,
      storeRange: tenant.storeRange,
      loadScope: tenant.loadScope,
      quota: tenant.quota,
      partition: tenant.partition,
      trustDomain: tenant.trustDomain ?? tenant.name,
      eviction,
    });
  });
  if (sharedQuota > sharedBlocks) {
    throw new EngineConfigError(
      'tenants',
      `quotas on the shared ring add up to ${sharedQuota}, more than its ${sharedBlocks} blocks`,
      'lower the quotas: their sum never exceeds F (draft 3.4)',
    );
  }

  const threads = config.threads ?? 4;
  const sessionsPerThread = config.sessionsPerThread ?? 64;
  const requestsPerThread = config.requestsPerThread ?? 1024;
  positiveInteger('threads', threads, 'give the number of threads that run requests');
  positiveInteger('sessionsPerThread', sessionsPerThread, 'give the sessions one thread may hold');
  positiveInteger('requestsPerThread', requestsPerThread, 'give the request contexts (posted receives) of one thread');

  const stagingBlocks = durable ? (config.stagingBlocks ?? Math.min(256, Math.max(4, Math.floor((64 << 20) / config.blockSize)))) : 0;
  if (durable) positiveInteger('stagingBlocks', stagingBlocks, 'give how many sealing requests may stage their data at once');

  return {
    blockSize: config.blockSize,
    blockCount: config.blockCount,
    sharedBlocks,
    ringOrder,
    ringMode,
    handleBase,
    handleCount,
    maxInline,
    partitions,
    tenants,
    threads,
    sessionsPerThread,
    requestsPerThread,
    durable,
    stagingBlocks,
  };
}
