// Reading a JSON configuration strictly: every object declares the keys it knows, so a typo at
// any depth is an error naming its path and the nearest known key, never a silently ignored
// setting. Each reader method checks one value and names the path and the fix when it is wrong.
import { ConfigError } from '../errors.ts';

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

export { ConfigError };

export function isJsonObject(value: Json | undefined): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const substitution = (previous[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1);
      current.push(Math.min((previous[j] ?? 0) + 1, (current[j - 1] ?? 0) + 1, substitution));
    }
    previous = current;
  }
  return previous[b.length] ?? 0;
}

/** The known key closest to `key` (case and spelling), if it is close enough to be the one meant. */
export function nearestKey(key: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const candidate of known) {
    const distance = editDistance(key.toLowerCase(), candidate.toLowerCase());
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  // A wrong case, a swapped or missing letter or two; a word of its own is not a typo.
  return best !== undefined && bestDistance <= Math.max(2, Math.floor(key.length / 3)) ? best : undefined;
}

export interface IntegerRule {
  min: number;
  max: number;
  /** Used when the key is absent; without one the key is required. */
  fallback?: number;
  /** What to say when a required key is missing. */
  why?: string;
}

/** One object of the configuration, at `path`, whose keys must all be among `known`. */
export class ObjectReader<Key extends string> {
  constructor(
    readonly path: string,
    readonly value: JsonObject,
    readonly known: readonly Key[],
  ) {
    for (const key of Object.keys(value)) {
      if ((known as readonly string[]).includes(key)) continue;
      const guess = nearestKey(key, known);
      throw new ConfigError(
        this.field(key),
        'unknown key',
        guess !== undefined ? `did you mean "${guess}"?` : `the keys here are ${known.map((k) => `"${k}"`).join(', ')}`,
      );
    }
  }

  /** Reads `value` at `path` as an object with the given keys (an absent value reads as {}). */
  static of<K extends string>(path: string, value: Json | undefined, known: readonly K[]): ObjectReader<K> {
    if (value === undefined) return new ObjectReader(path, {}, known);
    if (!isJsonObject(value)) {
      throw new ConfigError(path === '' ? '(top level)' : path, `must be an object, got ${JSON.stringify(value)}`, 'write it as { ... }');
    }
    return new ObjectReader(path, value, known);
  }

  field(key: string): string {
    return this.path === '' ? key : `${this.path}.${key}`;
  }

  has(key: Key): boolean {
    return this.value[key] !== undefined;
  }

  raw(key: Key): Json | undefined {
    return this.value[key];
  }

  object<K extends string>(key: Key, known: readonly K[]): ObjectReader<K> {
    return ObjectReader.of(this.field(key), this.value[key], known);
  }

  integer(key: Key, rule: IntegerRule): number {
    const value = this.value[key];
    if (value === undefined) {
      if (rule.fallback !== undefined) return rule.fallback;
      throw new ConfigError(this.field(key), 'is required', rule.why ?? `give an integer from ${rule.min} to ${rule.max}`);
    }
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < rule.min || value > rule.max) {
      throw new ConfigError(
        this.field(key),
        `must be an integer from ${rule.min} to ${rule.max}, got ${JSON.stringify(value)}`,
        rule.fallback !== undefined ? `e.g. ${rule.fallback}` : (rule.why ?? 'give a number'),
      );
    }
    return value;
  }

  boolean(key: Key, fallback: boolean): boolean {
    const value = this.value[key];
    if (value === undefined) return fallback;
    if (typeof value !== 'boolean') throw new ConfigError(this.field(key), `must be true or false, got ${JSON.stringify(value)}`, 'use a JSON boolean');
    return value;
  }

  /** A string of 1 to `maxOctets` UTF-8 octets, or undefined when absent. */
  string(key: Key, maxOctets: number, why: string): string | undefined {
    const value = this.value[key];
    if (value === undefined) return undefined;
    if (typeof value !== 'string' || value === '' || Buffer.byteLength(value) > maxOctets) {
      throw new ConfigError(this.field(key), `must be a non-empty string of at most ${maxOctets} UTF-8 octets`, why);
    }
    return value;
  }

  /** A handle: a JSON number (safe integer) or a decimal string, for handles beyond 2^53. */
  handle(key: Key, fallback: bigint): bigint {
    const value = this.value[key];
    if (value === undefined) return fallback;
    if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return BigInt(value);
    if (typeof value === 'string' && /^[0-9]+$/.test(value) && BigInt(value) < 2n ** 64n) return BigInt(value);
    throw new ConfigError(
      this.field(key),
      `must be a non-negative integer below 2^64, got ${JSON.stringify(value)}`,
      'write it as a number, or as a decimal string above 2^53',
    );
  }

  /** An array (undefined when absent); each element is for the caller to read at `${field}[i]`. */
  array(key: Key): Json[] | undefined {
    const value = this.value[key];
    if (value === undefined) return undefined;
    if (!Array.isArray(value)) throw new ConfigError(this.field(key), `must be an array, got ${JSON.stringify(value)}`, 'write it as [ ... ]');
    return value;
  }
}
