// The durable tier on its own: group commit, recovery, power loss, corruption, faults, capacity.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { crc32c } from '@node-rs/crc32';
import { DurableTier, TierError, type TierOptions, type DropGate } from '../../host/tier/tier.ts';
import { generationDistance, generationPlus, GENERATION_RESERVE_BATCH } from '../../host/tier/generations.ts';
import { Random } from '../../host/util/random.ts';
import { MemoryFiles } from './memory-files.ts';
import type { FileLayer, TierFile } from '../../host/tier/files.ts';
import { journalFrames, corrupt, isGroupWith, type JournalFrame } from './journal-frames.ts';

const DIR = '/tier';
const BLOCK = 4096;

function options(files: MemoryFiles, extra: Partial<TierOptions> = {}): TierOptions {
  return {
    directory: DIR,
    capacityBytes: 8 << 20,
    blockSize: BLOCK,
    handleBase: 0n,
    handleCount: 256,
    tenants: [
      { first: 0, count: 128, durableQuota: 1000 },
      { first: 128, count: 128, durableQuota: 1000 },
    ],
    files,
    ...extra,
  };
}

async function rejectsWith(work: Promise<unknown>, code: string): Promise<void> {
  try {
    await work;
  } catch (error) {
    assert.instance(error, TierError);
    assert.is((error as TierError).reason, code);
    assert.is((error as TierError).code, 'KBTP_TIER');
    return;
  }
  assert.unreachable(`expected a TierError ${code}`);
}

function blockData(index: number, generation: number, length = BLOCK): Uint8Array {
  const data = new Uint8Array(length);
  for (let i = 0; i < length; i++) data[i] = (index * 31 + generation * 7 + i) & 0xff;
  return data;
}

/** The bytes of the newest journal (a live view: changing them changes the file). */
async function newestJournal(files: MemoryFiles): Promise<Uint8Array> {
  const journal =
    (await files.list(DIR))
      .filter((name) => name.startsWith('journal-'))
      .sort()
      .at(-1) ?? '';
  return files.contentOf(`${DIR}/${journal}`);
}

async function readBack(tier: DurableTier, index: number): Promise<{ generation: number; data: Uint8Array }> {
  const into = new Uint8Array(BLOCK);
  const { generation, dataLength } = await tier.read(index, into);
  return { generation, data: into.subarray(0, dataLength) };
}

/** Flips a bit near the end of the newest checkpoint (or of every checkpoint) so it fails its checksum. */
async function corruptCheckpoints(files: MemoryFiles, which: 'newest' | 'all'): Promise<number> {
  const names = (await files.list(DIR)).filter((name) => name.startsWith('checkpoint-')).sort();
  const chosen = which === 'all' ? names : names.slice(-1);
  for (const name of chosen) {
    const bytes = files.contentOf(`${DIR}/${name}`);
    bytes[bytes.length - 3] = (bytes[bytes.length - 3] ?? 0) ^ 0x80;
  }
  return chosen.length;
}

test('freed slots are reused lowest first, so a group of seals goes out in a few vectored writes', async () => {
  const files = new MemoryFiles();
  const tier = await DurableTier.open(options(files));
  const dataFile = `${DIR}/blocks`;
  await Promise.all(Array.from({ length: 48 }, (_, i) => tier.seal(i, 2, blockData(i, 2))));
  // Freed in a scattered order: taken last-freed-first, the next seals' slots would not be consecutive.
  const order = Array.from({ length: 48 }, (_, i) => (i * 29) % 48);
  for (const index of order) await tier.unbind(index, 3);
  const writesBefore = files.writesTo.get(dataFile) ?? 0;
  await Promise.all(Array.from({ length: 40 }, (_, i) => tier.seal(100 + i, 2, blockData(100 + i, 2))));
  const writes = (files.writesTo.get(dataFile) ?? 0) - writesBefore;
  assert.ok(writes <= 2, `40 concurrent seals into freed slots took ${writes} data writes`);
  // The lowest free slot is taken first: free two slots, seal one block, find it in the lower one.
  const data = files.contentOf(dataFile);
  const slotOf = (index: number): number => {
    const wanted = blockData(index, 2);
    for (let slot = 0; slot * BLOCK < data.length; slot++) if (data.subarray(slot * BLOCK, (slot + 1) * BLOCK).every((v, i) => v === wanted[i])) return slot;
    return -1;
  };
  const [low, high] = [slotOf(100 + 3), slotOf(100 + 30)].sort((a, b) => a - b) as [number, number];
  assert.ok(low >= 0 && high > low);
  await tier.unbind(100 + 30, 3);
  await tier.unbind(100 + 3, 3);
  await tier.seal(200, 2, blockData(200, 2));
  assert.is(slotOf(200), low);
  await tier.close();
  const again = await DurableTier.open(options(files.afterCrash()));
  assert.is(again.recovery.blocksRecovered, 40 - 2 + 1);
  assert.equal((await readBack(again, 200)).data, blockData(200, 2));
  await again.close();
});

