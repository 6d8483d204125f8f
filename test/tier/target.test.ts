// The target with a durable tier, in-process: warm restart, TIER_ERROR that changes nothing,
// demotion and promotion under concurrent LOADs and DIRECT_LOADs (the Placement Epoch), Durable
// Quota drops. The crash and power-loss tests with a real process are in crash.test.ts.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as K from '../../assembly/kbtp-constants.ts';
import { testSettings, startRig, type Rig } from '../support/rig.ts';
import type { KbtpSession } from '../../host/kbtp/initiator.ts';
import { KbtpStatusError } from '../../host/kbtp/errors.ts';
import { statusOf } from '../support/status.ts';
import type { Completion } from '../../host/kbtp/wire/messages.ts';
import { generationDistance } from '../../host/tier/generations.ts';
import { Random } from '../../host/util/random.ts';
import { MemoryFiles } from './memory-files.ts';
import { startTarget } from '../../host/kbtp/server/target.ts';

const tempDirs: string[] = [];
function dataDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kbtp-durable-'));
  tempDirs.push(dir);
  return dir;
}

function durableSettings(dir: string, extra: Record<string, unknown> = {}, tenants?: unknown) {
  const base = testSettings();
  const settings = testSettings({ durable: { dataDir: dir, capacity: '64MiB' }, ...extra, ...(tenants === undefined ? {} : { tenants }) });
  return { ...settings, session: { ...settings.session, ticketTimeoutMs: base.session.ticketTimeoutMs } };
}

/** A block's content: unique per handle and generation, so a block read from the wrong place shows. */
function content(handle: bigint, version: number, length = 3000): Uint8Array {
  const data = new Uint8Array(length);
  for (let i = 0; i < length; i++) data[i] = (Number(handle) * 131 + version * 17 + i * 7 + (i >> 8)) & 0xff;
  return data;
}

/** The COMPLETION of a request that failed (LOAD of a handle that is not VALID: its Generation). */
async function failure(work: Promise<unknown>): Promise<Completion> {
  try {
    await work;
  } catch (error) {
    if (error instanceof KbtpStatusError && error.completion !== undefined) return error.completion;
    throw error;
  }
  throw new Error('the request succeeded');
}

test('warm restart: acknowledged sealed blocks load byte-exact with their Generation; frees stay; nothing goes backwards', async () => {
  const dir = dataDir();
  let rig: Rig = await startRig(durableSettings(dir));
  let alpha = await rig.session('alpha', { capabilities: K.CAP_PERSISTENT });
  assert.is(alpha.hello.capabilities & K.CAP_PERSISTENT, K.CAP_PERSISTENT, 'PERSISTENT is granted');
  const stored = await Promise.all(Array.from({ length: 20 }, (_, i) => alpha.allocStore(BigInt(i), content(BigInt(i), 1), { seal: true })));
  const unsealed = await alpha.allocStore(30n, content(30n, 1), { seal: false });
  for (const handle of [2n, 5n, 7n]) await alpha.free(handle);
  const freedGeneration = (await failure(alpha.load(2n))).generation;
  const stats = await rig.target.stats();
  assert.ok((stats.durable?.blocksDurable ?? 0) === 17);
  assert.ok((stats.durable?.groupCommits ?? 0) < 20 + 3, 'concurrent seals shared group commits');
  await rig.stop();

  rig = await startRig(durableSettings(dir));
  assert.is(rig.target.recovery?.blocksRecovered, 17);
  alpha = await rig.session('alpha');
  for (let i = 0; i < 20; i++) {
    const handle = BigInt(i);
    if ([2n, 5n, 7n].includes(handle)) {
      assert.is(await statusOf(alpha.load(handle)), 'NOT_VALID', `freed handle ${handle} came back`);
      continue;
    }
    const loaded = await alpha.load(handle);
    assert.is(loaded.generation, stored[i]?.generation);
    assert.equal(loaded.data, content(handle, 1));
  }
  // The unsealed block was volatile: gone, and its handle's Generation moved on past what was shown.
  const after = await failure(alpha.load(30n));
  assert.is(after.status, K.STATUS_NOT_VALID);
  const ahead = generationDistance(unsealed.generation, after.generation);
  assert.ok(ahead >= 1 && ahead < 0x8000, `Generation ${after.generation} is not ahead of ${unsealed.generation}`);
  const freedNow = (await failure(alpha.load(2n))).generation;
  const freedAhead = generationDistance(freedGeneration, freedNow);
  assert.ok(freedAhead >= 1 && freedAhead < 0x8000);
  assert.ok(rig.target.audit().ok);
  await rig.stop();
});

