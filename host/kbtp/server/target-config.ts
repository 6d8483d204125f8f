// The target's configuration file (JSON): read, validated with messages that name the field and
// the fix, filled with defaults, and turned into the engine's configuration.
import { readFileSync } from 'node:fs';
import type { EngineConfig, TenantConfig } from '../../engine/config.ts';
import { DEFAULT_PORT, parseHostPort, type HostPort } from '../address.ts';

export { DEFAULT_PORT };
import { ConfigError, ObjectReader, isJsonObject, type Json } from '../../util/config-reader.ts';
import { parseSecretHash } from './secret-hash.ts';
import { jsonSyntaxProblem } from '../../util/json-syntax.ts';
import { BUSY_POLL_ENV, MAX_BUSY_POLL_US, NO_IDLE_DRIVER_BUDGET_US } from '../../rnic/busy-poll.ts';
import { isLoopback } from '../../rnic/socket-window.ts';
import { MAX_CPU_LATENCY_US } from '../../util/cpu-latency.ts';

export interface TenantSettings {
  name: string;
  /** Shared secret the HELLO credential must equal, written in the clear; null when hashed or open. */
  secret: string | null;
  /** The secret as a salted scrypt hash (`kbtp tenant add` writes these); null when in the clear or open. */
  secretHash: string | null;
  /** Said explicitly in the file ("open": true): anyone may use the tenant without a secret. */
  open: boolean;
  quota: number;
  /** Sessions of this tenant the node holds at once (all workers together). */
  maxSessions: number;
  storeRange: { first: bigint; count: bigint };
  loadScope: { first: bigint; count: bigint };
  trust: { directLoad: boolean; directAlloc: boolean };
  trustDomain: string;
  /** kbtp-v1 section 12: 'demote' (default with a durable tier) or 'none'. */
  eviction: 'none' | 'demote';
  /** The configuration said the policy; otherwise it is the default and follows the tier being turned on or off. */
  evictionExplicit?: boolean;
  /** Blocks the tenant may keep on the durable tier (default: the whole tier). */
  durableQuota: number | undefined;
  /** Its engine tenant slot when that is not its position in the list (after a reload). */
  slot?: number;
}

/** The durable tier (kbtp-v1 section 12, docs/TIER.md): sealed blocks survive restarts and power loss. */
export interface DurableSettings {
  /** Data directory; the tier's files live in its `tier/` folder. */
  dataDir: string;
  /** Hard cap of the tier's files, octets. */
  capacityBytes: number;
  /**
   * Percent of each ring's blocks kept free: below it, least recently used sealed blocks of
   * tenants under `demote` leave the pool ahead of need (0: only at a tenant's quota).
   */
  lowWatermark?: number;
}

/** How long each stage of a connection may take; past it the connection is closed and counted. */
export interface TimeoutSettings {
  /** TCP connected, MPA Request not complete. */
  mpaRequestMs: number;
  /** MPA Reply sent, the initiator's ready-to-receive (RTR) message not arrived. */
  rtrMs: number;
  /** Stream established, no HELLO yet. */
  helloMs: number;
  /** A session with nothing outstanding and no message (0: never). */
  idleSessionMs: number;
  /** An RDMA Read Request of the target (STORE data) the initiator does not answer. */
  rdmaReadMs: number;
}

/** The RDMA binding a target serves: RDMAP/DDP/MPA over TCP (draft 9.1) or IB RC over RoCEv2 (draft 9.2). */
export type Transport = 'iwarp' | 'roce';