/** `files` with the data file's writes taking a turn of the event loop each, counting how many run at once. */
function slowDataWrites(files: MemoryFiles): { layer: FileLayer; mostAtOnce: () => number } {
  let running = 0;
  let most = 0;
  const slow = async (write: () => Promise<void>): Promise<void> => {
    running += 1;
    most = Math.max(most, running);
    try {
      await new Promise((resolve) => setTimeout(resolve, 1));
      await write();
    } finally {
      running -= 1;
    }
  };
  const wrap = (file: TierFile): TierFile => ({
    path: file.path,
    write: (data, position) => slow(() => file.write(data, position)),
    writev: (data, position) => slow(() => file.writev(data, position)),
    read: (into, position) => file.read(into, position),
    datasync: () => file.datasync(),
    size: () => file.size(),
    truncate: (length) => file.truncate(length),
    close: () => file.close(),
  });
  const layer: FileLayer = {
    open: async (file, create) => {
      const opened = await files.open(file, create);
      return file === `${DIR}/blocks` ? wrap(opened) : opened;
    },
    list: (directory) => files.list(directory),
    exists: (file) => files.exists(file),
    rename: (from, to) => files.rename(from, to),
    remove: (file) => files.remove(file),
    syncDirectory: (directory) => files.syncDirectory(directory),
    makeDirectory: () => files.makeDirectory(),
  };
  return { layer, mostAtOnce: () => most };
}

test('one data write at a time: seals that cannot share a vectored write are written one after another', async () => {
  const files = new MemoryFiles();
  const slow = slowDataWrites(files);
  const tier = await DurableTier.open({ ...options(files), files: slow.layer });
  // Short blocks do not fill their slots, so each is a write of its own; all arrive together.
  const short = (index: number): Uint8Array => blockData(index, 2).subarray(0, 100 + index);
  await Promise.all(Array.from({ length: 24 }, (_, i) => tier.seal(i, 2, short(i))));
  // Concurrent writes to one file wait for each other on its inode lock in the kernel, each wait a sleep and a wake-up.
  assert.is(slow.mostAtOnce(), 1);
  await tier.close();
  const again = await DurableTier.open(options(files.afterCrash()));
  assert.is(again.recovery.blocksRecovered, 24);
  for (let i = 0; i < 24; i++) assert.equal((await readBack(again, i)).data, short(i));
  await again.close();
});

test('concurrent seals share fdatasyncs and come back after a restart', async () => {
  const files = new MemoryFiles();
  const tier = await DurableTier.open(options(files));
  assert.ok(tier.recovery.fresh);
  const before = files.calls.datasync;
  await Promise.all(Array.from({ length: 64 }, (_, i) => tier.seal(i, 2, blockData(i, 2, i === 5 ? 100 : BLOCK))));
  const syncs = files.calls.datasync - before;
  assert.ok(syncs <= 8, `64 concurrent seals took ${syncs} fdatasyncs`);
  const stats = tier.stats();
  assert.is(stats.blocksDurable, 64);
  assert.ok(stats.batchLargest > 1);
  assert.ok(stats.syncMilliseconds > 0, "the groups' time in fdatasync is counted");
  assert.is((await readBack(tier, 5)).data.length, 100);
  await tier.close();

  const again = await DurableTier.open(options(files.afterCrash()));
  assert.is(again.recovery.blocksRecovered, 64);
  for (let i = 0; i < 64; i++) {
    const { generation, data } = await readBack(again, i);
    assert.is(generation, 2);
    assert.equal(data, blockData(i, 2, i === 5 ? 100 : BLOCK));
  }
  // A handle the tier does not hold resumes above anything that could have been shown.
  assert.is(again.resumeGeneration(200), generationPlus(generationPlus(1, GENERATION_RESERVE_BATCH), 1));
  await again.close();
});

