// CPU time per request on each side: a server process's CPU across a client run, and the client's
// as a child waited for by a shell. Two runs of N and 3N requests after a warm-up; the difference
// over 2N is the cost of one request, start-up, connection setup and preparation cancelling out.
// Figures are CPU time, not wall time: less sensitive to other load on the machine, though a busy
// machine still costs caches and wake-ups.
//
// Both clocks are read finely: /proc's utime and stime count clock ticks (10 ms), too coarse for
// the difference of two short runs (at --cpu-requests 2000 the target's came out 0 us: its
// 16-session runs differ by a few ticks, and 150-250 ms of connection setup and JIT work on its
// compiler threads moved between them by more than that, so the clamped difference was 0).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run, track } from './tools.ts';

/** Clock ticks per second of /proc's utime and stime (USER_HZ; 100 on Linux). */
const TICKS_PER_SECOND = 100;

/**
 * CPU time `pid` has used so far, in microseconds: the sum of its threads' run time from
 * /proc/PID/task/TID/schedstat (nanoseconds). A thread that exited drops out of the sum, so this
 * is for servers whose threads live as long as they do (a kbtp target, redis-server). Falls back
 * to utime + stime from /proc/PID/stat (clock ticks) where the kernel keeps no schedstat.
 */
export function processCpuUs(pid: number): number {
  try {
    let nanoseconds = 0;
    for (const thread of readdirSync(`/proc/${pid}/task`)) {
      nanoseconds += Number(readFileSync(`/proc/${pid}/task/${thread}/schedstat`, 'utf8').split(' ')[0]);
    }
    if (Number.isFinite(nanoseconds)) return nanoseconds / 1000;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // After the command name: state is field 3, so utime (14) and stime (15) are at 11 and 12.
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / TICKS_PER_SECOND;
}

/**
 * Runs `command` to completion; resolves with the CPU time it (and its children) used, in
 * microseconds. bash's `time` reports getrusage(RUSAGE_CHILDREN) to the millisecond
 * (TIMEFORMAT %3U %3S), where a child's cutime/cstime in /proc are whole clock ticks.
 */
export async function childCpuUs(command: string, args: string[], timeoutMs: number): Promise<number> {
  const out = await run('bash', ['-c', 'TIMEFORMAT="cpu %3U %3S"; { time "$@" >/dev/null 2>&1 || exit $?; } 2>&1', 'bash', command, ...args], timeoutMs);
  const match = /cpu ([0-9.]+) ([0-9.]+)\s*$/.exec(out);
  if (match === null) throw new Error(`cannot read the CPU time of ${command} from bash's time: ${JSON.stringify(out)}`);
  return (Number(match[1]) + Number(match[2])) * 1e6;
}

export interface CpuPerOp {
  /** Server (kbtp target or redis-server) CPU per request, microseconds; null when not measurable. */
  server_us: number | null;
  /** Client (kbtp bench or redis-benchmark) CPU per request, microseconds; null when not measurable. */
  client_us: number | null;
  requests: number;
}

/**
 * The difference method: `client(n)` runs n requests against the server `pid`. The warm-up is two
 * runs of `requests`: a fresh server spends its first few thousand requests compiling (V8's
 * compiler threads ran 150-250 ms in one 4,000-request run of a new target and nothing two runs
 * later), which would otherwise land in the N run and shrink or reverse the difference. A difference
 * that is not positive is reported as null (not measurable: more requests needed), never as 0.
 */
export async function cpuPerOp(pid: number, requests: number, client: (count: number) => Promise<number>): Promise<CpuPerOp> {
  for (let warm = 0; warm < 2; warm++) await client(requests);
  const measure = async (count: number): Promise<[number, number]> => {
    const before = processCpuUs(pid);
    const clientUs = await client(count);
    return [processCpuUs(pid) - before, clientUs];
  };
  const [server1, client1] = await measure(requests);
  const [server3, client3] = await measure(3 * requests);
  const per = (small: number, large: number): number | null => (large > small ? +((large - small) / (2 * requests)).toFixed(1) : null);
  return { server_us: per(server1, server3), client_us: per(client1, client3), requests };
}

/**
 * A kbtp target in a process of its own (`kbtp target`), so that its CPU is its own. `maxInline`
 * sets its Max Inline (through a configuration file; `kbtp target`'s default is min(8 KiB, block
 * size), make compare's spawned targets take whole blocks up to 1 MiB).
 */
export async function startTargetProcess(
  repoRoot: string,
  blockSize: number,
  blocks: number,
  maxInline?: number,
  targetArgs: readonly string[] = [],
): Promise<{ port: number; pid: number; child: ChildProcess }> {
  const config: string[] = [...targetArgs];
  if (maxInline !== undefined) {
    const folder = mkdtempSync(join(tmpdir(), 'kbtp-cpu-'));
    const file = join(folder, 'target.json');
    writeFileSync(file, JSON.stringify({ pool: { blockSize, blockCount: blocks, maxInline } }));
    config.push('--config', file);
    // The target reads its configuration at start-up: the file can go once it listens or failed.
    setTimeout(() => rmSync(folder, { recursive: true, force: true }), 30_000).unref();
  }
  const child = track(
    spawn(
      process.execPath,
      [
        join(repoRoot, 'dist', 'host', 'cli.js'),
        'target',
        ...config,
        '--listen',
        '127.0.0.1:0',
        '--workers',
        '1',
        '--block-size',
        String(blockSize),
        '--blocks',
        String(blocks),
        '--credits',
        '8',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    ),
  );
  const port = await new Promise<number>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`kbtp target did not start: ${out}`)), 30_000);
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const match = /listening on [0-9.]+:([0-9]+)/.exec(out);
      if (match !== null) {
        clearTimeout(timer);
        resolve(Number(match[1]));
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`kbtp target exited (code ${code}): ${out}`));
    });
  });
  return { port, pid: child.pid ?? 0, child };
}

