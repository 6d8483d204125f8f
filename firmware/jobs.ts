// The bodies of the scheduled jobs. Each returns a one-line result for the log and the status
// page, or throws what an operator must look at (the scheduler logs and counts it).
//
// The engine needs no ticket reclaim sweep from here: each worker already sweeps the tickets of
// ended sessions on its own timer (host/kbtp/server/tickets.ts, LateReclaims). The durable
// tier's jobs (scrub, checkpoint) are in tier-jobs.ts.
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { auditPool, type AuditReport } from '../host/engine/audit.ts';
import { CheckFailedError } from '../host/errors.ts';
import type { Engine } from '../host/engine/engine.ts';
import type { StatsSnapshot } from '../host/kbtp/server/stats.ts';
import { poolOccupancy } from './pool-occupancy.ts';
import { totalRequests } from './traffic-history.ts';

/** How long the audit waits before looking again at blocks that seemed lost (allocations in flight). */
const RECHECK_MS = 250;

function lostAndDoubled(report: AuditReport): { lost: Set<number>; doubled: Set<number>; problems: Set<string> } {
  return { lost: new Set(report.lost), doubled: new Set(report.doubled.map((entry) => entry.block)), problems: new Set(report.problems) };
}

/**
 * The pool audit: every block exactly once in the table or on a ring. It reads the shared memory
 * while the workers serve, so a block between its allocation and its binding looks lost for a
 * moment; only what is wrong in two audits a moment apart is reported.
 */
export async function poolAuditJob(engine: Engine): Promise<string> {
  const first = auditPool(engine);
  if (first.ok) return `clean: ${first.bound} blocks bound, ${first.inRings} free`;
  await new Promise((resolve) => setTimeout(resolve, RECHECK_MS));
  const second = auditPool(engine);
  if (second.ok) return `clean on a second look (blocks were in flight): ${second.bound} bound, ${second.inRings} free`;
  const before = lostAndDoubled(first);
  const now = lostAndDoubled(second);
  const lost = [...now.lost].filter((block) => before.lost.has(block));
  const doubled = [...now.doubled].filter((block) => before.doubled.has(block));
  const problems = [...now.problems].filter((problem) => before.problems.has(problem));
  if (lost.length === 0 && doubled.length === 0 && problems.length === 0) {
    return `clean on a second look (blocks were in flight): ${second.bound} bound, ${second.inRings} free`;
  }
  const parts = [
    `${lost.length} lost${lost.length > 0 ? ` (blocks ${lost.slice(0, 5).join(', ')}${lost.length > 5 ? ', ...' : ''})` : ''}`,
    `${doubled.length} doubled${doubled.length > 0 ? ` (blocks ${doubled.slice(0, 5).join(', ')})` : ''}`,
  ];
  if (problems.length > 0) parts.push(`${problems.length} other problems (${problems.slice(0, 3).join('; ')})`);
  throw new CheckFailedError(`pool audit: ${parts.join(', ')}`);
}

export interface SnapshotSources {
  stats(): Promise<StatsSnapshot>;
  engine(): Engine | undefined;
  dataDir: string | null;
}

/**
 * The statistics snapshot: one log line of the node's counters, and with a data directory the
 * full snapshot in stats/latest.json (replaced atomically), for whoever collects it after a crash.
 */
export async function statsSnapshotJob(sources: SnapshotSources): Promise<string> {
  const stats = await sources.stats();
  const engine = sources.engine();
  const pool = engine === undefined ? undefined : poolOccupancy(engine);
  const line =
    `sessions ${stats.sessionsOpen} open / ${stats.sessionsTotal} total / ${stats.sessionsRefused} refused; ` +
    `requests ${totalRequests(stats)}; data ${(stats.dataBytes / 2 ** 20).toFixed(1)} MiB; ` +
    (pool === undefined ? 'pool not started' : `pool ${pool.free}/${pool.blockCount} blocks free`);
  if (sources.dataDir !== null) {
    const directory = join(sources.dataDir, 'stats');
    await mkdir(directory, { recursive: true });
    const path = join(directory, 'latest.json');
    const temporary = `${path}.tmp`;
    await writeFile(temporary, `${JSON.stringify({ time: new Date().toISOString(), stats, pool }, null, 2)}\n`);
    await rename(temporary, path);
  }
  return line;
}
