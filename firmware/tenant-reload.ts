// Which tenant goes to which engine slot after a configuration reload, and what to write. A
// tenant that stays keeps its slot; a new one takes a slot that holds nothing (usage 0); a
// removed one's slot is closed (no handles, no quota) and kept out of reuse while blocks are
// still counted against it: its data stays bound until the tenant comes back or the node restarts.
// Partitions (DIRECT_ALLOC) carve the pool at start, so they change only with a restart.
import { resolveEngineConfig } from '../host/engine/config.ts';
import type { Engine } from '../host/engine/engine.ts';
import type { TenantRecord } from '../host/engine/tenant-record.ts';
import { ConfigError, engineConfigFor, type TargetSettings, type TenantSettings } from '../host/kbtp/server/target-config.ts';

export interface TenantReloadPlan {
  /** The new list, every tenant with its engine slot. */
  tenants: TenantSettings[];
  /** Engine tenant records to rewrite. */
  writes: Array<{ slot: number; record: TenantRecord }>;
  /** The shared ring serves several trust domains from now on: blocks freed to it must be cleared. */
  clearSharedRing: boolean;
  added: string[];
  removed: string[];
  changed: string[];
}

const slotOf = (tenant: TenantSettings, index: number): number => tenant.slot ?? index;

function recordOf(tenant: TenantSettings): TenantRecord {
  return { storeRange: tenant.storeRange, loadScope: tenant.loadScope, quota: tenant.quota };
}

const CLOSED: TenantRecord = { storeRange: { first: 0n, count: 0n }, loadScope: { first: 0n, count: 0n }, quota: 0 };

function sameRecord(a: TenantRecord, b: TenantRecord): boolean {
  return (
    a.quota === b.quota &&
    a.storeRange.first === b.storeRange.first &&
    a.storeRange.count === b.storeRange.count &&
    a.loadScope.first === b.loadScope.first &&
    a.loadScope.count === b.loadScope.count
  );
}

export function planTenantReload(running: TargetSettings, next: readonly TenantSettings[], engine: Engine): TenantReloadPlan {
  const slotCount = engine.config.tenants.length;
  const runningByName = new Map(running.tenants.map((tenant, index) => [tenant.name, { tenant, slot: slotOf(tenant, index) }]));
  const taken = new Set<number>();
  const placed: TenantSettings[] = [];
  const pending: Array<{ tenant: TenantSettings; index: number }> = [];
  next.forEach((tenant, index) => {
    const before = runningByName.get(tenant.name);
    if (tenant.trust.directAlloc !== (before?.tenant.trust.directAlloc ?? false) || (tenant.trust.directAlloc && before?.tenant.quota !== tenant.quota)) {
      throw new ConfigError(
        `tenants[${index}]`,
        `tenant '${tenant.name}': DIRECT_ALLOC partitions are carved out of the pool at start`,
        'restart the appliance for this change',
      );
    }
    if (before !== undefined && before.tenant.eviction !== tenant.eviction) {
      throw new ConfigError(
        `tenants[${index}].eviction`,
        `tenant '${tenant.name}': what its quota counts changes with the eviction policy, and it holds blocks counted the old way`,
        'restart the appliance for this change',
      );
    }
    if (before === undefined) {
      pending.push({ tenant, index });
    } else {
      taken.add(before.slot);
      placed[index] = { ...tenant, slot: before.slot };
    }
  });
  // A slot is free when nothing is counted against it and no running tenant holds it: not even one
  // removed by this reload, whose sessions are still ending and must not reach the newcomer's range.
  const runningSlots = new Set(running.tenants.map(slotOf));
  for (const { tenant, index } of pending) {
    let slot = -1;
    for (let candidate = 0; candidate < slotCount && slot < 0; candidate++) {
      if (!taken.has(candidate) && !runningSlots.has(candidate) && engine.tenantUsage(candidate) === 0) slot = candidate;
    }
    if (slot < 0) {
      throw new ConfigError(
        `tenants[${index}]`,
        `no free tenant slot for '${tenant.name}' (the engine has ${slotCount}; removed tenants keep theirs while they hold blocks)`,
        'raise maxTenants and restart the appliance',
      );
    }
    taken.add(slot);
    placed[index] = { ...tenant, slot };
  }
  const tenants = placed;
  // The engine's own checks (overlapping store ranges, quotas over the shared ring) on the new set.
  resolveEngineConfig(engineConfigFor({ ...running, tenants, tenantSlots: slotCount }));

  const writes: TenantReloadPlan['writes'] = [];
  const nextBySlot = new Map(tenants.map((tenant) => [tenant.slot ?? -1, tenant]));
  const runningBySlot = new Map(running.tenants.map((tenant, index) => [slotOf(tenant, index), tenant]));
  for (let slot = 0; slot < slotCount; slot++) {
    const now = nextBySlot.get(slot);
    const before = runningBySlot.get(slot);
    const record = now === undefined ? CLOSED : recordOf(now);
    const previous = before === undefined ? CLOSED : recordOf(before);
    // A new tenant's slot counts nothing (usage 0): its eviction policy can be set.
    if (now !== undefined && before === undefined) writes.push({ slot, record: { ...record, eviction: now.eviction } });
    else if (!sameRecord(record, previous)) writes.push({ slot, record });
  }
  const sharedDomains = (list: readonly TenantSettings[]): number => new Set(list.filter((t) => !t.trust.directAlloc).map((t) => t.trustDomain)).size;
  const names = (list: readonly TenantSettings[]): Set<string> => new Set(list.map((t) => t.name));
  const runningNames = names(running.tenants);
  const nextNames = names(tenants);
  return {
    tenants,
    writes,
    clearSharedRing: sharedDomains(tenants) > 1 && sharedDomains(running.tenants) <= 1,
    added: [...nextNames].filter((name) => !runningNames.has(name)),
    removed: [...runningNames].filter((name) => !nextNames.has(name)),
    changed: tenants
      .filter((t) => {
        const before = runningByName.get(t.name)?.tenant;
        return (
          before !== undefined &&
          (before.secret !== t.secret ||
            before.secretHash !== t.secretHash ||
            before.quota !== t.quota ||
            !sameRecord(recordOf(before), recordOf(t)) ||
            before.trust.directLoad !== t.trust.directLoad ||
            before.open !== t.open)
        );
      })
      .map((t) => t.name),
  };
}