export interface TargetSettings {
  listen: { host: string; port: number };
  transport: Transport;
  workers: number;
  pool: { blockSize: number; blockCount: number; handleBase: bigint; handleCount: number; maxInline: number; ringOrder: number | undefined };
  session: {
    credits: number;
    ticketTimeoutMs: number;
    maxSessions: number;
    maxSessionsPerWorker: number;
    /** TCP connections a worker keeps waiting for their MPA Request; past it the oldest is closed. */
    maxHandshakesPerWorker: number;
  };
  timeouts: TimeoutSettings;
  tenants: TenantSettings[];
  /**
   * Tenant slots of the engine: tenants.length unless a daemon that adds tenants at run time
   * (the appliance's SIGHUP) reserves more. A tenant's slot is its `slot`, or its position.
   */
  tenantSlots: number;
  sramModel: string | undefined;
  /**
   * The workers' bounded busy poll after socket writes, in microseconds (0: off; docs/BENCH.md,
   * host/rnic/busy-poll.ts). Undefined: $KBTP_BUSY_POLL_US decides, as for any kbtp process, and
   * unset that is 200 where the kernel has no cpuidle driver, else 0.
   */
  busyPollUs: number | undefined;
  /**
   * The CPU wake latency the target asks the kernel for while it serves traffic (PM QoS; 0: idle
   * CPUs poll instead of halting; null: no request). host/kbtp/server/wake-latency.ts says why.
   */
  cpuWakeLatencyUs: number | null;
  /**
   * TCP congestion control of the connections a loopback listener accepts (null: the host's;
   * host/rnic/socket-window.ts says why kbtp does not keep BBR there).
   */
  loopbackCongestionControl: string | null;
  /** Absent: DRAM only (PERSISTENT is never granted). */
  durable: DurableSettings | undefined;
}

export { ConfigError } from '../../util/config-reader.ts';

const DEFAULT_BLOCK_SIZE = 64 * 1024;
const DEFAULT_BLOCK_COUNT = 4096; // 256 MiB
const DEFAULT_MAX_SESSIONS = 64;
const DEFAULT_TIMEOUTS: TimeoutSettings = { mpaRequestMs: 10_000, rtrMs: 10_000, helloMs: 10_000, idleSessionMs: 600_000, rdmaReadMs: 30_000 };
const MAX_TIMEOUT_MS = 2 ** 31 - 1; // setTimeout's limit
/** Idle CPUs poll while the node is busy: a cache node answers first (docs/BENCH.md, session 15). */
export const DEFAULT_CPU_WAKE_LATENCY_US = 0;

// The keys each object of the file may hold; a key read below must be listed here.
const TOP_KEYS = [
  'listen',
  'workers',
  'pool',
  'session',
  'timeouts',
  'tenants',
  'sramModel',
  'durable',
  'transport',
  'busyPollUs',
  'cpuWakeLatencyUs',
  'loopbackCongestionControl',
] as const;
const DURABLE_KEYS = ['enabled', 'dataDir', 'capacity', 'lowWatermark'] as const;
/** Default percent of each ring kept free by demotion ahead of need. */
export const DEFAULT_LOW_WATERMARK = 5;
const POOL_KEYS = ['blockSize', 'blockCount', 'handleBase', 'handleCount', 'maxInline', 'ringOrder'] as const;
const SESSION_KEYS = ['credits', 'ticketTimeoutMs', 'maxSessions', 'maxSessionsPerWorker', 'maxHandshakesPerWorker'] as const;
const TIMEOUT_KEYS = ['mpaRequestMs', 'rtrMs', 'helloMs', 'idleSessionMs', 'rdmaReadMs'] as const;
const TENANT_KEYS = [
  'name',
  'secret',
  'secretHash',
  'open',
  'quota',
  'maxSessions',
  'storeRange',
  'loadScope',
  'trust',
  'trustDomain',
  'eviction',
  'durableQuota',
] as const;
const RANGE_KEYS = ['first', 'count'] as const;
const TRUST_KEYS = ['directLoad', 'directAlloc'] as const;

export function parseListen(value: string, field = 'listen'): HostPort {
  const address = parseHostPort(value, { allowPortZero: true });
  if (address === undefined) {
    throw new ConfigError(field, `"${value}" is not host:port`, `e.g. "127.0.0.1:${DEFAULT_PORT}" (port 0 picks a free port)`);
  }
  return address;
}

const BYTE_UNITS: Record<string, number> = { '': 1, K: 2 ** 10, KIB: 2 ** 10, M: 2 ** 20, MIB: 2 ** 20, G: 2 ** 30, GIB: 2 ** 30, T: 2 ** 40, TIB: 2 ** 40 };

/** A size in octets: a number, or a string such as "512MiB", "64G", "1073741824". */
export function parseBytes(value: Json | undefined, field: string): number {
  const match = typeof value === 'string' ? /^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$/.exec(value) : null;
  const unit = BYTE_UNITS[(match?.[2] ?? '').toUpperCase()];
  const bytes = typeof value === 'number' ? value : match !== null && unit !== undefined ? Math.floor(Number(match[1]) * unit) : NaN;
  if (!Number.isSafeInteger(bytes) || bytes <= 0) {
    throw new ConfigError(field, `${JSON.stringify(value)} is not a size in octets`, 'give e.g. 1073741824 or "1GiB" (units K, M, G, T: powers of 1024)');
  }
  return bytes;
}

