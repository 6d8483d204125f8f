// Trace replay: the counting rule (hits only up to a request's first miss) on a hand-made trace,
// through a real target; the LRU model against the README's figures; and the full Mooncake trace
// replayed against an unbounded pool, whose hit rate must be the README's 36.6%.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadTrace, modelHitRate, parseTrace, replayTrace, TraceError } from '../../host/bench/trace.ts';

const tracePath = fileURLToPath(new URL('../fixtures/traces/mooncake-conversation.jsonl', import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'kbtp-trace-test-'));
test.after(() => rmSync(scratch, { recursive: true, force: true }));

// Request 2 reuses block 1, misses 9, then holds 3 and 2 again: one prefix hit (any-hit would count 3).
const SMALL = [
  { timestamp: 0, hash_ids: [1, 2, 3] },
  { timestamp: 5, hash_ids: [1, 9, 3, 2] },
  { timestamp: 9, hash_ids: [1, 9, 4] },
]
  .map((record) => JSON.stringify(record))
  .join('\n');

test('the counting rule: hits stop at the first miss', () => {
  const trace = parseTrace(SMALL, 'small');
  const model = modelHitRate(trace);
  assert.is(model.references, 10);
  assert.is(model.hits, 1 + 2); // request 2: block 1; request 3: blocks 1 and 9
  assert.is(model.anyHits, 1 + 2 + 2);
});

test('the replay applies the same rule against a real target and checks every loaded block', async () => {
  const file = join(scratch, 'small.jsonl');
  writeFileSync(file, SMALL);
  const result = await replayTrace({ path: file, blockSize: 4096, concurrency: 4, workers: 1 });
  assert.is(result.hits, 3);
  assert.is(result.misses, 7);
  assert.is(result.presentAfterMiss, 2);
  assert.is(result.load.count, 3, 'every hit is a LOAD');
  assert.is(result.store.count, 5, 'every new block is stored once (1, 2, 3, 9, 4)');
  assert.is(result.corrupt, 0);
  assert.equal(result.errors, {});
  assert.is(result.hitRate, result.modelHitRate);
});

test('bad traces are refused with the line', () => {
  assert.throws(
    () => parseTrace('{"hash_ids": [1]}\nnot json', 'x.jsonl'),
    (error: Error) => error instanceof TraceError && /x\.jsonl:2/.test(error.message),
  );
  assert.throws(() => parseTrace('{"hash_ids": [-1]}', 'x.jsonl'), /hash id -1/);
  assert.throws(() => parseTrace('{"timestamp": "soon", "hash_ids": []}', 'x.jsonl'), /timestamp/);
  assert.throws(() => loadTrace(join(scratch, 'missing.jsonl')), /cannot read trace/);
});

if (existsSync(tracePath)) {
  test('LRU model of the Mooncake trace matches the README (4.4 / 11.0 / 28.7 / 35.5 / 36.6 %)', () => {
    const trace = loadTrace(tracePath);
    const rate = (capacity: number): number => {
      const model = modelHitRate(trace, capacity);
      return Math.round((model.hits / model.references) * 1000) / 10;
    };
    assert.is(rate(1000), 4.4);
    assert.is(rate(5000), 11.0);
    assert.is(rate(20000), 28.7);
    assert.is(rate(50000), 35.5);
    assert.is(rate(Infinity), 36.6);
  });

  test('the full trace replayed against an unbounded pool hits 36.6% of its block references', async () => {
    const result = await replayTrace({ path: tracePath, blockSize: 64, concurrency: 32, workers: 1 });
    assert.is(result.requests, 12031);
    assert.is(result.references, 288500);
    assert.is(result.distinctBlocks, 182790);
    assert.ok(result.unbounded);
    assert.is(Math.round(result.hitRate * 1000) / 10, 36.6);
    assert.is(result.hitRate, result.modelHitRate);
    assert.is(result.load.count, result.hits);
    assert.is(result.store.count, result.distinctBlocks);
    assert.is(result.corrupt, 0);
    assert.equal(result.errors, {});
  });
} else {
  test('shared trace present', () => {
    assert.unreachable(`the Mooncake trace is missing at ${tracePath}`);
  });
}

test.run();
