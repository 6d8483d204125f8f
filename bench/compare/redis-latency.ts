// Redis's request latency measured as kbtp bench measures kbtp's: from the request's first write
// to the last octet of its reply. redis-benchmark stops its clock at the first read event of a
// reply (src/redis-benchmark.c readHandler: "Calculate latency only for the first read event ...
// Parsing overhead is not part of the latency"), which for a 1 MiB GET is the first of its many
// reads. bench/compare/redis-latency.c, compiled here with the machine's C compiler, is a client
// shaped like redis-benchmark (one thread, N connections, -P requests written together, every
// reply parsed) that records both instants; the percentiles come from kbtp bench's own histogram.
import { LatencyHistogram } from '../../host/bench/histogram.ts';
import { buildC, run, type RedisResult } from './tools.ts';
import { processCpuUs } from './cpu.ts';

export interface RedisLatencyTest {
  test: string;
  requests: number;
  elapsedNs: number;
  /** The client's own CPU time over the test (user and system; it runs on one thread). */
  cpuNs: number;
  /** Each request's latency to its reply's last octet. */
  complete: LatencyHistogram;
  /** Each request's latency to the first read event after its write (redis-benchmark's). */
  firstRead: LatencyHistogram;
}

/**
 * Parses redis-latency's output: per test a line `test NAME requests N elapsed_ns E cpu_ns C`, then N
 * lines `<complete_ns> <first_read_ns>`. Anything else (a short or garbled list, a first read
 * after the reply's end) is an error: a silently short list would bias the percentiles.
 */
export function parseRedisLatencyOutput(text: string): Map<string, RedisLatencyTest> {
  const lines = text.split('\n');
  const tests = new Map<string, RedisLatencyTest>();
  let index = 0;
  const integer = (word: string | undefined, what: string): number => {
    if (word === undefined || !/^\d+$/.test(word)) throw new Error(`redis-latency: ${what} is not a number: '${word ?? ''}'`);
    return Number(word);
  };
  while (index < lines.length) {
    const line = (lines[index] ?? '').trim();
    index++;
    if (line === '') continue;
    const words = line.split(' ');
    if (words.length !== 8 || words[0] !== 'test' || words[2] !== 'requests' || words[4] !== 'elapsed_ns' || words[6] !== 'cpu_ns') {
      throw new Error(`redis-latency: expected 'test NAME requests N elapsed_ns E cpu_ns C', got '${line}'`);
    }
    const name = words[1] ?? '';
    const requests = integer(words[3], 'the request count');
    const elapsedNs = integer(words[5], 'the elapsed time');
    const cpuNs = integer(words[7], 'the CPU time');
    if (requests === 0 || elapsedNs === 0) throw new Error(`redis-latency: ${name} ran no requests or took no time`);
    const complete = new LatencyHistogram();
    const firstRead = new LatencyHistogram();
    for (let i = 0; i < requests; i++, index++) {
      const pair = (lines[index] ?? '').trim().split(' ');
      if (pair.length !== 2 || lines[index] === undefined) throw new Error(`redis-latency: ${name} printed ${i} of ${requests} latencies`);
      const completeNs = integer(pair[0], `${name} latency ${i}`);
      const firstNs = integer(pair[1], `${name} first-read latency ${i}`);
      if (firstNs > completeNs) throw new Error(`redis-latency: ${name} request ${i} was read first after its reply had ended (${firstNs} > ${completeNs} ns)`);
      complete.record(completeNs);
      firstRead.record(firstNs);
    }
    if (tests.has(name)) throw new Error(`redis-latency: ${name} reported twice`);
    tests.set(name, { test: name, requests, elapsedNs, cpuNs, complete, firstRead });
  }
  return tests;
}

/** Compiles redis-latency.c into dist/bench/compare/ unless the binary is newer; returns its path. */
export const buildRedisLatency = (): string => buildC('redis-latency');

