// `kbtp appliance` with a durable tier, as a real process: the tier's scheduled jobs (scrub finds
// flipped bits on disk, repairs a resident block's copy from the pool and gives up a block that
// lives on the tier alone; checkpoint), /readyz during a long recovery, and a tenant added by
// SIGHUP whose Durable Quota holds at once.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, openSync, readSync, writeSync, closeSync, rmSync, readFileSync, writeFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type KbtpSession } from '../../host/kbtp/initiator.ts';
import { statusOf } from '../support/status.ts';
import { startDaemon, get, eventually, longJournals, runCli, SMALL_POOL, type Daemon } from './daemon.ts';
import { DurableTier } from '../../host/tier/tier.ts';
import { defaultDurableCapacity } from '../../host/kbtp/server/target-config.ts';
import { journalFrames, corrupt, isGroupWith } from '../tier/journal-frames.ts';
import { parseExposition, type Exposition } from './exposition.ts';

const SLOT = 4096; // SMALL_POOL's 4096-octet blocks fill one page-aligned slot each

const blockOf = (handle: number): Uint8Array => new Uint8Array(3000).fill(0x40 + handle);

async function scrape(daemon: Daemon): Promise<Exposition> {
  return parseExposition((await get(`${daemon.management}/metrics`)).text);
}

interface JobView {
  name: string;
  runs: number;
  failures: number;
  lastRun: { ok: boolean; result: string } | null;
}
async function jobs(daemon: Daemon): Promise<Record<string, JobView>> {
  const status = JSON.parse((await get(`${daemon.management}/api/status`)).text) as { jobs: JobView[] };
  return Object.fromEntries(status.jobs.map((job) => [job.name, job]));
}

/** Flips one octet of a block's slot in the tier's data file, as a failing disk would. */
function flipOnDisk(dataDir: string, slot: number): void {
  const fd = openSync(join(dataDir, 'tier', 'blocks'), 'r+');
  try {
    const octet = Buffer.alloc(1);
    readSync(fd, octet, 0, 1, slot * SLOT + 100);
    octet[0] = (octet[0] ?? 0) ^ 0x5a;
    writeSync(fd, octet, 0, 1, slot * SLOT + 100);
  } finally {
    closeSync(fd);
  }
}

