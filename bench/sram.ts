// How many modelled accesses per second the SRAM model sustains. The access stream is built
// up front in typed arrays (a mix of QP contexts, translations and completions over a working
// set larger than the cache, so hits, misses, evictions and write-backs all happen), then
// replayed for a short, fixed wall-clock time per configuration. Results: bench/results/sram.json.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SramCache } from '../host/sram/cache.ts';
import { EntryKind } from '../host/sram/kinds.ts';
import { SramNicObserver } from '../host/sram/nic-observer.ts';
import { createPolicy } from '../host/sram/policy.ts';
import { Random } from '../host/util/random.ts';
import { checkoutRoot } from './checkout-root.ts';

const STREAM = 1 << 20;
const SECONDS_PER_CASE = Number(process.env.SRAM_BENCH_SECONDS ?? 1.5);
const TARGET_PER_SECOND = 10_000_000;

interface Stream {
  kinds: Uint8Array;
  a: Uint32Array;
  b: Uint32Array;
  owners: Int32Array;
  writes: Uint8Array;
}

/** 40% QPC (of 1500 QPs), 10% MPT (64 regions), 40% MTT (4000 pages), 10% CQC (100 CQs): about half the accesses hit. */
function buildStream(seed: number): Stream {
  const random = new Random(seed);
  const stream: Stream = {
    kinds: new Uint8Array(STREAM),
    a: new Uint32Array(STREAM),
    b: new Uint32Array(STREAM),
    owners: new Int32Array(STREAM),
    writes: new Uint8Array(STREAM),
  };
  for (let i = 0; i < STREAM; i++) {
    const roll = random.below(100);
    const qp = random.below(1500);
    stream.owners[i] = qp % 64;
    if (roll < 40) {
      stream.kinds[i] = EntryKind.QPC;
      stream.a[i] = qp;
      stream.writes[i] = 1;
    } else if (roll < 50) {
      stream.kinds[i] = EntryKind.MPT;
      stream.a[i] = random.below(64);
    } else if (roll < 90) {
      stream.kinds[i] = EntryKind.MTT;
      stream.a[i] = random.below(64);
      stream.b[i] = random.below(4000 / 64);
    } else {
      stream.kinds[i] = EntryKind.CQC;
      stream.a[i] = random.below(100);
      stream.writes[i] = 1;
    }
  }
  return stream;
}

function replay(cache: SramCache, stream: Stream): void {
  const { kinds, a, b, owners, writes } = stream;
  for (let i = 0; i < STREAM; i++) {
    cache.access(kinds[i]! as EntryKind, a[i]!, b[i]!, owners[i]!, writes[i] === 1);
  }
}

interface CaseResult {
  name: string;
  accesses: number;
  seconds: number;
  accessesPerSecond: number;
  accessesPerCpuSecond: number;
  hitRate: number;
}

function report(result: CaseResult, extra = ''): void {
  console.log(
    `${result.name.padEnd(36)} ${(result.accessesPerSecond / 1e6).toFixed(1).padStart(6)} M accesses/s wall, ` +
      `${(result.accessesPerCpuSecond / 1e6).toFixed(1).padStart(5)} M/s CPU  (hit rate ${(result.hitRate * 100).toFixed(1)}%${extra})`,
  );
}

const ROUNDS = 3;

interface Timed {
  accesses: number;
  seconds: number;
  /** Median round, wall clock. */
  rate: number;
  /** Median round, this process's CPU time: what the model costs when other work shares the cores. */
  cpuRate: number;
}

/**
 * Rate of `run` (which performs `perRun` accesses) over ROUNDS timed rounds. The median round
 * counts, and CPU time is reported beside wall time, because other processes on this 2-core
 * machine can take the CPU away in the middle of a round.
 */
function timeRounds(run: () => void, perRun: number): Timed {
  const rates: number[] = [];
  const cpuRates: number[] = [];
  let accesses = 0;
  let seconds = 0;
  for (let round = 0; round < ROUNDS; round++) {
    let done = 0;
    const start = process.hrtime.bigint();
    const cpuStart = process.cpuUsage();
    let elapsed = 0;
    while (elapsed < SECONDS_PER_CASE / ROUNDS) {
      run();
      done += perRun;
      elapsed = Number(process.hrtime.bigint() - start) / 1e9;
    }
    const cpu = process.cpuUsage(cpuStart);
    rates.push(done / elapsed);
    cpuRates.push(done / ((cpu.user + cpu.system) / 1e6));
    accesses += done;
    seconds += elapsed;
  }
  const median = (values: number[]) => values.sort((x, y) => x - y)[Math.floor(values.length / 2)]!;
  return { accesses, seconds, rate: median(rates), cpuRate: median(cpuRates) };
}

