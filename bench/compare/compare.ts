// `make compare`: kbtp against Redis and against the loopback limit, in one run on this machine.
//
//   node --import tsx bench/compare/compare.ts [--seconds 3] [--sizes 16K,256K,1M] [--sessions 1,16]
//        [--in-flight 1] [--pipelined 8] [--workers 1] [--cpu-requests 10000] [--floor-seconds 1]
//        [--cpu-wake-latency-us 0|N|off]
//
// kbtp: LOAD and STORE through `kbtp bench`'s engine against a target spawned for each size
// (--workers threads, 1 by default: Redis serves from one thread too), every loaded block checked.
// Redis: redis-benchmark SET and GET of values of the same sizes with the same client counts and
// the same requests in flight per connection (-P), against a redis-server started on 127.0.0.1
// with persistence off, and the same with redis-latency.c (redis-latency.ts), whose latency runs to
// the reply's last octet as kbtp's does (redis-benchmark's stops at the reply's first read). iperf3: one TCP stream over loopback, the kernel's ceiling; a plain Node
// socket pair moving 1 MiB blocks (node-socket.ts), Node's own. CPU per request on both sides from
// /proc (cpu.ts). Under every kbtp/Redis row the Node floor of the same shape (node-floor.ts: the
// same direction, sessions and requests in flight, no protocol), and the bare C exchange at 1 and at
// --pipelined in flight (tcp-pingpong.c): which goals lie above what Node reaches here (floor-goals.ts).
// Every row runs under one CPU wake-latency request held for the whole run (--cpu-wake-latency-us,
// 0 by default, the value a kbtp target holds while busy; off: none, by the run or its targets):
// an idle CPU's wake-up is the machine's, so kbtp and Redis meet it alike (docs/BENCH.md, session 15).
// Writes bench/results/compare.json (issue 6's shape plus issue 16's p50s,
// node_socket_gbps and CPU per op), compare-detail.json (everything measured) and compare.svg;
// stops every process it started, also on failure or Ctrl-C.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseCommandLine } from '../../host/commands/command-line.ts';
import { runBench } from '../../host/bench/run.ts';
import { parseMix } from '../../host/bench/mix.ts';
import { parseInteger, parseNumber, parseSizes } from '../../host/bench/options.ts';
import { formatSize, stack, type BenchRow } from '../../host/bench/report.ts';
import { formatTable } from '../../host/report/table.ts';
import { barChart } from '../../host/report/svg.ts';
import { loadavg } from 'node:os';
import { iperf3, redisBenchmark, repoRoot, startRedis, stopAll, type RedisResult, type RedisServer } from './tools.ts';
import { childCpuUs, cpuPerOp, kbtpCpuPerOp, type CpuPerOp } from './cpu.ts';
import { nodeSocketGbps } from './node-socket.ts';
import { tcpPingPong, type PingPongResult } from './tcp-pingpong.ts';
import { redisLatency, redisRowFigures, type RedisRowFigures } from './redis-latency.ts';
import { rowCpuLine } from './row-cpu.ts';
import { nodeFloor, type FloorFigures } from './node-floor.ts';
import { floorGoalLines, floorGoals, formatFloorGoals, rowMet } from './floor-goals.ts';
import {
  CPU_WAKE_LATENCY_CHOICES,
  CpuLatencyRequest,
  cpuIdleDriver,
  currentCpuLatencyUs,
  noEffectReason,
  parseCpuWakeLatencyUs,
} from '../../host/util/cpu-latency.ts';
import { DEFAULT_CPU_WAKE_LATENCY_US } from '../../host/kbtp/server/target-config.ts';

