// Writes the engine's structures into a fresh memory: descriptor, rings (draft 3.3 initial
// state), block homes, table entries (Flags 0, Generation 1: kbtp-v1 section 10) and tenants.
import * as S from '../../assembly/struct-offsets.ts';
import type { ResolvedEngineConfig } from './config.ts';
import type { EngineLayout, RingLayout } from './layout.ts';

const ALL_ONES = 0xffffffffffffffffn;

export function initialCounters(ring: RingLayout, mode: 'masked' | 'unmasked'): { head: bigint; tail: bigint } {
  const slotCount = 2 ** ring.order;
  const tailTicket = BigInt(ring.blocks) << 32n;
  const tailSlot = mode === 'masked' ? BigInt(16 * (ring.blocks % slotCount)) : 0n;
  return { head: 0n, tail: tailTicket | tailSlot };
}

export function initializeEngine(memory: WebAssembly.Memory, config: ResolvedEngineConfig, layout: EngineLayout): void {
  const view = new DataView(memory.buffer);
  const engine = layout.engine;
  view.setUint32(engine + S.ENGINE_POOL_BASE, layout.pool, true);
  view.setUint32(engine + S.ENGINE_BLOCK_SIZE, config.blockSize, true);
  view.setUint32(engine + S.ENGINE_BLOCK_COUNT, config.blockCount, true);
  view.setUint32(engine + S.ENGINE_TABLE_BASE, layout.table, true);
  view.setUint32(engine + S.ENGINE_HANDLE_COUNT, config.handleCount, true);
  view.setUint32(engine + S.ENGINE_HANDLE_LOCKS, layout.handleLocks, true);
  view.setBigUint64(engine + S.ENGINE_BASE_HANDLE, config.handleBase, true);
  view.setUint32(engine + S.ENGINE_BLOCK_RINGS, layout.blockRings, true);
  view.setUint32(engine + S.ENGINE_MAX_INLINE, config.maxInline, true);
  view.setUint32(engine + S.ENGINE_SHARED_RING, layout.rings[0]?.descriptor ?? 0, true);
  view.setUint32(engine + S.ENGINE_DURABLE, config.durable ? 1 : 0, true);
  view.setUint32(engine + S.ENGINE_GENERATION_MARKS, layout.generationMarks, true);
  view.setUint32(engine + S.ENGINE_TENANTS, layout.tenants, true);
  view.setUint32(engine + S.ENGINE_TENANT_COUNT, config.tenants.length, true);
  view.setUint32(engine + S.ENGINE_STAGING, layout.staging, true);
  view.setUint32(engine + S.ENGINE_STAGING_COUNT, config.stagingBlocks, true);
  view.setUint32(engine + S.ENGINE_STAGING_FLAGS, layout.stagingFlags, true);

  // A ring shared by tenants of different trust domains zeroes blocks on free (draft 6.4).
  const domainsOfRing = layout.rings.map(() => new Set<string>());
  for (const tenant of config.tenants) domainsOfRing[tenant.partition === undefined ? 0 : tenant.partition + 1]?.add(tenant.trustDomain);

  layout.rings.forEach((ring, index) => {
    const slotCount = 2 ** ring.order;
    const d = ring.descriptor;
    view.setUint32(d + S.RING_MODE, config.ringMode === 'masked' ? S.RING_MODE_MASKED : S.RING_MODE_UNMASKED, true);
    view.setUint32(d + S.RING_ORDER, ring.order, true);
    view.setUint32(d + S.RING_SLOTS, ring.slots, true);
    view.setUint32(d + S.RING_HEAD, ring.head, true);
    view.setUint32(d + S.RING_BLOCK_COUNT, ring.blocks, true);
    view.setUint32(d + S.RING_FIRST_BLOCK, ring.firstBlock, true);
    view.setUint32(d + S.RING_DEFERRED_LIST, ring.deferredList, true);
    view.setUint32(d + S.RING_ABANDONED, ring.abandoned, true);
    view.setUint32(d + S.RING_CLEAR_ON_FREE, (domainsOfRing[index]?.size ?? 0) > 1 ? 1 : 0, true);
    for (let slot = 0; slot < slotCount; slot++) {
      const address = ring.slots + S.SLOT_SIZE * slot;
      if (slot < ring.blocks) {
        view.setUint32(address, slot, false);
        view.setBigUint64(address + 8, BigInt((ring.firstBlock + slot) * config.blockSize), false);
      } else {
        view.setUint32(address, (slot - slotCount) >>> 0, false);
        view.setBigUint64(address + 8, ALL_ONES, false);
      }
    }
    const counters = initialCounters(ring, config.ringMode);
    view.setBigUint64(ring.head, counters.head, true);
    view.setBigUint64(d + S.RING_TAIL, counters.tail, true);
    for (let block = ring.firstBlock; block < ring.firstBlock + ring.blocks; block++) {
      view.setUint32(layout.blockRings + 4 * block, d, true);
    }
  });

  for (let index = 0; index < config.handleCount; index++) {
    view.setUint32(layout.table + S.ENTRY_SIZE * index, 1, false);
  }

  config.tenants.forEach((tenant, index) => {
    const t = layout.tenants + S.TENANT_SIZE * index;
    view.setBigUint64(t + S.TENANT_STORE_FIRST, tenant.storeRange.first, true);
    view.setBigUint64(t + S.TENANT_STORE_COUNT, tenant.storeRange.count, true);
    view.setBigUint64(t + S.TENANT_LOAD_FIRST, tenant.loadScope.first, true);
    view.setBigUint64(t + S.TENANT_LOAD_COUNT, tenant.loadScope.count, true);
    view.setUint32(t + S.TENANT_QUOTA, tenant.quota, true);
    view.setUint32(t + S.TENANT_USAGE, 0, true);
    const ring = layout.rings[tenant.partition === undefined ? 0 : tenant.partition + 1];
    view.setUint32(t + S.TENANT_RING, ring?.descriptor ?? 0, true);
    view.setUint32(t + S.TENANT_POLICY, tenant.eviction === 'demote' ? S.EVICTION_DEMOTE : S.EVICTION_NONE, true);
  });
}