/** The default cap of a durable tier: four times the pool. */
export function defaultDurableCapacity(pool: { blockSize: number; blockCount: number }): number {
  return Math.max(64 * 2 ** 20, 4 * pool.blockSize * pool.blockCount);
}

function durableAt(
  top: ObjectReader<(typeof TOP_KEYS)[number]>,
  pool: { blockSize: number; blockCount: number },
  defaultDataDir: string | undefined,
): DurableSettings | undefined {
  const section = top.object('durable', DURABLE_KEYS);
  if (!section.boolean('enabled', true)) return undefined;
  const dataDir = section.string('dataDir', 4096, 'give the directory the durable tier keeps its files in, e.g. "/var/lib/kbtp"') ?? defaultDataDir;
  if (dataDir === undefined) {
    if (section.has('capacity')) throw new ConfigError('durable.dataDir', 'is required with durable.capacity', 'give the directory of the durable tier');
    return undefined;
  }
  const capacityBytes = section.has('capacity') ? parseBytes(section.raw('capacity'), 'durable.capacity') : defaultDurableCapacity(pool);
  const lowWatermark = section.integer('lowWatermark', {
    min: 0,
    max: 50,
    fallback: DEFAULT_LOW_WATERMARK,
    why: 'give the percent of each ring kept free by demoting least recently used sealed blocks early (0: demote only at a quota)',
  });
  return { dataDir, capacityBytes, lowWatermark };
}

/**
 * The receive window a connection should be able to offer from its start: two of the largest
 * messages a client sends (an inline STORE with its request, or a whole block as the Read
 * Response of a STORE the target pulls), at least 1 MiB, at most 8 MiB. Below that, a new
 * connection's first large requests wait for the window to grow, and a BBR sender paces the
 * connection for good (host/rnic/socket-window.ts). A limit, not memory: autotuning grows the
 * buffer past it for a fast sender as before, and nothing is allocated until data waits.
 */
export function initialReceiveWindow(settings: Pick<TargetSettings, 'pool'>): number {
  const largest = Math.max(settings.pool.blockSize, settings.pool.maxInline + 1024);
  return Math.min(8 * 2 ** 20, Math.max(2 ** 20, 2 * largest));
}

export { isLoopback };

function rangeAt(parent: ObjectReader<string>, key: string, fallback: { first: bigint; count: bigint } | undefined, why: string) {
  if (!parent.has(key)) {
    if (fallback !== undefined) return fallback;
    throw new ConfigError(parent.field(key), 'is required', why);
  }
  const range = parent.object(key, RANGE_KEYS);
  const count = range.handle('count', fallback?.count ?? -1n);
  if (count < 0n) throw new ConfigError(range.field('count'), 'is required', 'give the number of handles');
  return { first: range.handle('first', fallback?.first ?? 0n), count };
}

function timeoutsAt(top: ObjectReader<(typeof TOP_KEYS)[number]>): TimeoutSettings {
  const input = top.object('timeouts', TIMEOUT_KEYS);
  const stage = (key: (typeof TIMEOUT_KEYS)[number], min: number) => input.integer(key, { min, max: MAX_TIMEOUT_MS, fallback: DEFAULT_TIMEOUTS[key] });
  return {
    mpaRequestMs: stage('mpaRequestMs', 1),
    rtrMs: stage('rtrMs', 1),
    helloMs: stage('helloMs', 1),
    idleSessionMs: stage('idleSessionMs', 0),
    rdmaReadMs: stage('rdmaReadMs', 1),
  };
}

