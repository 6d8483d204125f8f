// SIGHUP on a real `kbtp appliance` with live sessions: `kbtp tenant add` and `remove` edit the
// file (secrets stored as scrypt hashes, printed once), the reload adds and removes tenants
// without touching the sessions that stay allowed, a removed tenant's sessions end, quotas
// change in place, and a configuration with an error changes nothing.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync, writeFileSync } from 'node:fs';
import { connect, type KbtpSession } from '../../host/kbtp/initiator.ts';
import { KbtpStatusError } from '../../host/kbtp/errors.ts';
import { hashSecret } from '../../host/kbtp/server/secret-hash.ts';
import { startDaemon, runCli, get, eventually } from './daemon.ts';
import { parseExposition } from './exposition.ts';

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);

test('SIGHUP: tenants added and removed with live sessions; quotas in place; a bad file changes nothing', async () => {
  const daemon = await startDaemon({
    workers: 2,
    tenants: [
      { name: 'alpha', secretHash: hashSecret('alpha-secret'), quota: 40, storeRange: { first: 0, count: 100 } },
      { name: 'beta', secret: 'beta-secret', quota: 40, storeRange: { first: 100, count: 100 } },
    ],
  });
  const sessions: KbtpSession[] = [];
  try {
    const kbtp = await daemon.kbtp;
    const alpha = await connect(kbtp, { tenant: 'alpha', secret: 'alpha-secret' });
    const beta = await connect(kbtp, { tenant: 'beta', secret: 'beta-secret' });
    sessions.push(alpha, beta);
    await alpha.allocStore(1n, bytes('alpha one'), { seal: true });
    await beta.allocStore(101n, bytes('beta one'), { seal: true });
    const wrongHash = await connect(kbtp, { tenant: 'alpha', secret: 'not-it' }).then(
      () => 'admitted',
      (e: unknown) => e,
    );
    assert.ok(wrongHash instanceof Error && /AUTH_FAILED/.test(wrongHash.message), 'a wrong secret against the scrypt hash is refused');

    const added = await runCli(['tenant', 'add', 'gamma', '--quota', '10', '--handles', '50', '--config', daemon.configPath]);
    assert.is(added.code, 0, added.stderr);
    const gammaSecret = added.stdout.trim();
    assert.match(gammaSecret, /^[A-Za-z0-9_-]{43}$/);
    const file = readFileSync(daemon.configPath, 'utf8');
    assert.not.ok(file.includes(gammaSecret), 'the file keeps only the hash');
    assert.match(file, /"secretHash": "scrypt\$16384\$8\$1\$/);
    const removed = await runCli(['tenant', 'remove', 'beta', '--config', daemon.configPath]);
    assert.is(removed.code, 0, removed.stderr);
    const listed = await runCli(['tenant', 'list', '--config', daemon.configPath]);
    assert.match(listed.stdout, /alpha\s+scrypt hash\s+40\s+0\.\.99/);
    assert.match(listed.stdout, /gamma\s+scrypt hash\s+10\s+200\.\.249/);
    assert.not.match(listed.stdout + listed.stderr, new RegExp(gammaSecret));

    daemon.child.kill('SIGHUP');
    await daemon.waitForLog(/tenants reloaded: \+gamma -beta/);
    // beta's session ends; alpha's goes on untouched.
    const betaAfter = await beta.allocStore(102n, bytes('too late')).then(
      () => 'stored',
      (e: unknown) => e,
    );
    assert.ok(betaAfter instanceof Error, `beta's session should have ended, got ${String(betaAfter)}`);
    assert.equal(new TextDecoder().decode((await alpha.load(1n)).data), 'alpha one');
    await alpha.allocStore(2n, bytes('alpha two'), { seal: true });
    const betaAgain = await connect(kbtp, { tenant: 'beta', secret: 'beta-secret' }).then(
      () => 'admitted',
      (e: unknown) => e,
    );
    assert.ok(betaAgain instanceof Error && /AUTH_FAILED/.test(betaAgain.message), String(betaAgain));
    const gamma = await connect(kbtp, { tenant: 'gamma', secret: gammaSecret });
    sessions.push(gamma);
    assert.is(gamma.hello.quota, 10);
    await gamma.allocStore(200n, bytes('gamma one'), { seal: true });
    const outside = await gamma.allocStore(1n, bytes('not mine')).then(
      () => 'stored',
      (e: unknown) => e,
    );
    assert.ok(outside instanceof KbtpStatusError && outside.statusName === 'ACCESS_DENIED', String(outside));

    // Quota down to what alpha holds: its next allocation is refused, its data stays.
    const config = JSON.parse(readFileSync(daemon.configPath, 'utf8')) as { tenants: Array<{ name: string; quota: number }> };
    for (const tenant of config.tenants) if (tenant.name === 'alpha') tenant.quota = 2;
    writeFileSync(daemon.configPath, JSON.stringify(config));
    daemon.child.kill('SIGHUP');
    await daemon.waitForLog(/tenants reloaded: ~alpha/);
    const full = await alpha.allocStore(3n, bytes('over quota')).then(
      () => 'stored',
      (e: unknown) => e,
    );
    assert.ok(full instanceof KbtpStatusError && full.statusName === 'NO_SPACE', String(full));
    assert.equal(new TextDecoder().decode((await alpha.load(2n)).data), 'alpha two');

    // A typo: refused, nothing changes, the node serves on.
    writeFileSync(daemon.configPath, JSON.stringify({ ...config, tenants: [{ name: 'alpha', secrte: 'x' }] }));
    daemon.child.kill('SIGHUP');
    await daemon.waitForLog(/reload refused, the running configuration stays: tenants\[0\]\.secrte: unknown key; did you mean "secret"\?/);
    await gamma.allocStore(201n, bytes('gamma two'), { seal: true });
    const metrics = parseExposition((await get(`${daemon.management}/metrics`)).text);
    assert.is(metrics.value('kbtp_config_reloads_total', { result: 'success' }), 2);
    assert.is(metrics.value('kbtp_config_reloads_total', { result: 'failure' }), 1);
    assert.is(metrics.value('kbtp_tenant_quota_blocks', { tenant: 'gamma' }), 10);
    assert.is(metrics.value('kbtp_tenant_blocks', { tenant: 'gamma' }), 2);
    assert.is(metrics.value('kbtp_tenant_quota_blocks', { tenant: 'beta' }), undefined, 'a removed tenant leaves the metrics');
    assert.is(metrics.sum('kbtp_pool_blocks', { state: 'in_use' }), 5, "beta's block stays bound: its data waits for it");
    await eventually(
      'beta session gone',
      async () => parseExposition((await get(`${daemon.management}/metrics`)).text),
      (m) => m.value('kbtp_tenant_sessions_open', { tenant: 'beta' }) === undefined,
    );
    assert.not.match(daemon.stderr() + daemon.stdout(), new RegExp(`${gammaSecret}|alpha-secret|beta-secret`), 'no secret in the log');
  } finally {
    await Promise.all(sessions.map((session) => session.close().catch(() => undefined)));
    assert.is(await daemon.stop(), 0, daemon.stderr());
  }
});

test.run();
