// `kbtp tenant add|list|remove` edit the tenants of the appliance's configuration file: the new
// file is validated as the daemon would read it before it replaces the old one (atomically), and
// a new tenant's secret exists only as a salted scrypt hash in it (the caller prints it once).
import { renameSync, writeFileSync, statSync } from 'node:fs';
import { hashSecret, newSecret } from '../host/kbtp/server/secret-hash.ts';
import { readConfigFile, ConfigError } from '../host/kbtp/server/target-config.ts';
import { isJsonObject, type Json, type JsonObject } from '../host/util/config-reader.ts';
import { resolveApplianceSettings, type ApplianceSettings } from './appliance-config.ts';

export interface NewTenant {
  name: string;
  quota: number | undefined;
  handles: number | undefined;
  /** Blocks it may keep on the durable tier (kbtp-v1 section 12); undefined: the whole tier. */
  durableQuota?: number | undefined;
  directLoad: boolean;
}

function load(path: string): { file: JsonObject; settings: ApplianceSettings } {
  const file = readConfigFile(path);
  if (!isJsonObject(file)) throw new ConfigError(path, 'is not a JSON object', 'start the file with {');
  return { file, settings: resolveApplianceSettings(file) };
}

function save(path: string, file: JsonObject): void {
  resolveApplianceSettings(file); // never write a file the daemon would refuse
  const temporary = `${path}.tmp-${process.pid}`;
  let mode = 0o600;
  try {
    mode = statSync(path).mode & 0o777;
  } catch {
    // a new file: owner only, it holds hashes
  }
  writeFileSync(temporary, `${JSON.stringify(file, null, 2)}\n`, { mode });
  renameSync(temporary, path);
}

function handleRanges(settings: ApplianceSettings): Array<{ first: bigint; end: bigint }> {
  return settings.target.tenants
    .map((t) => ({ first: t.storeRange.first, end: t.storeRange.first + t.storeRange.count }))
    .filter((range) => range.end > range.first)
    .sort((a, b) => (a.first < b.first ? -1 : a.first > b.first ? 1 : 0));
}

/** Adds a tenant; returns the secret, which exists nowhere else (print it once). */
export function addTenant(path: string, tenant: NewTenant): { secret: string; quota: number; storeRange: { first: bigint; count: bigint } } {
  const { file, settings } = load(path);
  const explicit = Array.isArray(file.tenants);
  const existing = explicit ? settings.target.tenants : [];
  if (existing.some((t) => t.name === tenant.name)) {
    throw new ConfigError(`tenant '${tenant.name}'`, 'exists already', 'pick another name, or remove it first');
  }
  const { pool } = settings.target;
  // Quotas on the shared ring and partitions both come out of the pool.
  const promised = existing.reduce((sum, t) => sum + t.quota, 0);
  const quota = tenant.quota ?? pool.blockCount - promised;
  if (quota <= 0) {
    throw new ConfigError(
      '--quota',
      `the pool's ${pool.blockCount} blocks are all promised to other tenants`,
      "give --quota N and lower another tenant's quota",
    );
  }
  const count = BigInt(tenant.handles ?? quota * 4);
  // The first gap of the handle table that holds `count` handles.
  let first = pool.handleBase;
  const end = pool.handleBase + BigInt(pool.handleCount);
  for (const range of explicit ? handleRanges(settings) : []) {
    if (range.first - first >= count) break;
    if (range.end > first) first = range.end;
  }
  if (first + count > end) {
    throw new ConfigError('--handles', `no gap of ${count} handles is left in the table (${pool.handleBase}..${end - 1n})`, 'give a smaller --handles N');
  }
  const secret = newSecret();
  const entry: JsonObject = {
    name: tenant.name,
    secretHash: hashSecret(secret),
    quota,
    storeRange: { first: Number(first), count: Number(count) },
  };
  if (tenant.durableQuota !== undefined) entry.durableQuota = tenant.durableQuota;
  if (tenant.directLoad) entry.trust = { directLoad: true };
  file.tenants = [...(explicit ? (file.tenants as Json[]) : []), entry];
  save(path, file);
  return { secret, quota, storeRange: { first, count } };
}

export function removeTenant(path: string, name: string): void {
  const { file } = load(path);
  const tenants = Array.isArray(file.tenants) ? file.tenants : [];
  const kept = tenants.filter((t) => !(isJsonObject(t) && t.name === name));
  if (kept.length === tenants.length) throw new ConfigError(`tenant '${name}'`, 'is not in the configuration', 'see kbtp tenant list');
  if (kept.length === 0) throw new ConfigError(`tenant '${name}'`, 'is the last tenant', 'add another tenant first: a node serves at least one');
  file.tenants = kept;
  save(path, file);
}

export interface TenantListing {
  name: string;
  authentication: 'scrypt hash' | 'plain secret' | 'open';
  quota: number;
  storeRange: string;
  /** Blocks it may keep on the durable tier, or 'tier' when bounded by the tier's capacity alone. */
  durableQuota: string;
  trust: string;
}

export function listTenants(path: string): TenantListing[] {
  const { settings } = load(path);
  return settings.target.tenants.map((t) => ({
    name: t.name,
    authentication: t.secretHash !== null ? 'scrypt hash' : t.secret !== null ? 'plain secret' : 'open',
    quota: t.quota,
    storeRange: t.storeRange.count === 0n ? '(none)' : `${t.storeRange.first}..${t.storeRange.first + t.storeRange.count - 1n}`,
    durableQuota: t.durableQuota === undefined ? 'tier' : String(t.durableQuota),
    trust: [t.trust.directLoad ? 'direct-load' : '', t.trust.directAlloc ? 'direct-alloc' : ''].filter(Boolean).join(', ') || '-',
  }));
}