/** kbtp bench --json's client CPU over its window (all rows' phase together), microseconds; undefined without the figures. */
function windowCpu(json: string): number | undefined {
  const report = JSON.parse(json) as { rows?: Array<{ cpu?: { requests: number; clientUsPerOp: number; otherUsPerOp: number } }> };
  const cpu = report.rows?.[0]?.cpu;
  return cpu === undefined ? undefined : (cpu.clientUsPerOp + cpu.otherUsPerOp) * cpu.requests;
}

/**
 * CPU per request of kbtp (issue 16): `kbtp bench --mix load` (or `mix`) of `size`-octet blocks
 * from `sessions` sessions x `inFlight` in flight against a `kbtp target` of its own (1 worker,
 * `maxInline` if given), by the difference method. `extra` goes to kbtp bench (e.g. --batch).
 */
export async function kbtpCpuPerOp(
  repoRoot: string,
  requests: number,
  options: {
    size: number;
    sessions: number;
    inFlight?: number;
    extra?: readonly string[];
    mix?: 'load' | 'store';
    maxInline?: number;
    /** More options of the `kbtp target` process. */
    targetArgs?: readonly string[];
  },
): Promise<CpuPerOp> {
  const { size, sessions } = options;
  const inFlight = options.inFlight ?? 1;
  const cli = join(repoRoot, 'dist', 'host', 'cli.js');
  const target = await startTargetProcess(repoRoot, size, sessions * inFlight + 16, options.maxInline, options.targetArgs);
  try {
    const args = (count: number): string[] => [
      cli,
      'bench',
      '--target',
      `127.0.0.1:${target.port}`,
      '--sizes',
      String(size),
      '--mix',
      options.mix ?? 'load',
      '--sessions',
      String(sessions),
      '--in-flight',
      String(inFlight),
      '--count',
      String(count),
      '--json',
      ...(options.extra ?? []),
    ];
    return await cpuPerOp(target.pid, requests, async (count) => {
      // The client's CPU over its measured window (kbtp bench's own per-thread figures: the main
      // thread and the process's other threads), not over the whole process: a fresh Node
      // process's start-up and module loading cost 0.5-0.7 s of CPU and varied by +/-80 ms
      // between runs, +/-20 us per request at 2,000 requests, which the difference did not cancel.
      const cpu = windowCpu(await run(process.execPath, args(count), 600_000));
      return cpu ?? (await childCpuUs(process.execPath, args(count), 600_000));
    });
  } finally {
    target.child.kill('SIGTERM');
  }
}
