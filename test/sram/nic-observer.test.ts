// The adapter is driven the way the software RNIC drives a NicObserver, and its per-QP books
// are checked against what the calls imply.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { SramCache } from '../../host/sram/cache.ts';
import { EntryKind } from '../../host/sram/kinds.ts';
import { SramNicObserver, formatSramNicReport } from '../../host/sram/nic-observer.ts';
import { createPolicy } from '../../host/sram/policy.ts';
import type { NicObserver } from '../../host/rnic/nic-observer.ts';

const costs = { sramHitNs: 10, pcieReadNs: 100, pcieWriteNs: 50 };

function observer(lines = 64, policy = 'shared-lru'): SramNicObserver {
  return new SramNicObserver(new SramCache({ lines, costs, policy: createPolicy(policy) }));
}

test('one RDMA Write: QPC, MPT and one MTT per page touched, CQC, EQC, each charged to the QP', () => {
  const nic = observer();
  const asInterface: NicObserver = nic;
  asInterface.registerRegion(0x100, 1 << 20, 4096);
  asInterface.queuePairCreated(7);
  asInterface.queuePairContext(7, true);
  // 10000 bytes at offset 4000 touch pages 0, 1, 2 and 3.
  asInterface.memoryTranslation(0x100, 4000, 10_000, 4096);
  asInterface.completionQueue(3);
  asInterface.eventQueue(1);
  const cache = nic.cache;
  for (let page = 0; page < 4; page++) assert.ok(cache.contains(EntryKind.MTT, 0x100, page), `page ${page} cached`);
  assert.not.ok(cache.contains(EntryKind.MTT, 0x100, 4));
  const report = nic.report();
  assert.is(report.perQueuePair.length, 1);
  const qp = report.perQueuePair[0]!;
  assert.is(qp.qp, 7);
  // QPC hit (inserted at creation), MPT hit (inserted at registration), 4 MTT misses, CQC and EQC misses.
  assert.is(qp.hits, 2);
  assert.is(qp.misses, 6);
  assert.is(qp.translationLookups, 5);
  assert.is(qp.translationMisses, 4);
  assert.is(qp.pcieReads, 6);
  assert.is(qp.pcieWrites, 0);
  assert.is(qp.nicTimeNs, 2 * 10 + 6 * 110);
  assert.is(report.total.registrations, 1);
  assert.is(report.total.nicTimeNs, qp.nicTimeNs);
  assert.is(report.perKind.MTT!.misses, 4);
  assert.is(report.perKind.MPT!.inserts, 1);
  assert.is(report.perKind.QPC!.inserts, 1);
});

test('a zero-length access resolves the MPT entry only; a page-aligned access touches exactly its pages', () => {
  const nic = observer();
  nic.queuePairContext(1, false);
  nic.memoryTranslation(5, 0, 0, 4096);
  assert.is(nic.report().perKind.MTT!.misses, 0);
  assert.is(nic.report().perKind.MPT!.misses, 1);
  nic.memoryTranslation(5, 8192, 8192, 4096);
  assert.ok(nic.cache.contains(EntryKind.MTT, 5, 2));
  assert.ok(nic.cache.contains(EntryKind.MTT, 5, 3));
  assert.is(nic.report().perKind.MTT!.misses, 2);
  assert.throws(() => nic.memoryTranslation(5, 0, 10, 0), /pageSize positive/);
});

test('per-QP attribution: work after a QP context access is charged to that QP', () => {
  const nic = observer(4);
  nic.queuePairContext(1, true);
  nic.memoryTranslation(9, 0, 4096, 4096);
  nic.queuePairContext(2, true);
  nic.memoryTranslation(10, 0, 4096, 4096);
  nic.completionQueue(1);
  // QP 2's MPT miss evicted QP 1's dirty context (the write-back is charged to QP 2, which caused
  // it), its MTT miss QP 1's MPT line, and the CQC miss QP 1's MTT line.
  const [one, two] = nic.report().perQueuePair;
  assert.is(one!.qp, 1);
  assert.is(one!.misses, 3);
  assert.is(one!.linesLost, 3);
  assert.is(two!.misses, 4);
  assert.is(two!.pcieWrites, 1);
  assert.is(two!.nicTimeNs, 4 * 110 + 50);
  assert.equal(nic.queuePair(2), two);
});

test('deregistration follows the policy; QP destroy drops the context and freezes the figures', () => {
  for (const [policy, survivors] of [
    ['shared-lru', 0],
    ['hw-assisted', 2],
  ] as const) {
    const nic = observer(64, policy);
    nic.registerRegion(1, 8192, 4096);
    nic.registerRegion(2, 8192, 4096);
    nic.queuePairContext(4, true);
    nic.memoryTranslation(1, 0, 4096, 4096);
    nic.memoryTranslation(2, 0, 4096, 4096);
    nic.deregisterRegion(2);
    const occupancy = nic.cache.occupancy();
    assert.is(occupancy.MPT! + occupancy.MTT!, survivors, `${policy}: translations left`);
    assert.is(occupancy.QPC, 1);
    nic.queuePairDestroyed(4);
    assert.is(nic.cache.occupancy().QPC, 0);
    assert.is(nic.queuePair(4), undefined);
    // A new QP with the same number is a new session with its own books.
    nic.queuePairCreated(4);
    nic.queuePairContext(4, false);
    const report = nic.report();
    assert.is(report.perQueuePair.length, 2);
    assert.ok(report.perQueuePair[0]!.destroyed);
    assert.not.ok(report.perQueuePair[1]!.destroyed);
    assert.is(report.perQueuePair[1]!.hits, 1);
    assert.is(report.total.deregistrations, 1);
  }
});

test('control work before any message is charged to the control owner', () => {
  const nic = observer(2);
  nic.registerRegion(1, 4096, 4096);
  nic.registerRegion(2, 4096, 4096);
  nic.registerRegion(3, 4096, 4096);
  const report = nic.report();
  assert.is(report.perQueuePair.length, 0);
  assert.is(report.perKind.MPT!.evictions, 1);
  assert.is(report.control.qp, -1);
});

test('the log report names the model, the totals and every QP', () => {
  const nic = observer();
  nic.queuePairContext(11, true);
  nic.memoryTranslation(3, 0, 100, 4096);
  const text = formatSramNicReport(nic.report());
  assert.match(text, /^sram model \(64 lines, fully associative, shared-lru\): 3 accesses, 0 hits, 3 misses/);
  assert.match(text, /PCIe 3 reads \+ 0 writes, modelled NIC time 0\.3 us/);
  assert.match(text, /\n {2}QP 11: 0 hits, 3 misses \(0\.0%\), translations 2\/2 missed/);
});

test.run();
