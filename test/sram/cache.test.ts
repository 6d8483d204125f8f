import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { BYPASSED, EVICTED, HIT, SramCache, WROTE_BACK } from '../../host/sram/cache.ts';
import { EntryKind, KIND_COUNT } from '../../host/sram/kinds.ts';
import { createPolicy, defaultPartition, policyNames, registerPolicy } from '../../host/sram/policy.ts';
import { Random } from '../../host/util/random.ts';

const { QPC, MPT, MTT, CQC, BLOCK } = EntryKind;

/** A plain Map-based LRU per set: the obviously correct model the typed-array one must match. */
class ReferenceLru {
  private readonly sets = new Map<number, Map<string, boolean>>();
  constructor(private readonly ways: number) {}
  access(set: number, key: string, write: boolean): { hit: boolean; evicted?: string; wroteBack: boolean } {
    let lines = this.sets.get(set);
    // biome-ignore lint/suspicious/noAssignInExpressions: creates the set's map on first use
    if (lines === undefined) this.sets.set(set, (lines = new Map()));
    const dirty = lines.get(key);
    if (dirty !== undefined) {
      lines.delete(key);
      lines.set(key, dirty || write);
      return { hit: true, wroteBack: false };
    }
    let evicted: string | undefined;
    let wroteBack = false;
    if (lines.size >= this.ways) {
      const [oldest, oldestDirty] = lines.entries().next().value as [string, boolean];
      lines.delete(oldest);
      evicted = oldest;
      wroteBack = oldestDirty;
    }
    lines.set(key, write);
    return evicted === undefined ? { hit: false, wroteBack } : { hit: false, evicted, wroteBack };
  }
  drop(predicate: (key: string) => boolean): void {
    for (const lines of this.sets.values()) for (const key of [...lines.keys()]) if (predicate(key)) lines.delete(key);
  }
  size(): number {
    let total = 0;
    for (const lines of this.sets.values()) total += lines.size;
    return total;
  }
}

function checkAgainstReference(lines: number, associativity: number, seed: number): void {
  const cache = new SramCache({ lines, associativity });
  const reference = new ReferenceLru(associativity === 0 ? lines : associativity);
  const random = new Random(seed);
  for (let step = 0; step < 40_000; step++) {
    const roll = random.below(1000);
    if (roll < 3) {
      // A deregistration on shared-lru drops every translation.
      cache.deregisterRegion(random.below(8));
      reference.drop((key) => key.startsWith('1:') || key.startsWith('2:'));
      continue;
    }
    const kind = (roll < 400 ? QPC : roll < 450 ? MPT : roll < 950 ? MTT : CQC) as EntryKind;
    const a = kind === MTT || kind === MPT ? random.below(8) : random.below(lines * 2);
    const b = kind === MTT ? random.below(lines) : 0;
    const write = (kind === QPC || kind === CQC) && random.below(2) === 0;
    const set = cache.setOfKey(kind, a, b);
    const expected = reference.access(set, `${kind}:${a}:${b}`, write);
    const result = cache.access(kind, a, b, 0, write);
    assert.is((result & HIT) !== 0, expected.hit, `step ${step}: hit`);
    assert.is((result & EVICTED) !== 0, expected.evicted !== undefined, `step ${step}: eviction`);
    assert.is((result & WROTE_BACK) !== 0, expected.wroteBack, `step ${step}: write-back`);
  }
  const occupied = cache.snapshot().filter((line) => line !== null).length;
  assert.is(occupied, reference.size(), 'same number of valid lines at the end');
}

test('fully associative: every hit, eviction and write-back matches a reference LRU', () => {
  checkAgainstReference(64, 0, 1);
  checkAgainstReference(1000, 0, 2);
});

test('set associative: matches a reference LRU per set', () => {
  checkAgainstReference(64, 4, 3);
  checkAgainstReference(1024, 8, 4);
  checkAgainstReference(96, 2, 5);
});

