// 32 sessions pipelining at once across 2 worker threads, every byte checked.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { resolveTargetSettings } from '../../host/kbtp/server/target-config.ts';
import { startRig } from '../support/rig.ts';

test('32 sessions x 8 requests in flight, 2 workers: all data comes back intact', async () => {
  const rig = await startRig(
    resolveTargetSettings({
      listen: '127.0.0.1:0',
      workers: 2,
      pool: { blockSize: 16384, blockCount: 512, handleCount: 2048 },
      session: { credits: 8 },
      tenants: [{ name: 'open', open: true, quota: 512 }],
    }),
  );
  try {
    const digest = (data: Uint8Array): string => createHash('sha256').update(data).digest('hex');
    const results = await Promise.all(
      Array.from({ length: 32 }, async (_, s) => {
        const session = await rig.session('open', { pipeline: 8 });
        assert.is(session.depth, 8);
        let checked = 0;
        for (let round = 0; round < 3; round++) {
          const handles = Array.from({ length: 8 }, (_, i) => BigInt(s * 64 + round * 8 + i));
          // Half above Max Inline (8192): those go through the target's RDMA Read.
          const blocks = handles.map((handle, i) => new Uint8Array(i % 2 === 0 ? 12000 : 3000).map((_, j) => Number((handle * 131n + BigInt(j)) & 0xffn)));
          await Promise.all(handles.map((handle, i) => session.allocStore(handle, blocks[i] ?? new Uint8Array(0), { seal: true })));
          const loaded = await Promise.all(handles.map((handle) => session.load(handle)));
          loaded.forEach((result, i) => {
            assert.is(digest(result.data), digest(blocks[i] ?? new Uint8Array(0)), `session ${s} handle ${handles[i]}`);
            checked += 1;
          });
          if (round < 2) await Promise.all(handles.map((handle) => session.free(handle)));
        }
        return checked;
      }),
    );
    assert.is(
      results.reduce((a, b) => a + b, 0),
      32 * 24,
    );
    // Which worker accepts is the kernel's choice: a burst of 32 connects split 4/28 in one run
    // of six at load 5, so one worker taking all of them is rare but possible. Sessions opened one
    // at a time settle it; a worker that cannot accept at all still fails after 32 of them.
    let perWorker = await rig.target.workerStats();
    for (let extra = 0; extra < 32 && perWorker.some((stats) => stats.sessionsTotal === 0); extra++) {
      const session = await rig.session('open');
      await session.close();
      perWorker = await rig.target.workerStats();
    }
    assert.is(perWorker.length, 2);
    for (const stats of perWorker)
      assert.ok(stats.sessionsTotal > 0, `both workers served sessions (${perWorker.map((stats) => stats.sessionsTotal).join(' / ')})`);
    const audit = rig.target.audit();
    assert.ok(audit.ok);
    assert.is(audit.bound, 32 * 8);
  } finally {
    await rig.stop();
  }
});

test.run();
