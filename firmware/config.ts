// The target's configuration file (JSON): read, validated with messages that name the field and
// the fix, filled with defaults, and turned into the engine's configuration.
import { readFileSync } from 'node:fs';
import type { EngineConfig, TenantConfig } from '../host/engine/config.ts';
import { DEFAULT_PORT, parseHostPort, type HostPort } from '../host/kbtp/address.ts';

export { DEFAULT_PORT };

export interface TenantSettings {
  name: string;
  /** Shared secret the HELLO credential must equal; null for an open tenant (loopback only). */
  secret: string | null;
  quota: number;
  storeRange: { first: bigint; count: bigint };
  loadScope: { first: bigint; count: bigint };
  trust: { directLoad: boolean; directAlloc: boolean };
  trustDomain: string;
}

export interface TargetSettings {
  listen: { host: string; port: number };
  workers: number;
  pool: { blockSize: number; blockCount: number; handleBase: bigint; handleCount: number; maxInline: number; ringOrder: number | undefined };
  session: { credits: number; ticketTimeoutMs: number; maxSessionsPerWorker: number };
  tenants: TenantSettings[];
  sramModel: string | undefined;
}

export class ConfigError extends Error {
  constructor(readonly field: string, problem: string, fix: string) {
    super(`${field}: ${problem}; ${fix}`);
    this.name = 'ConfigError';
  }
}

const DEFAULT_BLOCK_SIZE = 64 * 1024;
const DEFAULT_BLOCK_COUNT = 4096; // 256 MiB

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

function isObject(value: Json | undefined): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function objectAt(parent: JsonObject, key: string, field: string): JsonObject {
  const value = parent[key];
  if (value === undefined) return {};
  if (!isObject(value)) throw new ConfigError(field, `must be an object, got ${JSON.stringify(value)}`, 'write it as { ... }');
  return value;
}

function integerAt(parent: JsonObject, key: string, field: string, fallback: number, min: number, max: number): number {
  const value = parent[key];
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || value > max) {
    throw new ConfigError(field, `must be an integer from ${min} to ${max}, got ${JSON.stringify(value)}`, `e.g. ${fallback}`);
  }
  return value;
}

function booleanAt(parent: JsonObject, key: string, field: string): boolean {
  const value = parent[key];
  if (value === undefined) return false;
  if (typeof value !== 'boolean') throw new ConfigError(field, `must be true or false, got ${JSON.stringify(value)}`, 'use a JSON boolean');
  return value;
}

/** A handle: a JSON number (safe integer) or a decimal string, for handles beyond 2^53. */
function handleAt(parent: JsonObject, key: string, field: string, fallback: bigint): bigint {
  const value = parent[key];
  if (value === undefined) return fallback;
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return BigInt(value);
  if (typeof value === 'string' && /^[0-9]+$/.test(value) && BigInt(value) < 2n ** 64n) return BigInt(value);
  throw new ConfigError(field, `must be a non-negative integer below 2^64, got ${JSON.stringify(value)}`,
    'write it as a number, or as a decimal string above 2^53');
}

export function parseListen(value: string, field = 'listen'): HostPort {
  const address = parseHostPort(value, { allowPortZero: true });
  if (address === undefined) {
    throw new ConfigError(field, `"${value}" is not host:port`, `e.g. "127.0.0.1:${DEFAULT_PORT}" (port 0 picks a free port)`);
  }
  return address;
}

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\./.test(host);
}

function rangeAt(parent: JsonObject, key: string, field: string, fallback: { first: bigint; count: bigint }) {
  if (parent[key] === undefined) return fallback;
  const range = objectAt(parent, key, field);
  return { first: handleAt(range, 'first', `${field}.first`, fallback.first), count: handleAt(range, 'count', `${field}.count`, fallback.count) };
}