function measure(name: string, makeCache: () => SramCache, stream: Stream): CaseResult {
  const cache = makeCache();
  replay(cache, stream); // warm the JIT and the cache
  cache.resetCounters();
  const timed = timeRounds(() => replay(cache, stream), STREAM);
  const result = {
    name,
    accesses: timed.accesses,
    seconds: timed.seconds,
    accessesPerSecond: timed.rate,
    accessesPerCpuSecond: timed.cpuRate,
    hitRate: cache.stats().hitRate,
  };
  report(result);
  return result;
}

/** The adapter path: what the RNIC pays per 4 KiB RDMA Write (QPC, MPT, one MTT, CQC). */
function measureObserver(): CaseResult {
  const observer = new SramNicObserver(new SramCache({ lines: 2048 }));
  const random = new Random(7);
  const qps = new Uint32Array(STREAM);
  const pages = new Uint32Array(STREAM);
  for (let i = 0; i < STREAM; i++) {
    qps[i] = random.below(1500);
    pages[i] = random.below(4000);
  }
  const run = () => {
    for (let i = 0; i < STREAM; i++) {
      observer.queuePairContext(qps[i]!, true);
      observer.memoryTranslation(1, pages[i]! * 4096, 4096, 4096);
      observer.completionQueue(qps[i]! & 63);
    }
  };
  run();
  observer.cache.resetCounters();
  const accessesPerMessage = 4; // QPC, MPT, one MTT, CQC
  const timed = timeRounds(run, STREAM * accessesPerMessage);
  const stats = observer.cache.stats();
  const result = {
    name: 'NicObserver adapter, 4 KiB writes',
    accesses: timed.accesses,
    seconds: timed.seconds,
    accessesPerSecond: timed.rate,
    accessesPerCpuSecond: timed.cpuRate,
    hitRate: stats.hitRate,
  };
  report(result, `, ${(result.accessesPerSecond / accessesPerMessage / 1e6).toFixed(1)} M messages/s`);
  return result;
}

/** Worst case: dirty QP contexts of 100,000 QPs, so 98% of accesses miss and write a line back. */
function buildThrashingStream(seed: number): Stream {
  const random = new Random(seed);
  const stream: Stream = {
    kinds: new Uint8Array(STREAM).fill(EntryKind.QPC),
    a: new Uint32Array(STREAM),
    b: new Uint32Array(STREAM),
    owners: new Int32Array(STREAM),
    writes: new Uint8Array(STREAM).fill(1),
  };
  for (let i = 0; i < STREAM; i++) {
    stream.a[i] = random.below(100_000);
    stream.owners[i] = i & 63;
  }
  return stream;
}

const stream = buildStream(1);
const cases: CaseResult[] = [
  measure('shared-lru, 2048 lines, fully assoc', () => new SramCache({ lines: 2048 }), stream),
  measure('shared-lru, 2048 lines, 8-way', () => new SramCache({ lines: 2048, associativity: 8 }), stream),
  measure('partitioned, 2048 lines', () => new SramCache({ lines: 2048, policy: createPolicy('partitioned') }), stream),
  measure('hw-assisted, 65536 lines (all hits)', () => new SramCache({ lines: 65_536, policy: createPolicy('hw-assisted') }), stream),
  measure('thrashing: 98% misses, write-backs', () => new SramCache({ lines: 2048 }), buildThrashingStream(2)),
  measureObserver(),
];

const slowest = Math.min(...cases.map((c) => c.accessesPerSecond));
const slowestCpu = Math.min(...cases.map((c) => c.accessesPerCpuSecond));
const passed = slowestCpu >= TARGET_PER_SECOND;
console.log(
  `slowest case: ${(slowest / 1e6).toFixed(1)} M accesses/s wall clock, ${(slowestCpu / 1e6).toFixed(1)} M per CPU second; ` +
    `target ${TARGET_PER_SECOND / 1e6} M/s: ${passed ? 'met' : 'NOT met'}`,
);

const resultsDir = join(checkoutRoot, 'bench', 'results');
mkdirSync(resultsDir, { recursive: true });
const output = {
  benchmark: 'sram',
  node: process.version,
  date: new Date().toISOString(),
  secondsPerCase: SECONDS_PER_CASE,
  targetAccessesPerSecond: TARGET_PER_SECOND,
  met: passed,
  slowestAccessesPerSecond: slowest,
  slowestAccessesPerCpuSecond: slowestCpu,
  cases,
};
writeFileSync(join(resultsDir, 'sram.json'), `${JSON.stringify(output, null, 2)}\n`);
console.log(`wrote ${join(resultsDir, 'sram.json')}`);
// A missed target is reported (above and in sram.json), not an error: timings on a shared machine vary,
// and `make bench` must go on to the other benchmarks.
