// The BLOCK tier replay of the Mooncake trace must agree with the reference LRU figures of the
// trace's README (test/fixtures/README.md; same rule: hits count only up to a request's first miss),
// and hit for hit with an independent Map-based LRU.
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { REFERENCE_HIT_RATES, UNLIMITED, replayBlockTier } from '../../host/sram/experiments/block-tier.ts';
import { loadBlockTrace, parseBlockTrace, type BlockTrace } from '../../host/sram/trace.ts';

const TRACE = fileURLToPath(new URL('../fixtures/traces/mooncake-conversation.jsonl', import.meta.url));
const trace = loadBlockTrace(TRACE);

/** Prefix hits of a plain Map-based LRU (Map keeps insertion order; re-inserting refreshes). */
function mapLruPrefixHits(blocks: BlockTrace, capacity: number): number {
  const lru = new Map<number, true>();
  let hits = 0;
  for (let request = 0; request < blocks.requests; request++) {
    let inPrefix = true;
    for (let at = blocks.starts[request]!; at < blocks.starts[request + 1]!; at++) {
      const id = blocks.blockIds[at]!;
      if (lru.delete(id)) {
        if (inPrefix) hits++;
      } else {
        inPrefix = false;
        if (lru.size >= capacity) lru.delete(lru.keys().next().value as number);
      }
      lru.set(id, true);
    }
  }
  return hits;
}

test('the trace is the one the README describes', () => {
  assert.is(trace.requests, 12_031);
  assert.is(trace.blockIds.length, 288_500);
  assert.is(trace.distinctBlocks, 182_790);
});

for (const capacity of [1000, 5000, 20000, 50000, UNLIMITED]) {
  const name = capacity === UNLIMITED ? 'unlimited' : `${capacity} blocks`;
  test(`LRU prefix-hit rate at ${name} agrees with the README within 0.1 percentage points`, () => {
    const lines = capacity === UNLIMITED ? trace.distinctBlocks : capacity;
    const replay = replayBlockTier(trace, lines);
    const rate = replay.prefixHits / replay.references;
    const reference = REFERENCE_HIT_RATES.get(capacity)!;
    assert.ok(Math.abs(rate - reference) <= 0.001, `${(rate * 100).toFixed(3)}% vs README ${(reference * 100).toFixed(1)}%`);
    if (capacity === 1000 || capacity === 20000) {
      assert.is(replay.prefixHits, mapLruPrefixHits(trace, lines), 'same hits as an independent LRU');
    }
  });
}

test("the counting rule: hits after a request's first miss do not count as prefix hits", () => {
  const tiny = parseBlockTrace('{"hash_ids":[1,2,3]}\n{"hash_ids":[1,9,3]}\n', 'inline');
  const replay = replayBlockTier(tiny, 10);
  assert.is(replay.references, 6);
  assert.is(replay.hits, 2, 'blocks 1 and 3 of the second request are cached');
  assert.is(replay.prefixHits, 1, 'block 3 follows the miss on 9');
});

test('a malformed trace line is named', () => {
  assert.throws(() => parseBlockTrace('{"hash_ids":[1]}\nnot json\n', 't.jsonl'), /t\.jsonl:2: not a JSON object/);
  assert.throws(() => parseBlockTrace('{"hash_ids":[-1]}\n', 't.jsonl'), /t\.jsonl:1: hash id -1 is not an integer/);
  assert.throws(() => parseBlockTrace('{"input_length":5}\n', 't.jsonl'), /t\.jsonl:1: missing "hash_ids" array/);
});

test.run();