/** Validates a parsed configuration object and fills in defaults. */
export function resolveTargetSettings(input: Json): TargetSettings {
  if (!isObject(input)) throw new ConfigError('(top level)', 'must be a JSON object', 'start the file with {');
  const known = new Set(['listen', 'workers', 'pool', 'session', 'tenants', 'sramModel']);
  for (const key of Object.keys(input)) {
    if (!known.has(key)) throw new ConfigError(key, 'is not a setting', `use one of ${[...known].join(', ')}`);
  }
  const listenValue = input.listen ?? `127.0.0.1:${DEFAULT_PORT}`;
  if (typeof listenValue !== 'string') throw new ConfigError('listen', 'must be a string', `e.g. "127.0.0.1:${DEFAULT_PORT}"`);
  const listen = parseListen(listenValue);
  const workers = integerAt(input, 'workers', 'workers', 2, 1, 64);
  const poolIn = objectAt(input, 'pool', 'pool');
  const blockSize = integerAt(poolIn, 'blockSize', 'pool.blockSize', DEFAULT_BLOCK_SIZE, 8, 2 ** 30);
  const blockCount = integerAt(poolIn, 'blockCount', 'pool.blockCount', DEFAULT_BLOCK_COUNT, 1, 2 ** 27);
  const handleBase = handleAt(poolIn, 'handleBase', 'pool.handleBase', 0n);
  const handleCount = integerAt(poolIn, 'handleCount', 'pool.handleCount', blockCount * 4, 1, 2 ** 26);
  const maxInline = integerAt(poolIn, 'maxInline', 'pool.maxInline', Math.min(8192, blockSize), 0, blockSize);
  const ringOrder = poolIn.ringOrder === undefined ? undefined : integerAt(poolIn, 'ringOrder', 'pool.ringOrder', 1, 1, 27);
  const sessionIn = objectAt(input, 'session', 'session');
  const session = {
    credits: integerAt(sessionIn, 'credits', 'session.credits', 64, 1, 65535),
    ticketTimeoutMs: integerAt(sessionIn, 'ticketTimeoutMs', 'session.ticketTimeoutMs', 5000, 1, 2 ** 32 - 1),
    maxSessionsPerWorker: integerAt(sessionIn, 'maxSessionsPerWorker', 'session.maxSessionsPerWorker', 32, 1, 4096),
  };

  const allHandles = { first: handleBase, count: BigInt(handleCount) };
  const tenantsIn: Json = input.tenants ?? [{ name: 'default', secret: null, quota: blockCount }];
  if (!Array.isArray(tenantsIn) || tenantsIn.length === 0) {
    throw new ConfigError('tenants', 'must be a non-empty array', 'list at least one tenant: [{ "name": "default", "quota": 4096 }]');
  }
  const tenants = tenantsIn.map((tenantIn, index): TenantSettings => {
    const field = `tenants[${index}]`;
    if (!isObject(tenantIn)) throw new ConfigError(field, 'must be an object', 'write it as { "name": ..., "quota": ... }');
    const name = tenantIn.name;
    if (typeof name !== 'string' || name === '' || Buffer.byteLength(name) > 64) {
      throw new ConfigError(`${field}.name`, 'must be a non-empty string of at most 64 UTF-8 octets', 'HELLO carries it in 64 octets');
    }
    const secret = tenantIn.secret ?? null;
    if (secret !== null && (typeof secret !== 'string' || secret === '' || Buffer.byteLength(secret) > 64)) {
      throw new ConfigError(`${field}.secret`, 'must be a string of 1 to 64 octets, or null for an open tenant',
        'HELLO carries the credential in at most 64 octets');
    }
    if (secret === null && !isLoopback(listen.host)) {
      throw new ConfigError(`${field}.secret`, `tenant '${name}' is open but the target listens on ${listen.host}`,
        'give the tenant a secret, or listen on loopback only');
    }
    const trustIn = objectAt(tenantIn, 'trust', `${field}.trust`);
    const trustDomain = tenantIn.trustDomain ?? name;
    if (typeof trustDomain !== 'string') throw new ConfigError(`${field}.trustDomain`, 'must be a string', 'name the trust domain');
    return {
      name, secret,
      quota: integerAt(tenantIn, 'quota', `${field}.quota`, 0, 0, blockCount),
      storeRange: rangeAt(tenantIn, 'storeRange', `${field}.storeRange`, tenantsIn.length === 1 ? allHandles : { first: 0n, count: 0n }),
      loadScope: rangeAt(tenantIn, 'loadScope', `${field}.loadScope`, allHandles),
      trust: { directLoad: booleanAt(trustIn, 'directLoad', `${field}.trust.directLoad`), directAlloc: booleanAt(trustIn, 'directAlloc', `${field}.trust.directAlloc`) },
      trustDomain,
    };
  });
  const sramModel = input.sramModel;
  if (sramModel !== undefined && typeof sramModel !== 'string') {
    throw new ConfigError('sramModel', 'must be the path of an SRAM model config file', 'e.g. "sram.json"');
  }
  return {
    listen, workers, session, tenants, sramModel: sramModel ?? undefined,
    pool: { blockSize, blockCount, handleBase, handleCount, maxInline, ringOrder },
  };
}

export function loadTargetSettings(path: string | undefined): TargetSettings {
  if (path === undefined) return resolveTargetSettings({});
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new ConfigError(path, `cannot be read (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`, 'check the path');
  }
  let parsed: Json;
  try {
    parsed = JSON.parse(text) as Json;
  } catch (error) {
    throw new ConfigError(path, `is not valid JSON (${(error as Error).message})`, 'fix the syntax');
  }
  return resolveTargetSettings(parsed);
}

/**
 * The engine configuration of a target: tenants trusted for DIRECT_ALLOC get a partition of
 * exactly their quota (draft 3.4); everyone else allocates from the shared ring.
 */
export function engineConfigFor(settings: TargetSettings): EngineConfig {
  const partitions: Array<{ blocks: number }> = [];
  const tenants: TenantConfig[] = settings.tenants.map((tenant) => {
    const config: TenantConfig = {
      name: tenant.name, storeRange: tenant.storeRange, loadScope: tenant.loadScope, quota: tenant.quota, trustDomain: tenant.trustDomain,
    };
    if (tenant.trust.directAlloc) {
      config.partition = partitions.length;
      partitions.push({ blocks: tenant.quota });
    }
    return config;
  });
  const credits = settings.session.credits;
  return {
    blockSize: settings.pool.blockSize, blockCount: settings.pool.blockCount, handleBase: settings.pool.handleBase,
    handleCount: settings.pool.handleCount, maxInline: settings.pool.maxInline, ringOrder: settings.pool.ringOrder,
    partitions, tenants,
    threads: settings.workers + 1,
    sessionsPerThread: settings.session.maxSessionsPerWorker,
    // kbtp-v1 section 11: at least 2 x credits receives posted per session.
    requestsPerThread: settings.session.maxSessionsPerWorker * 2 * credits,
  };
}
