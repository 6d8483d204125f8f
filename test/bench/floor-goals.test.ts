// make compare's goals against the Node floor (bench/compare/floor-goals.ts): which side of the
// floor each goal lies on, whether kbtp met it, and the summary lines, from made-up rows.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { CompareRow } from '../../bench/compare/compare.ts';
import { floorGoalLines, floorGoals, formatFloorGoals, rowMet } from '../../bench/compare/floor-goals.ts';

const row = (figures: Partial<CompareRow>): CompareRow => ({
  op: 'load',
  size: 16384,
  sessions: 1,
  kbtp_gbps: 5,
  kbtp_p50_us: 40,
  kbtp_p99_us: 100,
  node_floor_gbps: 6,
  node_floor_p50_us: 38,
  node_floor_p99_us: 70,
  redis_gbps: 7,
  redis_p50_us: 35,
  redis_p99_us: 60,
  redis_benchmark_p50_us: 30,
  redis_benchmark_p99_us: 50,
  ...figures,
});

test('at 1 in flight: GB/s and p50 against Redis, and p99 / p50, each set against the floor', () => {
  const goals = floorGoals(
    [row({}), row({ op: 'store', size: 1048576, sessions: 16, kbtp_gbps: 20, kbtp_p50_us: 30, node_floor_gbps: 25, node_floor_p50_us: 20 })],
    1,
  );
  assert.equal(
    goals.map((goal) => [goal.goal, goal.op, goal.kbtp, goal.redis, goal.needed, goal.node_floor, goal.node_best, goal.met, goal.above_node]),
    [
      // Redis moves 7 Gbit/s where the floor moves 6: beyond Node; its p50 of 35 us is below the floor's 38.
      ['GB/s >= Redis', 'load', 5, 7, 7, 6, 6, false, true],
      ['p50 <= Redis', 'load', 40, 35, 35, 38, 38, false, true],
      ['p99 <= 2x p50', 'load', 2.5, 1.714, 2, 1.842, 1.842, false, false],
      // The floor outruns Redis in both: kbtp's own to reach; it meets GB/s (20 >= 7) and p50 (30 <= 35).
      ['GB/s >= Redis', 'store', 20, 7, 7, 25, 25, true, false],
      ['p50 <= Redis', 'store', 30, 35, 35, 20, 20, true, false],
      // Neither kbtp's 3.33 nor the floor's 3.5 is within 2: beyond what Node reached.
      ['p99 <= 2x p50', 'store', 3.333, 1.714, 2, 3.5, 3.333, false, true],
    ],
  );
  assert.ok(goals.every((goal) => goal.in_flight === 1));
});

test('pipelined: 1.5x Redis in GB/s, the floor against 1.5x', () => {
  const goals = floorGoals([row({ kbtp_gbps: 10, node_floor_gbps: 10, redis_gbps: 6 }), row({ kbtp_gbps: 9.5, node_floor_gbps: 9, redis_gbps: 6 })], 8);
  assert.equal(
    goals.filter((goal) => goal.goal === 'GB/s >= 1.5x Redis').map((goal) => [goal.needed, goal.met, goal.above_node]),
    [
      [9, true, false],
      [9, true, false],
    ],
  );
  const beyond = floorGoals([row({ kbtp_gbps: 8, node_floor_gbps: 8.9, redis_gbps: 6 })], 8)[0]!;
  assert.equal([beyond.met, beyond.above_node], [false, true]);
  // kbtp above a floor that falls short: what kbtp reached is what Node reached, so the goal it met is not beyond Node.
  const kbtpBetter = floorGoals([row({ kbtp_gbps: 9.5, node_floor_gbps: 7, redis_gbps: 6 })], 8)[0]!;
  assert.equal([kbtpBetter.node_best, kbtpBetter.met, kbtpBetter.above_node], [9.5, true, false]);
  assert.ok(goals.every((goal) => goal.in_flight === 8 && goal.goal !== 'p50 <= Redis' && goal.goal !== 'GB/s >= Redis'));
});

test('the table and the lines name each row, its side of the floor and what kbtp misses below it', () => {
  const goals = floorGoals([row({}), row({ size: 262144, sessions: 16, node_floor_gbps: 9, node_floor_p50_us: 30, node_floor_p99_us: 50 })], 1);
  const table = formatFloorGoals('title', goals);
  assert.match(table, /GB\/s >= Redis\s+LOAD 16 KiB x1 .*no\s+above: beyond Node/);
  assert.match(table, /GB\/s >= Redis\s+LOAD 256 KiB x16 .*no\s+below: kbtp's to reach/);
  assert.equal(floorGoalLines(goals), [
    'goal GB/s >= Redis at 1 in flight: kbtp met 0 of 2; above what Node reached (floor or kbtp: beyond Node) in 1: LOAD 16 KiB x1; below it in 1, of which kbtp misses 1: LOAD 256 KiB x16',
    'goal p50 <= Redis at 1 in flight: kbtp met 0 of 2; above what Node reached (floor or kbtp: beyond Node) in 1: LOAD 16 KiB x1; below it in 1, of which kbtp misses 1: LOAD 256 KiB x16',
    'goal p99 <= 2x p50 at 1 in flight: kbtp met 0 of 2; above what Node reached (floor or kbtp: beyond Node) in 0: none; below it in 2, of which kbtp misses 2: LOAD 16 KiB x1, LOAD 256 KiB x16',
  ]);
});

test.run();

test("a row's bar (make compare's met column): GB/s and p50 at 1 in flight, 1.5x GB/s pipelined, p99 aside", () => {
  // At 1 in flight both must hold: GB/s alone or p50 alone is not enough; a p99 over 2x p50 does not count.
  assert.ok(rowMet(row({ kbtp_gbps: 7, kbtp_p50_us: 35, kbtp_p99_us: 500 }), 1));
  assert.not.ok(rowMet(row({ kbtp_gbps: 7, kbtp_p50_us: 36 }), 1));
  assert.not.ok(rowMet(row({ kbtp_gbps: 6.9, kbtp_p50_us: 20 }), 1));
  // Pipelined: 1.5x Redis's GB/s, whatever the p50.
  assert.ok(rowMet(row({ kbtp_gbps: 10.5, kbtp_p50_us: 500 }), 8));
  assert.not.ok(rowMet(row({ kbtp_gbps: 10.4 }), 8));
});
