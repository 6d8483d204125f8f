// Each experiment, run small, must show the effect it exists to show.
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { DEFAULT_SRAM_CONFIG, withOverrides } from '../../host/sram/config.ts';
import { runDeregCase, type DeregParams } from '../../host/sram/experiments/dereg.ts';
import { runScheme, schemesFor } from '../../host/sram/experiments/kbtp-vs-per-block-mr.ts';
import { mixesFor, runPolicyCell, POLICIES } from '../../host/sram/experiments/policies.ts';
import { runQpSweepPoint } from '../../host/sram/experiments/qp-sweep.ts';
import { loadBlockTrace } from '../../host/sram/trace.ts';
import { ThroughputMeter } from '../../host/sram/workload.ts';

const small = withOverrides(DEFAULT_SRAM_CONFIG, { lines: 256 }, 'test');

test("dereg: a deregistering neighbour multiplies the victim's translation misses; a registering one barely moves them", () => {
  const params: DeregParams = { victimPages: 384, interval: 100, operations: 40_000, warmup: 10_000, messageBytes: 4096, linkGbps: 100 };
  const alone = runDeregCase(small, 'alone', params, 1);
  const register = runDeregCase(small, 'register', params, 1);
  const dereg = runDeregCase(small, 'dereg', params, 1);
  assert.ok(alone.translationMissRate > 0.1 && alone.translationMissRate < 0.25, `alone ${alone.translationMissRate}`);
  assert.ok(dereg.translationMissRate > 2.5 * alone.translationMissRate, `dereg ${dereg.translationMissRate}`);
  assert.ok(register.translationMissRate < 1.15 * alone.translationMissRate, `register ${register.translationMissRate}`);
  assert.ok(dereg.throughputGbps < 0.7 * alone.throughputGbps);
  assert.ok(register.throughputGbps > 0.9 * alone.throughputGbps);
  assert.ok(dereg.linesDropped > 0 && alone.linesDropped === 0);
  // On a hw-assisted NIC the neighbour's deregistrations only drop its own region.
  const hw = withOverrides(small, { policy: 'hw-assisted' }, 'test');
  assert.ok(runDeregCase(hw, 'dereg', params, 1).translationMissRate < 1.15 * alone.translationMissRate);
});

test('qp-sweep: all hits while the QPs fit, a cliff once they do not', () => {
  const params = { qpCounts: [], messages: 20_000, messageBytes: 256, pages: 16, qpsPerCq: 16, linkGbps: 100 };
  const fits = runQpSweepPoint(small, 64, params, 1);
  const past = runQpSweepPoint(small, 1024, params, 1);
  assert.is(fits.hitRate, 1);
  assert.ok(past.qpcHitRate < 0.35, `QPC hit rate ${past.qpcHitRate}`);
  assert.ok(past.messagesPerSecond < fits.messagesPerSecond / 4);
  assert.ok(past.pcieWritesPerMessage > 0.5, 'evicted QP contexts are dirty');
});

test('policies: each policy wins the mix it is built for', () => {
  const params = { operations: 20_000, warmup: 20_000, messageBytes: 1024, linkGbps: 100 };
  const cost = (mixName: string, policy: string) => {
    const mix = mixesFor(small.lines).find((m) => m.name === mixName)!;
    return runPolicyCell(withOverrides(small, { policy }, 'test'), mix, params, 1).tenantANicNsPerOperation;
  };
  const best = (mix: string) => {
    const costs = POLICIES.map((policy) => [policy, cost(mix, policy)] as const);
    return costs.reduce((a, b) => (b[1] < a[1] ? b : a))[0];
  };
  assert.ok(cost('qp-heavy', 'shared-lru') < cost('qp-heavy', 'partitioned') / 2);
  assert.ok(cost('mr-heavy', 'shared-lru') < cost('mr-heavy', 'partitioned') / 2);
  assert.is(best('noisy-qps'), 'partitioned');
  assert.is(best('dereg-churn'), 'hw-assisted');
});

test('kbtp-vs-per-block-mr: one pool STag needs far fewer translations than a region per block', () => {
  const trace = loadBlockTrace(fileURLToPath(new URL('../fixtures/traces/mooncake-conversation.jsonl', import.meta.url)), 1500);
  const params = { blockBytes: 65_536, poolBlocks: 4000, sessions: 8, requestBytes: 64, linkGbps: 100 };
  const [kbtp, kbtpHuge, perBlock, perBlockOnePage, perBlockHw] = schemesFor(small, 4096, 2 << 20, params.blockBytes).map((scheme) =>
    runScheme(trace, scheme, params),
  );
  assert.is(kbtp!.loads + kbtp!.stores, trace.blockIds.length);
  assert.is(kbtp!.deregistrations, 0);
  assert.ok(perBlock!.deregistrations > 0, 'evicting a block deregisters its region');
  assert.is(
    perBlock!.registrations - perBlock!.deregistrations,
    params.poolBlocks + 2 * params.sessions,
    'one live region per pooled block, plus the session buffers',
  );
  assert.ok(perBlock!.translationMisses > kbtp!.translationMisses);
  assert.ok(perBlockOnePage!.nicNsPerBlockOperation > 5 * kbtpHuge!.nicNsPerBlockOperation);
  assert.ok(perBlockHw!.translationMisses < perBlockOnePage!.translationMisses);
  assert.is(perBlockHw!.linesInvalidated < perBlockOnePage!.linesInvalidated, true);
});

test('throughput meter: an operation takes the larger of its wire time and its NIC time', () => {
  const meter = new ThroughputMeter(100);
  meter.add(100, 4096); // wire 327.68 ns
  meter.add(1000, 4096); // NIC-bound
  assert.is(meter.ns, 327.68 + 1000);
  assert.ok(Math.abs(meter.gbps() - (2 * 4096 * 8) / 1327.68) < 1e-9);
  assert.is(meter.nicNsPerOperation(), 550);
});

test.run();