test('full disk and I/O errors give TIER_ERROR, change nothing, and the session and the node go on', async () => {
  const files = new MemoryFiles();
  const settings = durableSettings('/mem');
  const target = await startTarget(settings, { tierFiles: files, log: () => undefined });
  const { connect } = await import('../../host/kbtp/initiator.ts');
  const alpha = await connect(`127.0.0.1:${target.port}`, { tenant: 'alpha', secret: 'alpha-secret' });
  try {
    await alpha.allocStore(1n, content(1n, 1), { seal: true });
    files.faults.push({ op: 'write', match: /blocks$/, code: 'ENOSPC', times: 1 });
    assert.is(await statusOf(alpha.allocStore(2n, content(2n, 1), { seal: true })), 'TIER_ERROR');
    assert.is(await statusOf(alpha.load(2n)), 'NOT_VALID', 'a failed seal binds nothing');
    files.faults.push({ op: 'datasync', match: /journal/, code: 'EIO', times: 1 });
    assert.is(await statusOf(alpha.free(1n)), 'TIER_ERROR');
    assert.equal((await alpha.load(1n)).data, content(1n, 1), 'a failed free leaves the block');
    // Unsealed blocks do not touch the tier; the node keeps serving.
    await alpha.allocStore(3n, content(3n, 1), { seal: false });
    await alpha.allocStore(2n, content(2n, 2), { seal: true });
    await alpha.free(1n);
    assert.equal((await alpha.load(2n)).data, content(2n, 2));
    const stats = await target.stats();
    assert.ok((stats.durable?.tierErrors ?? 0) >= 2 && (stats.durable?.writeErrors ?? 0) >= 2);
    assert.is(stats.requests.ALLOC_STORE?.TIER_ERROR, 1);
    assert.ok(target.audit().ok);
  } finally {
    await alpha.close(500).catch(() => undefined);
    await target.stop(1000);
  }
});

test('demotion and promotion under concurrent LOADs and DIRECT_LOADs: the right bytes, never a moved block, consistent quotas', async () => {
  const dir = dataDir();
  const rig = await startRig(durableSettings(dir));
  try {
    const alpha = await rig.session('alpha');
    const gamma = await rig.session('gamma', { capabilities: K.CAP_DIRECT_LOAD });
    // alpha's quota is 24 resident blocks: storing 60 sealed blocks demotes the least recently used.
    for (let i = 0; i < 60; i += 6) {
      await Promise.all(Array.from({ length: 6 }, (_, k) => alpha.allocStore(BigInt(i + k), content(BigInt(i + k), 1), { seal: true })));
    }
    assert.ok(rig.target.engine.tenantUsage(0) <= 24);
    const random = new Random(7);
    const readers: Array<Promise<void>> = [];
    const check = async (session: KbtpSession, direct: boolean): Promise<void> => {
      for (let n = 0; n < 60; n++) {
        const handle = BigInt(random.below(60));
        const loaded = direct ? await session.directLoad(handle) : await session.load(handle);
        assert.equal(loaded.data, content(handle, 1), `${direct ? 'direct' : 'LOAD'} of ${handle} returned another block's bytes`);
      }
    };
    readers.push(check(alpha, false), check(alpha, false), check(gamma, true), check(gamma, true), check(gamma, false));
    await Promise.all(readers);
    const stats = await rig.target.stats();
    assert.ok(stats.demotions > 0 && stats.promotions > 0, `demotions ${stats.demotions}, promotions ${stats.promotions}`);
    assert.ok(rig.target.engine.tenantUsage(0) <= 24, 'the resident quota holds');
    assert.ok(rig.target.audit().ok, JSON.stringify(rig.target.audit()));
  } finally {
    await rig.stop();
  }
});

test("Durable Quota: past it, the tenant's least recently used blocks on the tier alone are dropped, as if freed", async () => {
  const dir = dataDir();
  const base = testSettings();
  const tenants = [
    { name: 'alpha', secret: 'alpha-secret', quota: 8, durableQuota: 20, storeRange: { first: 0, count: 64 }, loadScope: { first: 0, count: 256 } },
    { name: 'beta', secret: 'beta-secret', quota: 8, storeRange: { first: 64, count: 64 }, loadScope: { first: 64, count: 64 } },
  ];
  const rig = await startRig(durableSettings(dir, {}, tenants));
  try {
    assert.ok(base.tenants.length > 0);
    const alpha = await rig.session('alpha');
    for (let i = 0; i < 30; i++) await alpha.allocStore(BigInt(i), content(BigInt(i), 1), { seal: true });
    const stats = await rig.target.stats();
    assert.is(stats.durable?.drops, 10);
    for (let i = 0; i < 10; i++) assert.is(await statusOf(alpha.load(BigInt(i))), 'NOT_VALID', `handle ${i} was the least recently used`);
    for (let i = 10; i < 30; i++) assert.equal((await alpha.load(BigInt(i))).data, content(BigInt(i), 1));
    assert.ok(rig.target.audit().ok);
  } finally {
    await rig.stop();
  }
});

