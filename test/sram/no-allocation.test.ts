// The model's access path must not allocate: millions of accesses (hits, misses, evictions,
// write-backs, over many owners) run without a single garbage collection. A per-access
// allocation of even a few bytes would fill the young generation, and force a scavenge, many
// times over in this many calls (32 bytes per call: about 60 collections). One collection is
// tolerated: uvu runs every test file in one process, and a collection another file's test set
// in motion may finish during the loop.
//
// What is measured is the optimized code. Until V8's optimizing compiler (a background thread)
// has compiled the loop, it runs as bytecode, where every Float64Array counter update allocates
// (32 octets per `+= 1`): in make test's single process, behind every optimization the earlier
// files queued on a loaded machine, that compile landed late enough for the loop to see 26
// collections (session 6 reproduced it alone with `--concurrent-recompilation-delay=500`: 17).
// So each test first runs batches until one grows the heap by (next to) nothing, for at most
// WARM_LIMIT_MS; code that allocates per call never gets there and fails below.
import v8 from 'node:v8';
import vm from 'node:vm';
import { PerformanceObserver } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { SramCache } from '../../host/sram/cache.ts';
import { EntryKind } from '../../host/sram/kinds.ts';
import { SramNicObserver } from '../../host/sram/nic-observer.ts';
import { Random } from '../../host/util/random.ts';

const CALLS = 3_000_000;
v8.setFlagsFromString('--expose-gc');
const collect = vm.runInNewContext('gc') as () => void;
const WARM_BATCH = 200_000;
const WARM_LIMIT_MS = 30_000;

/**
 * Runs `run(WARM_BATCH)` until a batch grows the used heap by less than 0.05 octets per call
 * (about 600 octets per batch once every function on the path is optimized; a batch with one of
 * them still in bytecode grows by 0.5 octets per call or more), or WARM_LIMIT_MS passed; yields
 * between batches so a finished background compile can be installed.
 */
async function warmUntilOptimized(run: (count: number) => void): Promise<void> {
  const started = performance.now();
  for (;;) {
    const before = v8.getHeapStatistics().used_heap_size;
    run(WARM_BATCH);
    const grown = v8.getHeapStatistics().used_heap_size - before;
    if ((grown >= 0 && grown < WARM_BATCH / 20) || performance.now() - started > WARM_LIMIT_MS) return;
    await sleep(1);
  }
}

/**
 * Collections while `work` runs. A full collection first, and its entry (delivered later, as
 * every gc entry is) let pass before observing: what earlier tests left (a marking under way, a
 * heap to compact; in a test/kbtp + test/sram run, 2 collections) is not counted against `work`.
 */
async function garbageCollectionsDuring(work: () => void): Promise<number> {
  collect();
  collect();
  await sleep(50);
  let collections = 0;
  const observer = new PerformanceObserver((list) => {
    collections += list.getEntries().length;
  });
  observer.observe({ entryTypes: ['gc'] });
  work();
  await sleep(50); // gc entries are delivered asynchronously
  observer.disconnect();
  return collections;
}

test('SramCache.access allocates nothing', async () => {
  const cache = new SramCache({ lines: 2048, associativity: 8 });
  const random = new Random(5);
  const keys = new Uint32Array(1 << 16).map(() => random.below(6000));
  const run = (count: number) => {
    for (let i = 0; i < count; i++) {
      const key = keys[i & 0xffff]!;
      const kind = (key & 3) === 0 ? EntryKind.MTT : EntryKind.QPC;
      cache.access(kind, key, key >>> 4, i & 127, kind === EntryKind.QPC);
    }
  };
  await warmUntilOptimized(run); // compile, grow owner counters
  const collections = await garbageCollectionsDuring(() => run(CALLS));
  assert.ok(collections <= 1, `${collections} garbage collections`);
  assert.ok(cache.stats().misses > CALLS / 10, 'the run missed and evicted');
  assert.ok(cache.stats().pcieWrites > 0, 'and wrote dirty lines back');
});

test('the NicObserver adapter allocates nothing per message', async () => {
  const observer = new SramNicObserver(new SramCache({ lines: 1024 }));
  const run = (count: number) => {
    for (let i = 0; i < count; i++) {
      const qp = i % 1500;
      observer.queuePairContext(qp, true);
      observer.memoryTranslation(7, (i % 3000) * 4096, 4096, 4096);
      observer.completionQueue(qp & 15);
    }
  };
  await warmUntilOptimized(run);
  const collections = await garbageCollectionsDuring(() => run(CALLS / 3));
  assert.ok(collections <= 1, `${collections} garbage collections`);
});

test.run();
