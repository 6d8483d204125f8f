// bench/tier keeps the same bytes in flight at every block size (docs/TIER.md, session 9): the group
// commit's batch is bounded by bytes in flight, so a fixed request count would starve small blocks.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { BYTES_IN_FLIGHT, inFlightPerSession, SESSIONS } from '../../bench/tier-store-run.ts';

test('the issue-12 rows keep 64 MiB in flight: 16 requests a session at 256 KiB, 4 at 1 MiB', () => {
  assert.is(BYTES_IN_FLIGHT, 64 * 2 ** 20);
  assert.is(inFlightPerSession(262144), 16);
  assert.is(inFlightPerSession(1048576), 4);
  for (const size of [262144, 1048576]) assert.is(inFlightPerSession(size) * SESSIONS * size, BYTES_IN_FLIGHT);
});

test('within a session credits: never more than 16, never fewer than 1', () => {
  assert.is(inFlightPerSession(16384), 16);
  assert.is(inFlightPerSession(4096), 16);
  assert.is(inFlightPerSession(8 * 2 ** 20), 1);
  assert.is(inFlightPerSession(2 ** 30), 1);
});

test.run();