const ALL_ONES = 0xffffffffffffffffn;

/** Polls `done` every 20 ms for at most 20 s (a loaded machine may be slow to run the timer). */
async function eventually(done: () => boolean, what: string): Promise<void> {
  for (let waited = 0; waited < 20000; waited += 20) {
    if (done()) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  assert.unreachable(`timed out waiting until ${what}`);
}

/** alpha fills the shared ring with beta; gamma has a partition of 16 (DIRECT_ALLOC); 10 % low watermark. */
function watermarkSettings(dir: string) {
  const tenants = [
    { name: 'alpha', secret: 'alpha-secret', quota: 40, storeRange: { first: 0, count: 64 }, loadScope: { first: 0, count: 256 } },
    { name: 'beta', secret: 'beta-secret', quota: 8, storeRange: { first: 64, count: 64 }, loadScope: { first: 64, count: 64 } },
    {
      name: 'gamma',
      secret: 'gamma-secret',
      quota: 16,
      storeRange: { first: 128, count: 64 },
      loadScope: { first: 0, count: 256 },
      trust: { directLoad: true, directAlloc: true },
    },
  ];
  const settings = durableSettings(dir, {}, tenants);
  return { ...settings, durable: settings.durable === undefined ? undefined : { ...settings.durable, lowWatermark: 10 } };
}

test('pool low watermark: the least recently used sealed blocks leave the shared ring before it runs out', async () => {
  const rig = await startRig(watermarkSettings(dataDir()));
  try {
    const { engine } = rig.target;
    const free = (): number => {
      const { headTicket, tailTicket } = engine.readCounters(engine.sharedRing);
      return tailTicket - headTicket;
    };
    const alpha = await rig.session('alpha');
    const beta = await rig.session('beta');
    for (let i = 0; i < 40; i++) await alpha.allocStore(BigInt(i), content(BigInt(i), 1), { seal: true });
    // 48 shared blocks, 40 of them alpha's: 8 free, above the watermark of 5. beta takes 6 more.
    for (let i = 64; i < 70; i++) await beta.allocStore(BigInt(i), content(BigInt(i), 1), { seal: true });
    // Below 5 free, demotion runs up to 10 free; beta's last stores may land after it.
    await eventually(() => free() >= 5, 'the shared ring is back above its watermark');
    const stats = await rig.target.stats();
    const early = stats.durable?.watermarkDemotions ?? 0;
    assert.ok(early >= 3, `${early} demotions at the watermark`);
    // alpha had the most resident blocks: its least recently used went, in order.
    const demoted = Array.from({ length: 40 }, (_, i) => engine.readEntry(BigInt(i))?.blockOffset === ALL_ONES);
    const count = demoted.filter(Boolean).length;
    assert.is(count, early);
    assert.equal(demoted, [...Array<boolean>(count).fill(true), ...Array<boolean>(40 - count).fill(false)], 'not the least recently used first');
    for (let i = 64; i < 70; i++) assert.is.not(engine.readEntry(BigInt(i))?.blockOffset, ALL_ONES, "beta's blocks stay");
    // Promotion brings them back with the right bytes; the watermark keeps making room.
    for (let i = 0; i < 40; i++) assert.equal((await alpha.load(BigInt(i))).data, content(BigInt(i), 1));
    assert.ok(engine.tenantUsage(0) <= 40);
    assert.ok(rig.target.audit().ok, JSON.stringify(rig.target.audit()));
  } finally {
    await rig.stop();
  }
});

test('pool low watermark and quota demotion on a DIRECT_ALLOC partition: ALLOC_STORE and one-sided tickets', async () => {
  const rig = await startRig(watermarkSettings(dataDir()));
  try {
    const { engine } = rig.target;
    const ring = engine.partitionRing(0);
    const free = (): number => {
      const { headTicket, tailTicket } = engine.readCounters(ring);
      return tailTicket - headTicket;
    };
    const gamma = await rig.session('gamma', { capabilities: K.CAP_DIRECT_ALLOC | K.CAP_DIRECT_LOAD });
    for (let i = 128; i < 143; i++) await gamma.allocStore(BigInt(i), content(BigInt(i), 1), { seal: true });
    // 15 of the partition's 16 blocks in use: below its watermark of 2.
    await eventually(() => free() >= 4, 'the partition is back at twice its watermark');
    assert.is(engine.readEntry(128n)?.blockOffset, ALL_ONES, 'the least recently used block left first');
    // One-sided tickets past what is free: demotion at the watermark, and at the quota when a ticket passes it.
    for (let i = 143; i < 163; i++) await gamma.directAllocStore(BigInt(i), content(BigInt(i), 1), { seal: true });
    const stats = await rig.target.stats();
    assert.ok((stats.durable?.watermarkDemotions ?? 0) >= 3, JSON.stringify(stats.durable));
    // 35 blocks stored into a partition of 16: at least 19 of them left it.
    assert.ok(stats.demotions + (stats.durable?.watermarkDemotions ?? 0) >= 19, 'every block past the partition was made room for');
    for (let i = 128; i < 163; i++) {
      const handle = BigInt(i);
      const loaded = i % 2 === 0 ? await gamma.load(handle) : await gamma.directLoad(handle);
      assert.equal(loaded.data, content(handle, 1), `block ${i}`);
    }
    assert.ok(engine.tenantUsage(2) <= 16);
    assert.ok(rig.target.audit().ok, JSON.stringify(rig.target.audit()));
  } finally {
    await rig.stop();
  }
});

test('power loss under the real target: what was acknowledged before the power went comes back (3 seeded rounds)', async () => {
  for (let round = 0; round < 3; round++) {
    const random = new Random(500 + round);
    let files = new MemoryFiles();
    // Per handle: what the target acknowledged while the power was on (sealed version, or freed).
    const acked = new Map<bigint, { version: number; generation: number } | 'freed'>();
    // Requests in flight when the power went: each may or may not have become durable.
    const uncertain = new Map<bigint, { version: number } | 'free'>();
    for (let life = 0; life < 2; life++) {
      const target = await startTarget(durableSettings('/mem'), { tierFiles: files, log: () => undefined });
      const { connect } = await import('../../host/kbtp/initiator.ts');
      const sessions = await Promise.all(
        ['alpha', 'alpha', 'gamma'].map((tenant) => connect(`127.0.0.1:${target.port}`, { tenant, secret: `${tenant}-secret` })),
      );
      try {
        for (const [handle, outcome] of uncertain) {
          const loaded = await (sessions[0] as KbtpSession).load(handle).catch(() => undefined);
          if (outcome === 'free' && loaded === undefined) acked.set(handle, 'freed');
          else if (
            outcome !== 'free' &&
            loaded !== undefined &&
            loaded.data.length > 0 &&
            Buffer.from(loaded.data).equals(Buffer.from(content(handle, outcome.version)))
          ) {
            acked.set(handle, { version: outcome.version, generation: loaded.generation });
          }
        }
        uncertain.clear();
        for (const [handle, state] of acked) {
          if (state === 'freed') assert.is(await statusOf((sessions[0] as KbtpSession).load(handle)), 'NOT_VALID', `round ${round}: freed ${handle} came back`);
          else {
            const loaded = await (sessions[0] as KbtpSession).load(handle);
            assert.is(loaded.generation, state.generation, `round ${round}: Generation of ${handle}`);
            assert.equal(loaded.data, content(handle, state.version), `round ${round}: bytes of ${handle}`);
          }
        }
        assert.ok(target.audit().ok, `round ${round}: audit after the power loss`);
        let powerOn = true;
        const work = sessions.map(async (session, s) => {
          const first = s === 2 ? 128 : s * 24;
          for (let n = 0; n < 40 && powerOn; n++) {
            const handle = BigInt(first + random.below(24));
            const state = acked.get(handle);
            try {
              if (state !== undefined && state !== 'freed') {
                uncertain.set(handle, 'free');
                await session.free(handle);
                if (!powerOn) return;
                acked.set(handle, 'freed');
              } else {
                const version = life * 1000 + n + 1;
                uncertain.set(handle, { version });
                const stored = await session.allocStore(handle, content(handle, version), { seal: true });
                if (!powerOn) return;
                acked.set(handle, { version, generation: stored.generation });
              }
              uncertain.delete(handle);
            } catch (error) {
              if (!powerOn) return;
              throw error;
            }
          }
        });
        await new Promise((resolve) => setTimeout(resolve, 50 + random.below(300)));
        // The power goes: the files as the next boot finds them; acknowledgements after this never happened.
        files = files.afterPowerLoss(random);
        powerOn = false;
        await Promise.allSettled(work);
      } finally {
        for (const session of sessions) await session.close(200).catch(() => undefined);
        await target.stop(1000).catch(() => undefined);
      }
    }
  }
});

test.after(() => {
  for (const dir of tempDirs) fs.rmSync(dir, { recursive: true, force: true });
});

test.run();
