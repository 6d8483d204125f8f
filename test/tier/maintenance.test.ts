// The durable tier's maintenance, as the appliance's scheduled jobs and SIGHUP drive it: scrub
// (slices, corrupt blocks found, none invented while the tier serves), repair from a good copy,
// checkpoint with the data file's free tail given back, and tenants changed while serving.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { DurableTier, type TierOptions, type DropGate } from '../../host/tier/tier.ts';
import type { FileLayer, TierFile } from '../../host/tier/files.ts';
import { Random } from '../../host/util/random.ts';
import { MemoryFiles } from './memory-files.ts';

const DIR = '/tier';
const BLOCK = 4096;

function options(files: MemoryFiles, extra: Partial<TierOptions> = {}): TierOptions {
  return {
    directory: DIR,
    capacityBytes: 8 << 20,
    blockSize: BLOCK,
    handleBase: 0n,
    handleCount: 256,
    tenants: [{ first: 0, count: 128, durableQuota: 1000 }],
    files,
    ...extra,
  };
}

function blockData(index: number, generation: number): Uint8Array {
  const data = new Uint8Array(BLOCK);
  for (let i = 0; i < BLOCK; i++) data[i] = (index * 31 + generation * 7 + i) & 0xff;
  return data;
}

/** Reads that take a turn of the event loop before they copy, as a disk's do: writes get in between. */
function slowReads(files: FileLayer): FileLayer {
  return {
    list: (directory) => files.list(directory),
    exists: (file) => files.exists(file),
    rename: (from, to) => files.rename(from, to),
    remove: (file) => files.remove(file),
    syncDirectory: (directory) => files.syncDirectory(directory),
    makeDirectory: (directory) => files.makeDirectory(directory),
    async open(file, create): Promise<TierFile> {
      const inner = await files.open(file, create);
      return {
        path: inner.path,
        write: (data, position) => inner.write(data, position),
        writev: (data, position) => inner.writev(data, position),
        datasync: () => inner.datasync(),
        size: () => inner.size(),
        truncate: (length) => inner.truncate(length),
        close: () => inner.close(),
        read: async (into, position) => {
          await new Promise((resolve) => setImmediate(resolve));
          return inner.read(into, position);
        },
      };
    },
  };
}

/** Scrubs the whole tier in slices of `slice` blocks; returns what every slice found. */
async function scrubPass(tier: DurableTier, slice: number): Promise<{ checked: number; corrupt: number[]; slices: number }> {
  let from = 0;
  let checked = 0;
  let slices = 0;
  const corrupt: number[] = [];
  do {
    const result = await tier.scrub(from, slice);
    assert.ok(result.checked <= slice, 'a slice checks at most its size');
    checked += result.checked;
    corrupt.push(...result.corrupt.map((bad) => bad.index));
    from = result.nextSlot;
    slices += 1;
  } while (from !== 0 && slices < 1000);
  return { checked, corrupt, slices };
}

test('scrub: slices cover the tier, find flipped bits, count them; repair from a good copy', async () => {
  const files = new MemoryFiles();
  const tier = await DurableTier.open(options(files));
  for (let i = 0; i < 20; i++) await tier.seal(i, 2, blockData(i, 2));
  const clean = await scrubPass(tier, 8);
  assert.equal(clean, { checked: 20, corrupt: [], slices: 3 });
  const slot = tier.sizing.slotSize;
  const data = files.contentOf(`${DIR}/blocks`);
  for (const index of [5, 12]) data[index * slot + 100] = (data[index * slot + 100] ?? 0) ^ 0x10;
  const found = await scrubPass(tier, 8);
  assert.equal(found.corrupt, [5, 12]);
  assert.is(tier.stats().checksumFailures, 2);

  assert.not.ok(await tier.repair(5, 2, blockData(6, 2)), 'a copy that does not match the sealed CRC is refused');
  assert.not.ok(await tier.repair(5, 3, blockData(5, 2)), 'another Generation is refused');
  assert.ok(await tier.repair(5, 2, blockData(5, 2)));
  const into = new Uint8Array(BLOCK);
  await tier.read(5, into);
  assert.equal(into, blockData(5, 2));
  assert.equal((await scrubPass(tier, 100)).corrupt, [12]);
  await tier.close();
});

test('scrub while the tier seals and frees: no block is reported corrupt that is not', async () => {
  const files = new MemoryFiles();
  const tier = await DurableTier.open(options(files, { files: slowReads(files) }));
  const random = new Random(7);
  const generation = new Map<number, number>();
  for (let i = 0; i < 64; i++) {
    await tier.seal(i, 2, blockData(i, 2));
    generation.set(i, 2);
  }
  let stop = false;
  // Frees and re-seals move blocks between slots and reuse freed slots under the scrubber.
  const churn = (async () => {
    while (!stop) {
      const index = random.below(64);
      const g = generation.get(index) ?? 2;
      if (tier.holds(index)) await tier.unbind(index, g + 1);
      else await tier.seal(index, g + 1, blockData(index, g + 1));
      generation.set(index, g + 1);
      // One change per turn of the event loop, so that reads in progress see some.
      if (random.below(2) === 0) await new Promise((resolve) => setImmediate(resolve));
    }
  })();
  let passes = 0;
  let checked = 0;
  while (passes < 30) {
    const pass = await scrubPass(tier, 5);
    assert.equal(pass.corrupt, [], `pass ${passes}`);
    checked += pass.checked;
    passes += 1;
  }
  stop = true;
  await churn;
  assert.ok(checked > 0);
  assert.is(tier.stats().checksumFailures, 0);
  await tier.close();
});

