// The Mooncake conversation trace (test/fixtures/traces) replayed through a real target with a
// pool of 20,000 blocks, once with the pool alone (the client frees its least recently used block
// to make room, as an LRU KV cache over a DRAM-only node does) and once over a larger durable
// tier (the target demotes at the quota and promotes on LOAD; the tier drops its least recently
// used blocks at its cap). The hit rule is the trace's: a request's blocks are hits up to its
// first miss. Both hit rates are printed; the tier's must be the higher.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { resolveTargetSettings } from '../../host/kbtp/server/target-config.ts';
import { startTarget } from '../../host/kbtp/server/target.ts';
import { connect, type KbtpSession } from '../../host/kbtp/initiator.ts';
import { KbtpStatusError } from '../../host/kbtp/errors.ts';
import { loadTrace, modelHitRate, type Trace } from '../../host/bench/trace.ts';

const TRACE = fileURLToPath(new URL('../fixtures/traces/mooncake-conversation.jsonl', import.meta.url));
const REQUESTS = 2500;
const POOL = 20_000;
const BLOCK = 4096;

function payload(id: number): Uint8Array {
  const data = new Uint8Array(64);
  new DataView(data.buffer).setUint32(0, id);
  data.fill(id & 0xff, 4);
  return data;
}

/** Replays the trace; `evict` (pool alone) frees the least recently used block at POOL blocks. */
async function replay(session: KbtpSession, trace: Trace, handles: Map<number, number>, evict: boolean): Promise<{ hits: number; references: number }> {
  const stored = new Map<number, true>(); // LRU order: what the client stored and did not free
  let hits = 0;
  for (let r = 0; r < trace.requests; r++) {
    const ids = Array.from(trace.blockIds.subarray(trace.starts[r] ?? 0, trace.starts[r + 1] ?? 0));
    const present = await Promise.all(
      ids.map(async (id) => {
        if (!stored.has(id)) return false;
        try {
          const loaded = await session.load(BigInt(handles.get(id) ?? 0));
          assert.equal(loaded.data, payload(id), `block ${id} came back with other bytes`);
          return true;
        } catch (error) {
          // Dropped by the durable tier at its cap: the cache forgot it.
          if (error instanceof KbtpStatusError && error.statusName === 'NOT_VALID') {
            stored.delete(id);
            return false;
          }
          throw error;
        }
      }),
    );
    let inPrefix = true;
    const stores: Array<Promise<unknown>> = [];
    for (const [i, id] of ids.entries()) {
      if (present[i] === true) {
        if (inPrefix) hits += 1;
        stored.delete(id);
        stored.set(id, true);
        continue;
      }
      inPrefix = false;
      if (evict && stored.size >= POOL) {
        const oldest = stored.keys().next().value as number;
        stored.delete(oldest);
        await session.free(BigInt(handles.get(oldest) ?? 0));
      }
      stored.set(id, true);
      stores.push(session.allocStore(BigInt(handles.get(id) ?? 0), payload(id), { seal: true }));
    }
    await Promise.all(stores);
  }
  return { hits, references: trace.blockIds.length };
}

test('Mooncake trace, 20,000-block pool: a larger durable tier gives a higher hit rate than the pool alone', async () => {
  const trace = loadTrace(TRACE, REQUESTS);
  const handles = new Map<number, number>();
  for (const id of trace.blockIds) if (!handles.has(id)) handles.set(id, handles.size);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kbtp-mooncake-'));
  const results: Record<string, { hits: number; references: number }> = {};
  try {
    for (const variant of ['pool alone', 'pool + durable tier'] as const) {
      const durable = variant !== 'pool alone';
      const settings = resolveTargetSettings({
        listen: '127.0.0.1:0',
        workers: 2,
        pool: { blockSize: BLOCK, blockCount: POOL, handleCount: handles.size, maxInline: 256 },
        ...(durable ? { durable: { dataDir: dir, capacity: '180MiB' } } : {}),
      });
      const target = await startTarget(settings, { log: () => undefined });
      try {
        const session = await connect(`127.0.0.1:${target.port}`, { tenant: 'default', pipeline: 32 });
        results[variant] = await replay(session, trace, handles, !durable);
        await session.close(1000);
        if (durable) {
          const stats = await target.stats();
          assert.ok(
            (stats.durable?.demotions ?? 0) > 0 && stats.promotions > 0,
            'the replay went through demotion (at the quota or the watermark) and promotion',
          );
          assert.ok((stats.durable?.bytesUsed ?? Infinity) <= 180 * 2 ** 20, 'the tier stayed within its cap');
        }
        assert.ok(target.audit().ok);
      } finally {
        await target.stop(1000);
      }
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const pool = results['pool alone'];
  const tier = results['pool + durable tier'];
  assert.ok(pool !== undefined && tier !== undefined);
  const rate = (r: { hits: number; references: number }): string => `${((100 * r.hits) / r.references).toFixed(2)} %`;
  console.log(
    `  Mooncake trace, ${REQUESTS} requests, ${pool.references} block references: pool alone ${rate(pool)} hits,` +
      ` pool + durable tier ${rate(tier)} (LRU model: ${((100 * modelHitRate(trace, POOL).hits) / pool.references).toFixed(2)} % at ${POOL} blocks)`,
  );
  assert.is(pool.hits, modelHitRate(trace, POOL).hits, 'the pool alone behaves as an LRU of 20,000 blocks');
  assert.ok(tier.hits > pool.hits, `durable tier ${tier.hits} hits, pool alone ${pool.hits}`);
});

test.run();
