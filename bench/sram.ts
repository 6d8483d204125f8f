// How many modelled accesses per second the SRAM model sustains. The access stream is built
// up front in typed arrays (a mix of QP contexts, translations and completions over a working
// set larger than the cache, so hits, misses, evictions and write-backs all happen), then
// replayed for a short, fixed wall-clock time per configuration. Results: bench/results/sram.json.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SramCache } from '../host/sram/cache.ts';
import { EntryKind } from '../host/sram/kinds.ts';
import { SramNicObserver } from '../host/sram/nic-observer.ts';
import { createPolicy } from '../host/sram/policy.ts';
import { Random } from '../host/sram/random.ts';

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

/** 40% QPC (of 1500 QPs), 10% MPT (64 regions), 40% MTT (4000 pages), 10% CQC (100 CQs). */
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
  hitRate: number;
}

function measure(name: string, makeCache: () => SramCache, stream: Stream): CaseResult {
  const cache = makeCache();
  replay(cache, stream); // warm the JIT and the cache
  cache.resetCounters();
  let accesses = 0;
  const start = process.hrtime.bigint();
  let elapsed = 0;
  while (elapsed < SECONDS_PER_CASE) {
    replay(cache, stream);
    accesses += STREAM;
    elapsed = Number(process.hrtime.bigint() - start) / 1e9;
  }
  const result = { name, accesses, seconds: elapsed, accessesPerSecond: accesses / elapsed, hitRate: cache.stats().hitRate };
  console.log(`${name.padEnd(34)} ${(result.accessesPerSecond / 1e6).toFixed(1).padStart(6)} M accesses/s  (hit rate ${(result.hitRate * 100).toFixed(1)}%)`);
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
  let messages = 0;
  const start = process.hrtime.bigint();
  let elapsed = 0;
  while (elapsed < SECONDS_PER_CASE) {
    run();
    messages += STREAM;
    elapsed = Number(process.hrtime.bigint() - start) / 1e9;
  }
  const stats = observer.cache.stats();
  const result = {
    name: 'NicObserver adapter (4 accesses/msg)',
    accesses: stats.accesses,
    seconds: elapsed,
    accessesPerSecond: stats.accesses / elapsed,
    hitRate: stats.hitRate,
  };
  console.log(
    `${result.name.padEnd(34)} ${(result.accessesPerSecond / 1e6).toFixed(1).padStart(6)} M accesses/s  ` +
      `(${((messages / elapsed) / 1e6).toFixed(1)} M messages/s, hit rate ${(result.hitRate * 100).toFixed(1)}%)`,
  );
  return result;
}

const stream = buildStream(1);
const cases: CaseResult[] = [
  measure('shared-lru, 2048 lines, fully assoc', () => new SramCache({ lines: 2048 }), stream),
  measure('shared-lru, 2048 lines, 8-way', () => new SramCache({ lines: 2048, associativity: 8 }), stream),
  measure('partitioned, 2048 lines', () => new SramCache({ lines: 2048, policy: createPolicy('partitioned') }), stream),
  measure('hw-assisted, 65536 lines', () => new SramCache({ lines: 65_536, policy: createPolicy('hw-assisted') }), stream),
  measureObserver(),
];

const slowest = Math.min(...cases.map((c) => c.accessesPerSecond));
const passed = slowest >= TARGET_PER_SECOND;
console.log(`slowest ${(slowest / 1e6).toFixed(1)} M accesses/s; target ${TARGET_PER_SECOND / 1e6} M/s: ${passed ? 'met' : 'NOT met'}`);

const here = dirname(fileURLToPath(import.meta.url));
// From dist/bench/ the results still go to the source tree's bench/results/.
const resultsDir = here.endsWith(join('dist', 'bench')) ? join(here, '..', '..', 'bench', 'results') : join(here, 'results');
mkdirSync(resultsDir, { recursive: true });
const output = {
  benchmark: 'sram',
  node: process.version,
  date: new Date().toISOString(),
  secondsPerCase: SECONDS_PER_CASE,
  targetAccessesPerSecond: TARGET_PER_SECOND,
  met: passed,
  cases,
};
writeFileSync(join(resultsDir, 'sram.json'), `${JSON.stringify(output, null, 2)}\n`);
console.log(`wrote ${join(resultsDir, 'sram.json')}`);
process.exitCode = passed ? 0 : 1;
