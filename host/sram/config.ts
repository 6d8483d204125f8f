// The `--sram-model <config>` file: a JSON object describing the modelled SRAM. Every field is
// optional; a bad one is refused with a message naming the field and what to put there.
import { EXIT_USAGE, KbtpError } from '../errors.ts';
import { readFileSync } from 'node:fs';
import { SramCache } from './cache.ts';
import { DEFAULT_COSTS, type SramCosts } from './costs.ts';
import { KIND_NAMES } from './kinds.ts';
import { createPolicy, policyNames, type Partition } from './policy.ts';

export interface SramModelConfig {
  /** Lines in the SRAM. */
  readonly lines: number;
  /** Ways per set; 0 = fully associative. */
  readonly associativity: number;
  readonly policy: string;
  /** Lines per kind for the partitioned policy; absent = the policy's default split. */
  readonly partition?: Partition;
  readonly costs: SramCosts;
  readonly controlInsertsLines: boolean;
}

/**
 * 2048 lines, fully associative, shared-lru. No source gives a ConnectX SRAM size (the seed
 * says none should be assumed), so 2048 is an assumption: room for a couple of thousand
 * contexts and translations, which puts the QP cliff in the low thousands of QPs.
 */
export const DEFAULT_SRAM_CONFIG: SramModelConfig = Object.freeze({
  lines: 2048,
  associativity: 0,
  policy: 'shared-lru',
  costs: DEFAULT_COSTS,
  controlInsertsLines: true,
});

/** A bad SRAM model file or value; the message names the field and the fix. */
export class SramConfigError extends KbtpError {
  constructor(message: string) {
    super('KBTP_CONFIG', message, EXIT_USAGE);
  }
}

const FIELDS = ['lines', 'associativity', 'policy', 'partition', 'costs', 'controlInsertsLines'] as const;
const COST_FIELDS = Object.keys(DEFAULT_COSTS) as Array<keyof SramCosts>;

function describe(value: unknown): string {
  return JSON.stringify(value) ?? String(value);
}

