// make compare's line of CPU per request on the four sides of the LOAD 16 KiB x16 row
// (bench/compare/row-cpu.ts): the figures of that row, and nothing where one is missing.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { CompareRow } from '../../bench/compare/compare.ts';
import { rowCpuLine } from '../../bench/compare/row-cpu.ts';

const row = (op: 'load' | 'store', size: number, sessions: number, clientUs: number): CompareRow => ({
  op,
  size,
  sessions,
  kbtp_gbps: 1,
  kbtp_p50_us: 1,
  kbtp_p99_us: 1,
  node_floor_gbps: 1,
  node_floor_p50_us: 1,
  node_floor_p99_us: 1,
  redis_gbps: 1,
  redis_p50_us: 1,
  redis_p99_us: 1,
  redis_benchmark_p50_us: 1,
  redis_benchmark_p99_us: 1,
  kbtp_cpu: { client_us: clientUs, target_us: 19.5, other_us: 0.2, client_busy: 0.97, target_busy: 0.96 },
  redis_server_cpu: { us: 9.5, busy: 0.99 },
  redis_client_cpu: { us: 8.1, busy: 0.86 },
});

test('the LOAD 16 KiB x16 row is the one reported, all four sides with their busy shares', () => {
  const line = rowCpuLine([row('store', 16384, 16, 30), row('load', 16384, 1, 40), row('load', 16384, 16, 21.5), row('load', 262144, 16, 70)]);
  assert.is(
    line,
    'CPU per request in the LOAD 16 KiB x16 row itself (busy share): kbtp client 21.5 us (0.97), target 19.5 us (0.96); ' +
      'redis-latency 8.1 us (0.86), redis-server 9.5 us (0.99)',
  );
});

test('no line without the row or without one of its figures', () => {
  assert.is(rowCpuLine([row('load', 16384, 1, 21.5)]), undefined);
  const { redis_client_cpu: _dropped, ...withoutClient } = row('load', 16384, 16, 21.5);
  assert.is(rowCpuLine([withoutClient]), undefined);
  const unmeasured = row('load', 16384, 16, 21.5);
  unmeasured.kbtp_cpu = { client_us: 21.5, target_us: null, other_us: 0, client_busy: 0.9, target_busy: null };
  assert.is(rowCpuLine([unmeasured]), undefined);
});

test.run();