/** redis_p50_us / redis_p99_us: to the reply's last octet; redis_benchmark_*: redis-benchmark's first read. */
export interface CompareRow extends RedisRowFigures {
  op: 'load' | 'store';
  size: number;
  sessions: number;
  kbtp_gbps: number;
  kbtp_p50_us: number;
  kbtp_p99_us: number;
  /** The Node floor of the row's shape in the same run (node-floor.ts): what Node without a native addon reaches. */
  node_floor_gbps: number;
  node_floor_p50_us: number;
  node_floor_p99_us: number;
  /**
   * kbtp's CPU per request by thread over the row's window (the phase's LOAD or STORE requests):
   * client = kbtp bench's main thread, target = the spawned target's workers, other = the process's
   * remaining threads (V8's GC and compiler helpers); *_busy = that CPU time over the window's wall
   * time (1.0 = a whole core: the thread that limits the row). Absent where /proc has no schedstat.
   */
  kbtp_cpu?: { client_us: number; target_us: number | null; other_us: number; client_busy: number; target_busy: number | null };
  /** redis-server's CPU per request and busy share over redis-latency's run of the row (its one thread). */
  redis_server_cpu?: { us: number; busy: number };
  /**
   * redis-latency's own CPU per request and busy share over the same run: the Redis side's client,
   * to set beside kbtp_cpu.client_us (kbtp bench's); the GB/s of a row with both sides at busy ~1
   * is set by these per-request costs (docs/BENCH.md, session 8).
   */
  redis_client_cpu?: { us: number; busy: number };
}

