// The appliance's configuration: the target's settings (host/kbtp/server/target-config.ts) plus the sections only
// the daemon reads (management server, data directory, logging, drain bound), from the same JSON
// file, validated the same way: every error names the field and the fix.
import { resolveTargetSettings, readConfigFile, parseListen, isLoopback, ConfigError, type TargetSettings } from '../host/kbtp/server/target-config.ts';
import cron from 'node-cron';
import { ObjectReader, isJsonObject, type Json, type JsonObject } from '../host/util/config-reader.ts';

export const DEFAULT_MANAGEMENT_PORT = 7118;
export type LogLevel = 'error' | 'warn' | 'info' | 'debug';
export const LOG_LEVELS: readonly LogLevel[] = ['error', 'warn', 'info', 'debug'];
export type LogFormat = 'text' | 'json';

export interface ManagementSettings {
  listen: { host: string; port: number };
  /** Bearer token; required when the management server listens beyond loopback. Never logged. */
  token: string | null;
}

export interface ApplianceSettings {
  target: TargetSettings;
  management: ManagementSettings;
  /** Where the durable tier and job outputs live; null keeps the node memory-only. */
  dataDir: string | null;
  /** True when dataDir is the caller's default (the appliance image's data partition), not the file's. */
  dataDirDefaulted?: boolean;
  log: { level: LogLevel; format: LogFormat; sessions: boolean };
  /** SIGTERM/SIGINT: how long sessions get to finish before the daemon gives up and exits 1. */
  drainTimeoutMs: number;
  /** At start, how long to wait for a KBTP address another process still holds (a predecessor draining). */
  listenWaitMs: number;
  /** Cron expression of each scheduled job; null turns the job off. */
  jobs: Record<JobName, string | null>;
  /** Blocks the tier scrub re-reads per run (a slice; the next run goes on from there). */
  scrubBlocksPerRun: number;
}

/** The scheduled maintenance jobs (firmware/jobs.ts) and their default schedules (cron, 5 or 6 fields). */
export const JOB_DEFAULTS = {
  poolAudit: '*/5 * * * *',
  statsSnapshot: '* * * * *',
  // Durable-tier jobs (firmware/tier-jobs.ts); they run only on a node with a tier.
  tierScrub: '*/10 * * * *',
  tierCheckpoint: '*/15 * * * *',
} as const;
export type JobName = keyof typeof JOB_DEFAULTS;
export const JOB_NAMES = Object.keys(JOB_DEFAULTS) as JobName[];

/** The top-level keys this file adds to the target's. */
export const APPLIANCE_SECTIONS = ['management', 'dataDir', 'log', 'drainTimeoutMs', 'listenWaitMs', 'jobs', 'scrubBlocksPerRun', 'maxTenants'] as const;

export const MIN_TOKEN_LENGTH = 16;
const MANAGEMENT_KEYS = ['listen', 'token'] as const;
const LOG_KEYS = ['level', 'format', 'sessions'] as const;

function resolveManagement(top: ObjectReader<(typeof APPLIANCE_SECTIONS)[number]>): ManagementSettings {
  const section = top.object('management', MANAGEMENT_KEYS);
  const listenValue = section.raw('listen') ?? `127.0.0.1:${DEFAULT_MANAGEMENT_PORT}`;
  if (typeof listenValue !== 'string') {
    throw new ConfigError('management.listen', 'must be a string', `e.g. "127.0.0.1:${DEFAULT_MANAGEMENT_PORT}"`);
  }
  const listen = parseListen(listenValue, 'management.listen');
  const token = section.raw('token') ?? null;
  if (token !== null && (typeof token !== 'string' || token.length < MIN_TOKEN_LENGTH)) {
    // The value itself is never echoed: it is a secret.
    throw new ConfigError('management.token', `must be a string of at least ${MIN_TOKEN_LENGTH} characters`, 'generate one with: openssl rand -hex 32');
  }
  return { listen, token };
}

/** Checks the rule that ties the management address to the token (flags may change the address). */
export function checkManagementExposure(management: ManagementSettings, field = 'management.listen'): void {
  if (!isLoopback(management.listen.host) && management.token === null) {
    throw new ConfigError(
      field,
      `the management server would listen on ${management.listen.host} without a token`,
      'set management.token (a bearer token), or listen on loopback only',
    );
  }
}

const MAX_BOUND_MS = 3_600_000;
const DEFAULT_MAX_TENANTS = 32;
/** 4096 blocks every 10 minutes: a 64 GiB tier of 256 KiB blocks is read through in about 11 hours. */
const DEFAULT_SCRUB_BLOCKS = 4096;