function tenantAt(
  value: Json,
  index: number,
  context: {
    listen: { host: string };
    blockCount: number;
    single: boolean;
    allHandles: { first: bigint; count: bigint };
    maxSessions: number;
    durable: boolean;
  },
): TenantSettings {
  const tenant = ObjectReader.of(`tenants[${index}]`, value, TENANT_KEYS);
  const name = tenant.string('name', 64, 'HELLO carries the tenant name in at most 64 octets');
  if (name === undefined) throw new ConfigError(tenant.field('name'), 'is required', 'name the tenant (HELLO carries it in at most 64 octets)');
  const secretValue = tenant.raw('secret');
  const open = tenant.boolean('open', false);
  let secret: string | null = null;
  if (secretValue !== undefined && secretValue !== null) {
    if (typeof secretValue !== 'string' || secretValue === '' || Buffer.byteLength(secretValue) > 64) {
      throw new ConfigError(tenant.field('secret'), 'must be a string of 1 to 64 octets', 'HELLO carries the credential in at most 64 octets');
    }
    secret = secretValue;
  }
  const hashValue = tenant.raw('secretHash');
  let secretHash: string | null = null;
  if (hashValue !== undefined && hashValue !== null) {
    // The value is not echoed: it is derived from a secret.
    if (typeof hashValue !== 'string' || parseSecretHash(hashValue) === undefined) {
      throw new ConfigError(tenant.field('secretHash'), 'is not a scrypt hash (scrypt$N$r$p$salt$key)', 'write it with kbtp tenant add');
    }
    secretHash = hashValue;
  }
  if (secret !== null && secretHash !== null) {
    throw new ConfigError(tenant.field('secret'), `tenant '${name}' has both a secret and a secretHash`, 'keep only the secretHash');
  }
  if ((secret !== null || secretHash !== null) && open) {
    throw new ConfigError(tenant.field('open'), `tenant '${name}' has a secret and "open": true`, 'drop one of them: an open tenant has no secret');
  }
  if (secret === null && secretHash === null && !open) {
    throw new ConfigError(
      tenant.field('secret'),
      `tenant '${name}' has no secret`,
      'give it a "secretHash" (kbtp tenant add writes one) or a "secret", or say "open": true for a tenant anyone may use without one (loopback only)',
    );
  }
  if (open && !isLoopback(context.listen.host)) {
    throw new ConfigError(
      tenant.field('open'),
      `tenant '${name}' is open but the target listens on ${context.listen.host}`,
      'give the tenant a secret, or listen on loopback only',
    );
  }
  const trust = tenant.object('trust', TRUST_KEYS);
  const trustDomain = tenant.string('trustDomain', 64, 'name the trust domain') ?? name;
  const rangeWhy = 'give the handles the tenant may store, e.g. { "first": 0, "count": 1024 } (ranges of tenants never overlap)';
  return {
    name,
    secret,
    secretHash,
    open,
    quota: tenant.integer('quota', {
      min: 0,
      max: context.blockCount,
      ...(context.single ? { fallback: context.blockCount } : {}),
      why: `give the tenant's allocation quota in blocks (quotas on the shared ring add up to at most pool.blockCount, ${context.blockCount}); 0 makes a tenant that cannot allocate`,
    }),
    maxSessions: tenant.integer('maxSessions', { min: 1, max: context.maxSessions, fallback: context.maxSessions }),
    storeRange: rangeAt(tenant, 'storeRange', context.single ? context.allHandles : undefined, rangeWhy),
    loadScope: rangeAt(tenant, 'loadScope', context.allHandles, 'give the handles the tenant may load'),
    trust: { directLoad: trust.boolean('directLoad', false), directAlloc: trust.boolean('directAlloc', false) },
    trustDomain,
    eviction: evictionAt(tenant, context.durable),
    evictionExplicit: tenant.has('eviction'),
    durableQuota: tenant.has('durableQuota') ? tenant.integer('durableQuota', { min: 0, max: 2 ** 32 - 1 }) : undefined,
  };
}

function evictionAt(tenant: ObjectReader<(typeof TENANT_KEYS)[number]>, durable: boolean): 'none' | 'demote' {
  const value = tenant.raw('eviction') ?? (durable ? 'demote' : 'none');
  if (value !== 'none' && value !== 'demote') {
    throw new ConfigError(
      tenant.field('eviction'),
      `must be "none" or "demote", got ${JSON.stringify(value)}`,
      '"demote" moves least recently used sealed blocks to the durable tier at the quota; "none" answers NO_SPACE',
    );
  }
  return value;
}

/**
 * Validates a parsed configuration object and fills in defaults. `otherSections` are top-level
 * keys another reader of the same file validates (the appliance's, firmware/appliance-config.ts).
 */