interface Table {
  inFlight: number;
  rows: CompareRow[];
  kbtp: BenchRow[];
  redis: RedisResult[];
  /** The same runs by redis-latency (complete replies). */
  redisComplete: RedisResult[];
  /** The Node floor under each row, by floorKey. */
  floors: Array<{ op: 'load' | 'store'; size: number; sessions: number; figures: FloorFigures }>;
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

async function measure(
  sizes: number[],
  sessionCounts: number[],
  inFlight: number,
  seconds: number,
  workers: number,
  redisServer: RedisServer,
  floorSeconds: number,
  cpuWakeLatencyUs: number | null,
): Promise<Table> {
  const kbtp: BenchRow[] = [];
  const redis: RedisResult[] = [];
  const redisComplete: RedisResult[] = [];
  const floors: Table['floors'] = [];
  const rows: CompareRow[] = [];
  for (const sessions of sessionCounts) {
    log(`kbtp: LOAD and STORE at ${sizes.map(formatSize).join(', ')}, ${sessions} session(s) x ${inFlight} in flight, ${workers} target worker(s)`);
    const measured = await runBench({
      workers,
      sizes,
      phases: parseMix('load,store'),
      sessions,
      inFlight,
      keysPerSession: inFlight,
      // Several requests in flight per connection are what loadMany/storeMany are for: a user
      // pipelining as redis-benchmark -P does would batch them.
      batched: inFlight > 1,
      durationMs: seconds * 1000,
      warmupMs: 500,
      // The first phase of each size meets a freshly spawned target still being compiled (run.ts).
      firstWarmupMs: 2000,
      cpuWakeLatencyUs,
      log: () => undefined,
    });
    for (const row of measured) {
      if (row.corrupt > 0 || Object.keys(row.errors).length > 0) throw new Error(`kbtp ${row.op} ${formatSize(row.size)}: ${row.firstError ?? 'errors'}`);
    }
    kbtp.push(...measured);
    for (const size of sizes) {
      log(`redis-benchmark: SET and GET of ${formatSize(size)}, ${sessions} client(s), pipeline ${inFlight}`);
      redis.push(...(await redisBenchmark(redisServer.port, size, sessions, redisRequests(size, seconds), inFlight)));
      log(`redis-latency: the same, timed to each reply's last octet`);
      redisComplete.push(...(await redisLatency(redisServer.port, size, sessions, redisRequests(size, seconds), inFlight, redisServer.pid)));
      log(`node floor: LOAD and STORE of ${formatSize(size)}, ${sessions} connection(s) x ${inFlight} in flight, no protocol`);
      for (const op of ['load', 'store'] as const) {
        const figures = await nodeFloor({ op, size, sessions, inFlight }, { seconds: floorSeconds, warmupMs: 300 });
        floors.push({ op, size, sessions, figures });
      }
    }
  }
  for (const sessions of sessionCounts) {
    for (const size of sizes) {
      for (const op of ['load', 'store'] as const) {
        const k = kbtp.find((row) => row.op === op && row.size === size && row.sessions === sessions);
        const same = (row: RedisResult): boolean => row.op === (op === 'load' ? 'get' : 'set') && row.size === size && row.clients === sessions;
        const r = redis.find(same);
        const c = redisComplete.find(same);
        const floor = floors.find((row) => row.op === op && row.size === size && row.sessions === sessions)?.figures;
        if (k === undefined || r === undefined || c === undefined || floor === undefined) continue;
        const cpu = k.cpu;
        rows.push({
          op,
          size,
          sessions,
          kbtp_gbps: r3(gbit(k)),
          kbtp_p50_us: k.p50Us,
          kbtp_p99_us: k.p99Us,
          node_floor_gbps: r3(floor.gbps),
          node_floor_p50_us: +floor.p50Us.toFixed(1),
          node_floor_p99_us: +floor.p99Us.toFixed(1),
          ...redisRowFigures(r, c),
          ...(c.serverUsPerOp !== undefined && c.serverBusy !== undefined ? { redis_server_cpu: { us: c.serverUsPerOp, busy: c.serverBusy } } : {}),
          ...(c.clientUsPerOp !== undefined && c.clientBusy !== undefined ? { redis_client_cpu: { us: c.clientUsPerOp, busy: c.clientBusy } } : {}),
          ...(cpu !== undefined
            ? {
                kbtp_cpu: {
                  client_us: cpu.clientUsPerOp,
                  target_us: cpu.targetUsPerOp ?? null,
                  other_us: cpu.otherUsPerOp,
                  client_busy: cpu.clientBusy,
                  target_busy: cpu.targetBusy ?? null,
                },
              }
            : {}),
        });
      }
    }
  }
  return { inFlight, rows, kbtp, redis, redisComplete, floors };
}

/** Where kbtp's CPU went per row: the thread with busy near 1.0 is what limits the row. */
function formatCpu(title: string, rows: readonly CompareRow[]): string {
  return formatTable({
    title,
    columns: [
      'kbtp op',
      'size',
      'sessions',
      'client us/req',
      'target us/req',
      'other us/req',
      'client busy',
      'target busy',
      'redis-server us/req',
      'redis-server busy',
      'redis-latency us/req',
      'redis-latency busy',
    ],
    rows: rows.map((row) => [
      row.op.toUpperCase(),
      formatSize(row.size),
      row.sessions,
      row.kbtp_cpu?.client_us ?? '-',
      row.kbtp_cpu?.target_us ?? '-',
      row.kbtp_cpu?.other_us ?? '-',
      row.kbtp_cpu?.client_busy ?? '-',
      row.kbtp_cpu?.target_busy ?? '-',
      row.redis_server_cpu?.us ?? '-',
      row.redis_server_cpu?.busy ?? '-',
      row.redis_client_cpu?.us ?? '-',
      row.redis_client_cpu?.busy ?? '-',
    ]),
  });
}

function formatCompare(title: string, rows: readonly CompareRow[], iperfGbps: number, inFlight: number): string {
  return formatTable({
    title,
    columns: [
      'kbtp op',
      'Redis op',
      'size',
      'sessions',
      'kbtp Gbit/s',
      'Redis Gbit/s',
      'kbtp/Redis',
      'kbtp/iperf3',
      'kbtp p50 us',
      'Redis p50 us',
      'kbtp p99 us',
      'Redis p99 us',
      'redis-benchmark p50/p99 us',
      'Node floor Gbit/s',
      'Node floor p50/p99 us',
      inFlight > 1 ? '>= 1.5x Redis' : '>= Redis',
    ],
    rows: rows.map((row) => [
      row.op.toUpperCase(),
      row.op === 'load' ? 'GET' : 'SET',
      formatSize(row.size),
      row.sessions,
      row.kbtp_gbps,
      row.redis_gbps,
      r3(row.kbtp_gbps / row.redis_gbps),
      r3(row.kbtp_gbps / iperfGbps),
      row.kbtp_p50_us,
      row.redis_p50_us,
      row.kbtp_p99_us,
      row.redis_p99_us,
      `${row.redis_benchmark_p50_us} / ${row.redis_benchmark_p99_us}`,
      row.node_floor_gbps,
      `${row.node_floor_p50_us} / ${row.node_floor_p99_us}`,
      rowMet(row, inFlight) ? 'yes' : 'no',
    ]),
  });
}

/**
 * CPU per request on each side (issue 16): 16 KiB LOAD against a target in a process of its own
 * (cpu.ts kbtpCpuPerOp) and Redis GET of 16 KiB against `redisServer`, both 16 connections x 1 in flight.
 */
async function measureCpu(redisServer: RedisServer, requests: number, cpuWakeLatencyUs: number | null): Promise<{ kbtp: CpuPerOp; redis: CpuPerOp }> {
  const size = 16 * 1024;
  const sessions = 16;
  const targetArgs = ['--cpu-wake-latency-us', cpuWakeLatencyUs === null ? 'off' : String(cpuWakeLatencyUs)];
  const kbtp = await kbtpCpuPerOp(repoRoot, requests, { size, sessions, targetArgs });
  // GET needs the value: one SET first (redis-benchmark uses the one key "key:__rand_int__" without -r).
  await childCpuUs('redis-benchmark', ['-h', '127.0.0.1', '-p', String(redisServer.port), '-t', 'set', '-d', String(size), '-n', '100', '-q'], 60_000);
  const redis = await cpuPerOp(redisServer.pid, requests, (count) =>
    childCpuUs(
      'redis-benchmark',
      ['-h', '127.0.0.1', '-p', String(redisServer.port), '-t', 'get', '-d', String(size), '-c', String(sessions), '-n', String(count), '-q'],
      600_000,
    ),
  );
  return { kbtp, redis };
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

/**
 * The p99 target's line: kbtp's and Redis's p99 / p50 per row, and the same ratio of the barest
 * loopback exchange at each size, which no server on this machine goes below (docs/BENCH.md, session 7).
 */
function tailLine(table: Table, bare: readonly PingPongResult[]): string {
  const ratio = (p99: number, p50: number): string => (p50 > 0 ? (p99 / p50).toFixed(2) : 'n/a');
  const label = (row: CompareRow): string => `${row.op.toUpperCase()} ${formatSize(row.size)} x${row.sessions}`;
  const met = table.rows.filter((row) => row.kbtp_p99_us <= 2 * row.kbtp_p50_us).length;
  return (
    `target p99 <= 2x p50 at ${table.inFlight} in flight: met in ${met} of ${table.rows.length} rows; p99/p50 kbtp / Redis: ` +
    table.rows.map((row) => `${label(row)} ${ratio(row.kbtp_p99_us, row.kbtp_p50_us)} / ${ratio(row.redis_p99_us, row.redis_p50_us)}`).join(', ') +
    '; the bare loopback exchange (tcp-pingpong.c, 1 x 1) p50 / p99 us: ' +
    bare.map((row) => `${formatSize(row.size)} ${row.p50Us} / ${row.p99Us} = ${ratio(row.p99Us, row.p50Us)}`).join(', ')
  );
}

async function main(): Promise<number> {
  const parsed = parseCommandLine(
    'bench/compare',
    'usage: node --import tsx bench/compare/compare.ts [--seconds 3] [--sizes 16K,256K,1M] [--sessions 1,16] [--in-flight 1] [--pipelined 8|0] [--workers 1] [--cpu-requests 10000] [--floor-seconds 1] [--cpu-wake-latency-us 0|N|off] [--out DIR]',
    process.argv.slice(2),
    {
      seconds: { type: 'string' },
      sizes: { type: 'string' },
      sessions: { type: 'string' },
      'in-flight': { type: 'string' },
      pipelined: { type: 'string' },
      workers: { type: 'string' },
      'cpu-requests': { type: 'string' },
      'floor-seconds': { type: 'string' },
      'cpu-wake-latency-us': { type: 'string' },
      out: { type: 'string' },
    },
  );
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const seconds = parseNumber(values.seconds, '--seconds', 3, 0.1);
  const sizes = parseSizes(values.sizes ?? '16K,256K,1M', '--sizes');
  const sessionCounts = (values.sessions ?? '1,16').split(',').map((text) => parseInteger(text.trim(), '--sessions', 1));
  const inFlight = parseInteger(values['in-flight'], '--in-flight', 1);
  const pipelined = parseInteger(values.pipelined, '--pipelined', 8, 0);
  const workers = parseInteger(values.workers, '--workers', 1);
  const cpuRequests = parseInteger(values['cpu-requests'], '--cpu-requests', 10_000, 100);
  const floorSeconds = parseNumber(values['floor-seconds'], '--floor-seconds', 1, 0.1);
  const out = values.out ?? join(repoRoot, 'bench', 'results');
  const wakeText = values['cpu-wake-latency-us'];
  const cpuWakeLatencyUs = wakeText === undefined ? DEFAULT_CPU_WAKE_LATENCY_US : parseCpuWakeLatencyUs(wakeText);
  if (cpuWakeLatencyUs === undefined) {
    console.error(`bench/compare: --cpu-wake-latency-us: "${wakeText}" is not a wake latency; give ${CPU_WAKE_LATENCY_CHOICES}`);
    return 2;
  }
  mkdirSync(out, { recursive: true });
  // As a target does (host/kbtp/server/wake-latency.ts): no request where no cpuidle governor would read it.
  const idleDriver = cpuIdleDriver();
  const noEffect = cpuWakeLatencyUs === null ? undefined : noEffectReason(idleDriver);
  const wakeRequest = cpuWakeLatencyUs === null || noEffect !== undefined ? undefined : new CpuLatencyRequest(cpuWakeLatencyUs);
  const wakeProblem = noEffect ?? wakeRequest?.hold()?.message;
  const cpuWakeLatency = {
    request_us: cpuWakeLatencyUs,
    held: wakeRequest?.held ?? false,
    kernel_us: currentCpuLatencyUs() ?? null,
    idle_driver: idleDriver ?? null,
    ...(wakeProblem !== undefined ? { problem: wakeProblem } : {}),
  };
  log(
    cpuWakeLatencyUs === null
      ? 'CPU wake latency: no request (idle CPUs take whatever idle state the kernel picks)'
      : wakeProblem !== undefined
        ? `CPU wake latency: not requested: ${wakeProblem}; every row runs with the machine's idle states`
        : `CPU wake latency: ${cpuWakeLatencyUs} us requested for the whole run (cpuidle driver ${idleDriver ?? 'unknown'}; the kernel now honours ${cpuWakeLatency.kernel_us ?? '?'} us)`,
  );

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
    const loadBefore = loadavg().map((value) => +value.toFixed(2));
    log(`node sockets: ${formatSize(1024 * 1024)} blocks, 16 connections x 1 request in flight (the plain Node.js baseline)`);
    const nodeSocket = r3(await nodeSocketGbps(1024 * 1024, 16, seconds));
    log(`tcp-pingpong: the barest loopback exchange at ${sizes.map(formatSize).join(', ')}, 1 connection x 1 in flight (the p99 target's reference)`);
    const bare: PingPongResult[] = [];
    for (const size of sizes) bare.push(await tcpPingPong(size, Math.min(2, seconds)));
    const barePipelined: PingPongResult[] = [];
    if (pipelined > 1) {
      log(`tcp-pingpong: the same, 1 connection x ${pipelined} in flight (the pipelined rows' kernel reference)`);
      for (const size of sizes) barePipelined.push(await tcpPingPong(size, Math.min(1, seconds), pipelined));
    }
    const redisServer = await startRedis();
    let primary: Table;
    let extra: Table | undefined;
    let cpu: { kbtp: CpuPerOp; redis: CpuPerOp };
    try {
      primary = await measure(sizes, sessionCounts, inFlight, seconds, workers, redisServer, floorSeconds, cpuWakeLatencyUs);
      extra =
        pipelined > 0 && pipelined !== inFlight
          ? await measure(sizes, sessionCounts, pipelined, seconds, workers, redisServer, floorSeconds, cpuWakeLatencyUs)
          : undefined;
      log(
        `CPU per request: 16 KiB LOAD and GET, 16 connections x 1 in flight, ${cpuRequests} and ${3 * cpuRequests} requests (target in a process of its own)`,
      );
      cpu = await measureCpu(redisServer, cpuRequests, cpuWakeLatencyUs);
    } finally {
      await redisServer.stop();
    }
    const loadAfter = loadavg().map((value) => +value.toFixed(2));

    const iperf3Gbps = r3(iperfDefault);
    const goals = [...floorGoals(primary.rows, primary.inFlight), ...(extra !== undefined ? floorGoals(extra.rows, extra.inFlight) : [])];
    const cpuFields = (figure: CpuPerOp): { server: number | null; client: number | null } => ({ server: figure.server_us, client: figure.client_us });
    const result = {
      iperf3_gbps: iperf3Gbps,
      node_socket_gbps: nodeSocket,
      kbtp_cpu_us_per_op: cpuFields(cpu.kbtp),
      redis_cpu_us_per_op: cpuFields(cpu.redis),
      load_average: { before: loadBefore, after: loadAfter },
      cpu_wake_latency: cpuWakeLatency,
      tcp_pingpong: bare.map((row) => ({ size: row.size, p50_us: row.p50Us, p99_us: row.p99Us })),
      tcp_pingpong_pipelined: barePipelined.map((row) => ({ size: row.size, in_flight: row.inFlight, gbps: row.gbps, p50_us: row.p50Us, p99_us: row.p99Us })),
      rows: primary.rows,
      ...(extra !== undefined ? { pipelined: { in_flight: extra.inFlight, rows: extra.rows } } : {}),
      goals_vs_node_floor: goals,
    };
    writeFileSync(join(out, 'compare.json'), `${JSON.stringify(result, null, 2)}\n`);
    writeFileSync(
      join(out, 'compare-detail.json'),
      `${JSON.stringify(
        {
          measuredAt: new Date().toISOString(),
          seconds,
          workers,
          loadAverage: { before: loadBefore, after: loadAfter },
          cpuWakeLatency,
          iperf3: { defaultWritesGbps: iperf3Gbps, oneMiBWritesGbps: r3(iperfLarge) },
          nodeSocketGbps: nodeSocket,
          tcpPingPong: bare,
          tcpPingPongPipelined: barePipelined,
          cpuPerOp: { kbtp: cpu.kbtp, redis: cpu.redis, what: '16 KiB LOAD / GET, 16 connections x 1 in flight, difference of N and 3N requests, from /proc' },
          units: 'Gbit/s = 1e9 bits per second of block data; p50/p99 and CPU in microseconds',
          tables: [primary, ...(extra !== undefined ? [extra] : [])],
        },
        null,
        2,
      )}\n`,
    );
    writeFileSync(join(out, 'compare.svg'), chart(primary.rows, iperf3Gbps, inFlight));

    const tables = [primary, ...(extra !== undefined ? [extra] : [])];
    for (const table of tables) {
      console.log(
        formatCompare(
          `kbtp vs Redis vs iperf3 (${table.inFlight} request(s) in flight per connection; iperf3 ${iperf3Gbps} Gbit/s, ` +
            `${r3(iperfLarge)} with 1 MiB writes; target: ${workers} worker thread(s))`,
          table.rows,
          iperfDefault,
          table.inFlight,
        ),
      );
      console.log('');
      console.log(
        formatCpu(
          `kbtp CPU per request by thread, ${table.inFlight} in flight (client: kbtp bench's main thread; target: the spawned target's worker(s); ` +
            "other: the process's other threads; busy: CPU time / wall time of the window, 1.0 = one core; " +
            "redis-server: its CPU per request and busy share over redis-latency's run of the row; redis-latency: that client's own, the Redis side's counterpart of kbtp's client)",
          table.rows,
        ),
      );
      console.log('');
    }
    console.log(
      "Redis p50/p99: each request to its reply's last octet (redis-latency.c), as kbtp's; redis-benchmark p50/p99: to the reply's first read " +
        "(its readHandler); Redis Gbit/s: the higher of the two clients'.",
    );
    const ratios = tables.flatMap((table) =>
      table.redisComplete.map((row) => {
        const twin = table.redis.find(
          (other) => other.op === row.op && other.size === row.size && other.clients === row.clients && other.pipeline === row.pipeline,
        );
        return twin === undefined ? Number.NaN : row.opsPerSec / twin.opsPerSec;
      }),
    );
    if (ratios.length > 0) {
      const sorted = ratios.filter(Number.isFinite).sort((x, y) => x - y);
      console.log(
        `redis-latency ops/s / redis-benchmark ops/s over ${sorted.length} runs: min ${r3(sorted[0] ?? Number.NaN)}, ` +
          `median ${r3(sorted[Math.floor(sorted.length / 2)] ?? Number.NaN)}, max ${r3(sorted[sorted.length - 1] ?? Number.NaN)}`,
      );
    }
    for (const table of tables) {
      const met = table.rows.filter((row) => rowMet(row, table.inFlight)).length;
      console.log(
        `target ${table.inFlight > 1 ? 'kbtp >= 1.5x Redis' : 'kbtp >= Redis in GB/s and p50'} at ${table.inFlight} in flight: met in ${met} of ${table.rows.length} rows`,
      );
    }
    console.log(tailLine(primary, bare));
    console.log('');
    console.log(
      formatFloorGoals(
        "issue 16's goals against the Node floor of each row, measured in this run (node-floor.ts: the row's direction, sessions and requests in flight, " +
          'no protocol; figures in Gbit/s, us, or p99/p50; Node best: the better of the floor and kbtp, both Node programs): ' +
          "above = the goal asks more than any Node program reached in this run, below = kbtp's own to reach",
        goals,
      ),
    );
    for (const line of floorGoalLines(goals)) console.log(line);
    if (barePipelined.length > 0) {
      console.log(
        `the bare C exchange (tcp-pingpong.c) at ${pipelined} in flight, 1 connection, Gbit/s and p50 / p99 us: ` +
          barePipelined.map((row) => `${formatSize(row.size)} ${row.gbps} (${row.p50Us} / ${row.p99Us})`).join(', '),
      );
    }
    console.log('');
    const load1m = primary.rows.find((row) => row.op === 'load' && row.size === 1024 * 1024 && row.sessions === 16);
    if (load1m !== undefined) {
      console.log(
        `target kbtp LOAD 1 MiB x16 >= 0.8 of a plain Node socket pair: ${load1m.kbtp_gbps} of ${nodeSocket} Gbit/s = ` +
          `${(load1m.kbtp_gbps / nodeSocket).toFixed(2)} -> ${load1m.kbtp_gbps >= 0.8 * nodeSocket ? 'met' : 'missed'}`,
      );
    }
    const cpuMet = (side: 'server_us' | 'client_us'): string => {
      const mine = cpu.kbtp[side];
      const redis = cpu.redis[side];
      if (mine === null || redis === null) return 'not measurable (raise --cpu-requests)';
      return mine <= 2 * redis ? 'met' : 'missed';
    };
    console.log(
      `target CPU per 16 KiB LOAD <= 2x Redis GET: target ${cpu.kbtp.server_us} us vs redis-server ${cpu.redis.server_us} us -> ${cpuMet('server_us')}; ` +
        `client ${cpu.kbtp.client_us} us vs redis-benchmark ${cpu.redis.client_us} us -> ${cpuMet('client_us')}`,
    );
    const perRequest = rowCpuLine(primary.rows);
    if (perRequest !== undefined) console.log(perRequest);
    console.log(`load average before ${loadBefore.join(' ')}, after ${loadAfter.join(' ')} (2 cores)`);
    console.log(
      `CPU wake latency over the run: ${cpuWakeLatencyUs === null ? 'no request' : `${cpuWakeLatencyUs} us ${cpuWakeLatency.held ? 'held' : `not held (${cpuWakeLatency.problem ?? '?'})`}`}`,
    );
    console.log(`wrote ${join(out, 'compare.json')}, compare-detail.json and compare.svg`);
    return 0;
  } finally {
    wakeRequest?.release();
    await stopAll();
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  async (error: unknown) => {
    await stopAll();
    console.error(`compare: ${error instanceof Error ? error.message : String(error)}`);
    process.exitCode = 1;
  },
);
