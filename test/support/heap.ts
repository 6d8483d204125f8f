// Heap measurements of the allocation tests (issue 16): the heap kept after a full collection,
// and the octets allocated per unit of work, counted from the used heap over runs in which no
// collection ran (a count of octets, independent of the machine's speed and load).
import { PerformanceObserver } from 'node:perf_hooks';
import v8 from 'node:v8';
import vm from 'node:vm';

v8.setFlagsFromString('--expose-gc');
const collect = vm.runInNewContext('gc') as () => void;

/** Heap and external memory in use after two full collections. */
export function heapAfterFullCollection(): number {
  collect();
  collect();
  const usage = process.memoryUsage();
  return usage.heapUsed + usage.external;
}

/**
 * Octets allocated per unit: the used heap's growth over up to 12 runs of `run` (each doing
 * `units` units of work) in which no collection ran, the smallest; NaN when every run saw one.
 */
export async function sampleRuns(units: number, run: () => Promise<void> | void): Promise<number> {
  const collections: number[] = [];
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) collections.push(entry.startTime);
  });
  observer.observe({ entryTypes: ['gc'] });
  let best = Number.NaN;
  try {
    for (let attempt = 0; attempt < 12; attempt++) {
      const started = performance.now();
      const before = v8.getHeapStatistics().used_heap_size;
      await run();
      const after = v8.getHeapStatistics().used_heap_size;
      const ended = performance.now();
      // gc entries arrive asynchronously: Node creates one from a native immediate after the
      // collection and hands it to observers from a second one, so a single setImmediate missed
      // a collection in the run's last turn (and a missed one makes a run look cheap).
      await new Promise((resolve) => setTimeout(resolve, 20));
      if (collections.some((at) => at >= started && at <= ended) || after < before) continue;
      const perUnit = (after - before) / units;
      if (Number.isNaN(best) || perUnit < best) best = perUnit;
    }
  } finally {
    observer.disconnect();
  }
  return best;
}
