// bench/profile/load-loop.ts, what callgrind-load.ts counts: every mode (a bare chain of loadInto or
// storeFrom calls, or kbtp bench's workload over one or more sessions, 1 or more in flight) runs its requests to the end
// without an error, and a wrong option is refused.
import { spawnSync } from 'node:child_process';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

function loop(...args: string[]): { status: number | null; stderr: string } {
  const run = spawnSync(process.execPath, ['--import', 'tsx', 'bench/profile/load-loop.ts', '--warm', '40', '--loads', '30', '--size', '4096', ...args], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { status: run.status, stderr: run.stderr };
}

for (const mode of [[], ['--bench'], ['--bench', '--sessions', '3'], ['--bench', '--sessions', '2', '--in-flight', '8']]) {
  for (const op of ['load', 'store']) {
    test(`--op ${op} ${mode.join(' ')}: the requests complete`, () => {
      const { status, stderr } = loop('--op', op, ...mode);
      assert.is(status, 0, stderr);
    });
  }
}

test('an unknown --op, or --sessions or --in-flight without --bench, is a usage error', () => {
  const wrongOp = loop('--op', 'free');
  assert.is(wrongOp.status, 2);
  assert.match(wrongOp.stderr, /--op must be load or store/);
  const sessions = loop('--sessions', '2');
  assert.is(sessions.status, 2);
  assert.match(sessions.stderr, /--sessions and --in-flight need --bench/);
  const inFlight = loop('--in-flight', '8');
  assert.is(inFlight.status, 2);
  assert.match(inFlight.stderr, /--sessions and --in-flight need --bench/);
});

test.run();