/** Validates a parsed config object; `source` names it in error messages (a path, "--config"). */
export function parseSramConfig(value: unknown, source: string): SramModelConfig {
  const fail = (message: string): never => {
    throw new SramConfigError(`${source}: ${message}`);
  };
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return fail(`the SRAM model config must be a JSON object such as {"lines": 2048, "policy": "shared-lru"} (got ${describe(value)})`);
  }
  const record = value as Record<string, unknown>;
  for (const key of Object.keys(record)) {
    if (!(FIELDS as readonly string[]).includes(key)) {
      fail(`unknown field "${key}"; the fields are ${FIELDS.join(', ')}`);
    }
  }

  let lines = DEFAULT_SRAM_CONFIG.lines;
  if (record.lines !== undefined) {
    if (typeof record.lines !== 'number' || !Number.isInteger(record.lines) || record.lines < 1 || record.lines > 1 << 24) {
      fail(`"lines" must be a whole number of SRAM lines between 1 and ${1 << 24} (got ${describe(record.lines)}); e.g. "lines": 2048`);
    }
    lines = record.lines as number;
  }

  let associativity = DEFAULT_SRAM_CONFIG.associativity;
  if (record.associativity !== undefined && record.associativity !== 'full') {
    const ways = record.associativity;
    if (typeof ways !== 'number' || !Number.isInteger(ways) || ways < 0) {
      fail(`"associativity" must be "full" (or 0) or a positive number of ways per set (got ${describe(ways)}); e.g. "associativity": 8`);
    }
    associativity = ways as number;
  }

  let policy = DEFAULT_SRAM_CONFIG.policy;
  if (record.policy !== undefined) {
    if (typeof record.policy !== 'string' || !policyNames().includes(record.policy)) {
      fail(
        `"policy" must be one of ${policyNames()
          .map((name) => `"${name}"`)
          .join(', ')} (got ${describe(record.policy)})`,
      );
    }
    policy = record.policy as string;
  }

  let partition: Partition | undefined;
  if (record.partition !== undefined) {
    if (policy !== 'partitioned') {
      fail(`"partition" only applies to "policy": "partitioned" (policy is "${policy}"); remove it or change the policy`);
    }
    if (typeof record.partition !== 'object' || record.partition === null || Array.isArray(record.partition)) {
      fail(`"partition" must be an object of lines per kind, e.g. {"QPC": 1024, "MPT": 128, "MTT": 768, "CQC": 64, "EQC": 64}`);
    }
    partition = {};
    for (const [kind, count] of Object.entries(record.partition as Record<string, unknown>)) {
      if (!KIND_NAMES.includes(kind)) fail(`"partition.${kind}" names no kind; use ${KIND_NAMES.join(', ')}`);
      if (typeof count !== 'number' || !Number.isInteger(count) || count < 0) {
        fail(`"partition.${kind}" must be a whole, non-negative number of lines (got ${describe(count)})`);
      }
      partition[kind] = count as number;
    }
    const total = Object.values(partition).reduce<number>((sum, count) => sum + (count ?? 0), 0);
    if (total !== lines) fail(`"partition" gives ${total} lines in all but "lines" is ${lines}; make the per-kind counts add up to "lines"`);
  }

  const costs: Record<string, number> = { ...DEFAULT_COSTS };
  if (record.costs !== undefined) {
    if (typeof record.costs !== 'object' || record.costs === null || Array.isArray(record.costs)) {
      fail(`"costs" must be an object such as {"sramHitNs": 20, "pcieReadNs": 1000, "pcieWriteNs": 500}`);
    }
    for (const [name, ns] of Object.entries(record.costs as Record<string, unknown>)) {
      if (!(COST_FIELDS as string[]).includes(name)) fail(`unknown field "costs.${name}"; the cost fields are ${COST_FIELDS.join(', ')}`);
      if (typeof ns !== 'number' || !Number.isFinite(ns) || ns < 0) {
        fail(`"costs.${name}" must be a non-negative number of nanoseconds (got ${describe(ns)})`);
      }
      costs[name] = ns as number;
    }
  }

  let controlInsertsLines = DEFAULT_SRAM_CONFIG.controlInsertsLines;
  if (record.controlInsertsLines !== undefined) {
    if (typeof record.controlInsertsLines !== 'boolean') {
      fail(`"controlInsertsLines" must be true or false (got ${describe(record.controlInsertsLines)})`);
    }
    controlInsertsLines = record.controlInsertsLines as boolean;
  }

  const config: SramModelConfig = {
    lines,
    associativity,
    policy,
    ...(partition === undefined ? {} : { partition }),
    costs: costs as unknown as SramCosts,
    controlInsertsLines,
  };
  // Geometry errors (pool sizes against the associativity) are found by building the cache once.
  try {
    createSramCache(config);
  } catch (error) {
    fail(error instanceof Error ? error.message : String(error));
  }
  return config;
}

/** Reads and validates a config file. */
export function loadSramConfig(path: string): SramModelConfig {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (error as Error).message;
    throw new SramConfigError(`${path}: cannot read the SRAM model config (${reason}); pass the path of a JSON file`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new SramConfigError(`${path}: not valid JSON (${(error as Error).message}); the file must hold one JSON object`);
  }
  return parseSramConfig(parsed, path);
}

export function createSramCache(config: SramModelConfig): SramCache {
  return new SramCache({
    lines: config.lines,
    associativity: config.associativity,
    policy: createPolicy(config.policy, config.partition === undefined ? {} : { partition: config.partition }),
    costs: config.costs,
    controlInsertsLines: config.controlInsertsLines,
  });
}

/** The config with some fields replaced (experiments override lines or policy from the command line). */
export function withOverrides(config: SramModelConfig, overrides: Partial<SramModelConfig>, source: string): SramModelConfig {
  const merged: Record<string, unknown> = { ...config, ...overrides };
  if (merged.policy !== 'partitioned' || (overrides.lines !== undefined && overrides.partition === undefined)) delete merged.partition;
  return parseSramConfig(merged, source);
}
