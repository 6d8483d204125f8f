// A latency histogram with log-linear buckets (HDR-style): values below 128 ns are exact, above
// that each power of two is split in 64 buckets, so a reported percentile is within 1/64 (1.6%)
// of the true value whatever the range. Recording is O(1) with no allocation, which matters when a
// benchmark records every one of millions of requests; histograms of several sessions merge.
import { UsageError } from '../errors.ts';

const SUB_BITS = 6;
const SUB_COUNT = 1 << SUB_BITS; // 64 buckets per power of two
const EXACT_LIMIT = 2 * SUB_COUNT; // values below this have their own bucket
/** 2^48 ns is about 78 hours: longer latencies are clamped into the last bucket. */
const MAX_EXPONENT = 48;
const BUCKETS = EXACT_LIMIT + (MAX_EXPONENT - SUB_BITS) * SUB_COUNT;

/** 2^-shift for every shift bucketOf uses: a multiplication instead of `2 ** shift` per value. */
const SCALE = Float64Array.from({ length: MAX_EXPONENT }, (_, shift) => 2 ** -shift);

/** Bucket of a non-negative integer value (nanoseconds). */
export function bucketOf(value: number): number {
  if (value < EXACT_LIMIT) return value < 0 ? 0 : Math.floor(value);
  // The exponent is the highest set bit's place, of the value's low or high 32 bits: exact (Math.log2
  // rounded up just below a power of two) and no call into the math library per value (issue 16).
  const exponent = value < 4294967296 ? 31 - Math.clz32(value) : value < 2 ** MAX_EXPONENT ? 63 - Math.clz32(value / 4294967296) : MAX_EXPONENT - 1;
  const shift = exponent - SUB_BITS;
  // Clamped values (at or past 2^48) keep the sub-bucket in range.
  const sub = Math.min(2 * SUB_COUNT - 1, Math.max(SUB_COUNT, Math.floor(value * (SCALE[shift] as number))));
  return Math.min(BUCKETS - 1, EXACT_LIMIT + (exponent - SUB_BITS - 1) * SUB_COUNT + (sub - SUB_COUNT));
}

/** The lowest value that falls in `bucket`, and the first value of the next one. */
export function bucketRange(bucket: number): [number, number] {
  if (bucket < EXACT_LIMIT) return [bucket, bucket + 1];
  const index = bucket - EXACT_LIMIT;
  const exponent = Math.floor(index / SUB_COUNT) + SUB_BITS + 1;
  const sub = (index % SUB_COUNT) + SUB_COUNT;
  const width = 2 ** (exponent - SUB_BITS);
  return [sub * width, (sub + 1) * width];
}

export class LatencyHistogram {
  private readonly counts = new Float64Array(BUCKETS);
  count = 0;
  sumNs = 0;
  minNs = Infinity;
  maxNs = 0;

  /** Records one latency in nanoseconds. */
  record(nanoseconds: number): void {
    const bucket = bucketOf(nanoseconds);
    this.counts[bucket] = (this.counts[bucket] ?? 0) + 1;
    this.count += 1;
    this.sumNs += nanoseconds;
    if (nanoseconds < this.minNs) this.minNs = nanoseconds;
    if (nanoseconds > this.maxNs) this.maxNs = nanoseconds;
  }

  merge(other: LatencyHistogram): void {
    for (let i = 0; i < BUCKETS; i++) {
      const add = other.counts[i] ?? 0;
      if (add !== 0) this.counts[i] = (this.counts[i] ?? 0) + add;
    }
    this.count += other.count;
    this.sumNs += other.sumNs;
    this.minNs = Math.min(this.minNs, other.minNs);
    this.maxNs = Math.max(this.maxNs, other.maxNs);
  }

  /**
   * The value at quantile `q` (0 < q <= 1): the smallest recorded value such that at least
   * q of all values are at or below it, reported as the middle of its bucket, clamped to the
   * observed min and max. NaN when nothing was recorded.
   */
  percentileNs(q: number): number {
    if (this.count === 0) return Number.NaN;
    if (!(q > 0 && q <= 1)) throw new UsageError(`quantile ${q} must be in (0, 1]`);
    const rank = Math.max(1, Math.ceil(q * this.count - 1e-9));
    let seen = 0;
    for (let bucket = 0; bucket < BUCKETS; bucket++) {
      seen += this.counts[bucket] ?? 0;
      if (seen >= rank) {
        const [low, high] = bucketRange(bucket);
        const middle = bucket < EXACT_LIMIT ? low : (low + high) / 2;
        return Math.min(this.maxNs, Math.max(this.minNs, middle));
      }
    }
    return this.maxNs;
  }

  get meanNs(): number {
    return this.count === 0 ? Number.NaN : this.sumNs / this.count;
  }
}