test('a durable free never comes back, and the freed handle resumes above its last Generation', async () => {
  const files = new MemoryFiles();
  const tier = await DurableTier.open(options(files));
  await tier.seal(7, 5, blockData(7, 5));
  await tier.unbind(7, 6);
  assert.not.ok(tier.holds(7));
  await tier.close();
  const again = await DurableTier.open(options(files.afterCrash()));
  assert.not.ok(again.holds(7));
  const resume = again.resumeGeneration(7);
  assert.ok(generationDistance(6, resume) >= 1 && generationDistance(6, resume) < 0x8000, `resumes at ${resume}`);
  await again.close();
});

test('reserved Generation marks survive and a restart resumes above them', async () => {
  const files = new MemoryFiles();
  const tier = await DurableTier.open(options(files));
  await tier.reserve(9, 3000);
  assert.is(tier.generationMark(9), 3000);
  await tier.close();
  const again = await DurableTier.open(options(files.afterCrash()));
  assert.is(again.resumeGeneration(9), 3001);
  assert.is(again.generationMark(9), generationPlus(3000, GENERATION_RESERVE_BATCH));
  await again.close();
});

test('power loss: every acknowledged seal and free survives, nothing goes backwards (40 rounds)', async () => {
  for (let round = 0; round < 40; round++) {
    const random = new Random(1000 + round);
    let files = new MemoryFiles();
    // What was acknowledged per handle, and the highest Generation shown for it.
    const acked = new Map<number, { generation: number; sealed: boolean }>();
    const shown = new Map<number, number>();
    const uncertain = new Map<number, { generation: number; sealed: boolean }>();
    let generationOf = (index: number): number => shown.get(index) ?? 1;
    for (let life = 0; life < 3; life++) {
      const tier = await DurableTier.open(options(files, { capacityBytes: 4 << 20, maxBatch: 1 + random.below(16) }));
      // A request in flight when the power went may or may not have become durable; either is right.
      for (const [index, outcome] of uncertain) {
        const before = acked.get(index);
        const landed = outcome.sealed ? tier.holds(index) && (await readBack(tier, index)).generation === outcome.generation : !tier.holds(index);
        if (landed) {
          acked.set(index, outcome);
          shown.set(index, outcome.generation);
        } else if (before === undefined) {
          acked.delete(index);
        }
      }
      uncertain.clear();
      for (const [index, state] of acked) {
        if (state.sealed) {
          assert.ok(tier.holds(index), `round ${round}: acknowledged seal of ${index} lost`);
          const { generation, data } = await readBack(tier, index);
          assert.is(generation, state.generation);
          assert.equal(data, blockData(index, state.generation));
        } else {
          assert.not.ok(tier.holds(index), `round ${round}: freed ${index} came back`);
        }
      }
      for (let index = 0; index < 64; index++) {
        const resume = tier.holds(index) ? (acked.get(index)?.generation ?? -1) : tier.resumeGeneration(index);
        const last = shown.get(index);
        if (last !== undefined && !tier.holds(index)) {
          const ahead = generationDistance(last, resume);
          assert.ok(ahead >= 1 && ahead < 0x8000, `round ${round}: handle ${index} resumes at ${resume}, shown ${last}`);
        }
        shown.set(index, resume);
      }
      generationOf = (index) => shown.get(index) ?? 1;
      // A burst of concurrent requests, one per handle at a time, as the target's locks make them.
      const inFlight: Array<Promise<void>> = [];
      const busy = new Set<number>();
      // Acknowledgements that arrive after the power went were never seen by anyone.
      let powerOn = true;
      const operations = 20 + random.below(60);
      for (let n = 0; n < operations; n++) {
        const index = random.below(64);
        if (busy.has(index)) continue;
        busy.add(index);
        const generation = generationPlus(generationOf(index), 1);
        const held = tier.holds(index);
        const reserving = !held && random.below(4) === 0;
        if (!reserving) uncertain.set(index, { generation, sealed: !held });
        const work = held
          ? tier.unbind(index, generation).then(() => {
              if (powerOn) acked.set(index, { generation, sealed: false });
            })
          : reserving
            ? tier.reserve(index, generationPlus(generation, 10)).then(() => undefined)
            : tier.seal(index, generation, blockData(index, generation)).then(() => {
                if (powerOn) acked.set(index, { generation, sealed: true });
              });
        // The new Generation is shown only once the request is acknowledged.
        inFlight.push(
          work
            .then(
              () => {
                if (!powerOn) return;
                shown.set(index, generation);
                uncertain.delete(index);
              },
              () => undefined,
            )
            .finally(() => busy.delete(index)),
        );
      }
      // The power goes at a random moment: after some of the requests were acknowledged.
      const cut = random.below(inFlight.length + 1);
      await Promise.all(inFlight.slice(0, cut));
      files = files.afterPowerLoss(random);
      powerOn = false;
      await Promise.allSettled(inFlight);
      await tier.close();
    }
  }
});

