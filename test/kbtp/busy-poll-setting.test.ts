// The target's busy poll as a configuration setting (`busyPollUs`, `kbtp target --busy-poll-us`):
// validated like every other key, and applied by the workers, whose CPU shows it (a worker that
// polls keeps running after each answer; one that does not sleeps).
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

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

type Rig = Awaited<ReturnType<typeof startRig>>;
type Session = Awaited<ReturnType<Rig['session']>>;

/** A one-worker target with `busyPollUs`, a session, and block 1 stored (4 KiB of 7s): `body`'s to drive. */
async function withStoredBlock<T>(busyPollUs: number, body: (rig: Rig, session: Session, handle: bigint) => Promise<T>): Promise<T> {
  const rig = await startRig(iwarp({ workers: 1, busyPollUs }));
  try {
    const session = await rig.session('alpha');
    await session.allocStore(1n, new Uint8Array(4096).fill(7), { seal: true });
    return await body(rig, session, 1n);
  } finally {
    await rig.stop();
  }
}

/**
 * Wall-clock milliseconds the worker spent polling, per LOAD, over `requests` LOADs 30 ms apart.
 * Wall time, not CPU time: a spin ends by the clock, so the figure does not depend on how much of
 * a CPU a loaded machine gives the worker (CPU time did: 0.84 ms instead of ~10 at load 10).
 */
async function polledMsPerIdleRequest(busyPollUs: number, requests: number): Promise<number> {
  return withStoredBlock(busyPollUs, async (rig, session, handle) => {
    await pause(50);
    // A spin whose first look finds the next message already there (as during the session's
    // set-up) skips the spins of the next turns (busy-poll.ts, MOST_SKIPPED): idle LOADs until one
    // is followed by a whole spin, so that none of the measured ones is skipped.
    for (let warm = 0; busyPollUs > 0 && warm < 40; warm++) {
      const polled = (await rig.target.stats()).busyPollMs ?? 0;
      await session.load(handle);
      await pause(30);
      if (((await rig.target.stats()).busyPollMs ?? 0) - polled >= busyPollUs / 1000 - 0.5) break;
    }
    const before = (await rig.target.stats()).busyPollMs ?? Number.NaN;
    for (let i = 0; i < requests; i++) {
      await session.load(handle);
      await pause(30);
    }
    const after = (await rig.target.stats()).busyPollMs ?? Number.NaN;
    return (after - before) / requests;
  });
}

test('the workers apply the configured budget: a 10 ms poll keeps the worker polling after each answer', async () => {
  assert.is(await polledMsPerIdleRequest(0, 8), 0, 'off: the worker never polls');
  const polling = await polledMsPerIdleRequest(10_000, 8);
  // The poll runs until 10 ms after the request's read and its answer's write, then the worker
  // sleeps until the next request 30 ms later: about 10 ms per request, never less (more only when
  // the machine keeps the worker from running when the budget runs out).
  assert.ok(polling >= 9.5 && polling < 1000, `wall-clock polling per request with a 10 ms budget: ${polling.toFixed(2)} ms`);
});

/** Reads the workers' busy poll made itself over `requests` LOADs, each sent as soon as the last was answered. */
async function pollReadsBackToBack(busyPollUs: number, requests: number): Promise<number> {
  return withStoredBlock(busyPollUs, async (rig, session, handle) => {
    const before = (await rig.target.stats()).busyPollReads ?? 0;
    for (let i = 0; i < requests; i++) assert.is((await session.load(handle)).data[4095], 7);
    const after = (await rig.target.stats()).busyPollReads ?? Number.NaN;
    return after - before;
  });
}

test('a worker reads the next request itself when its poll finds it (stats: busyPollReads)', async () => {
  assert.is(await pollReadsBackToBack(0, 200), 0, 'off: libuv reads every request');
  // The next LOAD comes well within 10 ms of each answer, while the worker polls inside the read
  // callback of the request it answered: the poll reads it, bar one in DIRECT_READS_IN_ROW + 1.
  const reads = await pollReadsBackToBack(10_000, 200);
  console.log(`  ${reads} of 200 back-to-back LOADs read by the worker's poll`);
  assert.ok(reads >= 100 && reads <= 200, `${reads} of 200 requests read by the poll`);
});

test.run();
