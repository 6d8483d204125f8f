import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { resolveTargetSettings, engineConfigFor, ConfigError } from '../../firmware/config.ts';
import { resolveEngineConfig, EngineConfigError } from '../../host/engine/config.ts';
import { computeLayout } from '../../host/engine/layout.ts';

function rejects(input: unknown, field: string, fix: RegExp): void {
  try {
    resolveTargetSettings(input as never);
  } catch (error) {
    assert.instance(error, ConfigError);
    assert.is((error as ConfigError).field, field);
    assert.match((error as Error).message, fix);
    return;
  }
  assert.unreachable(`accepted ${JSON.stringify(input)}`);
}

test('defaults: a 256 MiB pool of 64 KiB blocks, one open tenant, loopback 7117', () => {
  const settings = resolveTargetSettings({});
  assert.equal(settings.listen, { host: '127.0.0.1', port: 7117 });
  assert.is(settings.pool.blockSize * settings.pool.blockCount, 256 * 2 ** 20);
  assert.is(settings.tenants.length, 1);
  assert.is(settings.tenants[0]?.secret, null);
  assert.is(settings.tenants[0]?.quota, 4096);
  const engine = resolveEngineConfig(engineConfigFor(settings));
  assert.is(engine.sharedBlocks, 4096);
});

test('every bad field is named with a fix', () => {
  rejects({ listen: 'nowhere' }, 'listen', /host:port/);
  rejects({ listen: '127.0.0.1:70000' }, 'listen', /host:port/);
  rejects({ pool: { blockSize: 'big' } }, 'pool.blockSize', /integer/);
  rejects({ pool: { blockCount: 0 } }, 'pool.blockCount', /integer from 1/);
  rejects({ colour: 'blue' }, 'colour', /not a setting/);
  rejects({ tenants: [] }, 'tenants', /at least one tenant/);
  rejects({ tenants: [{ quota: 1 }] }, 'tenants[0].name', /64 UTF-8/);
  rejects({ tenants: [{ name: 'a', secret: 7 }] }, 'tenants[0].secret', /1 to 64/);
  rejects({ listen: '0.0.0.0:7117' }, 'tenants[0].secret', /give the tenant a secret/);
  rejects({ tenants: [{ name: 'a', storeRange: { first: -1, count: 3 } }] }, 'tenants[0].storeRange.first', /non-negative/);
  rejects({ tenants: [{ name: 'a', trust: { directLoad: 'yes' } }] }, 'tenants[0].trust.directLoad', /true or false/);
});

test('engine-level rules surface through the engine config: overlapping ranges, quota sum, 4 GiB', () => {
  const overlap = resolveTargetSettings({ tenants: [
    { name: 'a', quota: 1, storeRange: { first: 0, count: 10 } },
    { name: 'b', quota: 1, storeRange: { first: 5, count: 10 } },
  ] });
  assert.throws(() => resolveEngineConfig(engineConfigFor(overlap)), /overlaps the store range of tenant 'a'/);
  const tooMuch = resolveTargetSettings({ pool: { blockCount: 8, blockSize: 64 }, tenants: [
    { name: 'a', quota: 5, storeRange: { first: 0, count: 10 } }, { name: 'b', quota: 4, storeRange: { first: 10, count: 10 } },
  ] });
  assert.throws(() => resolveEngineConfig(engineConfigFor(tooMuch)), /add up to 9, more than its 8 blocks/);
  const huge = resolveEngineConfig({ blockSize: 1 << 20, blockCount: 4096, threads: 1 });
  assert.throws(() => computeLayout(huge, 16), (error: unknown) => error instanceof EngineConfigError && /4 GiB/.test((error as Error).message));
  assert.throws(() => resolveEngineConfig({ blockSize: 100, blockCount: 4 }), /not a multiple of 8; use 104/);
  assert.throws(() => resolveEngineConfig({ blockSize: 64, blockCount: 9, ringOrder: 3 }), /smaller than the ring's 9 blocks/);
  assert.throws(() => resolveEngineConfig({ blockSize: 64, blockCount: 4, ringOrder: 0 }), /from 1 to/);
});

test('a tenant trusted for DIRECT_ALLOC gets a partition of exactly its quota', () => {
  const settings = resolveTargetSettings({ pool: { blockCount: 100, blockSize: 4096 }, tenants: [
    { name: 'plain', quota: 60, storeRange: { first: 0, count: 100 } },
    { name: 'trusted', secret: 'hunter2', quota: 40, storeRange: { first: 100, count: 100 }, trust: { directLoad: true, directAlloc: true } },
  ] });
  const engine = resolveEngineConfig(engineConfigFor(settings));
  assert.equal(engine.partitions, [{ blocks: 40, ringOrder: 6, firstBlock: 60 }]);
  assert.is(engine.sharedBlocks, 60);
  assert.is(engine.tenants[1]?.partition, 0);
});

test.run();