export function resolveTargetSettings(input: Json, otherSections: readonly string[] = [], defaults: { dataDir?: string } = {}): TargetSettings {
  if (!isJsonObject(input)) throw new ConfigError('(top level)', 'must be a JSON object', 'start the file with {');
  const top = ObjectReader.of<(typeof TOP_KEYS)[number]>('', input, [...TOP_KEYS, ...otherSections] as Array<(typeof TOP_KEYS)[number]>);
  const listenValue = top.raw('listen') ?? `127.0.0.1:${DEFAULT_PORT}`;
  if (typeof listenValue !== 'string') throw new ConfigError('listen', 'must be a string', `e.g. "127.0.0.1:${DEFAULT_PORT}"`);
  const listen = parseListen(listenValue);
  const transportValue = top.raw('transport') ?? 'iwarp';
  if (transportValue !== 'iwarp' && transportValue !== 'roce') {
    throw new ConfigError(
      'transport',
      `must be "iwarp" or "roce", got ${JSON.stringify(transportValue)}`,
      '"iwarp" = RDMAP over TCP (draft 9.1), "roce" = IB RC over RoCEv2 (draft 9.2)',
    );
  }
  const transport: Transport = transportValue;
  if (transport === 'roce' && !/^\d{1,3}(\.\d{1,3}){3}$/.test(listen.host)) {
    // The RoCE port's address is the connection's GID and is covered by every packet's ICRC.
    throw new ConfigError('listen', `the roce transport needs a specific IPv4 listen address, got ${listen.host}`, 'e.g. "127.0.0.1:7117"');
  }
  const workers = top.integer('workers', { min: 1, max: 64, fallback: 2 });
  const poolIn = top.object('pool', POOL_KEYS);
  const blockSize = poolIn.integer('blockSize', { min: 8, max: 2 ** 30, fallback: DEFAULT_BLOCK_SIZE });
  const blockCount = poolIn.integer('blockCount', { min: 1, max: 2 ** 27, fallback: DEFAULT_BLOCK_COUNT });
  const handleBase = poolIn.handle('handleBase', 0n);
  const handleCount = poolIn.integer('handleCount', { min: 1, max: 2 ** 26, fallback: blockCount * 4 });
  const maxInline = poolIn.integer('maxInline', { min: 0, max: blockSize, fallback: Math.min(8192, blockSize) });
  const ringOrder = poolIn.has('ringOrder') ? poolIn.integer('ringOrder', { min: 1, max: 27 }) : undefined;
  const sessionIn = top.object('session', SESSION_KEYS);
  const maxSessions = sessionIn.integer('maxSessions', { min: 1, max: 4096, fallback: DEFAULT_MAX_SESSIONS });
  const session = {
    credits: sessionIn.integer('credits', { min: 1, max: 65535, fallback: 64 }),
    ticketTimeoutMs: sessionIn.integer('ticketTimeoutMs', { min: 1, max: 2 ** 32 - 1, fallback: 5000 }),
    maxSessions,
    maxSessionsPerWorker: sessionIn.integer('maxSessionsPerWorker', { min: 1, max: maxSessions, fallback: maxSessions }),
    maxHandshakesPerWorker: sessionIn.integer('maxHandshakesPerWorker', { min: 1, max: 65536, fallback: 1024 }),
  };
  const timeouts = timeoutsAt(top);

  const allHandles = { first: handleBase, count: BigInt(handleCount) };
  const tenantsIn = top.array('tenants');
  if (tenantsIn === undefined && !isLoopback(listen.host)) {
    throw new ConfigError(
      'tenants',
      `the default tenant is open, and the target listens on ${listen.host}`,
      'list tenants with secrets, or listen on loopback only',
    );
  }
  const list: Json[] = tenantsIn ?? [{ name: 'default', open: true }];
  if (list.length === 0) {
    throw new ConfigError('tenants', 'must be a non-empty array', 'list at least one tenant: [{ "name": "default", "open": true }]');
  }
  const durable = durableAt(top, { blockSize, blockCount }, defaults.dataDir);
  const context = { listen, blockCount, single: list.length === 1, allHandles, maxSessions, durable: durable !== undefined };
  const tenants = list.map((value, index) => tenantAt(value, index, context));
  const sramModel = top.raw('sramModel');
  if (sramModel !== undefined && typeof sramModel !== 'string') {
    throw new ConfigError('sramModel', 'must be the path of an SRAM model config file', 'e.g. "sram.json"');
  }
  const busyPollUs = top.has('busyPollUs') ? top.integer('busyPollUs', { min: 0, max: MAX_BUSY_POLL_US }) : undefined;
  checkBusyPoll(transport, busyPollUs, 'busyPollUs');
  const cpuWakeLatencyIn = top.raw('cpuWakeLatencyUs');
  const cpuWakeLatencyUs =
    cpuWakeLatencyIn === null
      ? null
      : cpuWakeLatencyIn === undefined
        ? DEFAULT_CPU_WAKE_LATENCY_US
        : top.integer('cpuWakeLatencyUs', {
            min: 0,
            max: MAX_CPU_LATENCY_US,
            why: `give microseconds from 0 (idle CPUs poll) to ${MAX_CPU_LATENCY_US}, or null for no request`,
          });
  const loopbackCongestionControl =
    top.raw('loopbackCongestionControl') === null
      ? null
      : (top.string('loopbackCongestionControl', 15, 'give a TCP congestion control such as "reno" or "cubic", or null for the host\'s') ?? null);
  return {
    listen,
    transport,
    workers,
    busyPollUs,
    cpuWakeLatencyUs,
    loopbackCongestionControl,
    session,
    timeouts,
    tenants,
    tenantSlots: tenants.length,
    sramModel: sramModel ?? undefined,
    pool: { blockSize, blockCount, handleBase, handleCount, maxInline, ringOrder },
    durable,
  };
}

