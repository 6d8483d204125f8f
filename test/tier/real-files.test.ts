// The tier over the real file system: a round trip through a restart, and the directory's size
// under the capacity.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DurableTier } from '../../host/tier/tier.ts';
import { journalFrames, corrupt, isGroupWith } from './journal-frames.ts';

test('blocks written to a real directory come back after reopening, within the cap', async () => {
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), 'kbtp-tier-'));
  try {
    const capacity = 3 << 20;
    const options = { directory, capacityBytes: capacity, blockSize: 65536, handleBase: 100n, handleCount: 1024, tenants: [] };
    const tier = await DurableTier.open(options);
    const data = (i: number): Uint8Array => new Uint8Array(65536).fill(i);
    const count = tier.sizing.maxSlots + 5;
    for (let i = 0; i < count; i += 8) {
      await Promise.all(Array.from({ length: Math.min(8, count - i) }, (_, k) => tier.seal(i + k, 3, data(i + k))));
    }
    assert.is(tier.stats().blocksDurable, tier.sizing.maxSlots);
    await tier.close();
    const bytes = fs.readdirSync(directory).reduce((sum, name) => sum + fs.statSync(path.join(directory, name)).size, 0);
    assert.ok(bytes <= capacity, `${bytes} octets in the directory, over the ${capacity} cap`);
    const again = await DurableTier.open(options);
    assert.is(again.recovery.blocksRecovered, again.sizing.maxSlots);
    const into = new Uint8Array(65536);
    await again.read(count - 1, into);
    assert.equal(into, data(count - 1));
    await again.close();
  } finally {
    fs.rmSync(directory, { recursive: true, force: true });
  }
});

test('a FREE whose journal record rots on a real disk stays freed after a restart', async () => {
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), 'kbtp-tier-'));
  try {
    const options = { directory, capacityBytes: 4 << 20, blockSize: 4096, handleBase: 0n, handleCount: 64, tenants: [] };
    const data = (i: number): Uint8Array => new Uint8Array(4096).fill(i + 1);
    const tier = await DurableTier.open(options);
    for (const i of [1, 2, 3]) await tier.seal(i, 4, data(i));
    await tier.unbind(2, 5);
    await tier.seal(4, 4, data(4));
    await tier.close();
    const journal = fs
      .readdirSync(directory)
      .filter((name) => name.startsWith('journal-'))
      .sort()
      .at(-1);
    assert.ok(journal !== undefined);
    const file = path.join(directory, journal);
    const bytes = new Uint8Array(fs.readFileSync(file));
    const free = journalFrames(bytes).find(isGroupWith('u', 2));
    assert.ok(free !== undefined, 'the FREE is in the journal');
    corrupt(bytes, free);
    fs.writeFileSync(file, bytes);
    const again = await DurableTier.open(options);
    assert.ok(again.recovery.checksumFailures >= 1);
    assert.not.ok(again.holds(2), 'the freed block came back');
    assert.ok(again.resumeGeneration(2) > 5, `handle 2 resumes at ${again.resumeGeneration(2)}, its FREE showed 5`);
    const into = new Uint8Array(4096);
    for (const i of [1, 3, 4]) {
      await again.read(i, into);
      assert.equal(into, data(i));
    }
    await again.close();
  } finally {
    fs.rmSync(directory, { recursive: true, force: true });
  }
});

test.run();