test('the key index survives heavy churn (backward-shift deletion keeps every key findable)', () => {
  const cache = new SramCache({ lines: 37 });
  const random = new Random(9);
  const present = new Set<number>();
  for (let step = 0; step < 50_000; step++) {
    const key = random.below(120);
    if (random.below(3) === 0) {
      assert.is(cache.invalidate(QPC, key, 0), present.has(key));
      present.delete(key);
    } else {
      const before = cache
        .snapshot()
        .filter((line) => line !== null)
        .map((line) => line!.a);
      cache.access(QPC, key, 0, 0, false);
      if (!present.has(key) && before.length === 37) {
        const after = new Set(cache.snapshot().map((line) => line!.a));
        for (const old of before) if (!after.has(old)) present.delete(old);
      }
      present.add(key);
    }
    if (step % 997 === 0) for (let k = 0; k < 120; k++) assert.is(cache.contains(QPC, k, 0), present.has(k), `key ${k}`);
  }
});

test('translations cannot be written on-chip', () => {
  const cache = new SramCache({ lines: 4 });
  assert.throws(() => cache.access(MTT, 1, 0, 0, true), /never modified on-chip/);
  assert.throws(() => cache.access(MPT, 1, 0, 0, true), /never modified on-chip/);
});

test('counters per kind and per owner, and modelled time', () => {
  const cache = new SramCache({ lines: 2, costs: { sramHitNs: 10, pcieReadNs: 100, pcieWriteNs: 50 } });
  cache.access(QPC, 1, 0, 0, true); // miss: 110
  cache.access(QPC, 1, 0, 0, false); // hit: 10
  cache.access(MTT, 7, 3, 1, false); // miss: 110
  cache.access(MTT, 7, 4, 1, false); // miss evicting dirty QPC 1: 160, owner 0 loses a line
  const stats = cache.stats();
  assert.is(stats.hits, 1);
  assert.is(stats.misses, 3);
  assert.is(stats.pcieReads, 3);
  assert.is(stats.pcieWrites, 1);
  assert.is(stats.pcieCrossings, 4);
  assert.is(stats.timeNs, 110 + 10 + 110 + 160);
  assert.equal(stats.perKind.QPC, { hits: 1, misses: 1, evictions: 1, writeBacks: 1, invalidations: 0, inserts: 0, timeNs: 120 });
  assert.is(stats.perKind.MTT!.misses, 2);
  const owner0 = cache.ownerStats(0);
  const owner1 = cache.ownerStats(1);
  assert.is(owner0.hits, 1);
  assert.is(owner0.misses, 1);
  assert.is(owner0.timeNs, 120);
  assert.is(owner0.linesLost, 1);
  assert.is(owner1.translationLookups, 2);
  assert.is(owner1.translationMisses, 2);
  assert.is(owner1.pcieWrites, 1, 'the access that needed the line paid the write-back');
  assert.is(owner1.timeNs, 270);
  assert.equal(cache.owners(), [0, 1]);
  cache.resetCounters();
  assert.is(cache.stats().accesses, 0);
  assert.ok(cache.contains(MTT, 7, 4), 'reset keeps the lines');
});

test('owner counters grow past the initial capacity', () => {
  const cache = new SramCache({ lines: 4 });
  cache.access(QPC, 1, 0, 5000, false);
  assert.is(cache.ownerStats(5000).misses, 1);
  assert.throws(() => cache.access(QPC, 1, 0, -1, false), /owner must be a non-negative integer/);
});

test('partitioned: each kind evicts only within its own lines; a kind with no lines bypasses', () => {
  const policy = createPolicy('partitioned', { partition: { QPC: 2, MPT: 1, MTT: 1, CQC: 0, EQC: 0 } });
  const cache = new SramCache({ lines: 4, policy });
  cache.access(MTT, 1, 0, 0, false);
  for (let qp = 0; qp < 10; qp++) cache.access(QPC, qp, 0, 0, false);
  assert.ok(cache.contains(MTT, 1, 0), 'QP churn cannot push the translation out');
  assert.is(cache.occupancy().QPC, 2);
  assert.is(cache.access(CQC, 1, 0, 0, true), BYPASSED);
  assert.is(cache.access(CQC, 1, 0, 0, true), BYPASSED, 'still not cached');
  assert.is(cache.stats().perKind.CQC!.misses, 2);
});

