// Crash torture in the test suite: 20 SIGKILLs of a real target process at random moments under
// four concurrent sessions (test/tier/torture.ts; `make soak-tier` runs more rounds).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTorture } from './torture.ts';

test('20 rounds of SIGKILL: acknowledged seals and frees survive, Generations never go back, the pool audit is clean', async () => {
  const report = await runTorture({ rounds: 20, seed: 20261130 });
  assert.is(report.rounds, 20);
  assert.ok(report.acknowledged > 0, 'requests were acknowledged between the kills');
  assert.ok(
    report.recoveries.some((line) => /recovered [1-9]\d* sealed blocks/.test(line)),
    'restarts recovered sealed blocks',
  );
});

test.run();