test('checkpoint: written between groups, gives the free tail back, and a restart recovers from it', async () => {
  const files = new MemoryFiles();
  const tier = await DurableTier.open(options(files));
  const slot = tier.sizing.slotSize;
  for (let i = 0; i < 30; i++) await tier.seal(i, 2, blockData(i, 2));
  for (let i = 20; i < 30; i++) await tier.unbind(i, 3);
  const slots = (): Promise<number> => files.open(`${DIR}/blocks`, false).then(async (file) => (await file.size()) / slot);
  assert.is(await slots(), 30);
  const trimmed = await tier.checkpoint();
  assert.equal(trimmed, { written: true, trimmedSlots: 10, journal: trimmed.journal });
  assert.is(await slots(), 20, 'the free tail went back to the file system');
  assert.not.ok((await tier.checkpoint()).written, 'nothing new: nothing written');
  // Seals in flight around a checkpoint: it waits for the committer between groups, and they for it.
  const sealing = [30, 31, 32].map((i) => tier.seal(i, 2, blockData(i, 2)));
  const [during] = await Promise.all([tier.checkpoint(), ...sealing]);
  assert.ok(during.journal > trimmed.journal);
  assert.is(await slots(), 23);
  await tier.close();

  const restarted = await DurableTier.open(options(files.afterCrash()));
  for (let i = 0; i < 33; i++) assert.is(restarted.holds(i), i < 20 || i >= 30, `handle ${i}`);
  const into = new Uint8Array(BLOCK);
  for (const i of [0, 19, 30, 32]) {
    await restarted.read(i, into);
    assert.equal(into, blockData(i, 2));
  }
  assert.is(restarted.recovery.recordsDropped, 0);
  await restarted.close();
});

test('tenants changed while serving: a new Durable Quota applies at once, dropping the least recently used', async () => {
  const files = new MemoryFiles();
  const settled: number[] = [];
  const gate: DropGate = {
    claim: (index) => (index === 3 ? 'skip' : 'claimed'),
    settle: (index, generation) => {
      if (generation !== undefined) settled.push(index);
    },
  };
  const tier = await DurableTier.open(options(files, { drops: gate }));
  for (let i = 0; i < 6; i++) await tier.seal(i, 2, blockData(i, 2));
  for (const i of [130, 131, 132]) await tier.seal(i, 2, blockData(i, 2));
  // Tenant 0's quota falls to 2 (block 3 cannot be dropped: resident); a tenant with 128.. arrives with a quota of 1.
  const change = await tier.setTenants([
    { first: 0, count: 128, durableQuota: 2 },
    { first: 128, count: 128, durableQuota: 1 },
  ]);
  assert.equal(settled, [0, 1, 2, 4, 130, 131]);
  assert.equal(change, { dropped: 6, overQuota: 0 });
  assert.equal(
    [0, 1, 2, 3, 4, 5, 130, 131, 132].map((i) => tier.holds(i)),
    [false, false, false, true, false, true, false, false, true],
  );
  // The new tenant's quota holds for later seals too.
  await tier.seal(140, 2, blockData(140, 2));
  assert.ok(tier.holds(140) && !tier.holds(132));
  await tier.close();
});

test('a scrub under way when the tier closes stops there and reports no finding', async () => {
  const files = new MemoryFiles();
  const tier = await DurableTier.open(options(files, { files: slowReads(files) }));
  for (let i = 0; i < 20; i++) await tier.seal(i, 2, blockData(i, 2));
  const scrubbing = tier.scrub(0, 100);
  await tier.close();
  const result = await scrubbing;
  assert.ok(result.checked < 20, `checked ${result.checked}`);
  assert.equal([result.corrupt, result.unreadable], [[], []]);
  assert.is(tier.stats().readErrors, 0);
});

test('recovery tells how far it is: once before each journal it replays', async () => {
  const files = new MemoryFiles();
  const tier = await DurableTier.open(options(files));
  await tier.seal(1, 2, blockData(1, 2));
  await tier.close();
  const calls: Array<[number, number]> = [];
  const again = await DurableTier.open(options(files.afterCrash(), { recoveryProgress: (done, total) => calls.push([done, total]) }));
  assert.equal(calls, [[0, 1]]);
  assert.ok(again.holds(1));
  await again.close();
});

test.run();
