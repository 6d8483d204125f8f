// What an experiment is: named options, a run that returns tables, one JSON object and SVG
// charts, and progress reported to stderr while it runs.
import { UsageError } from '../../errors.ts';
import type { SramModelConfig } from '../config.ts';
import type { TextTable } from '../../report/table.ts';

export interface OptionSpec {
  readonly type: 'string' | 'boolean';
  /** Shown in --help, e.g. "<n>". */
  readonly value?: string;
  readonly help: string;
}

export type OptionValues = Record<string, string | boolean | undefined>;

export interface ExperimentContext {
  /** The SRAM model to use (from --config and --lines); experiments may vary fields of it. */
  readonly config: SramModelConfig;
  readonly seed: number;
  readonly progress: Progress;
}

export interface Chart {
  /** File name inside --out, e.g. "dereg.svg". */
  readonly file: string;
  readonly svg: string;
}

export interface ExperimentOutput {
  readonly tables: readonly TextTable[];
  /** Findings printed under the tables. */
  readonly notes: readonly string[];
  readonly json: unknown;
  readonly charts: readonly Chart[];
}

export interface Experiment {
  readonly name: string;
  readonly summary: string;
  /** Paragraph for --help: what is modelled and what the figures mean. */
  readonly description: string;
  readonly options: Readonly<Record<string, OptionSpec>>;
  run(values: OptionValues, context: ExperimentContext): ExperimentOutput;
}

export { UsageError };

export function integerOption(values: OptionValues, name: string, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const raw = values[name];
  if (raw === undefined) return fallback;
  const value = typeof raw === 'string' && /^\d+$/.test(raw.trim()) ? Number(raw) : Number.NaN;
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new UsageError(`--${name} must be a whole number from ${min} to ${max} (got ${JSON.stringify(raw)})`);
  }
  return value;
}

export function numberOption(values: OptionValues, name: string, fallback: number, min: number): number {
  const raw = values[name];
  if (raw === undefined) return fallback;
  const value = typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : Number.NaN;
  if (!Number.isFinite(value) || value < min) throw new UsageError(`--${name} must be a number >= ${min} (got ${JSON.stringify(raw)})`);
  return value;
}

/** A comma-separated list of whole numbers; `words` maps special words (e.g. "unlimited") to values. */
export function integerListOption(
  values: OptionValues,
  name: string,
  fallback: readonly number[],
  min: number,
  words: Readonly<Record<string, number>> = {},
): number[] {
  const raw = values[name];
  if (raw === undefined) return [...fallback];
  const items = String(raw)
    .split(',')
    .map((item) => item.trim())
    .filter((item) => item !== '');
  const parsed = items.map((item) => (Object.hasOwn(words, item) ? words[item]! : /^\d+$/.test(item) ? Number(item) : Number.NaN));
  const bad = items.find((item, index) => !Object.hasOwn(words, item) && (!Number.isSafeInteger(parsed[index]) || parsed[index]! < min));
  if (bad !== undefined || items.length === 0) {
    const extra = Object.keys(words).length > 0 ? ` or ${Object.keys(words).join('/')}` : '';
    throw new UsageError(`--${name} must be a comma-separated list of whole numbers >= ${min}${extra} (bad item ${JSON.stringify(bad ?? raw)})`);
  }
  return parsed;
}

/** Progress lines on stderr, so stdout stays a clean table or JSON object. */
export class Progress {
  private readonly started = Date.now();

  constructor(
    private readonly label: string,
    private readonly enabled: boolean,
    private readonly write: (text: string) => void = (text) => process.stderr.write(text),
  ) {}

  step(done: number, total: number, what: string): void {
    if (!this.enabled) return;
    const seconds = ((Date.now() - this.started) / 1000).toFixed(1);
    this.write(`[sram ${this.label}] ${done}/${total} ${what} (${seconds} s)\n`);
  }
}
