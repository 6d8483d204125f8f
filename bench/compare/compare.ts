// `make compare`: kbtp against Redis and against the loopback limit, in one run on this machine.
//
//   node --import tsx bench/compare/compare.ts [--seconds 3] [--sizes 16K,256K,1M] [--sessions 1,16]
//        [--in-flight 1] [--pipelined 8] [--workers 1]
//
// kbtp: LOAD and STORE through `kbtp bench`'s engine against a target spawned for each size
// (--workers threads, 1 by default: Redis serves from one thread too), every loaded block checked.
// Redis: redis-benchmark SET and GET of values of the same sizes with the same client counts and
// the same requests in flight per connection (-P), against a redis-server started on 127.0.0.1
// with persistence off. iperf3: one TCP stream over loopback, the ceiling.
// Writes bench/results/compare.json (the shape issue 6 fixes), compare-detail.json (everything
// measured) and compare.svg; stops every process it started, also on failure or Ctrl-C.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { runBench } from '../../host/bench/run.ts';
import { parseMix } from '../../host/bench/mix.ts';
import { parseInteger, parseNumber, parseSizes } from '../../host/bench/options.ts';
import { formatSize, stack, type BenchRow } from '../../host/bench/report.ts';
import { formatTable } from '../../host/report/table.ts';
import { barChart } from '../../host/report/svg.ts';
import { iperf3, redisBenchmark, startRedis, stopAll, type RedisResult } from './tools.ts';

const here = dirname(fileURLToPath(import.meta.url));
// From bench/compare/ or dist/bench/compare/: results always go to <repo>/bench/results.
const repoRoot = here.includes(`${join('dist', 'bench')}`) ? join(here, '..', '..', '..') : join(here, '..', '..');

export interface CompareRow {
  op: 'load' | 'store';
  size: number;
  sessions: number;
  kbtp_gbps: number;
  redis_gbps: number;
  kbtp_p99_us: number;
  redis_p99_us: number;
}

interface Table {
  inFlight: number;
  rows: CompareRow[];
  kbtp: BenchRow[];
  redis: RedisResult[];
}

const gbit = (row: BenchRow): number => (row.bytesPerSec * 8) / 1e9;
const r3 = (value: number): number => +value.toFixed(3);

function log(line: string): void {
  process.stderr.write(`${line}\n`);
}

/** Requests per redis-benchmark run, aiming at a few seconds per size (1 MiB runs ~1-2 k/s here). */
function redisRequests(size: number, seconds: number): number {
  const perSecond = size <= 16 * 1024 ? 20_000 : size <= 256 * 1024 ? 4_000 : 1_200;
  return Math.max(200, Math.round(perSecond * seconds));
}

async function measure(sizes: number[], sessionCounts: number[], inFlight: number, seconds: number, workers: number): Promise<Table> {
  const kbtp: BenchRow[] = [];
  const redis: RedisResult[] = [];
  const rows: CompareRow[] = [];
  const redisServer = await startRedis();
  try {
    for (const sessions of sessionCounts) {
      log(`kbtp: LOAD and STORE at ${sizes.map(formatSize).join(', ')}, ${sessions} session(s) x ${inFlight} in flight, ${workers} target worker(s)`);
      const measured = await runBench({
        workers, sizes, phases: parseMix('load,store'), sessions, inFlight, keysPerSession: inFlight,
        durationMs: seconds * 1000, warmupMs: 500, log: () => undefined,
      });
      for (const row of measured) {
        if (row.corrupt > 0 || Object.keys(row.errors).length > 0) throw new Error(`kbtp ${row.op} ${formatSize(row.size)}: ${row.firstError ?? 'errors'}`);
      }
      kbtp.push(...measured);
      for (const size of sizes) {
        log(`redis-benchmark: SET and GET of ${formatSize(size)}, ${sessions} client(s), pipeline ${inFlight}`);
        redis.push(...await redisBenchmark(redisServer.port, size, sessions, redisRequests(size, seconds), inFlight));
      }
    }
  } finally {
    await redisServer.stop();
  }
  for (const sessions of sessionCounts) {
    for (const size of sizes) {
      for (const op of ['load', 'store'] as const) {
        const k = kbtp.find((row) => row.op === op && row.size === size && row.sessions === sessions);
        const r = redis.find((row) => row.op === (op === 'load' ? 'get' : 'set') && row.size === size && row.clients === sessions);
        if (k === undefined || r === undefined) continue;
        rows.push({ op, size, sessions, kbtp_gbps: r3(gbit(k)), redis_gbps: r3(r.gbps), kbtp_p99_us: k.p99Us, redis_p99_us: +r.p99Us.toFixed(1) });
      }
    }
  }
  return { inFlight, rows, kbtp, redis };
}

function formatCompare(title: string, rows: readonly CompareRow[], iperfGbps: number, iperfLargeGbps: number): string {
  return formatTable({
    title,
    columns: ['kbtp op', 'Redis op', 'size', 'sessions', 'kbtp Gbit/s', 'Redis Gbit/s', 'kbtp/Redis', 'kbtp/iperf3', 'kbtp/iperf3 1M',
      'kbtp p99 us', 'Redis p99 us', '>= 2x Redis'],
    rows: rows.map((row) => [row.op.toUpperCase(), row.op === 'load' ? 'GET' : 'SET', formatSize(row.size), row.sessions, row.kbtp_gbps, row.redis_gbps,
      r3(row.kbtp_gbps / row.redis_gbps), r3(row.kbtp_gbps / iperfGbps), r3(row.kbtp_gbps / iperfLargeGbps), row.kbtp_p99_us, row.redis_p99_us,
      row.kbtp_gbps >= 2 * row.redis_gbps ? 'yes' : 'no']),
  });
}