function resolveJobs(top: ObjectReader<(typeof APPLIANCE_SECTIONS)[number]>): Record<JobName, string | null> {
  const section = top.object('jobs', JOB_NAMES);
  const jobs = { ...JOB_DEFAULTS } as Record<JobName, string | null>;
  for (const name of JOB_NAMES) {
    const value = section.raw(name);
    if (value === undefined) continue;
    if (value !== null && (typeof value !== 'string' || !cron.validate(value))) {
      throw new ConfigError(
        section.field(name),
        `${JSON.stringify(value)} is not a cron expression`,
        `e.g. "${JOB_DEFAULTS[name]}" (minute hour day month weekday, an optional seconds field first), or null to turn the job off`,
      );
    }
    jobs[name] = value;
  }
  return jobs;
}

/**
 * `defaults.dataDir`: the data directory of a configuration that does not mention "dataDir" at all
 * (the appliance image passes its data partition). An explicit `"dataDir": null` still means
 * memory-only, and `"durable": {"enabled": false}` keeps the tier off while jobs use the directory.
 */
export function resolveApplianceSettings(file: Json, defaults: { dataDir?: string } = {}): ApplianceSettings {
  if (!isJsonObject(file)) throw new ConfigError('(top level)', 'must be a JSON object', 'start the file with {');
  const defaultDataDir = file.dataDir === undefined ? defaults.dataDir : undefined;
  const dataDirDefaulted = defaultDataDir !== undefined;
  const input: JsonObject = defaultDataDir === undefined ? file : { ...file, dataDir: defaultDataDir };
  // The appliance's data directory holds the durable tier too, unless "durable" says otherwise.
  const sharedDataDir = typeof input.dataDir === 'string' && input.dataDir !== '' ? input.dataDir : undefined;
  const target = resolveTargetSettings(input, APPLIANCE_SECTIONS, sharedDataDir === undefined ? {} : { dataDir: sharedDataDir });
  // The target's reader checked the top-level keys; this one reads only the appliance's sections.
  const own = Object.fromEntries(APPLIANCE_SECTIONS.filter((key) => input[key] !== undefined).map((key) => [key, input[key] as Json]));
  const top = ObjectReader.of('', own, APPLIANCE_SECTIONS);
  const management = resolveManagement(top);
  checkManagementExposure(management);
  const dataDir = top.raw('dataDir') ?? null;
  if (dataDir !== null && (typeof dataDir !== 'string' || dataDir === '')) {
    throw new ConfigError('dataDir', 'must be a directory path', 'e.g. "/var/lib/kbtp"');
  }
  const logIn = top.object('log', LOG_KEYS);
  const level = logIn.raw('level') ?? 'info';
  if (typeof level !== 'string' || !(LOG_LEVELS as readonly string[]).includes(level)) {
    throw new ConfigError('log.level', `must be one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(level)}`, 'e.g. "info"');
  }
  const format = logIn.raw('format') ?? 'text';
  if (format !== 'text' && format !== 'json') throw new ConfigError('log.format', `must be "text" or "json", got ${JSON.stringify(format)}`, 'e.g. "json"');
  const sessions = logIn.boolean('sessions', false);
  const drainTimeoutMs = top.integer('drainTimeoutMs', { min: 0, max: MAX_BOUND_MS, fallback: 10_000 });
  const listenWaitMs = top.integer('listenWaitMs', { min: 0, max: MAX_BOUND_MS, fallback: 10_000 });
  // Engine tenant slots, so SIGHUP can add tenants without a restart.
  target.tenantSlots = Math.max(target.tenants.length, top.integer('maxTenants', { min: 1, max: 1024, fallback: DEFAULT_MAX_TENANTS }));
  const scrubBlocksPerRun = top.integer('scrubBlocksPerRun', { min: 1, max: 2 ** 31 - 1, fallback: DEFAULT_SCRUB_BLOCKS });
  return {
    target,
    management,
    dataDir,
    ...(dataDirDefaulted ? { dataDirDefaulted } : {}),
    log: { level: level as LogLevel, format, sessions },
    drainTimeoutMs,
    listenWaitMs,
    jobs: resolveJobs(top),
    scrubBlocksPerRun,
  };
}

export function loadApplianceSettings(path: string | undefined, defaults: { dataDir?: string } = {}): ApplianceSettings {
  return resolveApplianceSettings(path === undefined ? {} : readConfigFile(path), defaults);
}

/** One line for the log at start: where the node keeps data, and why (a default, or memory only). */
export function storageSummary(settings: ApplianceSettings): string {
  const durable = settings.target.durable;
  if (settings.dataDir === null) return durable === undefined ? 'memory only (no dataDir)' : `durable tier in ${durable.dataDir}`;
  const where =
    settings.dataDirDefaulted === true
      ? `data directory ${settings.dataDir} (the default: the configuration names no dataDir)`
      : `data directory ${settings.dataDir}`;
  return durable === undefined ? `${where}; memory only: durable.enabled is false` : `${where}; durable tier in ${durable.dataDir}`;
}
