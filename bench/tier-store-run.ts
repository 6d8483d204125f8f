// One row of bench/tier.ts: a target (in this process, durable when given a data directory) and
// SESSIONS client sessions in a process of their own (bench/tier-load.ts) storing sealed blocks,
// measured after warm-up passes (warmupPasses), with the CPU time of both sides per STORE. Also used alone by
// bench/tier-row.ts, which lists the target's CPU by thread.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { resolveTargetSettings, type TargetSettings } from '../host/kbtp/server/target-config.ts';
import { startTarget } from '../host/kbtp/server/target.ts';
import type { DurableStats } from '../host/kbtp/server/target.ts';
import type { StatsSnapshot } from '../host/kbtp/server/stats.ts';

export const SESSIONS = 16;
/** Credits of each session: the most requests it may have in flight. */
export const CREDITS = 16;

export function settingsFor(size: number, blocks: number, dataDir: string | undefined): TargetSettings {
  return resolveTargetSettings({
    listen: '127.0.0.1:0',
    workers: 2,
    pool: { blockSize: size, blockCount: blocks, handleCount: blocks * 4, maxInline: 0 },
    session: { credits: CREDITS, maxSessions: 64 },
    ...(dataDir === undefined ? {} : { durable: { dataDir, capacity: 4 * blocks * size + 256 * 2 ** 20 } }),
  });
}

/**
 * Octets the 16 sessions keep in flight together, the same at every block size: 64 MiB, the target's
 * default staging capacity for sealing requests (docs/TIER.md). A group commit's batch, and so the
 * disk's work per fdatasync, is bounded by the bytes in flight, not by the number of requests: with a
 * fixed 4 requests per session (until session 9) the 256 KiB row had a quarter of the 1 MiB row's
 * bytes in flight, its groups a quarter of the size, and its STOREs waited on the group commit's
 * fixed cost per group four times as often per byte.
 */
export const BYTES_IN_FLIGHT = 64 * 2 ** 20;

/** Requests in flight per session at `size`: BYTES_IN_FLIGHT over the sessions, at least 1, at most a session's credits (4 at 1 MiB, 16 at 256 KiB). */
export function inFlightPerSession(size: number): number {
  return Math.max(1, Math.min(CREDITS, Math.floor(BYTES_IN_FLIGHT / (SESSIONS * size))));
}

/** STOREs (each with its FREE) the warm-up makes at least, before the measured pass. */
export const WARMUP_STORES = 4096;

/**
 * Warm-up passes (each stores and frees every block of the row once) before the measured pass:
 * at least two, and enough for WARMUP_STORES. V8 compiles a function with TurboFan only after it
 * ran often enough, counted in calls, not octets; the tier's per-group functions (the committer,
 * the group's frames) run once per group of a handful of STOREs. After one pass of 1,024 STOREs at
 * 1 MiB the measured pass still compiled 40 functions (~0.4 s of V8's compiler threads) and ran
 * the main thread's commit loop as baseline code; after four it compiled 12 (~0.03 s), and the
 * target's CPU per 1 MiB STORE fell ~20 % in both rows (docs/TIER.md, session 9). A cache node
 * runs for days: the measured pass is meant to see it compiled, as it sees its memory touched.
 */