test('a torn journal tail is cut off and reported; recovery starts', async () => {
  const files = new MemoryFiles();
  const tier = await DurableTier.open(options(files));
  await tier.seal(1, 2, blockData(1, 2));
  await tier.close();
  const journal = (await files.list(DIR)).find((name) => name.startsWith('journal-')) ?? '';
  const handle = await files.open(`${DIR}/${journal}`, false);
  await handle.write(new Uint8Array([0x4b, 0x42, 0x4a, 0x31, 200, 0, 0, 0, 1, 2, 3]), await handle.size());
  const again = await DurableTier.open(options(files.afterCrash()));
  assert.ok(again.recovery.tornBytes > 0);
  assert.ok(again.holds(1));
  await again.close();
});

test('bit flips: a corrupt block is never served and is counted; a corrupt checkpoint falls back', async () => {
  const files = new MemoryFiles();
  const tier = await DurableTier.open(options(files));
  await Promise.all([tier.seal(1, 2, blockData(1, 2)), tier.seal(2, 2, blockData(2, 2))]);
  // Rotate twice so a previous checkpoint exists to fall back on.
  await (tier as unknown as { writeCheckpoint(): Promise<void> }).writeCheckpoint();
  await tier.seal(3, 2, blockData(3, 2));
  const data = files.contentOf(`${DIR}/blocks`);
  data[10] = (data[10] ?? 0) ^ 0x04; // first block's slot
  await rejectsWith(readBack(tier, 1), 'CHECKSUM');
  assert.is(tier.stats().checksumFailures, 1);
  assert.equal((await readBack(tier, 2)).data, blockData(2, 2));
  await tier.close();

  const crashed = files.afterCrash();
  await corruptCheckpoints(crashed, 'newest');
  const again = await DurableTier.open(options(crashed));
  assert.ok(again.recovery.checksumFailures >= 1, 'the bad checkpoint is counted');
  assert.ok(again.holds(2) && again.holds(3), 'the previous checkpoint and its journals recover everything');
  await rejectsWith(readBack(again, 1), 'CHECKSUM');
  await again.close();
});

test('a flipped bit in a journal record in the middle is counted and skipped; later records still count', async () => {
  const files = new MemoryFiles();
  const tier = await DurableTier.open(options(files));
  await tier.seal(1, 2, blockData(1, 2));
  await tier.seal(2, 2, blockData(2, 2));
  await tier.seal(3, 2, blockData(3, 2));
  await tier.close();
  const crashed = files.afterCrash();
  const bytes = await newestJournal(crashed);
  bytes[30] = (bytes[30] ?? 0) ^ 0x01; // inside the first group's records
  const again = await DurableTier.open(options(crashed));
  assert.ok(again.recovery.checksumFailures >= 1);
  assert.ok(again.holds(3));
  await again.close();
});

/**
 * Seals 1..4 in separate groups, frees 2 (Generation 6) in its own group, seals 5 after it,
 * closes, and hands the journal's frames to `damage` before a restart.
 */
async function freeInTheMiddle(damage: (bytes: Uint8Array, frames: JournalFrame[]) => void): Promise<DurableTier> {
  const files = new MemoryFiles();
  const tier = await DurableTier.open(options(files));
  for (const i of [1, 2, 3, 4]) await tier.seal(i, 5, blockData(i, 5));
  await tier.unbind(2, 6);
  await tier.seal(5, 5, blockData(5, 5));
  await tier.close();
  const crashed = files.afterCrash();
  const bytes = await newestJournal(crashed);
  damage(bytes, journalFrames(bytes));
  return DurableTier.open(options(crashed));
}

const isFreeOf2 = isGroupWith('u', 2);

