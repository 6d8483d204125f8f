// The STag table's checks (in siw's order) and the completion queue's polling and notification.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Access, AccessStatus, MemoryTable } from '../../host/rnic/memory.ts';
import { CompletionQueue } from '../../host/rnic/cq.ts';
import { RnicError, WcStatus, type WorkCompletion } from '../../host/rnic/verbs.ts';
import { isAtomicAligned, executeAtomic } from '../../host/rnic/atomic-executor.ts';
import { AtomicOpcode, ALL_ONES_64 } from '../../host/rnic/wire/atomics.ts';

test('STags are a 24-bit index plus the key byte; checks run STag -> PD -> rights -> wrap -> bounds', () => {
  const table = new MemoryTable(1, undefined);
  const pd = table.allocatePd();
  const other = table.allocatePd();
  const region = table.register(pd, new ArrayBuffer(4096), { access: Access.LocalWrite | Access.RemoteWrite, key: 0x5a, taggedOffsetBase: 1000n });
  assert.is(region.stag & 0xff, 0x5a);
  assert.ok(region.stag >>> 8 >= 1 && region.stag >>> 8 <= 0xffffff);
  // STags the table picks stay below 2^31 (a small integer to V8; issue 16), whatever the first index drawn.
  for (let device = 0; device < 64; device++) {
    const fresh = new MemoryTable(2 + device, undefined);
    const picked = fresh.register(fresh.allocatePd(), new ArrayBuffer(16), { access: Access.LocalWrite, key: 0xff });
    assert.ok(picked.stag <= 0x7fffffff, `STag 0x${picked.stag.toString(16)} at or above 2^31`);
  }
  assert.is(region.lkey, region.stag);
  const check = (stag: number, usePd = pd, access: number = Access.RemoteWrite, to = 1000n, length = 10) => table.checkRemote(stag, usePd, access, to, length);
  assert.is(check(region.stag), AccessStatus.Ok);
  assert.is(table.resolvedOffset, 0);
  assert.is(check(region.stag, pd, Access.RemoteWrite, 1000n + 4086n, 10), AccessStatus.Ok);
  assert.is(check(region.stag ^ 1), AccessStatus.InvalidStag, 'key mismatch');
  assert.is(check((region.stag + 0x100) >>> 0), AccessStatus.InvalidStag, 'unknown index');
  assert.is(check(region.stag, other), AccessStatus.PdMismatch);
  assert.is(check(region.stag, pd, Access.RemoteRead), AccessStatus.AccessRights);
  assert.is(check(region.stag, pd, Access.RemoteWrite, ALL_ONES_64 - 2n), AccessStatus.ToWrap);
  assert.is(check(region.stag, pd, Access.RemoteWrite, 999n), AccessStatus.BaseBounds);
  assert.is(check(region.stag, pd, Access.RemoteWrite, 1000n + 4087n), AccessStatus.BaseBounds);
  // Order: an invalid STag wins over everything else, PD over rights.
  assert.is(check(region.stag ^ 1, other, Access.RemoteRead, 0n), AccessStatus.InvalidStag);
  assert.is(check(region.stag, other, Access.RemoteRead, 0n), AccessStatus.PdMismatch);
  assert.is(table.checkLocal(region.lkey, pd, Access.LocalWrite, 4000, 96), AccessStatus.Ok);
  assert.is(table.checkLocal(region.lkey, pd, Access.LocalWrite, 4000, 97), AccessStatus.BaseBounds);
  assert.is(table.invalidate(region.stag, other), AccessStatus.PdMismatch);
  assert.is(table.invalidate(region.stag, pd), AccessStatus.Ok);
  assert.is(table.invalidate(region.stag, pd), AccessStatus.Ok, 'invalidating twice is allowed');
  assert.is(check(region.stag), AccessStatus.InvalidStag);
  table.revalidate(region);
  assert.is(check(region.stag), AccessStatus.Ok);
  table.deregister(region);
  assert.is(check(region.stag), AccessStatus.InvalidStag);
  assert.is(table.size, 0);
});

