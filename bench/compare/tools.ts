// The reference programs of bench/compare: a Redis server and redis-benchmark, and iperf3, each
// started on 127.0.0.1 only, on a free port, and stopped by whoever started them.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync, statSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { checkoutRoot } from '../checkout-root.ts';

export { checkoutRoot as repoRoot };

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

export function requireTool(name: string): void {
  const found = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' });
  if (found.status !== 0) throw new Error(`${name} is not installed; run bench/compare/deps.sh (or 'make compare', which does)`);
}

/**
 * Compiles bench/compare/NAME.c (with `cc`, -O2) into dist/bench/compare/NAME unless the binary is
 * newer than its source; returns the binary's path.
 */
export function buildC(name: string): string {
  const source = join(checkoutRoot, 'bench', 'compare', `${name}.c`);
  const binary = join(checkoutRoot, 'dist', 'bench', 'compare', name);
  if (existsSync(binary) && statSync(binary).mtimeMs >= statSync(source).mtimeMs) return binary;
  requireTool('cc');
  mkdirSync(join(checkoutRoot, 'dist', 'bench', 'compare'), { recursive: true });
  // Built under a name of its own and renamed, so that two runs building at once never run half a file.
  const building = `${binary}.${process.pid}`;
  const built = spawnSync('cc', ['-O2', '-Wall', '-Wextra', '-o', building, source], { encoding: 'utf8' });
  if (built.status !== 0) throw new Error(`cc could not build ${source}: ${(built.stderr || built.stdout || String(built.error)).trim()}`);
  renameSync(building, binary);
  return binary;
}

/** Children this process started; stopAll() ends each by its own pid. */
export { track };
const started = new Set<ChildProcess>();

function track(child: ChildProcess): ChildProcess {
  started.add(child);
  child.once('exit', () => started.delete(child));
  return child;
}

async function stop(child: ChildProcess, graceMs = 2000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

export async function stopAll(): Promise<void> {
  await Promise.all([...started].map((child) => stop(child)));
}

export function run(command: string, args: string[], timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = track(spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] }));
    let out = '';
    let err = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    child.stderr?.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else reject(new Error(`${command} ${args.join(' ')} failed (${signal ?? `exit ${code}`}): ${err.trim() || out.trim()}`));
    });
  });
}

export interface RedisServer {
  port: number;
  pid: number;
  stop(): Promise<void>;
}