test('a corrupt FREE record in the middle of the journal never brings the freed block back', async () => {
  const again = await freeInTheMiddle((bytes, frames) => {
    const free = frames.find(isFreeOf2);
    assert.ok(free !== undefined);
    corrupt(bytes, free);
  });
  assert.ok(again.recovery.checksumFailures >= 1);
  assert.not.ok(again.holds(2), 'the freed block came back');
  const ahead = generationDistance(6, again.resumeGeneration(2));
  assert.ok(ahead >= 1 && ahead < 0x8000, `handle 2 resumes at ${again.resumeGeneration(2)}, its FREE showed 6`);
  for (const i of [1, 3, 4, 5]) assert.equal((await readBack(again, i)).data, blockData(i, 5), `block ${i}`);
  await again.close();
});

test('a corrupt batch marker alone loses nothing: its records say their group is complete', async () => {
  const again = await freeInTheMiddle((bytes, frames) => {
    const at = frames.findIndex(isFreeOf2);
    const marker = frames[at - 1];
    assert.ok(marker?.record.k === 'b');
    corrupt(bytes, marker);
  });
  assert.ok(again.recovery.checksumFailures >= 1);
  assert.is(again.recovery.blocksDiscarded, 0);
  assert.not.ok(again.holds(2));
  for (const i of [1, 3, 4, 5]) assert.ok(again.holds(i), `block ${i}`);
  await again.close();
});

test('a group lost whole (marker and records) in the middle: no block from before it is trusted', async () => {
  const again = await freeInTheMiddle((bytes, frames) => {
    const at = frames.findIndex(isFreeOf2);
    for (const frame of [frames[at - 1], frames[at]]) if (frame !== undefined) corrupt(bytes, frame);
  });
  assert.ok(again.recovery.checksumFailures >= 1);
  assert.not.ok(again.holds(2), 'the freed block came back');
  for (const i of [1, 3, 4]) assert.not.ok(again.holds(i), `block ${i} was written before the lost group`);
  assert.is(again.recovery.blocksDiscarded, 4); // 1..4: the lost FREE of 2 was never applied
  assert.equal((await readBack(again, 5)).data, blockData(5, 5), 'a block sealed after the lost group is recovered');
  // Every handle may have shown one Generation past its mark in the lost group.
  const ahead = generationDistance(6, again.resumeGeneration(2));
  assert.ok(ahead >= 1 && ahead < 0x8000);
  await again.close();
});

test('ENOSPC and EIO fail the request, change nothing, and the tier goes on', async () => {
  const files = new MemoryFiles();
  const tier = await DurableTier.open(options(files));
  await tier.seal(1, 2, blockData(1, 2));
  files.faults.push({ op: 'write', match: /blocks$/, code: 'ENOSPC', times: 1 });
  await rejectsWith(tier.seal(2, 2, blockData(2, 2)), 'ENOSPC');
  files.faults.push({ op: 'datasync', match: /journal/, code: 'EIO', times: 1 });
  await rejectsWith(tier.unbind(1, 3), 'EIO');
  assert.ok(tier.holds(1), 'a failed free changes nothing');
  assert.not.ok(tier.holds(2));
  files.faults.push({ op: 'read', code: 'EIO', times: 1 });
  await rejectsWith(readBack(tier, 1), 'EIO');
  await tier.seal(2, 2, blockData(2, 2));
  assert.equal((await readBack(tier, 1)).data, blockData(1, 2));
  assert.ok(tier.stats().writeErrors >= 2);
  await tier.close();
  const again = await DurableTier.open(options(files.afterCrash()));
  assert.ok(again.holds(1) && again.holds(2));
  await again.close();
});

test('a failed FREE is superseded before it is answered: a crash right after it loses nothing', async () => {
  const files = new MemoryFiles();
  const tier = await DurableTier.open(options(files));
  await tier.seal(1, 2, blockData(1, 2));
  files.faults.push({ op: 'datasync', match: /journal/, code: 'EIO', times: 1 });
  await rejectsWith(tier.unbind(1, 3), 'EIO');
  // The process dies before any other request: the failed group's record is in the old journal.
  const again = await DurableTier.open(options(files.afterCrash()));
  assert.ok(again.holds(1), 'a FREE answered TIER_ERROR changed nothing');
  assert.equal((await readBack(again, 1)).data, blockData(1, 2));
  await again.close();
});

