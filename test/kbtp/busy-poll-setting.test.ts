// The target's busy poll as a configuration setting (`busyPollUs`, `kbtp target --busy-poll-us`):
// validated like every other key, and applied by the workers, whose CPU shows it (a worker that
// polls keeps running after each answer; one that does not sleeps).
import { readFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ConfigError, describeSettings } from '../../host/kbtp/server/target-config.ts';
import { startRig, testSettings } from '../support/rig.ts';

const iwarp = (overrides: Record<string, unknown>) => testSettings({ transport: 'iwarp', ...overrides });

test('busyPollUs: absent leaves the environment variable in charge; a number is kept and shown', () => {
  assert.is(iwarp({}).busyPollUs, undefined);
  assert.match(describeSettings(iwarp({})), /"busyPollUs": "from \$KBTP_BUSY_POLL_US/);
  const set = iwarp({ busyPollUs: 200 });
  assert.is(set.busyPollUs, 200);
  assert.match(describeSettings(set), /"busyPollUs": 200/);
  assert.is(iwarp({ busyPollUs: 0 }).busyPollUs, 0);
});

test('busyPollUs: out of range, not an integer, or with the roce transport is a configuration error', () => {
  for (const bad of [-1, 10_001, 2.5, '50']) {
    assert.throws(
      () => iwarp({ busyPollUs: bad }),
      (error: unknown) => error instanceof ConfigError && /busyPollUs/.test(error.message),
      `${bad}`,
    );
  }
  assert.throws(
    () => testSettings({ transport: 'roce', busyPollUs: 50 }),
    (error: unknown) => error instanceof ConfigError && /iwarp transport only/.test(error.message),
  );
  assert.is(testSettings({ transport: 'roce', busyPollUs: 0 }).busyPollUs, 0, 'off is fine with roce');
});

/** CPU time of the target's worker threads in this process, nanoseconds (/proc/self/task/TID/schedstat). */
function workerCpuNs(threadIds: readonly number[]): number {
  let total = 0;
  for (const tid of threadIds) total += Number(readFileSync(`/proc/self/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
  return total;
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Worker CPU over `requests` LOADs 30 ms apart, after a warm-up (the first requests compile code). */
async function workerCpuPerIdleRequestMs(busyPollUs: number, requests: number): Promise<number> {
  const rig = await startRig(iwarp({ workers: 1, busyPollUs }));
  try {
    const session = await rig.session('alpha');
    const handle = 1n;
    await session.allocStore(handle, new Uint8Array(4096).fill(7), { seal: true });
    for (let i = 0; i < 50; i++) await session.load(handle);
    await pause(50);
    const before = workerCpuNs(rig.target.threadIds);
    for (let i = 0; i < requests; i++) {
      await session.load(handle);
      await pause(30);
    }
    return (workerCpuNs(rig.target.threadIds) - before) / 1e6 / requests;
  } finally {
    await rig.stop();
  }
}

test('the workers apply the configured budget: a 10 ms poll keeps the worker running after each answer', async () => {
  if (process.platform !== 'linux') return;
  const off = await workerCpuPerIdleRequestMs(0, 8);
  const polling = await workerCpuPerIdleRequestMs(10_000, 8);
  // Off, a LOAD of 4 KiB costs the worker well under a millisecond; polling, the worker spins for
  // up to 10 ms after each read and write (less only if the machine gives it less of a CPU).
  assert.ok(polling > 3, `worker CPU per request with a 10 ms poll: ${polling.toFixed(2)} ms`);
  assert.ok(polling > 4 * off, `polling ${polling.toFixed(2)} ms vs off ${off.toFixed(2)} ms per request`);
});

test.run();
