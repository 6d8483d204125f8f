// A small seeded generator (mulberry32), so experiments, stress runs and tests replay the same
// sequence on every run.

export class Random {
  private state: number;

  constructor(seed: number) {
    this.state = seed >>> 0;
  }

  /** A uniformly distributed unsigned 32-bit integer. */
  next(): number {
    // biome-ignore lint/suspicious/noAssignInExpressions: mulberry32 as published
    let t = (this.state = (this.state + 0x6d2b79f5) | 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  }

  /** An integer in [0, n). */
  below(n: number): number {
    return Math.floor((this.next() / 0x1_0000_0000) * n);
  }

  /** A float in [0, 1). */
  float(): number {
    return this.next() / 0x1_0000_0000;
  }
}