/**
 * Turns the durable tier on in `dataDir` (command line, appliance) or off (null). The rule for
 * tenants: a policy the file left to the default follows the change ("demote" with a tier,
 * "none" without); a policy the file said is kept as it is, so --data-dir never turns an
 * explicit "none" into "demote", and turning the tier off under an explicit "demote" is a
 * configuration error that says what to change.
 */
export function setDurable(settings: TargetSettings, dataDir: string | null, capacityBytes?: number): void {
  const before = settings.durable !== undefined;
  settings.durable =
    dataDir === null
      ? undefined
      : {
          dataDir,
          capacityBytes: capacityBytes ?? settings.durable?.capacityBytes ?? defaultDurableCapacity(settings.pool),
          lowWatermark: settings.durable?.lowWatermark ?? DEFAULT_LOW_WATERMARK,
        };
  const after = settings.durable !== undefined;
  if (before === after) return;
  for (const [index, tenant] of settings.tenants.entries()) {
    if (tenant.evictionExplicit !== true) {
      tenant.eviction = after ? 'demote' : 'none';
    } else if (!after && tenant.eviction === 'demote') {
      throw new ConfigError(
        `tenants[${index}].eviction`,
        `is "demote", which needs the durable tier that --no-durable (or durable.enabled false) turns off`,
        'set "eviction": "none" for this tenant, or keep the durable tier on',
      );
    }
  }
}

/** The busy poll serves the iWARP transport's TCP sockets (host/rnic/channel.ts); RoCE's UDP link has none. */
export function checkBusyPoll(transport: Transport, busyPollUs: number | undefined, field: string): void {
  if (transport === 'roce' && busyPollUs !== undefined && busyPollUs > 0)
    throw new ConfigError(field, 'the busy poll covers the iwarp transport only (its TCP sockets)', 'give 0, or use --transport iwarp');
}

