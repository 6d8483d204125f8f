// Latency percentiles from the service-time histogram, estimated the way Prometheus's
// histogram_quantile does: linear interpolation inside the bucket that holds the rank.
import { LATENCY_BOUNDS_SECONDS, type LatencyHistogram } from '../host/kbtp/server/stats.ts';

export interface LatencySummary {
  count: number;
  meanSeconds: number;
  p50Seconds: number;
  p90Seconds: number;
  p99Seconds: number;
}

export function histogramQuantile(q: number, counts: readonly number[], bounds: readonly number[] = LATENCY_BOUNDS_SECONDS): number {
  const total = counts.reduce((sum, n) => sum + n, 0);
  if (total === 0) return Number.NaN;
  const rank = q * total;
  let below = 0;
  for (let bucket = 0; bucket < counts.length; bucket++) {
    const inBucket = counts[bucket] ?? 0;
    if (below + inBucket >= rank && inBucket > 0) {
      const lower = bucket === 0 ? 0 : (bounds[bucket - 1] ?? 0);
      // The +Inf bucket has no upper bound: report its lower edge, as Prometheus does.
      const upper = bounds[bucket];
      if (upper === undefined) return lower;
      return lower + (upper - lower) * ((rank - below) / inBucket);
    }
    below += inBucket;
  }
  return bounds[bounds.length - 1] ?? Number.NaN;
}

export function summarizeLatency(histogram: LatencyHistogram): LatencySummary {
  return {
    count: histogram.count,
    meanSeconds: histogram.count === 0 ? 0 : histogram.sumSeconds / histogram.count,
    p50Seconds: histogramQuantile(0.5, histogram.counts),
    p90Seconds: histogramQuantile(0.9, histogram.counts),
    p99Seconds: histogramQuantile(0.99, histogram.counts),
  };
}