export function warmupPasses(storesPerPass: number): number {
  return Math.max(2, Math.ceil(WARMUP_STORES / storesPerPass));
}
const loadScript = fileURLToPath(new URL(`./tier-load${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url));

export interface StoreRun {
  gbps: number;
  /** CPU time (user + system) per STORE of the target's process and of the clients' process, microseconds. */
  targetCpuUs: number;
  clientCpuUs: number;
  /** Of targetCpuUs, the target's main thread: where the durable tier's group commit runs (the workers, libuv's and V8's threads are the rest). */
  mainThreadCpuUs: number;
  /**
   * With `threads`: every thread of this process that used CPU during the measured pass, microseconds
   * per STORE (user, system), and its context switches per STORE (voluntary: it slept and was woken,
   * each one a cross-thread hand-off or an I/O wait; involuntary: preempted).
   */
  threads?: Array<{ tid: number; name: string; main: boolean; userUs: number; systemUs: number; voluntary: number; involuntary: number }>;
  /**
   * With `threads`: each worker's share of the measured pass: its sessions (opened since the
   * target started), its STOREs and their mean latency as the worker sees it (request in to
   * COMPLETION out), to tell a busy worker from one whose sessions wait longer.
   */
  workers?: Array<{ sessions: number; stores: number; meanStoreUs: number }>;
  /** STOREs in the measured pass. */
  stores: number;
  /** The measured pass's length, and when its first session was done (the rest of the pass has fewer requests in flight). */
  seconds: number;
  firstSessionSeconds: number;
  /** Warm-up passes before it (each stores and frees every block once). */
  warmupPasses: number;
  /** Requests each session kept in flight (inFlightPerSession unless set). */
  inFlight: number;
  /** The durable tier's figures at the end of the run (group commits, fsyncs, batch sizes); undefined when volatile. */
  durable?: DurableStats | undefined;
  /**
   * With `threads`, when durable: the group commit over the measured pass (the run's `seconds`):
   * groups, their records, and the milliseconds their fdatasyncs were in flight.
   */
  measuredGroups?: { groupCommits: number; records: number; syncMilliseconds: number };
}

interface ThreadTimes {
  name: string;
  user: number;
  system: number;
  voluntary: number;
  involuntary: number;
}

/**
 * CPU times of this process's threads in microseconds (Linux: /proc/self/task/TID/stat, in clock
 * ticks) and their context switches (.../status); empty where there is no /proc.
 */
function threadTimes(): Map<number, ThreadTimes> {
  const times = new Map<number, ThreadTimes>();
  let tids: string[];
  try {
    tids = fs.readdirSync('/proc/self/task');
  } catch {
    return times;
  }
  for (const tid of tids) {
    try {
      const stat = fs.readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const status = fs.readFileSync(`/proc/self/task/${tid}/status`, 'utf8');
      const switches = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? 0);
      times.set(Number(tid), {
        name,
        user: (Number(fields[11]) * 1e6) / CLOCK_TICKS,
        system: (Number(fields[12]) * 1e6) / CLOCK_TICKS,
        voluntary: switches('voluntary_ctxt_switches'),
        involuntary: switches('nonvoluntary_ctxt_switches'),
      });
    } catch {
      // The thread ended meanwhile.
    }
  }
  return times;
}

/** Clock ticks per second of /proc's CPU times (sysconf(_SC_CLK_TCK)); 100 on Linux. */
const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

/** 16 sessions (in a client process of their own, bench/tier-load.ts) store `bytesPerRow` of sealed blocks of `size` octets. */
export async function storeRun(
  size: number,
  bytesPerRow: number,
  dataDir: string | undefined,
  options: { threads?: boolean; measuredPass?: { start(): void; stop(): Promise<void> }; warmupPasses?: number; inFlight?: number } = {},
): Promise<StoreRun> {
  const blocks = Math.max(SESSIONS, Math.ceil(bytesPerRow / size));
  const target = await startTarget(settingsFor(size, blocks, dataDir), { log: () => undefined });
  try {
    const perSession = Math.floor(blocks / SESSIONS);
    const passes = options.warmupPasses ?? warmupPasses(perSession * SESSIONS);
    const inFlight = options.inFlight ?? inFlightPerSession(size);
    const loader = loadScript.endsWith('.ts') ? ['--import', 'tsx', loadScript] : [loadScript];
    const child = spawn(
      process.execPath,
      [...loader, `127.0.0.1:${target.port}`, String(size), String(perSession), String(SESSIONS), String(inFlight), String(passes)],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    let out = '';
    let cpuBefore: NodeJS.CpuUsage | undefined;
    let threadsBefore = new Map<number, ThreadTimes>();
    let workersBefore: Promise<StatsSnapshot[]> | undefined;
    let durableBefore: Promise<StatsSnapshot> | undefined;
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      // The warm-up is over: the measured pass starts.
      if (cpuBefore === undefined && out.includes('"phase":"measure"')) {
        options.measuredPass?.start();
        cpuBefore = process.cpuUsage();
        threadsBefore = threadTimes();
        if (options.threads === true) {
          workersBefore = target.workerStats();
          durableBefore = target.stats();
        }
      }
    });
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    const cpu = process.cpuUsage(cpuBefore);
    const threadsAfter = threadTimes();
    await options.measuredPass?.stop();
    if (code !== 0 || cpuBefore === undefined) throw new Error(`bench/tier-load exited with ${code}: ${out}`);
    const { seconds, firstSessionSeconds, bytes, cpuMicros } = JSON.parse(out.trim().split('\n').at(-1) ?? '{}') as {
      seconds: number;
      firstSessionSeconds: number;
      bytes: number;
      cpuMicros: number;
    };
    const stores = perSession * SESSIONS;
    const threads: NonNullable<StoreRun['threads']> = [];
    for (const [tid, after] of threadsAfter) {
      const before = threadsBefore.get(tid) ?? { user: 0, system: 0, voluntary: 0, involuntary: 0 };
      const [userUs, systemUs] = [(after.user - before.user) / stores, (after.system - before.system) / stores];
      const [voluntary, involuntary] = [(after.voluntary - before.voluntary) / stores, (after.involuntary - before.involuntary) / stores];
      if (userUs + systemUs > 0 || voluntary > 0) threads.push({ tid, name: after.name, main: tid === process.pid, userUs, systemUs, voluntary, involuntary });
    }
    threads.sort((a, b) => b.userUs + b.systemUs - (a.userUs + a.systemUs));
    const main = threads.find((thread) => thread.main);
    const workers = workersBefore === undefined ? undefined : workerShares(await workersBefore, await target.workerStats());
    const durable = (await target.stats()).durable;
    const before = (await durableBefore)?.durable;
    const measuredGroups =
      durable === undefined || before === undefined
        ? undefined
        : {
            groupCommits: durable.groupCommits - before.groupCommits,
            records: durable.batchRecords - before.batchRecords,
            syncMilliseconds: durable.syncMilliseconds - before.syncMilliseconds,
          };
    return {
      gbps: (bytes * 8) / seconds / 1e9,
      stores,
      seconds,
      firstSessionSeconds,
      warmupPasses: passes,
      inFlight,
      targetCpuUs: (cpu.user + cpu.system) / stores,
      clientCpuUs: cpuMicros / stores,
      mainThreadCpuUs: threadsAfter.size === 0 ? Number.NaN : (main?.userUs ?? 0) + (main?.systemUs ?? 0),
      ...(options.threads === true ? { threads } : {}),
      ...(workers === undefined ? {} : { workers }),
      ...(measuredGroups === undefined ? {} : { measuredGroups }),
      durable,
    };
  } finally {
    await target.stop(1000);
  }
}

/** Each worker's sessions, STOREs and mean STORE latency between two snapshots of its statistics. */
function workerShares(before: readonly StatsSnapshot[], after: readonly StatsSnapshot[]): NonNullable<StoreRun['workers']> {
  const storesOf = (stats: StatsSnapshot | undefined): number => Object.values(stats?.requests.ALLOC_STORE ?? {}).reduce((sum, n) => sum + n, 0);
  return after.map((end, index) => {
    const start = before[index];
    const stores = storesOf(end) - storesOf(start);
    const seconds = (end.latency.ALLOC_STORE?.sumSeconds ?? 0) - (start?.latency.ALLOC_STORE?.sumSeconds ?? 0);
    const timed = (end.latency.ALLOC_STORE?.count ?? 0) - (start?.latency.ALLOC_STORE?.count ?? 0);
    return { sessions: end.sessionsTotal, stores, meanStoreUs: timed > 0 ? (seconds * 1e6) / timed : Number.NaN };
  });
}
