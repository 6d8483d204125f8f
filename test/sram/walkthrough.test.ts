// The seed's key-caching walkthrough (shared/seeds/004), step by step, on an eight-line shared
// cache: after every step each line's content, its dirty bit and the PCIe crossings counted so
// far are asserted exactly.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { EVICTED, HIT, SramCache, WROTE_BACK } from '../../host/sram/cache.ts';
import { EntryKind } from '../../host/sram/kinds.ts';
import { createPolicy } from '../../host/sram/policy.ts';

const { QPC, MPT, MTT } = EntryKind;
const REGION_A = 0xa00; // the victim's region
const REGION_D = 0xd00;
const REGION_E = 0xe00; // the neighbour's region, deregistered in step 7
const VICTIM_QP = 1;
const OWNER = 0;

type Expected = [kind: string, a: number, b: number, dirty: boolean] | null;

function assertLines(cache: SramCache, expected: Expected[], step: string): void {
  const actual = cache.snapshot().map((view): Expected => (view === null ? null : [view.kind, view.a, view.b, view.dirty]));
  assert.equal(actual, expected, `${step}: line contents and dirty bits`);
}

function assertCrossings(cache: SramCache, reads: number, writes: number, step: string): void {
  const stats = cache.stats();
  assert.is(stats.pcieReads, reads, `${step}: PCIe reads`);
  assert.is(stats.pcieWrites, writes, `${step}: PCIe writes`);
}

