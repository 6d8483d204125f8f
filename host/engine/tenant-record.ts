// Rewriting a tenant's record in the running engine (a configuration reload). Worker threads read
// these fields while they serve, so the writes are atomic and ordered: the ranges close first,
// then move, then open, so no request ever sees a half-written range; the quota is one word.
// The usage counter is left alone: it counts what the tenant holds, whatever its limits.
import * as S from '../../assembly/struct-offsets.ts';
import type { Engine } from './engine.ts';
import type { EvictionPolicy, HandleRange } from './config.ts';
import { UsageError } from '../errors.ts';

export interface TenantRecord {
  storeRange: HandleRange;
  loadScope: HandleRange;
  quota: number;
  /**
   * What the quota counts and what happens at it. Written only for a slot that counts nothing yet
   * (a new tenant): changing it under a tenant's usage would miscount that usage.
   */
  eviction?: EvictionPolicy;
}

export function writeTenantRecord(engine: Engine, index: number, record: TenantRecord): void {
  const address = engine.tenantAddress(index); // checks the index
  const words = new BigUint64Array(engine.memory.buffer);
  const u32 = new Uint32Array(engine.memory.buffer);
  const at = (offset: number): number => (address + offset) / 8;
  Atomics.store(words, at(S.TENANT_STORE_COUNT), 0n);
  Atomics.store(words, at(S.TENANT_LOAD_COUNT), 0n);
  Atomics.store(u32, (address + S.TENANT_QUOTA) / 4, record.quota);
  if (record.eviction !== undefined) {
    Atomics.store(u32, (address + S.TENANT_POLICY) / 4, record.eviction === 'demote' ? S.EVICTION_DEMOTE : S.EVICTION_NONE);
  }
  Atomics.store(words, at(S.TENANT_STORE_FIRST), record.storeRange.first);
  Atomics.store(words, at(S.TENANT_LOAD_FIRST), record.loadScope.first);
  Atomics.store(words, at(S.TENANT_STORE_COUNT), record.storeRange.count);
  Atomics.store(words, at(S.TENANT_LOAD_COUNT), record.loadScope.count);
}

/** The tenant's store range as the engine serves it now (a reload may have moved it since start). */
export function readStoreRange(engine: Engine, index: number): HandleRange {
  const address = engine.tenantAddress(index);
  const words = new BigUint64Array(engine.memory.buffer);
  return { first: Atomics.load(words, (address + S.TENANT_STORE_FIRST) / 8), count: Atomics.load(words, (address + S.TENANT_STORE_COUNT) / 8) };
}

/** From now on blocks freed to `ring` are cleared (draft 6.4): it now serves several trust domains. */
export function clearOnFree(engine: Engine, ringIndex: number): void {
  const ring = engine.layout.rings[ringIndex];
  if (ring === undefined) throw new UsageError(`no ring ${ringIndex}`);
  Atomics.store(new Uint32Array(engine.memory.buffer), (ring.descriptor + S.RING_CLEAR_ON_FREE) / 4, 1);
}
