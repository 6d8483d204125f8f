// Issue 16's goals per make compare row set against the Node floor of the same row (node-floor.ts,
// measured in the same run; session 14 of 2026-12-02): a goal that asks more than the floor
// reached lies above what a Node program without a native addon does on this machine, one below it
// is kbtp's own to reach. kbtp is a Node program too, and in some rows it beats the floor (it
// widens its sockets' first receive window, reads several FPDUs per read): what Node reached in a
// row is the better of the two, and a goal kbtp met is never called beyond Node.
import { formatSize } from '../../host/bench/report.ts';
import { formatTable } from '../../host/report/table.ts';
import type { CompareRow } from './compare.ts';

export type GoalName = 'GB/s >= Redis' | 'p50 <= Redis' | 'GB/s >= 1.5x Redis' | 'p99 <= 2x p50';

/** One goal in one row, in compare.json's `goals_vs_node_floor`. */
export interface FloorGoal {
  goal: GoalName;
  op: CompareRow['op'];
  size: number;
  sessions: number;
  in_flight: number;
  /** The figure the goal reads (Gbit/s, p50 in us, or p99 / p50) for kbtp, Redis and the Node floor. */
  kbtp: number;
  redis: number;
  node_floor: number;
  /** The better of the Node floor's and kbtp's figure: what a Node program reached in this run. */
  node_best: number;
  /** What kbtp must reach: at least this for GB/s, at most this for latency. */
  needed: number;
  met: boolean;
  /** The goal asks more than node_best: no Node program reached it in this run (neither the floor nor kbtp). */
  above_node: boolean;
}

const r3 = (value: number): number => +value.toFixed(3);
const ratio = (p99: number, p50: number): number => (p50 > 0 ? r3(p99 / p50) : Number.NaN);

/** The goals of one table of rows: at 1 in flight GB/s and p50 against Redis, pipelined 1.5x Redis's GB/s; p99 <= 2x p50 at both. */
export function floorGoals(rows: readonly CompareRow[], inFlight: number): FloorGoal[] {
  const goals: FloorGoal[] = [];
  for (const row of rows) {
    const where = { op: row.op, size: row.size, sessions: row.sessions, in_flight: inFlight };
    /** A goal kbtp reaches at `needed` or above (`higher`, GB/s) or at `needed` or below (latency). */
    const judged = (goal: GoalName, higher: boolean, kbtp: number, redis: number, floor: number, needed: number): FloorGoal => {
      const reaches = (value: number): boolean => (higher ? value >= needed : value <= needed);
      // NaN (a ratio over a p50 of 0) never counts as the better figure.
      const best = Number.isNaN(floor) ? kbtp : Number.isNaN(kbtp) ? floor : higher ? Math.max(kbtp, floor) : Math.min(kbtp, floor);
      return { goal, ...where, kbtp, redis, node_floor: floor, node_best: best, needed: r3(needed), met: reaches(kbtp), above_node: !reaches(best) };
    };
    const atLeast = (goal: GoalName, kbtp: number, redis: number, floor: number, needed: number): FloorGoal => judged(goal, true, kbtp, redis, floor, needed);
    const atMost = (goal: GoalName, kbtp: number, redis: number, floor: number, needed: number): FloorGoal => judged(goal, false, kbtp, redis, floor, needed);
    if (inFlight > 1) {
      goals.push(atLeast('GB/s >= 1.5x Redis', row.kbtp_gbps, row.redis_gbps, row.node_floor_gbps, 1.5 * row.redis_gbps));
    } else {
      goals.push(atLeast('GB/s >= Redis', row.kbtp_gbps, row.redis_gbps, row.node_floor_gbps, row.redis_gbps));
      goals.push(atMost('p50 <= Redis', row.kbtp_p50_us, row.redis_p50_us, row.node_floor_p50_us, row.redis_p50_us));
    }
    goals.push(
      atMost(
        'p99 <= 2x p50',
        ratio(row.kbtp_p99_us, row.kbtp_p50_us),
        ratio(row.redis_p99_us, row.redis_p50_us),
        ratio(row.node_floor_p99_us, row.node_floor_p50_us),
        2,
      ),
    );
  }
  return goals;
}

/**
 * Issue 16's bar per row, from the same goals: at 1 in flight kbtp at least matches Redis in GB/s
 * and p50; pipelined it is 1.5x Redis's GB/s (the p99 goal is judged on its own).
 */
export function rowMet(row: CompareRow, inFlight: number): boolean {
  return floorGoals([row], inFlight).every((goal) => goal.goal === 'p99 <= 2x p50' || goal.met);
}

const label = (goal: FloorGoal): string => `${goal.op.toUpperCase()} ${formatSize(goal.size)} x${goal.sessions}`;

/** The table make compare prints: per goal and row kbtp, Redis, what the goal needs, the Node floor, and which side of what Node reached the goal lies. */
export function formatFloorGoals(title: string, goals: readonly FloorGoal[]): string {
  return formatTable({
    title,
    columns: ['goal', 'row', 'in flight', 'kbtp', 'Redis', 'needed', 'Node floor', 'Node best', 'kbtp met', 'goal vs Node (floor or kbtp)'],
    rows: goals.map((goal) => [
      goal.goal,
      label(goal),
      goal.in_flight,
      goal.kbtp,
      goal.redis,
      goal.needed,
      goal.node_floor,
      goal.node_best,
      goal.met ? 'yes' : 'no',
      goal.above_node ? 'above: beyond Node' : "below: kbtp's to reach",
    ]),
  });
}

/** One line per goal: met in how many rows, above what Node reached in which, and what kbtp misses below it. */
export function floorGoalLines(goals: readonly FloorGoal[]): string[] {
  const lines: string[] = [];
  const kinds = [...new Set(goals.map((goal) => `${goal.goal}@${goal.in_flight}`))];
  for (const kind of kinds) {
    const mine = goals.filter((goal) => `${goal.goal}@${goal.in_flight}` === kind);
    const first = mine[0]!;
    const above = mine.filter((goal) => goal.above_node);
    const below = mine.filter((goal) => !goal.above_node);
    const missedBelow = below.filter((goal) => !goal.met);
    const list = (some: readonly FloorGoal[]): string => (some.length === 0 ? 'none' : some.map(label).join(', '));
    lines.push(
      `goal ${first.goal} at ${first.in_flight} in flight: kbtp met ${mine.filter((goal) => goal.met).length} of ${mine.length}; ` +
        `above what Node reached (floor or kbtp: beyond Node) in ${above.length}: ${list(above)}; ` +
        `below it in ${below.length}, of which kbtp misses ${missedBelow.length}: ${list(missedBelow)}`,
    );
  }
  return lines;
}
