import { test } from 'uvu';
import { hashSecret } from '../../host/kbtp/server/secret-hash.ts';
import * as assert from 'uvu/assert';
import { resolveTargetSettings, engineConfigFor, describeSettings, ConfigError, setDurable } from '../../host/kbtp/server/target-config.ts';
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
  rejects({ colour: 'blue' }, 'colour', /unknown key; the keys here are "listen", "workers"/);
  rejects({ tenants: [] }, 'tenants', /at least one tenant/);
  rejects({ transport: 'ib' }, 'transport', /"iwarp" or "roce"/);
  rejects({ transport: 'roce', listen: '[::1]:7117' }, 'listen', /specific IPv4 listen address/);
  rejects({ tenants: [{ quota: 1 }] }, 'tenants[0].name', /is required; name the tenant/);
  rejects({ tenants: [{ name: 'a', secret: 7 }] }, 'tenants[0].secret', /1 to 64/);
  rejects({ listen: '0.0.0.0:7117' }, 'tenants', /default tenant is open.*list tenants with secrets/);
  rejects({ tenants: [{ name: 'a', open: true, storeRange: { first: -1, count: 3 } }] }, 'tenants[0].storeRange.first', /non-negative/);
  rejects({ tenants: [{ name: 'a', open: true, trust: { directLoad: 'yes' } }] }, 'tenants[0].trust.directLoad', /true or false/);
  rejects({ timeouts: { helloMs: 0 } }, 'timeouts.helloMs', /integer from 1/);
  rejects({ session: { maxSessions: 8, maxSessionsPerWorker: 9 } }, 'session.maxSessionsPerWorker', /from 1 to 8/);
});

test('the typos of the issue, and one in every nested object, name their path and the nearest key', () => {
  // A misspelt secret used to start an open tenant anyone could use.
  rejects({ tenants: [{ name: 'a', secrte: 'x', quota: 1 }] }, 'tenants[0].secrte', /unknown key; did you mean "secret"\?/);
  rejects({ pool: { blockcount: 8 } }, 'pool.blockcount', /did you mean "blockCount"/);
  rejects({ session: { credit: 8 } }, 'session.credit', /did you mean "credits"/);
  rejects({ tenants: [{ name: 'a', open: true, trust: { directload: true } }] }, 'tenants[0].trust.directload', /did you mean "directLoad"/);
  rejects({ tenants: [{ name: 'a', open: true, storeRange: { frist: 0, count: 4 } }] }, 'tenants[0].storeRange.frist', /did you mean "first"/);
  rejects({ tenants: [{ name: 'a', open: true, loadScope: { first: 0, cuont: 4 } }] }, 'tenants[0].loadScope.cuont', /did you mean "count"/);
  rejects({ timeouts: { helloMS: 5 } }, 'timeouts.helloMS', /did you mean "helloMs"/);
  rejects({ worker: 2 }, 'worker', /did you mean "workers"/);
  rejects(
    {
      tenants: [
        { name: 'a', open: true, quota: 1, storeRange: { first: 0, count: 1 } },
        { name: 'b', secret: 's', qouta: 1, storeRange: { first: 9, count: 1 } },
      ],
    },
    'tenants[1].qouta',
    /did you mean "quota"/,
  );
  // Nested values of the wrong kind.
  rejects({ timeouts: 5 }, 'timeouts', /must be an object/);
  rejects({ tenants: [{ name: 'a', open: true, trust: [] }] }, 'tenants[0].trust', /must be an object/);
});

test('a tenant without a secret says so, and only on loopback; no silent zero quota', () => {
  rejects(
    { tenants: [{ name: 'a', quota: 1 }] },
    'tenants[0].secret',
    /has no secret; give it a "secretHash" \(kbtp tenant add writes one\) or a "secret", or say "open": true/,
  );
  rejects({ tenants: [{ name: 'a', quota: 1, secretHash: 'md5$abc' }] }, 'tenants[0].secretHash', /is not a scrypt hash/);
  rejects({ tenants: [{ name: 'a', quota: 1, secret: 's', secretHash: hashSecret('s') }] }, 'tenants[0].secret', /both a secret and a secretHash/);
  rejects({ tenants: [{ name: 'a', secret: null, quota: 1 }] }, 'tenants[0].secret', /has no secret/);
  rejects({ tenants: [{ name: 'a', secret: 's', open: true }] }, 'tenants[0].open', /has a secret and "open": true/);
  rejects({ listen: '10.0.0.1:7117', tenants: [{ name: 'a', open: true }] }, 'tenants[0].open', /open but the target listens on 10\.0\.0\.1/);
  const remote = resolveTargetSettings({ listen: '10.0.0.1:7117', tenants: [{ name: 'a', secret: 's' }] });
  assert.is(remote.tenants[0]?.open, false);
  // One tenant takes the whole pool by default; with several, each must say its quota and store range.
  assert.is(resolveTargetSettings({ pool: { blockCount: 32 }, tenants: [{ name: 'a', secret: 's' }] }).tenants[0]?.quota, 32);
  rejects(
    {
      tenants: [
        { name: 'a', open: true, storeRange: { first: 0, count: 1 } },
        { name: 'b', secret: 's', storeRange: { first: 1, count: 1 } },
      ],
    },
    'tenants[0].quota',
    /is required; give the tenant's allocation quota/,
  );
  rejects(
    {
      tenants: [
        { name: 'a', open: true, quota: 1 },
        { name: 'b', secret: 's', quota: 1 },
      ],
    },
    'tenants[0].storeRange',
    /is required/,
  );
  const zero = resolveTargetSettings({
    tenants: [
      { name: 'a', open: true, quota: 0, storeRange: { first: 0, count: 1 } },
      { name: 'b', secret: 's', quota: 1, storeRange: { first: 1, count: 1 } },
    ],
  });
  assert.is(zero.tenants[0]?.quota, 0, 'an explicit 0 is allowed: a tenant that only loads');
});

