// `sramModel` in the target config (kbtp target --sram-model): each worker's RNIC reports to an
// SRAM cache model, and the target's statistics carry the modelled figures per QP and in total.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startRig, testSettings } from '../support/rig.ts';
import { startTarget } from '../../host/kbtp/server/target.ts';

test('a target with an SRAM model reports hits, misses and PCIe crossings per QP', async () => {
  const work = mkdtempSync(join(tmpdir(), 'kbtp-sram-'));
  try {
    const config = join(work, 'sram.json');
    writeFileSync(config, JSON.stringify({ lines: 64, policy: 'shared-lru' }));
    const rig = await startRig(testSettings({ workers: 1, sramModel: config }));
    try {
      const alpha = await rig.session('alpha');
      for (let i = 0n; i < 20n; i++) await alpha.allocStore(i, new Uint8Array(2000).fill(Number(i)), { seal: true });
      for (let i = 0n; i < 20n; i++) await alpha.load(i);
      const stats = await rig.target.stats();
      const report = (stats.sram ?? []).join('\n');
      assert.match(report, /worker 1:/);
      assert.match(report, /hit/i);
      assert.match(report, /PCIe/i);
      assert.match(report, /QP \d+/);
    } finally {
      await rig.stop();
    }
    const plain = await startRig(testSettings({ workers: 1 }));
    assert.is((await plain.target.stats()).sram, undefined, 'off by default');
    await plain.stop();
    writeFileSync(config, JSON.stringify({ lines: -3 }));
    let refused = '';
    await startTarget(testSettings({ sramModel: config }), { log: () => undefined }).catch((error: Error) => {
      refused = error.message;
    });
    assert.match(refused, /lines/);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

test.run();