/**
 * A run's test as make compare's row: ops/s and GB/s over the run, p50/p99 of the complete reply,
 * and the client's CPU per request and busy share (1.0: its one thread never idle).
 */
export function latencyResult(op: 'get' | 'set', size: number, clients: number, pipeline: number, measured: RedisLatencyTest): RedisResult {
  const opsPerSec = measured.requests / (measured.elapsedNs / 1e9);
  return {
    op,
    size,
    clients,
    pipeline,
    requests: measured.requests,
    opsPerSec: Math.round(opsPerSec),
    gbps: (opsPerSec * size * 8) / 1e9,
    p50Us: measured.complete.percentileNs(0.5) / 1000,
    p99Us: measured.complete.percentileNs(0.99) / 1000,
    clientUsPerOp: +(measured.cpuNs / 1000 / measured.requests).toFixed(2),
    clientBusy: +(measured.cpuNs / measured.elapsedNs).toFixed(3),
  };
}

/**
 * SET then GET of `size`-octet values, as redisBenchmark() runs them, timed to the reply's last
 * octet. Given the server's pid, each operation runs on its own and the result carries
 * redis-server's CPU per request and busy share over it (for make compare's CPU table; the run
 * includes the client's connection setup, a few hundred microseconds).
 */
export async function redisLatency(port: number, size: number, clients: number, requests: number, pipeline = 1, serverPid?: number): Promise<RedisResult[]> {
  const binary = buildRedisLatency();
  const args = (tests: string): string[] => [
    ...['--host', '127.0.0.1', '--port', String(port), '--tests', tests, '--size', String(size)],
    ...['--clients', String(clients), '--requests', String(requests), '--pipeline', String(pipeline)],
  ];
  if (serverPid === undefined) {
    const parsed = parseRedisLatencyOutput(await run(binary, args('set,get'), 300_000));
    return (['set', 'get'] as const).map((op) => {
      const measured = parsed.get(op.toUpperCase());
      if (measured === undefined) throw new Error(`redis-latency printed no ${op.toUpperCase()} result`);
      return latencyResult(op, size, clients, pipeline, measured);
    });
  }
  const results: RedisResult[] = [];
  for (const op of ['set', 'get'] as const) {
    const cpuBefore = processCpuUs(serverPid);
    const wallBefore = performance.now();
    const parsed = parseRedisLatencyOutput(await run(binary, args(op), 300_000));
    const cpuUs = processCpuUs(serverPid) - cpuBefore;
    const wallUs = (performance.now() - wallBefore) * 1000;
    const measured = parsed.get(op.toUpperCase());
    if (measured === undefined) throw new Error(`redis-latency printed no ${op.toUpperCase()} result`);
    const result = latencyResult(op, size, clients, pipeline, measured);
    result.serverUsPerOp = +(cpuUs / measured.requests).toFixed(2);
    result.serverBusy = +(cpuUs / wallUs).toFixed(3);
    results.push(result);
  }
  return results;
}

/** make compare's Redis figures for one row: see docs/BENCH.md. */
export interface RedisRowFigures {
  redis_gbps: number;
  redis_p50_us: number;
  redis_p99_us: number;
  redis_benchmark_p50_us: number;
  redis_benchmark_p99_us: number;
}

/**
 * The latency of a Redis request is the complete reply's (`complete`); redis-benchmark's own
 * first-read figures are kept beside it. Throughput is Redis's best: the higher of the two
 * clients' GB/s, so that kbtp is never compared with a slow Redis client.
 */
export function redisRowFigures(benchmark: RedisResult, complete: RedisResult): RedisRowFigures {
  const us = (value: number): number => +value.toFixed(1);
  return {
    redis_gbps: +Math.max(benchmark.gbps, complete.gbps).toFixed(3),
    redis_p50_us: us(complete.p50Us),
    redis_p99_us: us(complete.p99Us),
    redis_benchmark_p50_us: us(benchmark.p50Us),
    redis_benchmark_p99_us: us(benchmark.p99Us),
  };
}
