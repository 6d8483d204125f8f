// The RC timers' Deadline: re-arming moves the deadline (later or earlier) without firing at the
// old one, disarming stops it, and it fires once per expiry. Only lower bounds of time are
// asserted (timers may run late on a loaded machine, never early).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { clockBatch, Deadline } from '../../host/rnic/rc/deadline.ts';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function until(condition: () => boolean, limitMs = 5_000): Promise<void> {
  const end = Date.now() + limitMs;
  while (!condition() && Date.now() < end) await sleep(5);
}

test('re-armed before it expires, a Deadline fires once, no earlier than the new deadline', async () => {
  const fired: number[] = [];
  const deadline = new Deadline(() => fired.push(performance.now()));
  const start = performance.now();
  deadline.arm(40);
  await sleep(20);
  const rearmed = performance.now();
  deadline.arm(40);
  assert.ok(deadline.armed);
  await until(() => fired.length > 0);
  await sleep(60);
  assert.is(fired.length, 1, 'fired once');
  assert.ok(fired[0]! - rearmed >= 39, `fired ${(fired[0]! - rearmed).toFixed(1)} ms after the re-arm (deadline 40)`);
  assert.ok(fired[0]! - start >= 59);
  assert.not.ok(deadline.armed);
});

test('a Deadline moved earlier fires at the earlier one; disarmed, it does not fire; stop drops it', async () => {
  let fired = 0;
  const deadline = new Deadline(() => fired++);
  deadline.arm(60_000);
  deadline.arm(5);
  await until(() => fired > 0);
  assert.is(fired, 1, 'the minute-long deadline moved to 5 ms');
  deadline.arm(10);
  deadline.disarm();
  assert.not.ok(deadline.armed);
  await sleep(50);
  assert.is(fired, 1, 'disarmed: nothing');
  deadline.arm(10);
  deadline.stop();
  await sleep(50);
  assert.is(fired, 1, 'stopped: nothing');
  deadline.arm(5);
  await until(() => fired > 1);
  assert.is(fired, 2, 'armed again after stop');
});

test('inside a clock batch deadlines share clock readings (one per 16 arms) and still fire at their delay', async () => {
  const realNow = performance.now.bind(performance);
  let reads = 0;
  performance.now = () => {
    reads++;
    return realNow();
  };
  const fired: number[] = [];
  const deadlines = Array.from({ length: 32 }, () => new Deadline(() => fired.push(realNow())));
  let armedAt = 0;
  try {
    for (const deadline of deadlines) deadline.arm(60_000);
    assert.is(reads, 32, 'outside a batch: a reading per arm');
    reads = 0;
    clockBatch.begin();
    armedAt = realNow();
    for (const deadline of deadlines) deadline.arm(30);
    clockBatch.end();
    assert.is(reads, 2, 'inside a batch: one reading per 16 arms');
    reads = 0;
    deadlines[0]!.arm(30);
    assert.is(reads, 1, 'after the batch: a reading per arm again');
  } finally {
    performance.now = realNow;
  }
  await until(() => fired.length === 32);
  assert.is(fired.length, 32);
  for (const at of fired) assert.ok(at - armedAt >= 29, `fired ${(at - armedAt).toFixed(1)} ms after the batch armed it (deadline 30)`);
});

test.run();
