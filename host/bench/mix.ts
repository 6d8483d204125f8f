// The operation mix of `kbtp bench`: which KBTP operations a run issues, parsed from the command
// line. "load,store" measures each operation in a phase of its own; "load:3,store:1" (any weight
// given) runs one phase that draws each request's operation with those weights.
import { UsageError } from '../errors.ts';

export const OPS = ['load', 'store', 'alloc-store', 'free', 'direct-load', 'direct-alloc'] as const;
export type OpName = (typeof OPS)[number];

/** Report names, as the protocol spells the opcodes. */
export const OP_LABELS: Record<OpName, string> = {
  load: 'LOAD',
  store: 'STORE',
  'alloc-store': 'ALLOC_STORE',
  free: 'FREE',
  'direct-load': 'DIRECT_LOAD',
  'direct-alloc': 'DIRECT_ALLOC',
};

export interface MixItem {
  op: OpName;
  weight: number;
}

/** One phase: the operations it draws from. A single item is a phase of that operation alone. */
export type Phase = readonly MixItem[];

export class MixError extends UsageError {}

/** Parses "load,store" (a phase per operation) or "load:3,store:1" (one weighted phase). */
export function parseMix(text: string): Phase[] {
  const items: MixItem[] = [];
  let weighted = false;
  for (const part of text
    .split(',')
    .map((item) => item.trim())
    .filter((item) => item !== '')) {
    const [name, weightText, extra] = part.split(':');
    const op = name?.toLowerCase().replace('_', '-') as OpName;
    if (!(OPS as readonly string[]).includes(op) || extra !== undefined) {
      throw new MixError(`"${part}" is not an operation; use ${OPS.join(', ')}, optionally with a weight (load:3)`);
    }
    let weight = 1;
    if (weightText !== undefined) {
      weighted = true;
      weight = Number(weightText);
      if (!(Number.isFinite(weight) && weight > 0)) throw new MixError(`weight "${weightText}" of ${op} must be a positive number`);
    }
    if (items.some((item) => item.op === op)) throw new MixError(`${op} is listed twice in the mix`);
    items.push({ op, weight });
  }
  if (items.length === 0) throw new MixError('the mix is empty; give e.g. --mix load,store');
  const phases = weighted ? [items] : items.map((item) => [item]);
  for (const phase of phases) sealingFor(phase);
  return phases;
}

export function usesDirect(phases: readonly Phase[]): { load: boolean; alloc: boolean } {
  const all = phases.flat();
  return { load: all.some((item) => item.op === 'direct-load'), alloc: all.some((item) => item.op === 'direct-alloc') };
}

/**
 * Whether a phase's blocks are sealed: STORE writes into unsealed blocks only, DIRECT_LOAD reads
 * sealed ones only (kbtp-v1 section 6), so one phase cannot have both.
 */
export function sealingFor(phase: Phase): boolean {
  const store = phase.some((item) => item.op === 'store');
  const direct = phase.some((item) => item.op === 'direct-load');
  if (store && direct) {
    throw new MixError('store needs unsealed blocks and direct-load sealed ones: run them in separate phases (--mix store,direct-load)');
  }
  return !store;
}

/** Draws operations with the phase's weights from a seeded generator (repeatable runs). */
export class OpPicker {
  private readonly cumulative: number[] = [];
  private readonly total: number;
  private state: number;

  constructor(
    private readonly phase: Phase,
    seed = 1,
  ) {
    let sum = 0;
    for (const item of phase) {
      sum += item.weight;
      this.cumulative.push(sum);
    }
    this.total = sum;
    this.state = seed >>> 0 || 1;
  }

  next(): OpName {
    const only = this.phase[0];
    if (this.phase.length === 1 && only !== undefined) return only.op;
    this.state ^= this.state << 13;
    this.state ^= this.state >>> 17;
    this.state ^= this.state << 5;
    this.state >>>= 0;
    const draw = (this.state / 2 ** 32) * this.total;
    for (let i = 0; i < this.cumulative.length; i++) {
      if (draw < (this.cumulative[i] ?? 0)) return this.phase[i]?.op ?? 'load';
    }
    return this.phase[this.phase.length - 1]?.op ?? 'load';
  }
}
