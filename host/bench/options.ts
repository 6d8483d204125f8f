// Parsing of `kbtp bench` values: sizes with units, positive integers and durations, each with a
// message that says what to write instead.
import { UsageError } from '../errors.ts';

export { UsageError };

const UNITS: Record<string, number> = { '': 1, b: 1, k: 1024, kb: 1024, kib: 1024, m: 2 ** 20, mb: 2 ** 20, mib: 2 ** 20, g: 2 ** 30, gib: 2 ** 30 };

/** "16K", "256KiB", "1M", "4096": octets (binary units). */
export function parseSize(text: string, flag: string): number {
  const match = /^([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)$/.exec(text.trim());
  const unit = UNITS[(match?.[2] ?? '?').toLowerCase()];
  const value = match === null || unit === undefined ? Number.NaN : Number(match[1]) * unit;
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new UsageError(`${flag}: "${text}" is not a size; write e.g. 16K, 256KiB, 1M or 4096`);
  }
  return value;
}

export function parseSizes(text: string, flag: string): number[] {
  const sizes = text
    .split(',')
    .map((part) => part.trim())
    .filter((part) => part !== '')
    .map((part) => parseSize(part, flag));
  if (sizes.length === 0) throw new UsageError(`${flag}: give at least one size, e.g. 16K,256K,1M`);
  return sizes;
}

export function parseInteger(text: string | undefined, flag: string, fallback: number, min = 1): number {
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < min) throw new UsageError(`${flag}: "${text}" is not an integer >= ${min}`);
  return value;
}

export function parseNumber(text: string | undefined, flag: string, fallback: number, min = 0): number {
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!Number.isFinite(value) || value < min) throw new UsageError(`${flag}: "${text}" is not a number >= ${min}`);
  return value;
}