test('failed groups stay void when the newest checkpoint is corrupt too (double fault)', async () => {
  const files = new MemoryFiles();
  const tier = await DurableTier.open(options(files));
  await tier.seal(1, 2, blockData(1, 2));
  await tier.seal(2, 2, blockData(2, 2));
  files.faults.push({ op: 'datasync', match: /journal/, code: 'EIO', times: 1 });
  await rejectsWith(tier.unbind(1, 3), 'EIO');
  files.faults.push({ op: 'datasync', match: /journal/, code: 'EIO', times: 1 });
  await rejectsWith(tier.seal(3, 2, blockData(3, 2)), 'EIO');
  // A group without data: the failed seal's slot keeps its data, which checks against its record.
  await tier.reserve(4, 100);
  await tier.close();
  const crashed = files.afterCrash();
  await corruptCheckpoints(crashed, 'newest');
  // Recovery falls back on the checkpoint before, and replays the journal the failed seal went to.
  const again = await DurableTier.open(options(crashed));
  assert.ok(again.recovery.checksumFailures >= 1, 'the bad checkpoint is counted');
  assert.not.ok(again.holds(3), 'a seal answered TIER_ERROR came back');
  assert.ok(again.holds(1), 'a FREE answered TIER_ERROR was applied');
  for (const i of [1, 2]) assert.equal((await readBack(again, i)).data, blockData(i, 2), `block ${i}`);
  await again.close();
});

test('a failed group whose superseding checkpoint fails too does not come back after a crash (double fault)', async () => {
  for (const kind of ['free', 'seal'] as const) {
    const files = new MemoryFiles();
    const tier = await DurableTier.open(options(files));
    await tier.seal(1, 2, blockData(1, 2));
    await tier.seal(2, 2, blockData(2, 2));
    // The group's journal sync fails, then the superseding checkpoint cannot even open its new
    // journal: nothing names the group void, and its record is in the journal a restart replays.
    files.faults.push({ op: 'datasync', match: /journal/, code: 'EIO', times: 1 }, { op: 'open', match: /journal/, code: 'EIO', times: 1 });
    await rejectsWith(kind === 'free' ? tier.unbind(1, 3) : tier.seal(3, 2, blockData(3, 2)), 'EIO');
    // The process dies before any checkpoint succeeds (the page cache survives a process crash),
    // or the power goes (the cut was synced: whatever else of the unsynced writes survives).
    const survivors = [files.afterCrash(), ...Array.from({ length: 16 }, (_, seed) => files.afterPowerLoss(new Random(seed + 1)))];
    for (const [n, survivor] of survivors.entries()) {
      const again = await DurableTier.open(options(survivor));
      assert.ok(again.holds(1), `${kind} ${n}: a FREE answered TIER_ERROR was applied`);
      assert.not.ok(again.holds(3), `${kind} ${n}: a seal answered TIER_ERROR came back`);
      for (const i of [1, 2]) assert.equal((await readBack(again, i)).data, blockData(i, 2), `${kind} ${n}: block ${i}`);
      await again.close();
    }
    // The tier that survived the double fault goes on: its next group writes the checkpoint first.
    await tier.seal(4, 2, blockData(4, 2));
    await tier.close();
    const later = await DurableTier.open(options(files.afterCrash()));
    assert.ok(later.holds(1) && later.holds(4) && !later.holds(3), `${kind}: after the next checkpoint`);
    await later.close();
  }
});

test('a BIND undo that fails still keeps its block from coming back, after a crash or a corrupt checkpoint', async () => {
  const files = new MemoryFiles();
  const tier = await DurableTier.open(options(files));
  await tier.seal(1, 2, blockData(1, 2));
  await tier.seal(5, 4, blockData(5, 4));
  // A BIND's seal of 5 was made durable, then its ticket was reclaimed: the undo fails too.
  files.faults.push({ op: 'datasync', match: /journal/, code: 'EIO', times: 1 });
  await rejectsWith(tier.unbind(5, 5, 'undo'), 'EIO');
  assert.not.ok(tier.holds(5), 'the running tier forgets the block at once');
  const crashedNow = await DurableTier.open(options(files.afterCrash()));
  assert.not.ok(crashedNow.holds(5), 'a crash right after the failed undo brought the block back');
  assert.ok(crashedNow.holds(1));
  assert.ok(generationDistance(5, crashedNow.resumeGeneration(5)) < 0x8000, 'handle 5 resumes above the undo');
  await crashedNow.close();
  // The undo is written again with the next group; then the newest checkpoint rots.
  await tier.seal(2, 2, blockData(2, 2));
  await tier.close();
  const crashed = files.afterCrash();
  await corruptCheckpoints(crashed, 'newest');
  const again = await DurableTier.open(options(crashed));
  assert.ok(again.recovery.checksumFailures >= 1);
  assert.not.ok(again.holds(5), 'the fallback replayed the seal without its undo');
  for (const i of [1, 2]) assert.equal((await readBack(again, i)).data, blockData(i, 2), `block ${i}`);
  await again.close();
});