function chart(rows: readonly CompareRow[], iperfGbps: number, inFlight: number): string {
  const charts = (['load', 'store'] as const).map((op) => {
    const mine = rows.filter((row) => row.op === op);
    return barChart({
      title: `kbtp ${op.toUpperCase()} vs Redis ${op === 'load' ? 'GET' : 'SET'} vs iperf3 (${inFlight} in flight per connection)`,
      yLabel: 'Gbit/s',
      groups: mine.map((row) => `${formatSize(row.size)} x${row.sessions}`),
      series: [
        { name: `kbtp ${op.toUpperCase()}`, values: mine.map((row) => row.kbtp_gbps) },
        { name: `Redis ${op === 'load' ? 'GET' : 'SET'}`, values: mine.map((row) => row.redis_gbps) },
        { name: 'iperf3 1 stream', values: mine.map(() => iperfGbps) },
      ],
    });
  });
  return stack(charts);
}

async function main(): Promise<number> {
  const { values } = parseArgs({ options: {
    seconds: { type: 'string' }, sizes: { type: 'string' }, sessions: { type: 'string' }, 'in-flight': { type: 'string' },
    pipelined: { type: 'string' }, workers: { type: 'string' }, out: { type: 'string' }, help: { type: 'boolean', short: 'h' },
  } });
  if (values.help === true) {
    console.log('usage: node --import tsx bench/compare/compare.ts [--seconds 3] [--sizes 16K,256K,1M] [--sessions 1,16] [--in-flight 1] [--pipelined 8|0] [--workers 1] [--out DIR]');
    return 0;
  }
  const seconds = parseNumber(values.seconds, '--seconds', 3, 0.1);
  const sizes = parseSizes(values.sizes ?? '16K,256K,1M', '--sizes');
  const sessionCounts = (values.sessions ?? '1,16').split(',').map((text) => parseInteger(text.trim(), '--sessions', 1));
  const inFlight = parseInteger(values['in-flight'], '--in-flight', 1);
  const pipelined = parseInteger(values.pipelined, '--pipelined', 8, 0);
  const workers = parseInteger(values.workers, '--workers', 1);
  const out = values.out ?? join(repoRoot, 'bench', 'results');
  mkdirSync(out, { recursive: true });

  const onSignal = (): void => {
    void stopAll().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    log('iperf3: one TCP stream over 127.0.0.1, default 128 KiB writes, then 1 MiB writes');
    const iperfDefault = await iperf3(Math.max(2, Math.round(seconds)));
    const iperfLarge = await iperf3(Math.max(2, Math.round(seconds)), '1M');
    log(`iperf3: ${iperfDefault.toFixed(2)} Gbit/s (128 KiB writes), ${iperfLarge.toFixed(2)} Gbit/s (1 MiB writes)`);
    const primary = await measure(sizes, sessionCounts, inFlight, seconds, workers);
    const extra = pipelined > 0 && pipelined !== inFlight ? await measure(sizes, sessionCounts, pipelined, seconds, workers) : undefined;

    const iperf3Gbps = r3(iperfDefault);
    const result = { iperf3_gbps: iperf3Gbps, rows: primary.rows };
    writeFileSync(join(out, 'compare.json'), `${JSON.stringify(result, null, 2)}\n`);
    writeFileSync(join(out, 'compare-detail.json'), `${JSON.stringify({
      measuredAt: new Date().toISOString(), seconds, workers,
      iperf3: { defaultWritesGbps: iperf3Gbps, oneMiBWritesGbps: r3(iperfLarge) },
      units: 'Gbit/s = 1e9 bits per second of block data; p99 in microseconds',
      tables: [primary, ...(extra !== undefined ? [extra] : [])],
    }, null, 2)}\n`);
    writeFileSync(join(out, 'compare.svg'), chart(primary.rows, iperf3Gbps, inFlight));

    const tables = [primary, ...(extra !== undefined ? [extra] : [])];
    for (const table of tables) {
      console.log(formatCompare(`kbtp vs Redis vs iperf3 (${table.inFlight} request(s) in flight per connection; iperf3 ${iperf3Gbps} Gbit/s, ` +
        `${r3(iperfLarge)} with 1 MiB writes; target: ${workers} worker thread(s))`, table.rows, iperfDefault, iperfLarge));
      console.log('');
    }
    const all = tables.flatMap((table) => table.rows);
    const missed = all.filter((row) => row.kbtp_gbps < 2 * row.redis_gbps);
    const load1m = primary.rows.filter((row) => row.op === 'load' && row.size === 1024 * 1024);
    const best1m = Math.max(0, ...tables.flatMap((table) => table.rows).filter((row) => row.op === 'load' && row.size === 1024 * 1024).map((row) => row.kbtp_gbps));
    console.log(`target kbtp >= 2x Redis: met in ${all.length - missed.length} of ${all.length} rows`);
    if (load1m.length > 0) {
      console.log(`target kbtp LOAD 1 MiB >= 80% of iperf3: best ${best1m} Gbit/s = ${(100 * best1m / iperfDefault).toFixed(1)}% of ${iperf3Gbps} ` +
        `(${(100 * best1m / iperfLarge).toFixed(1)}% of the 1 MiB-write figure) -> ${best1m >= 0.8 * iperfDefault ? 'met' : 'missed'}`);
    }
    console.log(`wrote ${join(out, 'compare.json')}, compare-detail.json and compare.svg`);
    return 0;
  } finally {
    await stopAll();
  }
}

main().then(
  (code) => { process.exitCode = code; },
  async (error: unknown) => {
    await stopAll();
    console.error(`compare: ${error instanceof Error ? error.message : String(error)}`);
    process.exitCode = 1;
  },
);