test('registration rejects bad arguments with clear errors, and explicit STags', () => {
  const table = new MemoryTable(1, undefined);
  const pd = table.allocatePd();
  const expect = (fn: () => unknown, pattern: RegExp) =>
    assert.throws(fn, (error: unknown) => error instanceof RnicError && error.errno === 'EINVAL' && pattern.test(error.message));
  expect(() => table.register(pd, new ArrayBuffer(16), { access: Access.RemoteWrite }), /require LocalWrite/);
  expect(() => table.register(pd, new ArrayBuffer(16), { access: 0x10 }), /not a mask/);
  expect(() => table.register(pd, new ArrayBuffer(16), { access: 0, offset: 8, length: 9 }), /does not fit/);
  expect(() => table.register(pd, new ArrayBuffer(16), { access: 0, taggedOffsetBase: ALL_ONES_64 - 4n }), /64 bits/);
  expect(() => table.register(pd, 'x' as unknown as ArrayBuffer, { access: 0 }), /ArrayBuffer/);
  expect(() => table.register(new MemoryTable(2, undefined).allocatePd(), new ArrayBuffer(16), { access: 0 }), /another RNIC/);
  const fixed = table.register(pd, new ArrayBuffer(16), { access: 0, stag: 0x12345678 });
  assert.is(fixed.stag, 0x12345678);
  expect(() => table.register(pd, new ArrayBuffer(16), { access: 0, stag: 0x123456ff }), /already registered/);
  expect(() => table.register(pd, new ArrayBuffer(16), { access: 0, stag: 0x000000aa }), /reserved/);
  // A view registers its own range.
  const backing = new ArrayBuffer(100);
  const view = table.register(pd, new Uint8Array(backing, 10, 50), { access: 0, offset: 5 });
  assert.equal([view.byteOffset, view.length], [15, 45]);
});

test('atomics: alignment is physical, masked CmpSwap leaves other bits alone', () => {
  const table = new MemoryTable(1, undefined);
  const pd = table.allocatePd();
  const region = table.register(pd, new SharedArrayBuffer(64), { access: Access.LocalWrite | Access.RemoteAtomic, offset: 8, length: 32 });
  assert.ok(isAtomicAligned(region, 0));
  assert.not.ok(isAtomicAligned(region, 4));
  const words = new BigUint64Array(region.buffer);
  words[1] = 0xffff_0000_ffff_0000n;
  const original = executeAtomic(region, 0, {
    atomicOpcode: AtomicOpcode.CompareSwap,
    compareData: 0xffff_0000n,
    compareMask: 0xffff_ffffn,
    addOrSwapData: 0x1234n,
    addOrSwapMask: 0xffffn,
  });
  assert.is(original, 0xffff_0000_ffff_0000n);
  assert.is(words[1], 0xffff_0000_ffff_1234n);
  const failed = executeAtomic(region, 0, {
    atomicOpcode: AtomicOpcode.CompareSwap,
    compareData: 0n,
    compareMask: ALL_ONES_64,
    addOrSwapData: 1n,
    addOrSwapMask: ALL_ONES_64,
  });
  assert.is(failed, 0xffff_0000_ffff_1234n);
  assert.is(words[1], 0xffff_0000_ffff_1234n, 'failed compare leaves memory unchanged');
});

const completion = (wrId: number, solicited = false, status: WcStatus = WcStatus.Success): WorkCompletion => ({
  wrId,
  status,
  opcode: 'RECV',
  qpNumber: 1,
  byteLength: 0,
  ...(solicited ? { solicited } : {}),
});

test('CQ: poll in order, overrun at depth, one-shot arming, solicited-only waits', async () => {
  const cq = new CompletionQueue(1, undefined, { depth: 3 });
  assert.ok(cq.push(completion(1)));
  assert.ok(cq.push(completion(2)));
  assert.ok(cq.push(completion(3)));
  assert.not.ok(cq.push(completion(4)));
  assert.ok(cq.overrun);
  assert.equal(
    cq.poll(2).map((c) => c.wrId),
    [1, 2],
  );
  assert.equal(
    cq.poll().map((c) => c.wrId),
    [3],
  );
  assert.equal(cq.poll(), []);

  const fresh = new CompletionQueue(2, undefined);
  let notifications = 0;
  fresh.onNotify(() => notifications++);
  fresh.requestNotify(true);
  fresh.push(completion(1));
  await Promise.resolve();
  assert.is(notifications, 0, 'an unsolicited completion does not fire a solicited arming');
  fresh.push(completion(2, true));
  await Promise.resolve();
  assert.is(notifications, 1);
  fresh.push(completion(3, true));
  await Promise.resolve();
  assert.is(notifications, 1, 'arming is one-shot');
  fresh.requestNotify();
  fresh.push(completion(4, false, WcStatus.WrFlushError));
  await Promise.resolve();
  assert.is(notifications, 2);
  // wait() resolves at once when there is something to poll; solicited waits look ahead only.
  await fresh.wait();
  const solicited = fresh.wait(true);
  let resolved = false;
  void solicited.then(() => (resolved = true));
  fresh.push(completion(5));
  await new Promise((resolve) => setImmediate(resolve));
  assert.not.ok(resolved);
  fresh.push(completion(6, true));
  await solicited;
  assert.ok(resolved);
});

test.run();
