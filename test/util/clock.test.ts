// The allocation-free clock: both forms read the same monotonic clock in milliseconds.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { monotonicMs, monotonicMsInto } from '../../host/util/clock.ts';

test('monotonicMsInto writes the same clock monotonicMs returns, into the index asked for', () => {
  const readings = new Float64Array(3).fill(-1);
  const before = monotonicMs();
  monotonicMsInto(readings, 1);
  const after = monotonicMs();
  assert.is(readings[0], -1);
  assert.is(readings[2], -1);
  assert.ok(readings[1]! >= before && readings[1]! <= after, `${before} <= ${readings[1]} <= ${after}`);
});

test('the clock is in milliseconds and never goes backwards', async () => {
  const start = monotonicMs();
  let last = start;
  for (let i = 0; i < 100_000; i++) {
    const now = monotonicMs();
    assert.ok(now >= last, `${now} after ${last}`);
    last = now;
  }
  const beforeSleep = monotonicMs();
  await new Promise((resolve) => setTimeout(resolve, 50));
  const slept = monotonicMs() - beforeSleep;
  // setTimeout never fires early by more than its 1 ms rounding; an upper bound would be a timing claim.
  assert.ok(slept >= 49, `50 ms sleep measured as ${slept} ms`);
});

test.run();
