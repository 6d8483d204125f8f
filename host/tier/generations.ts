// Generation arithmetic for the durable tier. Generations are 16 bits and skip 0 (draft 3.2), so
// they live on a cycle of 65535 values; "ahead" is meant within half of it (kbtp-v1 section 12).

export const GENERATION_CYCLE = 0xffff;

/** Increments from `from` to `to` going forward (0 .. 65534). */
export function generationDistance(from: number, to: number): number {
  return (((to - 1 - (from - 1)) % GENERATION_CYCLE) + GENERATION_CYCLE) % GENERATION_CYCLE;
}

/** `generation` moved forward by `steps`, skipping 0. */
export function generationPlus(generation: number, steps: number): number {
  return ((((generation - 1 + steps) % GENERATION_CYCLE) + GENERATION_CYCLE) % GENERATION_CYCLE) + 1;
}

/** The one of `a` and `b` that is ahead of the other (within half the cycle). */
export function generationLater(a: number, b: number): number {
  return generationDistance(a, b) < GENERATION_CYCLE / 2 ? b : a;
}

/**
 * Generations the tier reserves at a time ahead of use per handle. A handle whose Generation moves
 * without a durable record (unsealed binds, frees of unsealed blocks) needs one reservation per
 * this many moves; a restart resumes just above the mark, so it stays well inside half the cycle.
 */
export const GENERATION_RESERVE_BATCH = 1024;