test('partitioned: the default split adds up and respects the associativity', () => {
  const split = defaultPartition({ lines: 2048, associativity: 8 });
  assert.equal(split, { MPT: 128, MTT: 768, CQC: 64, EQC: 64, QPC: 1024, BLOCK: 0 });
  const cache = new SramCache({ lines: 2048, associativity: 8, policy: createPolicy('partitioned') });
  assert.is(cache.lineCount, 2048);
  assert.throws(
    () => new SramCache({ lines: 8, policy: createPolicy('partitioned', { partition: { QPC: 3 } }) }),
    /partition gives 3 lines but the cache has 8/,
  );
  assert.throws(
    () => new SramCache({ lines: 8, associativity: 4, policy: createPolicy('partitioned', { partition: { QPC: 6, MTT: 2 } }) }),
    /not a multiple of associativity 4/,
  );
});

test('hw-assisted drops only the departing region; shared-lru drops every translation', () => {
  for (const name of ['shared-lru', 'hw-assisted']) {
    const cache = new SramCache({ lines: 16, policy: createPolicy(name) });
    cache.access(QPC, 1, 0, 0, true);
    for (const stag of [10, 11]) {
      cache.access(MPT, stag, 0, 0, false);
      cache.access(MTT, stag, 0, 0, false);
    }
    cache.deregisterRegion(10);
    const occupancy = cache.occupancy();
    assert.is(occupancy.QPC, 1, `${name}: QP contexts stay`);
    assert.is(occupancy.MTT! + occupancy.MPT!, name === 'shared-lru' ? 0 : 2, `${name}: translations left`);
  }
});

test('control operations: registration inserts the MPT line, QP destroy drops its context', () => {
  const cache = new SramCache({ lines: 4 });
  cache.registerRegion(42, 0);
  assert.ok(cache.contains(MPT, 42, 0));
  assert.is(cache.stats().perKind.MPT!.inserts, 1);
  assert.is(cache.stats().misses, 0, 'an insert is not a miss');
  cache.createQueuePair(9, 0);
  assert.is(cache.access(QPC, 9, 0, 0, true), HIT);
  cache.destroyQueuePair(9);
  assert.not.ok(cache.contains(QPC, 9, 0));
  assert.is(cache.stats().pcieWrites, 0, 'a destroyed QP is dropped, not written back');
  const quiet = new SramCache({ lines: 4, controlInsertsLines: false });
  quiet.registerRegion(42, 0);
  assert.not.ok(quiet.contains(MPT, 42, 0));
  assert.is(quiet.registrations, 1);
});

test('keys are 32-bit unsigned: a negative STag is the same key as its unsigned value', () => {
  const cache = new SramCache({ lines: 4 });
  cache.access(MPT, -1, 0, 0, false);
  assert.is(cache.access(MPT, 0xffffffff, 0, 0, false), HIT);
});

test('BLOCK entries share the pool under shared-lru', () => {
  const cache = new SramCache({ lines: 2 });
  cache.access(BLOCK, 1, 0, 0, false);
  cache.access(QPC, 1, 0, 0, false);
  cache.access(BLOCK, 2, 0, 0, false);
  assert.not.ok(cache.contains(BLOCK, 1, 0));
});

test('policies are pluggable by name', () => {
  registerPolicy('test-never-invalidate', () => ({
    name: 'test-never-invalidate',
    description: 'deregistration drops nothing',
    layout: (geometry) => [{ kinds: Array.from({ length: KIND_COUNT }, (_, kind) => kind as EntryKind), lines: geometry.lines }],
    deregister: () => {},
  }));
  assert.ok(policyNames().includes('test-never-invalidate'));
  const cache = new SramCache({ lines: 4, policy: createPolicy('test-never-invalidate') });
  cache.access(MTT, 1, 0, 0, false);
  cache.deregisterRegion(1);
  assert.ok(cache.contains(MTT, 1, 0));
  assert.throws(() => createPolicy('no-such-policy'), /unknown policy 'no-such-policy'; use one of shared-lru, partitioned, hw-assisted/);
});

test('bad geometry is refused with a message naming the fix', () => {
  assert.throws(() => new SramCache({ lines: 0 }), /lines must be a whole number from 1 to 16777216/);
  assert.throws(() => new SramCache({ lines: 2 ** 25 }), /lines must be a whole number from 1 to 16777216/);
  assert.throws(() => new SramCache({ lines: 10, associativity: 4 }), /not a multiple of associativity 4/);
  assert.throws(() => new SramCache({ lines: 8, costs: { pcieReadNs: -1 } }), /costs.pcieReadNs must be a non-negative number/);
});

test.run();
