// The latency histogram: percentiles within the bucket precision (1/64) of the exact ones,
// exact small values, merging, and the edge ranks p50 / p99 / p99.9 are known to get wrong.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { LatencyHistogram, bucketOf, bucketRange } from '../../host/bench/histogram.ts';

function exact(sorted: readonly number[], q: number): number {
  return sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)] ?? Number.NaN;
}

function seeded(seed: number): () => number {
  let state = seed >>> 0 || 1;
  return () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    return state / 2 ** 32;
  };
}

test('every value falls in the bucket whose range holds it, buckets in order', () => {
  let previous = -1;
  for (const value of [0, 1, 127, 128, 129, 255, 256, 1000, 65_535, 65_536, 1e6, 123_456_789, 2 ** 40 + 5]) {
    const bucket = bucketOf(value);
    const [low, high] = bucketRange(bucket);
    assert.ok(low <= value && value < high, `${value} in [${low}, ${high})`);
    assert.ok(bucket >= previous, 'monotonic');
    previous = bucket;
  }
  for (let value = 128; value < 1 << 20; value += 37) {
    const [low, high] = bucketRange(bucketOf(value));
    assert.ok(low <= value && value < high, `${value}`);
    assert.ok((high - low) / low <= 1 / 64 + 1e-12, 'relative width at most 1/64');
  }
});

test('fractional values beside every power of two fall in the bucket whose range holds them', () => {
  for (let exponent = 8; exponent < 48; exponent++) {
    for (const value of [2 ** exponent - 0.25, 2 ** exponent, 2 ** exponent + 0.5, 3 * 2 ** (exponent - 1) + 0.75]) {
      const [low, high] = bucketRange(bucketOf(value));
      assert.ok(low <= value && value < high, `${value} in [${low}, ${high})`);
    }
  }
  // Past 2^48 ns everything is clamped into the last bucket.
  const last = bucketOf(2 ** 48 - 1);
  for (const value of [2 ** 48, 2 ** 60, 2 ** 70, Number.MAX_VALUE]) assert.is(bucketOf(value), last, `${value}`);
});

test('percentiles of a long-tailed sample are within 1/64 of the exact ones', () => {
  const random = seeded(7);
  const values: number[] = [];
  const histogram = new LatencyHistogram();
  for (let i = 0; i < 100_000; i++) {
    // Mostly ~50 us, a 1% tail around 2 ms and a 0.1% tail around 40 ms, in nanoseconds.
    const u = random();
    const base = u < 0.001 ? 40e6 : u < 0.01 ? 2e6 : 50e3;
    const value = Math.round(base * (0.5 + random()));
    values.push(value);
    histogram.record(value);
  }
  values.sort((a, b) => a - b);
  for (const q of [0.5, 0.9, 0.99, 0.999, 1]) {
    const want = exact(values, q);
    const got = histogram.percentileNs(q);
    assert.ok(Math.abs(got - want) / want <= 1 / 64, `q=${q}: ${got} vs ${want}`);
  }
  assert.is(histogram.count, 100_000);
  assert.is(histogram.maxNs, values[values.length - 1]);
  assert.is(histogram.minNs, values[0]);
});

test('small values are exact; ranks follow the nearest-rank rule', () => {
  const histogram = new LatencyHistogram();
  for (let value = 1; value <= 100; value++) histogram.record(value);
  assert.is(histogram.percentileNs(0.5), 50);
  assert.is(histogram.percentileNs(0.99), 99);
  assert.is(histogram.percentileNs(0.999), 100);
  assert.is(histogram.percentileNs(0.01), 1);
  assert.ok(Number.isNaN(new LatencyHistogram().percentileNs(0.5)), 'empty histogram has no percentile');
  assert.throws(() => histogram.percentileNs(0), /quantile/);
});

test('merging histograms equals recording into one', () => {
  const random = seeded(99);
  const a = new LatencyHistogram();
  const b = new LatencyHistogram();
  const both = new LatencyHistogram();
  for (let i = 0; i < 10_000; i++) {
    const value = Math.round(1e3 + random() * 1e7);
    (i % 3 === 0 ? a : b).record(value);
    both.record(value);
  }
  a.merge(b);
  for (const q of [0.5, 0.99, 0.999]) assert.is(a.percentileNs(q), both.percentileNs(q));
  assert.is(a.count, both.count);
  assert.is(a.sumNs, both.sumNs);
});

test.run();