test('tier jobs: the scrub finds flipped bits, repairs from the pool or gives the block up, and goes on; checkpoints run', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'kbtp-durable-'));
  const daemon = await startDaemon({
    dataDir,
    scrubBlocksPerRun: 4,
    jobs: { poolAudit: null, statsSnapshot: null, tierScrub: '* * * * * *', tierCheckpoint: '*/2 * * * * *' },
    tenants: [{ name: 'alpha', secret: 'alpha-secret', quota: 4, storeRange: { first: 0, count: 100 }, eviction: 'demote' }],
  });
  let session: KbtpSession | undefined;
  try {
    session = await connect(await daemon.kbtp, { tenant: 'alpha', secret: 'alpha-secret' });
    // One at a time, so handle h takes slot h. The quota of 4 demotes 0-3 to the tier alone.
    for (let h = 0; h < 8; h++) await session.allocStore(BigInt(h), blockOf(h), { seal: true });
    await eventually(
      'a clean scrub pass over the 8 blocks',
      () => jobs(daemon),
      // A pass that began before the last store may have seen fewer: wait for one over all 8.
      (all) => /pass \d+: .*pass complete \(8 blocks\), all good/.test(all.tierScrub?.lastRun?.result ?? ''),
    );
    await eventually(
      'a checkpoint',
      () => jobs(daemon),
      (all) => all.tierCheckpoint?.lastRun?.ok === true && all.tierCheckpoint.runs > 0,
    );
    assert.ok(((await scrape(daemon)).value('kbtp_tier_scrubbed_blocks_total') ?? 0) >= 8);

    flipOnDisk(dataDir, 1); // handle 1: on the tier alone
    flipOnDisk(dataDir, 5); // handle 5: resident in the pool too
    const found = await eventually(
      'the scrub finding both',
      () => scrape(daemon),
      (m) =>
        m.value('kbtp_tier_scrub_corrupt_blocks_total', { outcome: 'repaired' }) === 1 &&
        m.value('kbtp_tier_scrub_corrupt_blocks_total', { outcome: 'unbound' }) === 1,
    );
    assert.ok((found.value('kbtp_tier_checksum_failures_total') ?? 0) >= 2);
    assert.ok((found.value('kbtp_job_runs_total', { job: 'tierScrub', result: 'failure' }) ?? 0) >= 1, 'a run that found corruption counts as failed');
    await daemon.waitForLog(/job tierScrub failed: .*failed their checksum .*check the disk/);

    assert.is(await statusOf(session.load(1n)), 'NOT_VALID', 'the corrupt block on the tier alone was given up, not served');
    // Demote 4-7 by storing four more, then load 5 back from the tier: the repaired copy.
    for (let h = 8; h < 12; h++) await session.allocStore(BigInt(h), blockOf(h), { seal: true });
    const five = await session.load(5n);
    assert.equal(five.data, blockOf(5));
    for (const h of [0, 2, 3, 4, 6, 7]) assert.equal((await session.load(BigInt(h))).data, blockOf(h), `handle ${h}`);

    // The job goes on after the failed run, and succeeds again.
    const failedRuns = (await jobs(daemon)).tierScrub?.runs ?? 0;
    await eventually(
      'a clean scrub run after the failed ones',
      () => jobs(daemon),
      (all) => (all.tierScrub?.runs ?? 0) > failedRuns + 1 && all.tierScrub?.lastRun?.ok === true,
    );
    const page = JSON.parse((await get(`${daemon.management}/api/status`)).text) as { tier: { scrub: { pass: number }; checksumFailures: number } };
    assert.ok(page.tier.scrub.pass >= 2 && page.tier.checksumFailures >= 2, JSON.stringify(page.tier));
  } finally {
    await session?.close().catch(() => undefined);
    assert.is(await daemon.stop(), 0, daemon.stderr());
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('blocks the recovery gives up (a group of the journal lost in the middle) are logged and exported', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'kbtp-durable-'));
  const tierDir = join(dataDir, 'tier');
  // The tier as the appliance will open it, written beforehand: seals of 1..4, a FREE of 2, a seal of 5.
  const tier = await DurableTier.open({
    directory: tierDir,
    capacityBytes: defaultDurableCapacity(SMALL_POOL),
    blockSize: SMALL_POOL.blockSize,
    handleBase: 0n,
    handleCount: SMALL_POOL.handleCount,
    tenants: [],
  });
  for (const h of [1, 2, 3, 4]) await tier.seal(h, 5, blockOf(h));
  await tier.unbind(2, 6);
  await tier.seal(5, 5, blockOf(5));
  await tier.close();
  // Both frames of the FREE's group rot: nothing says which handles it was about, so 1..4 are given up.
  const journal = join(
    tierDir,
    readdirSync(tierDir)
      .filter((name) => name.startsWith('journal-'))
      .sort()
      .at(-1) ?? '',
  );
  const bytes = readFileSync(journal);
  const frames = journalFrames(bytes);
  const at = frames.findIndex(isGroupWith('u', 2));
  for (const frame of [frames[at - 1], frames[at]]) if (frame !== undefined) corrupt(bytes, frame);
  writeFileSync(journal, bytes);
  const daemon = await startDaemon({ dataDir });
  try {
    await daemon.kbtp;
    const line =
      daemon
        .stderr()
        .split('\n')
        .find((candidate) => /durable tier recovered/.test(candidate)) ?? '';
    assert.match(line, /blocksDiscarded\W+4\b/, daemon.stderr());
    const metrics = await scrape(daemon);
    assert.is(metrics.value('kbtp_tier_recovery_discarded_blocks'), 4);
    assert.is(metrics.value('kbtp_tier_recovered_blocks'), 1);
  } finally {
    assert.is(await daemon.stop(), 0, daemon.stderr());
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('/readyz says "recovering" (503) while a long journal is replayed, and turns ready only after', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'kbtp-durable-'));
  longJournals(dataDir, 6);
  const daemon = await startDaemon({ dataDir });
  try {
    const seen: string[] = [];
    let ready = false;
    const deadline = Date.now() + 120_000;
    while (!ready && Date.now() < deadline) {
      const response = await get(`${daemon.management}/readyz`);
      const body = JSON.parse(response.text) as { ready: boolean; state: string };
      assert.is(response.status === 200, body.ready);
      if (body.ready) {
        assert.match(daemon.stderr(), /durable tier recovered/, 'ready only after the recovery');
        ready = true;
      } else {
        seen.push(body.state);
        if (body.state === 'recovering') assert.is((await get(`${daemon.management}/healthz`)).status, 200, 'alive while recovering');
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.ok(ready, `never ready; states ${seen.join(',')}`);
    assert.ok(seen.includes('recovering'), `/readyz answered during the recovery; states seen: ${[...new Set(seen)].join(', ')}`);
    assert.ok(
      seen.every((state) => state === 'starting' || state === 'recovering'),
      seen.join(','),
    );
    assert.match(daemon.stderr(), /recovering the durable tier/);
    const metrics = await scrape(daemon);
    assert.ok((metrics.value('kbtp_tier_recovery_duration_seconds') ?? 0) > 0);
  } finally {
    assert.is(await daemon.stop(), 0, daemon.stderr());
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('SIGTERM while recovering: the recovery ends, the node never turns ready, the tier is closed, exit 0', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'kbtp-durable-'));
  longJournals(dataDir, 6);
  const daemon = await startDaemon({ dataDir });
  try {
    await eventually(
      'the recovery under way',
      async () => JSON.parse((await get(`${daemon.management}/readyz`)).text) as { state: string },
      (body) => body.state !== 'starting',
      60_000,
    ).then((body) => assert.is(body.state, 'recovering', 'the replay outlasts the first polls'));
    daemon.child.kill('SIGTERM');
    assert.is(await daemon.exited, 0, daemon.stderr());
    assert.match(daemon.stderr(), /SIGTERM while recovering; stopping once the start step in progress ends/);
    assert.match(daemon.stderr(), /durable tier: checkpoint written, files closed/);
    assert.match(daemon.stderr(), /stopped before serving/);
    assert.not.match(daemon.stdout(), /KBTP listening/, 'never announced as serving');
  } finally {
    await daemon.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('SIGHUP: a tenant added by kbtp tenant add --durable-quota gets its Durable Quota at once, without a restart', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'kbtp-durable-'));
  const daemon = await startDaemon({ dataDir, tenants: [{ name: 'alpha', secret: 'alpha-secret', quota: 8, storeRange: { first: 0, count: 100 } }] });
  let session: KbtpSession | undefined;
  try {
    await daemon.kbtp;
    // gamma: 2 blocks in the pool (demoting beyond), 3 on the tier; the oldest of what it seals beyond that is dropped.
    const added = await runCli(['tenant', 'add', 'gamma', '--quota', '2', '--handles', '50', '--durable-quota', '3', '--config', daemon.configPath]);
    assert.is(added.code, 0, added.stderr);
    assert.match(added.stderr, /handles 100\.\.149/);
    const listed = await runCli(['tenant', 'list', '--config', daemon.configPath]);
    assert.match(listed.stdout, /alpha\s+plain secret\s+8\s+0\.\.99\s+tier\s/);
    assert.match(listed.stdout, /gamma\s+scrypt hash\s+2\s+100\.\.149\s+3\s/);
    daemon.child.kill('SIGHUP');
    await daemon.waitForLog(/tenants reloaded: \+gamma/);
    await daemon.waitForLog(/durable tier: tenant ranges and Durable Quotas updated/);
    session = await connect(await daemon.kbtp, { tenant: 'gamma', secret: added.stdout.trim() });
    for (let h = 100; h < 106; h++) await session.allocStore(BigInt(h), blockOf(h - 100), { seal: true });
    const outcomes: string[] = [];
    for (let h = 100; h < 106; h++) outcomes.push(await statusOf(session.load(BigInt(h))));
    assert.equal(outcomes, ['NOT_VALID', 'NOT_VALID', 'NOT_VALID', 'SUCCESS', 'SUCCESS', 'SUCCESS'], 'only the 3 most recent stay');
    assert.is((await scrape(daemon)).value('kbtp_tier_drops_total'), 3);

    // A staying tenant's eviction policy changes what its usage counts: refused, nothing changes.
    const file = JSON.parse(readFileSync(daemon.configPath, 'utf8')) as { tenants: Array<Record<string, unknown>> };
    for (const tenant of file.tenants) if (tenant.name === 'alpha') tenant.eviction = 'none';
    writeFileSync(daemon.configPath, JSON.stringify(file));
    daemon.child.kill('SIGHUP');
    await daemon.waitForLog(/reload refused, the running configuration stays: tenants\[0\]\.eviction: tenant 'alpha': .*restart the appliance/);
    assert.equal(await statusOf(session.load(105n)), 'SUCCESS', "gamma's session goes on");
  } finally {
    await session?.close().catch(() => undefined);
    assert.is(await daemon.stop(), 0, daemon.stderr());
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test.run();