/** The effective configuration as JSON, for `kbtp target --check-config`: secrets masked, handles as strings past 2^53. */
export function describeSettings(settings: TargetSettings): string {
  const handle = (value: bigint): number | string => (value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : value.toString());
  const range = (r: { first: bigint; count: bigint }) => ({ first: handle(r.first), count: handle(r.count) });
  const { listen, pool } = settings;
  return JSON.stringify(
    {
      listen: `${listen.host.includes(':') ? `[${listen.host}]` : listen.host}:${listen.port}`,
      transport: settings.transport,
      workers: settings.workers,
      busyPollUs: settings.busyPollUs ?? `from $${BUSY_POLL_ENV} (unset: ${NO_IDLE_DRIVER_BUDGET_US} without a cpuidle driver, else 0, off)`,
      cpuWakeLatencyUs: settings.cpuWakeLatencyUs ?? 'off (no request)',
      loopbackCongestionControl: settings.loopbackCongestionControl ?? "the host's",
      pool: { ...pool, handleBase: handle(pool.handleBase), ringOrder: pool.ringOrder ?? 'smallest that fits' },
      session: settings.session,
      timeouts: settings.timeouts,
      tenants: settings.tenants.map((tenant) => ({
        name: tenant.name,
        ...(tenant.open ? { open: true } : tenant.secretHash !== null ? { secretHash: '(scrypt, not shown)' } : { secret: '(set, not shown)' }),
        quota: tenant.quota,
        maxSessions: tenant.maxSessions,
        storeRange: range(tenant.storeRange),
        loadScope: range(tenant.loadScope),
        trust: tenant.trust,
        trustDomain: tenant.trustDomain,
        eviction: tenant.eviction,
        ...(tenant.durableQuota !== undefined ? { durableQuota: tenant.durableQuota } : {}),
      })),
      durable:
        settings.durable === undefined
          ? { enabled: false }
          : { dataDir: settings.durable.dataDir, capacity: settings.durable.capacityBytes, lowWatermark: settings.durable.lowWatermark },
      ...(settings.sramModel !== undefined ? { sramModel: settings.sramModel } : {}),
    },
    null,
    2,
  );
}

/** Reads and parses a JSON configuration file; errors name the file and what is wrong with it. */
export function readConfigFile(path: string): Json {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new ConfigError(path, `cannot be read (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`, 'check the path');
  }
  try {
    return JSON.parse(text) as Json;
  } catch (error) {
    throw new ConfigError(path, `is not valid JSON (${jsonSyntaxProblem(error, text)})`, 'fix the syntax');
  }
}

export function loadTargetSettings(path: string | undefined): TargetSettings {
  return resolveTargetSettings(path === undefined ? {} : readConfigFile(path));
}

/**
 * The engine configuration of a target: tenants trusted for DIRECT_ALLOC get a partition of
 * exactly their quota (draft 3.4); everyone else allocates from the shared ring.
 */
export function engineConfigFor(settings: TargetSettings): EngineConfig {
  const partitions: Array<{ blocks: number }> = [];
  const bySlot = new Map(settings.tenants.map((tenant, index) => [tenant.slot ?? index, tenant]));
  const slots = Math.max(settings.tenantSlots, ...[...bySlot.keys()].map((slot) => slot + 1));
  const tenants: TenantConfig[] = Array.from({ length: slots }, (_, slot): TenantConfig => {
    const tenant = bySlot.get(slot);
    if (tenant === undefined) {
      // A free slot: no handles, no quota, in the first tenant's trust domain so that it does not
      // make the shared ring clear blocks on free by itself. The name cannot come from a config.
      return {
        name: `\u0000free slot ${slot}`,
        storeRange: { first: 0n, count: 0n },
        loadScope: { first: 0n, count: 0n },
        quota: 0,
        trustDomain: settings.tenants[0]?.trustDomain ?? '',
      };
    }
    const config: TenantConfig = {
      name: tenant.name,
      storeRange: tenant.storeRange,
      loadScope: tenant.loadScope,
      quota: tenant.quota,
      trustDomain: tenant.trustDomain,
      eviction: tenant.eviction,
    };
    if (tenant.trust.directAlloc) {
      config.partition = partitions.length;
      partitions.push({ blocks: tenant.quota });
    }
    return config;
  });
  const credits = settings.session.credits;
  return {
    blockSize: settings.pool.blockSize,
    blockCount: settings.pool.blockCount,
    handleBase: settings.pool.handleBase,
    handleCount: settings.pool.handleCount,
    maxInline: settings.pool.maxInline,
    ringOrder: settings.pool.ringOrder,
    partitions,
    tenants,
    // Draft 9.2: InfiniBand atomics are unmasked, so over RoCE the rings count with plain 64-bit adds.
    ringMode: settings.transport === 'roce' ? 'unmasked' : 'masked',
    // One slice for all workers, cut into a slot per session the node may hold (server/slots.ts).
    threads: 1,
    sessionsPerThread: settings.session.maxSessions,
    // kbtp-v1 section 11: at least 2 x credits receives posted per session.
    requestsPerThread: settings.session.maxSessions * 2 * credits,
    durable: settings.durable !== undefined,
  };
}