test('limits and timeouts: defaults, per-tenant session limit capped by the node', () => {
  const settings = resolveTargetSettings({});
  assert.equal(settings.timeouts, { mpaRequestMs: 10_000, rtrMs: 10_000, helloMs: 10_000, idleSessionMs: 600_000, rdmaReadMs: 30_000 });
  assert.is(settings.session.maxSessions, 64);
  assert.is(settings.session.maxSessionsPerWorker, 64);
  assert.is(settings.tenants[0]?.maxSessions, 64);
  assert.is(resolveTargetSettings({ timeouts: { idleSessionMs: 0 } }).timeouts.idleSessionMs, 0, '0 disables the idle timeout');
  rejects({ session: { maxSessions: 4 }, tenants: [{ name: 'a', open: true, maxSessions: 5 }] }, 'tenants[0].maxSessions', /from 1 to 4/);
});

test('the effective configuration masks secrets', () => {
  const text = describeSettings(resolveTargetSettings({ tenants: [{ name: 'a', secret: 'hunter2' }] }));
  assert.not.match(text, /hunter2/);
  const parsed = JSON.parse(text) as { tenants: Array<{ secret: string }>; timeouts: { helloMs: number } };
  assert.is(parsed.tenants[0]?.secret, '(set, not shown)');
  assert.is(parsed.timeouts.helloMs, 10_000);
});

test('engine-level rules surface through the engine config: overlapping ranges, quota sum, 4 GiB', () => {
  const overlap = resolveTargetSettings({
    tenants: [
      { name: 'a', open: true, quota: 1, storeRange: { first: 0, count: 10 } },
      { name: 'b', open: true, quota: 1, storeRange: { first: 5, count: 10 } },
    ],
  });
  assert.throws(() => resolveEngineConfig(engineConfigFor(overlap)), /overlaps the store range of tenant 'a'/);
  const tooMuch = resolveTargetSettings({
    pool: { blockCount: 8, blockSize: 64 },
    tenants: [
      { name: 'a', open: true, quota: 5, storeRange: { first: 0, count: 10 } },
      { name: 'b', open: true, quota: 4, storeRange: { first: 10, count: 10 } },
    ],
  });
  assert.throws(() => resolveEngineConfig(engineConfigFor(tooMuch)), /add up to 9, more than its 8 blocks/);
  const huge = resolveEngineConfig({ blockSize: 1 << 20, blockCount: 4096, threads: 1 });
  assert.throws(
    () => computeLayout(huge, 16),
    (error: unknown) => error instanceof EngineConfigError && /4 GiB/.test((error as Error).message),
  );
  assert.throws(() => resolveEngineConfig({ blockSize: 100, blockCount: 4 }), /not a multiple of 8; use 104/);
  assert.throws(() => resolveEngineConfig({ blockSize: 64, blockCount: 9, ringOrder: 3 }), /smaller than the ring's 9 blocks/);
  assert.throws(() => resolveEngineConfig({ blockSize: 64, blockCount: 4, ringOrder: 0 }), /from 1 to/);
});

test('a tenant trusted for DIRECT_ALLOC gets a partition of exactly its quota', () => {
  const settings = resolveTargetSettings({
    pool: { blockCount: 100, blockSize: 4096 },
    tenants: [
      { name: 'plain', open: true, quota: 60, storeRange: { first: 0, count: 100 } },
      { name: 'trusted', secret: 'hunter2', quota: 40, storeRange: { first: 100, count: 100 }, trust: { directLoad: true, directAlloc: true } },
    ],
  });
  const engine = resolveEngineConfig(engineConfigFor(settings));
  assert.equal(engine.partitions, [{ blocks: 40, ringOrder: 6, firstBlock: 60 }]);
  assert.is(engine.sharedBlocks, 60);
  assert.is(engine.tenants[1]?.partition, 0);
});

test('--data-dir and --no-durable: a default eviction policy follows the tier, an explicit one is kept or refused', () => {
  const tenant = (eviction?: string) => ({ name: 'a', open: true, ...(eviction === undefined ? {} : { eviction }) });
  const followed = resolveTargetSettings({ tenants: [tenant()] });
  setDurable(followed, '/var/lib/kbtp');
  assert.is(followed.tenants[0]?.eviction, 'demote');
  setDurable(followed, null);
  assert.is(followed.tenants[0]?.eviction, 'none');

  const none = resolveTargetSettings({ tenants: [tenant('none')] });
  setDurable(none, '/var/lib/kbtp');
  assert.is(none.tenants[0]?.eviction, 'none', '--data-dir overrode an explicit "none"');
  assert.is(resolveEngineConfig(engineConfigFor(none)).tenants[0]?.eviction, 'none');

  const demote = resolveTargetSettings({ durable: { dataDir: '/var/lib/kbtp' }, tenants: [tenant('demote')] });
  try {
    setDurable(demote, null);
    assert.unreachable('--no-durable under an explicit "demote" was accepted');
  } catch (error) {
    assert.instance(error, ConfigError);
    assert.is((error as ConfigError).field, 'tenants[0].eviction');
    assert.match((error as Error).message, /set "eviction": "none"/);
  }
});

test.run();