/** redis-server on 127.0.0.1, persistence off (no RDB snapshots, no AOF), in a scratch folder. */
export async function startRedis(): Promise<RedisServer> {
  requireTool('redis-server');
  requireTool('redis-cli');
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'kbtp-compare-redis-'));
  const child = track(
    spawn(
      'redis-server',
      [
        '--bind',
        '127.0.0.1',
        '--port',
        String(port),
        '--save',
        '',
        '--appendonly',
        'no',
        '--protected-mode',
        'yes',
        '--daemonize',
        'no',
        '--dir',
        dir,
        '--logfile',
        '',
      ],
      { stdio: 'ignore' },
    ),
  );
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`redis-server exited at start (code ${child.exitCode})`);
    const ping = spawnSync('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'ping'], { encoding: 'utf8' });
    if (ping.stdout.trim() === 'PONG') break;
    if (Date.now() > deadline) {
      await stop(child);
      throw new Error('redis-server did not answer PING within 10 s');
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return {
    port,
    pid: child.pid ?? 0,
    stop: async () => {
      await stop(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface RedisResult {
  op: 'get' | 'set';
  size: number;
  clients: number;
  pipeline: number;
  requests: number;
  opsPerSec: number;
  gbps: number;
  p50Us: number;
  p99Us: number;
  /** redis-server's CPU per request over the run (redis-latency's runs, given the server's pid). */
  serverUsPerOp?: number;
  /** That CPU time over the run's wall time: 1.0 = redis-server's one thread never idle. */
  serverBusy?: number;
  /** The client's CPU per request and busy share (redis-latency's runs; redis-benchmark reports none). */
  clientUsPerOp?: number;
  clientBusy?: number;
}

/** Parses redis-benchmark --csv output (Redis 7: test, rps, avg, min, p50, p95, p99, max in ms). */
export function parseRedisCsv(text: string): Map<string, { rps: number; p50Ms: number; p99Ms: number }> {
  const results = new Map<string, { rps: number; p50Ms: number; p99Ms: number }>();
  const lines = text
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '');
  const header = lines[0]?.split(',').map((cell) => cell.replace(/"/g, '')) ?? [];
  const column = (name: string): number => header.indexOf(name);
  for (const line of lines.slice(1)) {
    const cells = line.split(',').map((cell) => cell.replace(/"/g, ''));
    const name = cells[column('test')] ?? '';
    const number = (key: string): number => Number(cells[column(key)]);
    results.set(name, { rps: number('rps'), p50Ms: number('p50_latency_ms'), p99Ms: number('p99_latency_ms') });
  }
  return results;
}

/** redis-benchmark SET then GET of `size`-octet values on one key per run (as it does by default). */
export async function redisBenchmark(port: number, size: number, clients: number, requests: number, pipeline = 1): Promise<RedisResult[]> {
  requireTool('redis-benchmark');
  const out = await run(
    'redis-benchmark',
    [
      '-h',
      '127.0.0.1',
      '-p',
      String(port),
      '-t',
      'set,get',
      '-d',
      String(size),
      '-c',
      String(clients),
      '-n',
      String(requests),
      '-P',
      String(pipeline),
      '--csv',
      '--precision',
      '3',
    ],
    300_000,
  );
  const parsed = parseRedisCsv(out);
  return (['set', 'get'] as const).map((op) => {
    const row = parsed.get(op.toUpperCase());
    if (row === undefined || !Number.isFinite(row.rps)) throw new Error(`redis-benchmark printed no ${op.toUpperCase()} result: ${out.trim()}`);
    return { op, size, clients, pipeline, requests, opsPerSec: row.rps, gbps: (row.rps * size * 8) / 1e9, p50Us: row.p50Ms * 1000, p99Us: row.p99Ms * 1000 };
  });
}

/**
 * One iperf3 TCP stream over loopback for `seconds`; Gbit/s received. A run that reports no
 * throughput (on a busy machine the one-off server can lose its first client) is run again, at
 * most three times in all, on a new port.
 */
export async function iperf3(seconds: number, writeLength?: string): Promise<number> {
  requireTool('iperf3');
  let problem = '';
  for (let attempt = 0; attempt < 3; attempt++) {
    const result = await iperf3Once(seconds, writeLength);
    if (typeof result === 'number') return result;
    problem = result.problem;
  }
  throw new Error(`iperf3 printed no received throughput three times (${problem})`);
}

async function iperf3Once(seconds: number, writeLength: string | undefined): Promise<number | { problem: string }> {
  const port = await freePort();
  const server = track(spawn('iperf3', ['-s', '-B', '127.0.0.1', '-p', String(port), '-1'], { stdio: 'ignore' }));
  try {
    const deadline = Date.now() + 5000;
    let out: string | undefined;
    let lastError: unknown;
    while (out === undefined && Date.now() < deadline) {
      try {
        out = await run(
          'iperf3',
          ['-c', '127.0.0.1', '-B', '127.0.0.1', '-p', String(port), '-t', String(seconds), '-J', ...(writeLength !== undefined ? ['-l', writeLength] : [])],
          (seconds + 20) * 1000,
        );
      } catch (error) {
        lastError = error; // the server may not listen yet
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    if (out === undefined) throw lastError instanceof Error ? lastError : new Error('iperf3 did not run');
    const report = JSON.parse(out) as { error?: string; end?: { sum_received?: { bits_per_second?: number } } };
    const bps = report.end?.sum_received?.bits_per_second;
    if (typeof bps !== 'number' || bps <= 0) return { problem: report.error ?? 'no sum_received in its report' };
    return bps / 1e9;
  } finally {
    await stop(server);
  }
}
