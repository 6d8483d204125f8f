// The experiments `kbtp sram <experiment>` can run, in the order --help lists them.
import { blockTier } from './block-tier.ts';
import { dereg } from './dereg.ts';
import { kbtpVsPerBlockMr } from './kbtp-vs-per-block-mr.ts';
import { policies } from './policies.ts';
import { qpSweep } from './qp-sweep.ts';
import type { Experiment } from './experiment.ts';

export const EXPERIMENTS: readonly Experiment[] = [dereg, qpSweep, policies, kbtpVsPerBlockMr, blockTier];

export function experimentByName(name: string): Experiment | undefined {
  return EXPERIMENTS.find((experiment) => experiment.name === name);
}