test('the seed walkthrough: a QP miss evicts a translation, then a deregistration clears them all', () => {
  const cache = new SramCache({ lines: 8, policy: createPolicy('shared-lru') });

  // Warm-up: fill the eight lines in order, then use MTT D and QP 2 before everything else so
  // that they are the two least recently used lines. QP 2's use moves its next PSN: dirty.
  const warm: Array<[EntryKind, number, number]> = [
    [QPC, VICTIM_QP, 0],
    [MPT, REGION_A, 0],
    [QPC, 2, 0],
    [MTT, REGION_A, 0],
    [QPC, 3, 0],
    [MTT, REGION_A, 1],
    [MPT, REGION_D, 0],
    [MTT, REGION_D, 0],
  ];
  for (const [kind, a, b] of warm) cache.access(kind, a, b, OWNER, false);
  cache.access(MTT, REGION_D, 0, OWNER, false);
  cache.access(QPC, 2, 0, OWNER, true);
  for (const [kind, a, b] of warm) if (!(kind === MTT && a === REGION_D) && !(kind === QPC && a === 2)) cache.access(kind, a, b, OWNER, false);
  cache.resetCounters();

  // 1. Capacity pressure: full and warm, QPCs and translations side by side, line 2 dirty.
  assertLines(
    cache,
    [
      ['QPC', VICTIM_QP, 0, false],
      ['MPT', REGION_A, 0, false],
      ['QPC', 2, 0, true],
      ['MTT', REGION_A, 0, false],
      ['QPC', 3, 0, false],
      ['MTT', REGION_A, 1, false],
      ['MPT', REGION_D, 0, false],
      ['MTT', REGION_D, 0, false],
    ],
    'step 1',
  );
  assert.equal(cache.recencyOrder().slice(-2), [2, 7], 'step 1: MTT D is the LRU line, QP 2 the next');
  assertCrossings(cache, 0, 0, 'step 1');

  // 2. A packet arrives for QP 5: its context is in no line.
  assert.not.ok(cache.contains(QPC, 5, 0), 'step 2: QP 5 is not cached');
  assert.is(cache.peekVictim(QPC, 5, 0), 7, 'step 2: the miss will take line 7 (MTT D)');
  assertCrossings(cache, 0, 0, 'step 2');

  // 3. The victim is chosen by recency, not type: QP 5's context replaces MTT D in line 7,
  //    and dropping a translation costs no write.
  const qp5 = cache.access(QPC, 5, 0, OWNER, true);
  assert.is(qp5, EVICTED, 'step 3: a miss that evicted a clean line');
  assert.is(cache.lastLine, 7);
  assertLines(
    cache,
    [
      ['QPC', VICTIM_QP, 0, false],
      ['MPT', REGION_A, 0, false],
      ['QPC', 2, 0, true],
      ['MTT', REGION_A, 0, false],
      ['QPC', 3, 0, false],
      ['MTT', REGION_A, 1, false],
      ['MPT', REGION_D, 0, false],
      ['QPC', 5, 0, true],
    ],
    'step 3',
  );
  assertCrossings(cache, 1, 0, 'step 3');

  // 4. A DMA needs region D: its MPT entry is still there, its translation is not - a miss
  //    caused by QP traffic, not by memory-region traffic.
  assert.is(cache.access(MPT, REGION_D, 0, OWNER, false), HIT, 'step 4: MPT D hits');
  assert.not.ok(cache.contains(MTT, REGION_D, 0), 'step 4: MTT D was given to QP 5');
  assertLines(
    cache,
    [
      ['QPC', VICTIM_QP, 0, false],
      ['MPT', REGION_A, 0, false],
      ['QPC', 2, 0, true],
      ['MTT', REGION_A, 0, false],
      ['QPC', 3, 0, false],
      ['MTT', REGION_A, 1, false],
      ['MPT', REGION_D, 0, false],
      ['QPC', 5, 0, true],
    ],
    'step 4',
  );
  assertCrossings(cache, 1, 0, 'step 4');

  // 5. The next victim is QP 2's context, and it is dirty.
  const victim = cache.peekVictim(MTT, REGION_D, 0);
  assert.is(victim, 2, 'step 5: the LRU line is line 2');
  assert.equal(cache.lineView(victim), { line: 2, kind: 'QPC', a: 2, b: 0, dirty: true, owner: OWNER }, 'step 5: QP 2, dirty');
  assertCrossings(cache, 1, 0, 'step 5');

  // 6. QP 2 is written back, only then MTT D is fetched into line 2: one translation miss,
  //    two PCIe crossings (a write and a read).
  const mttD = cache.access(MTT, REGION_D, 0, OWNER, false);
  assert.is(mttD, EVICTED | WROTE_BACK, 'step 6: the miss wrote a dirty line back');
  assert.is(cache.lastLine, 2);
  assertLines(
    cache,
    [
      ['QPC', VICTIM_QP, 0, false],
      ['MPT', REGION_A, 0, false],
      ['MTT', REGION_D, 0, false],
      ['MTT', REGION_A, 0, false],
      ['QPC', 3, 0, false],
      ['MTT', REGION_A, 1, false],
      ['MPT', REGION_D, 0, false],
      ['QPC', 5, 0, true],
    ],
    'step 6',
  );
  assertCrossings(cache, 2, 1, 'step 6');
  const costs = cache.costs;
  assert.is(
    cache.stats().perKind.MTT!.timeNs,
    costs.sramHitNs + costs.pcieReadNs + costs.pcieWriteNs,
    'step 6: the translation miss paid a read and a write-back',
  );

  // 7. An unrelated deregistration (region E is not even cached) drops every MTT/MPT line;
  //    the QP contexts stay, QP 5's still dirty.
  cache.deregisterRegion(REGION_E);
  assertLines(cache, [['QPC', VICTIM_QP, 0, false], null, null, null, ['QPC', 3, 0, false], null, null, ['QPC', 5, 0, true]], 'step 7');
  assertCrossings(cache, 2, 1, 'step 7');
  assert.is(cache.stats().perKind.MTT!.invalidations, 3, 'step 7: three MTT lines dropped');
  assert.is(cache.stats().perKind.MPT!.invalidations, 2, 'step 7: two MPT lines dropped');

  // 8. The victim's next DMAs miss on translations it used a moment ago: each one a PCIe read.
  assert.is(cache.access(QPC, VICTIM_QP, 0, OWNER, false), HIT, "step 8: the victim's QP context survived");
  assert.is(cache.access(MPT, REGION_A, 0, OWNER, false), 0, 'step 8: MPT A misses into a free line');
  assert.is(cache.access(MTT, REGION_A, 0, OWNER, false), 0, 'step 8: MTT A page 0 misses');
  assert.is(cache.access(MTT, REGION_A, 1, OWNER, false), 0, 'step 8: MTT A page 1 misses');
  assertLines(
    cache,
    [
      ['QPC', VICTIM_QP, 0, false],
      ['MPT', REGION_A, 0, false],
      ['MTT', REGION_A, 0, false],
      ['MTT', REGION_A, 1, false],
      ['QPC', 3, 0, false],
      null,
      null,
      ['QPC', 5, 0, true],
    ],
    'step 8',
  );
  assertCrossings(cache, 5, 1, 'step 8');
});

test('the same walkthrough on a hw-assisted NIC keeps the victim translations at step 7', () => {
  const cache = new SramCache({ lines: 8, policy: createPolicy('hw-assisted') });
  cache.access(MPT, REGION_A, 0, OWNER, false);
  cache.access(MTT, REGION_A, 0, OWNER, false);
  cache.access(MPT, REGION_E, 0, OWNER, false);
  cache.access(MTT, REGION_E, 0, OWNER, false);
  cache.deregisterRegion(REGION_E);
  assert.ok(cache.contains(MPT, REGION_A, 0));
  assert.ok(cache.contains(MTT, REGION_A, 0));
  assert.not.ok(cache.contains(MPT, REGION_E, 0));
  assert.not.ok(cache.contains(MTT, REGION_E, 0));
});

test.run();