test('every checkpoint corrupt: handles the journals do not name still resume above their marks', async () => {
  const files = new MemoryFiles();
  const tier = await DurableTier.open(options(files));
  const mark = generationPlus(1, 5000);
  await tier.reserve(7, mark);
  await tier.seal(1, 2, blockData(1, 2));
  // Two checkpoints later, the journal with the reserve record is gone: only the checkpoints have it.
  const rotate = (tier as unknown as { writeCheckpoint(): Promise<void> }).writeCheckpoint.bind(tier);
  await rotate();
  await rotate();
  await tier.seal(2, 2, blockData(2, 2));
  await tier.close();
  const crashed = files.afterCrash();
  assert.ok((await corruptCheckpoints(crashed, 'all')) >= 2);
  const again = await DurableTier.open(options(crashed));
  assert.ok(again.recovery.checksumFailures >= 2, 'both bad checkpoints are counted');
  const ahead = generationDistance(mark, again.resumeGeneration(7));
  assert.ok(ahead >= 1 && ahead < 0x8000, `handle 7 resumes at ${again.resumeGeneration(7)}, Generations up to ${mark} may have been shown`);
  assert.equal((await readBack(again, 2)).data, blockData(2, 2), 'a block sealed after the checkpoints is recovered');
  await again.close();
});

test('capacity: the tier stays within its cap and drops least recently used blocks first', async () => {
  const files = new MemoryFiles();
  const capacity = 2 << 20;
  const settled: Array<[number, number | undefined]> = [];
  const gate: DropGate = {
    claim: () => 'claimed',
    settle: (index, generation) => {
      settled.push([index, generation]);
    },
  };
  const tier = await DurableTier.open(options(files, { capacityBytes: capacity, drops: gate }));
  const max = tier.sizing.maxSlots;
  for (let i = 0; i < max; i++) await tier.seal(i, 2, blockData(i, 2));
  tier.touch(0); // 0 is now the most recently used
  for (let i = max; i < max + 10; i++) await tier.seal(i, 2, blockData(i, 2));
  assert.is(tier.stats().blocksDurable, max);
  assert.ok(tier.holds(0), 'the touched block stays');
  for (let i = 1; i <= 10; i++) assert.not.ok(tier.holds(i), `block ${i} (least recently used) was dropped`);
  assert.equal(
    settled.map(([index]) => index),
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
  );
  assert.ok(
    settled.every(([, generation]) => generation === 3),
    'dropped with the next Generation',
  );
  assert.ok(files.bytesIn(DIR) <= capacity, `${files.bytesIn(DIR)} octets on disk over the ${capacity} cap`);
  await tier.close();
});

test('Durable Quota: a tenant past it loses its own least recently used blocks; NO room at all is ENOSPC', async () => {
  const files = new MemoryFiles();
  const gate: DropGate = { claim: (index) => (index === 130 ? 'skip' : 'claimed'), settle: () => undefined };
  const tier = await DurableTier.open(
    options(files, {
      drops: gate,
      tenants: [
        { first: 0, count: 128, durableQuota: 3 },
        { first: 128, count: 128, durableQuota: 1 },
      ],
    }),
  );
  for (const i of [0, 1, 2, 3, 4]) await tier.seal(i, 2, blockData(i, 2));
  assert.equal(
    [0, 1, 2, 3, 4].map((i) => tier.holds(i)),
    [false, false, true, true, true],
  );
  await tier.seal(130, 2, blockData(130, 2));
  await rejectsWith(tier.seal(131, 2, blockData(131, 2)), 'ENOSPC');
  assert.ok(tier.holds(130));
  await tier.close();
});

test('the data file is written where the checksum says', async () => {
  const files = new MemoryFiles();
  const tier = await DurableTier.open(options(files));
  const data = blockData(3, 4, 1000);
  await tier.seal(3, 4, data);
  const slotBytes = files.contentOf(`${DIR}/blocks`).subarray(0, 1000);
  assert.is(crc32c(slotBytes), crc32c(data));
  await tier.close();
});

test.run();
