// /metrics of a real `kbtp appliance` process: valid exposition format, Prometheus naming, the
// workers' counters summed, and values that move with traffic; scheduled jobs that run, and a
// job that fails is counted while its next run still happens.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type KbtpSession } from '../../host/kbtp/initiator.ts';
import { KbtpStatusError } from '../../host/kbtp/errors.ts';
import { startDaemon, get, eventually, SMALL_POOL, type Daemon } from './daemon.ts';
import { parseExposition, type Exposition } from './exposition.ts';

async function scrape(daemon: Daemon): Promise<Exposition> {
  const response = await get(`${daemon.management}/metrics`);
  assert.is(response.status, 200);
  assert.match(response.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
  return parseExposition(response.text);
}

test('metrics: valid exposition, Prometheus naming, and counters that move with traffic (two workers)', async () => {
  const daemon = await startDaemon({ workers: 2 });
  const sessions: KbtpSession[] = [];
  try {
    await daemon.kbtp;
    const before = await scrape(daemon);
    for (const [name, type] of before.types) {
      assert.ok(/^(kbtp|process|nodejs)_/.test(name), `${name}: kbtp_ prefix (or a default process metric)`);
      if (type === 'counter') assert.ok(name.endsWith('_total'), `${name}: counters end in _total`);
      assert.not.match(name, /_(ms|milliseconds|kb|mb|mib)(_|$)/, `${name}: base units only`);
    }
    for (const sample of before.samples) assert.not.ok('handle' in sample.labels, `${sample.name} has a handle label`);
    for (const expected of [
      'process_cpu_seconds_total',
      'process_resident_memory_bytes',
      'nodejs_eventloop_lag_seconds',
      'nodejs_heap_size_used_bytes',
      'nodejs_gc_duration_seconds',
    ]) {
      assert.ok(before.types.has(expected), `default metric ${expected}`);
    }
    assert.is(before.value('kbtp_pool_blocks', { state: 'free' }), SMALL_POOL.blockCount);
    assert.is(before.value('kbtp_ready'), 1);
    // The node's CPU wake-latency request (on by default): whether it is in force depends on traffic and on root.
    assert.ok([0, 1].includes(before.value('kbtp_cpu_wake_latency_held') ?? -1));
    assert.ok((before.value('kbtp_cpu_wake_latency_held_seconds') ?? -1) >= 0);

    const kbtp = await daemon.kbtp;
    // Sessions land on whichever worker accepts them; the sums below are across both.
    sessions.push(...(await Promise.all([0, 1, 2].map(() => connect(kbtp, { tenant: 'default' })))));
    const payload = new Uint8Array(3000).fill(7);
    for (let i = 0; i < 30; i++) await sessions[i % 3]?.allocStore(BigInt(100 + i), payload, { seal: true });
    for (let i = 0; i < 30; i++) await sessions[i % 3]?.load(BigInt(100 + i));
    const missing = await sessions[0]?.load(5n).then(
      () => 'loaded',
      (error: unknown) => error,
    );
    assert.ok(missing instanceof KbtpStatusError && missing.statusName === 'NOT_VALID');
    const refused = await connect(kbtp, { tenant: 'nobody', secret: 'x' }).then(
      () => 'admitted',
      (error: unknown) => error,
    );
    assert.ok(refused instanceof Error && /AUTH_FAILED/.test(refused.message), String(refused));

    const after = await scrape(daemon);
    const delta = (name: string, labels?: Record<string, string>): number => after.sum(name, labels) - before.sum(name, labels);
    assert.is(delta('kbtp_requests_total', { opcode: 'ALLOC_STORE', status: 'SUCCESS' }), 30);
    assert.is(delta('kbtp_requests_total', { opcode: 'LOAD', status: 'SUCCESS' }), 30);
    assert.is(delta('kbtp_requests_total', { opcode: 'LOAD', status: 'NOT_VALID' }), 1);
    assert.is(delta('kbtp_request_duration_seconds_count', { opcode: 'LOAD' }), 31);
    assert.is(delta('kbtp_request_duration_seconds_count', { opcode: 'ALLOC_STORE' }), 30);
    assert.ok(delta('kbtp_request_duration_seconds_sum', { opcode: 'LOAD' }) > 0);
    assert.is(delta('kbtp_data_bytes_total'), 60 * payload.length, 'each store read and each load wrote the payload once');
    assert.ok(delta('kbtp_received_bytes_total') > 0);
    assert.is(delta('kbtp_auth_failures_total'), 1);
    assert.is(delta('kbtp_sessions_refused_total'), 1);
    assert.is(after.value('kbtp_sessions_refused_total', { reason: 'auth' }), 1);
    assert.is(after.value('kbtp_sessions_open'), 3);
    assert.is(after.value('kbtp_tenant_sessions_open', { tenant: 'default' }), 3);
    assert.is(after.value('kbtp_pool_blocks', { state: 'in_use' }), 30);
    assert.is(after.value('kbtp_pool_blocks', { state: 'free' }), SMALL_POOL.blockCount - 30);
    assert.is(after.value('kbtp_tenant_blocks', { tenant: 'default' }), 30);

    const status = JSON.parse((await get(`${daemon.management}/api/status`)).text) as {
      tenants: Array<{ name: string; sessions: number; blocks: number }>;
      latency: Record<string, { count: number; p50Seconds: number; p99Seconds: number }>;
      requests: { total: number };
    };
    assert.equal(status.tenants, [{ name: 'default', sessions: 3, blocks: 30, quota: SMALL_POOL.blockCount }]);
    assert.is(status.latency.LOAD?.count, 31);
    assert.ok((status.latency.LOAD?.p50Seconds ?? 0) > 0 && (status.latency.LOAD?.p99Seconds ?? 0) >= (status.latency.LOAD?.p50Seconds ?? 0));
    await Promise.all(sessions.splice(0).map((session) => session.close()));
    await eventually(
      'sessions closed',
      () => scrape(daemon),
      (metrics) => metrics.value('kbtp_sessions_open') === 0,
    );
  } finally {
    await Promise.all(sessions.map((session) => session.close().catch(() => undefined)));
    assert.is(await daemon.stop(), 0, daemon.stderr());
  }
});

test('jobs: scheduled runs are counted; a run that throws is logged and counted, and the next run still happens', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'kbtp-appliance-data-'));
  const node = await startDaemon({ jobs: { poolAudit: '* * * * * *', statsSnapshot: '* * * * * *' } }, ['--data-dir', dataDir]);
  try {
    await node.kbtp;
    const runs = (metrics: Exposition, job: string, result: string): number => metrics.value('kbtp_job_runs_total', { job, result }) ?? 0;
    await eventually(
      'both jobs ran',
      () => scrape(node),
      (m) => runs(m, 'poolAudit', 'success') >= 1 && runs(m, 'statsSnapshot', 'success') >= 1,
    );
    assert.ok(existsSync(join(dataDir, 'stats', 'latest.json')));
    await node.waitForLog(/info +job statsSnapshot: sessions 0 open/);

    // Where the snapshot goes is now a file: every run fails until it is a directory again.
    rmSync(join(dataDir, 'stats'), { recursive: true, force: true });
    writeFileSync(join(dataDir, 'stats'), 'not a directory');
    const failed = await eventually(
      'a failed run',
      () => scrape(node),
      (m) => runs(m, 'statsSnapshot', 'failure') >= 1,
    );
    await node.waitForLog(/error +job statsSnapshot failed: .*(EEXIST|ENOTDIR)/);
    const jobs = (
      JSON.parse((await get(`${node.management}/api/status`)).text) as { jobs: Array<{ name: string; failures: number; lastRun: { ok: boolean } | null }> }
    ).jobs;
    const snapshot = jobs.find((job) => job.name === 'statsSnapshot');
    assert.ok(snapshot !== undefined && snapshot.failures >= 1);
    assert.is((await get(`${node.management}/readyz`)).status, 200, 'a failing job does not take the node down');
    rmSync(join(dataDir, 'stats'));
    const successesBefore = runs(failed, 'statsSnapshot', 'success');
    await eventually(
      'runs succeed again',
      () => scrape(node),
      (m) => runs(m, 'statsSnapshot', 'success') > successesBefore,
    );
    const last = await scrape(node);
    assert.ok((last.value('kbtp_job_duration_seconds_count', { job: 'poolAudit' }) ?? 0) >= 1);
    assert.ok((last.value('kbtp_job_last_success_timestamp_seconds', { job: 'statsSnapshot' }) ?? 0) > 0);
    // With a data directory the node has a durable tier (h12): its figures are exported too.
    assert.ok((last.value('kbtp_tier_capacity_bytes') ?? 0) > 0);
    assert.is(last.value('kbtp_tier_blocks'), 0);
    assert.is(last.types.get('kbtp_tier_fsyncs_total'), 'counter');
    const tier = (JSON.parse((await get(`${node.management}/api/status`)).text) as { tier: { capacityBytes: number } | null }).tier;
    assert.ok(tier !== null && tier.capacityBytes > 0);
  } finally {
    assert.is(await node.stop(), 0, node.stderr());
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test.run();
