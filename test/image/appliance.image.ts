// `make image-test`: the appliance image booted under QEMU TCG from its own disk (UEFI, no -kernel),
// reached from the host only through 127.0.0.1 port forwards. One node goes through the steps in
// order: first boot to ready, kbtp info and byte-exact put/get, /metrics, a clean reboot and two
// power cuts (the durable tier on the data partition keeps every acknowledged block), the watchdog
// (a stopped supervisor resets the node, which serves again), an A/B update through the API, and
// an update whose daemon cannot start (rolled back by the boot loader). Every block stored sealed
// along the way is checked after every reboot. Logs and pcaps: .cache/image-test/<run>/.
// IMAGE_TEST_ONLY=<regexp> (make image-test ONLY=...) runs the first boot and the matching cases.
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { execFile } from 'node:child_process';
import { createReadStream, mkdtempSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { generateKeyPairSync, randomBytes, sign } from 'node:crypto';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import * as K from '../../assembly/kbtp-constants.ts';
import { connect, type KbtpSession } from '../../host/kbtp/initiator.ts';
import { ApplianceNode, ARCH, applianceBuild } from './appliance-vm.ts';
import { BlockLedger } from './block-ledger.ts';
import { management, type ManagementResponse } from './management-client.ts';
import { HOST_ADDRESS_FROM_GUEST } from '../interop/guest.ts';

const run = promisify(execFile);
const cli = join(import.meta.dirname, '../../dist/host/cli.js');
// TCG on a shared 2-core machine: a boot that takes 30 s alone can take minutes under load.
const BOOT_TIMEOUT_MS = 600_000;

const build = applianceBuild();
const secret = randomBytes(18).toString('base64url');
const token = randomBytes(24).toString('base64url');
const config = {
  listen: '0.0.0.0:7117',
  workers: 2,
  pool: { blockSize: 65536, blockCount: 512, handleCount: 4096 },
  tenants: [{ name: 'fleet', secret, quota: 512 }],
  // No "dataDir": the image's daemon defaults to its data partition, so every durable-tier case
  // below also proves that a provisioned file without one is not silently memory-only.
  ...(build.service === 'appliance' ? { management: { listen: '0.0.0.0:7118', token } } : {}),
};

const test = suite('appliance image');
let node: ApplianceNode;
/** Every block stored sealed in this run; all of them must survive every reboot, cut and update. */
const ledger = new BlockLedger();

const only = process.env.IMAGE_TEST_ONLY ? new RegExp(process.env.IMAGE_TEST_ONLY, 'i') : undefined;
/** A case; with IMAGE_TEST_ONLY set, skipped unless its name matches. Failures are printed at once. */
function imageTest(name: string, body: () => Promise<void>, always = false): void {
  if (!always && only !== undefined && !only.test(name)) {
    test.skip(name, body);
    return;
  }
  test(name, async () => {
    try {
      await body();
    } catch (error) {
      // uvu reports failures only after the last case; a long run that is stopped would lose them.
      console.log(`\n  FAILED: ${name}: ${(error as Error).stack ?? String(error)}`);
      node?.note(`FAILED: ${name}: ${(error as Error).message}`);
      throw error;
    }
  });
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolveSleep) => setTimeout(resolveSleep, ms));
}

const escapeRegExp = (text: string): string => text.replace(/[.+*?^$()[\]{}|\\]/g, '\\$&');

async function session(capabilities = 0): Promise<KbtpSession> {
  return connect(`127.0.0.1:${node.kbtpPort}`, { tenant: 'fleet', secret, timeoutMs: 60_000, capabilities });
}

/** The management API with the node's token (or none). */
function api(path: string, options: { method?: 'GET' | 'POST'; json?: unknown; anonymous?: boolean } = {}): Promise<ManagementResponse> {
  return management(node.managementPort, path, { ...options, token: options.anonymous === true ? undefined : token, timeoutMs: 120_000 });
}

/** Until the node answers: /readyz for `kbtp appliance`, a KBTP session for `kbtp target`. */
async function waitReady(sinceLogOffset: number): Promise<void> {
  const deadline = Date.now() + BOOT_TIMEOUT_MS;
  // The daemon first has to start at all; only then is polling the forwarded port meaningful
  // (QEMU accepts forwarded connections before anything listens in the guest).
  await node.console.waitForLine(/kbtp-supervise\[[0-9.]+s\]: daemon started/, BOOT_TIMEOUT_MS, sinceLogOffset);
  // Polled every 2 s until the daemon logs that it is ready, then at once: the boot time measured
  // here is the node's, not the poll interval's (each poll costs the starting guest CPU time too).
  const readyLogged = node.console.waitForLine(/ info {2}ready /, BOOT_TIMEOUT_MS, sinceLogOffset).then(
    () => true,
    () => false,
  );
  let lastError = '';
  while (Date.now() < deadline) {
    if (!node.console.running) throw new Error(`the node powered off while we waited for it; log: ${node.logPath}`);
    try {
      if (build.service === 'appliance') {
        const response = await management(node.managementPort, '/readyz', { token, timeoutMs: 10_000 });
        if (response.status === 200) return;
        lastError = `/readyz ${response.status}`;
      } else {
        const probe = await session();
        await probe.close();
        return;
      }
    } catch (error) {
      lastError = (error as Error).message;
    }
    await Promise.race([sleep(2000), readyLogged.then((logged) => (logged ? sleep(100) : sleep(2000)))]);
  }
  throw new Error(`the node was not ready within ${BOOT_TIMEOUT_MS} ms (last: ${lastError}); log: ${node.logPath}`);
}

const randomBlock = (): Buffer => randomBytes(1 + Math.floor(Math.random() * 65536));

/** Stores `count` random blocks sealed at handles from `firstHandle` on, and loads them back. */
async function storeBlocks(count: number, firstHandle: bigint): Promise<void> {
  const s = await session();
  try {
    for (let i = 0; i < count; i++) await ledger.store(s, firstHandle + BigInt(i), randomBlock());
  } finally {
    await s.close();
  }
  await checkBlocks();
}

/** Every block the ledger holds, as acknowledged (after a cut: or as the request in flight left it). */
async function checkBlocks(): Promise<void> {
  const s = await session();
  try {
    await ledger.check(s);
  } finally {
    await s.close();
  }
}

test.before(async () => {
  node = await ApplianceNode.create({ name: 'appliance', config, diskGiB: 2, testHooks: true });
  console.log(`  artefacts: ${node.logPath.replace(/\/[^/]*$/, '')}`);
});

test.after(async () => {
  await node.stop();
});

/** Where a boot's time goes, in host seconds from power-on: filled in as the console shows each stage. */
function bootTimeline(poweredOn: number): string[] {
  const stages: [string, RegExp][] = [
    ['kernel', /EFI stub: /],
    ['initramfs', /kbtp-boot\[initramfs [0-9.]+s\]: slot/],
    ['stage 2', /kbtp-boot\[[0-9.]+s\]: stage 2:/],
    ['drivers', /kbtp-boot\[[0-9.]+s\]: drivers loaded/],
    ['daemon', /kbtp-supervise\[[0-9.]+s\]: daemon started/],
    ['listening', /KBTP listening on/],
    ['ready', / info {2}ready /],
  ];
  const timeline: string[] = [];
  for (const [name, pattern] of stages) {
    node.console.waitForLine(pattern, BOOT_TIMEOUT_MS).then(
      () => timeline.push(`${name} ${((Date.now() - poweredOn) / 1000).toFixed(1)}`),
      () => undefined,
    );
  }
  return timeline;
}

imageTest(
  'first boot from the disk alone reaches ready; the data partition grows to the disk',
  async () => {
    const poweredOn = Date.now();
    node.boot();
    const timeline = bootTimeline(poweredOn);
    await node.console.waitForLine(/kbtp-boot\[initramfs [0-9.]+s\]: slot a/, BOOT_TIMEOUT_MS);
    await waitReady(0);
    const cpu = node.cpuSeconds();
    console.log(
      `  power-on to ready: ${((Date.now() - poweredOn) / 1000).toFixed(1)} s (TCG, load ${loadavg()[0]?.toFixed(1)}; QEMU used ${cpu?.toFixed(1) ?? '?'} CPU seconds)`,
    );
    console.log(`  boot timeline, host seconds after power-on: ${timeline.join(', ')}`);
    const data = await node.console.waitForLine(/kbtp-boot\[[0-9.]+s\]: data: (\d+) MiB on/, 10_000);
    assert.ok(Number(data[1]) > 1024, `the data partition holds ${data[1]} MiB of a 2 GiB disk: it did not grow`);
    assert.match(node.console.log, /kbtp-supervise\[[0-9.]+s\]: watchdog armed \(i6300ESB/);
    assert.match(node.console.log, new RegExp(`stage 2: kbtp ${escapeRegExp(build.version)} `));
    assert.not.match(node.console.log, /KBTP-BOOT-FAILED/);
    if (build.service === 'appliance') {
      const tierLine = await node.console.waitForLine(/durable tier: new, empty.*/, 60_000);
      // The image ships Debian's libisal2, so sealing checksums through ISA-L, not the fallback.
      assert.match(tierLine[0], /ISA-L crc32_iscsi/);
      assert.match(node.console.log, /storage: data directory \/var\/lib\/kbtp \(the default: the configuration names no dataDir\); durable tier in/);
    }
  },
  true,
);

imageTest('kbtp info shows the node; blocks put and get byte-exact', async () => {
  const { stdout } = await run(process.execPath, [cli, 'info', '--target', `127.0.0.1:${node.kbtpPort}`, '--tenant', 'fleet'], {
    env: { ...process.env, KBTP_SECRET: secret },
    timeout: 120_000,
  });
  assert.match(stdout, /block size\s+65536 octets/);
  assert.match(stdout, /allocation quota\s+512 blocks/);
  if (build.service === 'appliance') assert.match(stdout, /PERSISTENT/);
  const before = ledger.sealedHandles.length;
  await storeBlocks(8, 100n);
  assert.is(ledger.sealedHandles.length, before + 8);
  // Through the CLI as well, byte for byte.
  const s = await session();
  const expected = Buffer.from((await s.load(100n)).data);
  await s.close();
  const { stdout: got } = await run(process.execPath, [cli, 'get', '100', '--target', `127.0.0.1:${node.kbtpPort}`, '--tenant', 'fleet'], {
    env: { ...process.env, KBTP_SECRET: secret },
    timeout: 120_000,
    encoding: 'buffer',
    maxBuffer: 1 << 20,
  });
  assert.ok(got.equals(expected), 'kbtp get returned other bytes');
});

imageTest('/metrics scrapes (Prometheus text) and counts the stores; no token, no metrics', async () => {
  if (build.service !== 'appliance') {
    console.log('  (this build runs kbtp target: no management server to scrape)');
    return;
  }
  await storeBlocks(1, 150n); // at least one store to count, whichever cases ran before
  const response = await api('/metrics');
  assert.is(response.status, 200);
  assert.match(response.contentType, /^text\/plain/);
  assert.match(response.text, /^# TYPE kbtp_\w+ /m);
  const stores = [...response.text.matchAll(/^kbtp_requests_total\{[^}]*opcode="ALLOC_STORE"[^}]*status="SUCCESS"[^}]*\} (\d+)/gm)];
  assert.ok(stores.length > 0, 'no kbtp_requests_total for ALLOC_STORE/SUCCESS in /metrics');
  assert.ok(stores.reduce((sum, m) => sum + Number(m[1]), 0) >= 1, 'the stores are not counted');
  assert.match(response.text, /^kbtp_tier_\w+/m);
  const anonymous = await api('/metrics', { anonymous: true });
  assert.is(anonymous.status, 401);
});

/** Waits for the boot that follows a reset or watchdog, or powers the node on again, and for ready. */
async function bootAgain(since: number, poweredOff: boolean): Promise<number> {
  if (poweredOff) {
    node.boot();
    since = 0;
  }
  await node.console.waitForLine(/kbtp-boot\[initramfs [0-9.]+s\]: slot [ab]/, BOOT_TIMEOUT_MS, since);
  await waitReady(since);
  return since;
}

imageTest('clean reboot (ACPI power button): every sealed block comes back from the data partition', async () => {
  if (build.service !== 'appliance') throw new Error('the durable tier needs kbtp appliance with a dataDir');
  const s = await session(K.CAP_PERSISTENT);
  try {
    assert.is(s.hello.capabilities & K.CAP_PERSISTENT, K.CAP_PERSISTENT, 'PERSISTENT is granted');
    for (let i = 0n; i < 12n; i++) await ledger.store(s, 500n + i, randomBlock());
    for (const handle of [500n, 503n, 507n]) await ledger.free(s, handle);
    await s.allocStore(520n, randomBlock(), { seal: false }); // unsealed: volatile by the spec
  } finally {
    await s.close();
  }
  const since = node.console.log.length;
  await node.pressPowerButton();
  await node.console.waitForLine(/kbtp-acpid\[[0-9.]+s\]: power button/, 120_000, since);
  // Draining the daemon and unmounting take seconds; minutes only on a very loaded host.
  const exit = await Promise.race([node.console.exited, sleep(300_000).then(() => undefined)]);
  assert.ok(exit !== undefined, 'the node did not power off within 300 s of the power button');
  await node.console.waitForLine(/stopped cleanly/, 1000, since);
  await node.console.waitForLine(/kbtp-shutdown\[[0-9.]+s\]: file systems unmounted/, 1000, since);
  await bootAgain(0, true);
  const recovered = await node.console.waitForLine(/durable tier recovered .*blocksRecovered=(\d+)/, 60_000);
  assert.ok(Number(recovered[1]) >= ledger.sealedHandles.length, `recovered ${recovered[1]} blocks, ${ledger.sealedHandles.length} were sealed`);
  await checkBlocks();
  const after = await session();
  try {
    const unsealed = await after.load(520n).then(
      () => 'loaded',
      (error: Error) => error.message,
    );
    assert.match(unsealed, /NOT_VALID/, `the unsealed block (volatile) after the reboot: ${unsealed}`);
  } finally {
    await after.close();
  }
});

/**
 * Four PERSISTENT sessions store and free sealed blocks on handles of their own as fast as the
 * node answers; once enough were acknowledged, `cut` takes the power away mid-stream. After the
 * next boot every acknowledged block and free must hold (requests in flight: either outcome).
 */
async function cutPowerUnderLoad(firstHandle: bigint, cut: () => Promise<void>): Promise<number> {
  const sessions = await Promise.all(Array.from({ length: 4 }, () => session(K.CAP_PERSISTENT)));
  for (const s of sessions) assert.is(s.hello.capabilities & K.CAP_PERSISTENT, K.CAP_PERSISTENT, 'PERSISTENT is granted');
  let acknowledged = 0;
  let stopping = false;
  const work = sessions.map(async (s, index) => {
    const base = firstHandle + BigInt(index * 16);
    try {
      while (!stopping) {
        const handle = base + BigInt(Math.floor(Math.random() * 16));
        if (ledger.isSealed(handle)) await ledger.free(s, handle);
        else await ledger.store(s, handle, randomBlock());
        acknowledged += 1;
      }
    } catch (error) {
      if (!stopping) throw error; // the power went: the connection died with the node
    }
  });
  const enough = (async () => {
    const deadline = Date.now() + BOOT_TIMEOUT_MS;
    while (acknowledged < 40 && Date.now() < deadline) await sleep(200);
    await sleep(Math.random() * 2000); // somewhere in the middle of a group commit, or not
  })();
  try {
    await Promise.race([enough, Promise.all(work)]); // a session that fails ends the wait
  } finally {
    stopping = true;
  }
  await cut();
  await Promise.all(work);
  for (const s of sessions) void s.close(10).catch(() => undefined);
  assert.ok(acknowledged > 0, 'no request was acknowledged before the cut');
  return acknowledged;
}

imageTest('power loss (QEMU killed) while storing and freeing PERSISTENT blocks: every acknowledged one holds', async () => {
  if (build.service !== 'appliance') throw new Error('the durable tier needs kbtp appliance with a dataDir');
  const acknowledged = await cutPowerUnderLoad(1000n, () => node.pullThePlug());
  await bootAgain(0, true);
  await node.console.waitForLine(/durable tier recovered/, 60_000);
  const s = await session();
  try {
    const result = await ledger.check(s);
    console.log(
      `  power loss after ${acknowledged} acknowledged requests: ${result.sealed} sealed, ${result.notValid} not valid, ${result.inFlightApplied} in flight had happened`,
    );
  } finally {
    await s.close();
  }
});

imageTest('reset without shutdown (system_reset) while storing and freeing: every acknowledged one holds', async () => {
  if (build.service !== 'appliance') throw new Error('the durable tier needs kbtp appliance with a dataDir');
  const since = node.console.log.length;
  const acknowledged = await cutPowerUnderLoad(1100n, () => node.pressReset());
  await bootAgain(since, false);
  await node.console.waitForLine(/durable tier recovered/, 60_000, since);
  assert.not.match(node.console.log.slice(since), /kbtp-shutdown/, 'the reset went through a shutdown');
  const s = await session();
  try {
    const result = await ledger.check(s);
    console.log(
      `  reset after ${acknowledged} acknowledged requests: ${result.sealed} sealed, ${result.notValid} not valid, ${result.inFlightApplied} in flight had happened`,
    );
  } finally {
    await s.close();
  }
});

imageTest('watchdog: a stopped supervisor resets the node, which boots and serves again', async () => {
  const since = node.console.log.length;
  node.console.send('kbtp-test-hook stop-supervisor');
  await node.console.waitForLine(/kbtp-test-hooks\[[0-9.]+s\]: stopping the supervisor/, 60_000, since);
  // i6300esb: two heartbeats of 15 s without a feed, then a reset; the node boots from the disk again.
  await bootAgain(since, false);
  await checkBlocks();
  await storeBlocks(2, 200n);
});

/** An update bundle of this build under another version (built by images/appliance/build.sh). */
async function buildBundle(version: string, brokenDaemon: boolean): Promise<string> {
  // Asynchronously: the harness must keep reading the node's console while the bundle builds.
  const { stdout } = await run(
    join(import.meta.dirname, '../../images/appliance/build.sh'),
    ['--bundle-only', '--arch', ARCH, '--version', version, ...(brokenDaemon ? ['--broken-daemon'] : [])],
    { encoding: 'utf8', timeout: 1_200_000, maxBuffer: 16 << 20 },
  );
  const path = stdout.trim().split('\n').pop() ?? '';
  assert.match(path, /\.kbtpupdate$/, `build.sh --bundle-only printed no bundle path: ${stdout}`);
  return path;
}

/** Serves files to the guest, which reaches 127.0.0.1:PORT on the host as 10.0.2.2:PORT. */
async function serveFiles(files: Map<string, string>): Promise<{ url(name: string): string; close(): void }> {
  const server = createServer((request, response) => {
    const path = files.get((request.url ?? '').slice(1));
    if (path === undefined) {
      response.statusCode = 404;
      response.end();
      return;
    }
    response.setHeader('content-length', statSync(path).size);
    createReadStream(path).pipe(response);
  });
  await new Promise<void>((resolveListen) => server.listen(0, '127.0.0.1', () => resolveListen()));
  const port = (server.address() as AddressInfo).port;
  return { url: (name) => `http://${HOST_ADDRESS_FROM_GUEST}:${port}/${name}`, close: () => server.close() };
}

interface UpdateStatus {
  running: { slot: string; version: string };
  operation: { state: string; detail: string };
  last: { state: string; slot?: string; version?: string; reason?: string };
}

/** GET /api/update; a guest busy downloading 100 MB under TCG may answer late, so this retries. */
async function updateStatus(): Promise<UpdateStatus> {
  const deadline = Date.now() + BOOT_TIMEOUT_MS;
  for (;;) {
    try {
      const response = await api('/api/update');
      if (response.status !== 200) throw new Error(`GET /api/update answered ${response.status}: ${response.text}`);
      return JSON.parse(response.text) as UpdateStatus;
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await sleep(2000);
    }
  }
}

/** POST /api/update, then follows GET /api/update until the node reboots into the new slot. */
async function startUpdate(url: string): Promise<void> {
  const since = node.console.log.length;
  const accepted = await api('/api/update', { method: 'POST', json: { url } });
  assert.is(accepted.status, 202, accepted.text);
  // The node may reboot between two polls: its console saying so ends the wait as well.
  let rebooting = false;
  node.console.waitForLine(/update: written .*rebooting into the new slot/, BOOT_TIMEOUT_MS, since).then(
    () => {
      rebooting = true;
    },
    () => undefined,
  );
  const deadline = Date.now() + BOOT_TIMEOUT_MS;
  for (;;) {
    if (rebooting) return;
    const status = await updateStatus();
    if (status.operation.state === 'rebooting') return;
    if (status.operation.state === 'failed') throw new Error(`the update failed on the node: ${status.operation.detail}`);
    if (Date.now() > deadline) throw new Error(`the update is still ${status.operation.state} after ${BOOT_TIMEOUT_MS} ms`);
    await sleep(3000);
  }
}

const otherSlot = (slot: string): string => (slot === 'a' ? 'b' : 'a');

/** A bundle signed by a key that is not the node's: a manifest and its signature, nothing else. */
async function forgedBundle(): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'kbtp-forged-'));
  const manifest = Buffer.from(`${JSON.stringify({ format: 'kbtp-update/1', arch: ARCH, version: `${build.version}-forged`, files: {} })}\n`);
  const { privateKey } = generateKeyPairSync('ed25519');
  writeFileSync(join(dir, 'manifest.json'), manifest);
  writeFileSync(join(dir, 'manifest.sig'), sign(null, manifest, privateKey));
  await run('tar', ['--format=ustar', '-cf', join(dir, 'forged.kbtpupdate'), '-C', dir, 'manifest.json', 'manifest.sig']);
  return join(dir, 'forged.kbtpupdate');
}

/** POST /api/update of a bundle the node must refuse: it reports the reason and does not reboot. */
async function expectRefused(url: string, reason: RegExp): Promise<void> {
  const since = node.console.log.length;
  const accepted = await api('/api/update', { method: 'POST', json: { url } });
  assert.is(accepted.status, 202, accepted.text);
  const deadline = Date.now() + BOOT_TIMEOUT_MS;
  let status = await updateStatus();
  while (status.operation.state !== 'failed') {
    assert.not.equal(status.operation.state, 'rebooting', 'the node accepted a bundle it must refuse');
    if (Date.now() > deadline) throw new Error(`the refused update is still ${status.operation.state} after ${BOOT_TIMEOUT_MS} ms`);
    await sleep(2000);
    status = await updateStatus();
  }
  assert.match(status.operation.detail, reason);
  assert.not.match(node.console.log.slice(since), /rebooting into the new slot/);
}

imageTest('update through the API: the node boots the other slot once, passes its self-test, marks it good', async () => {
  if (build.service !== 'appliance') throw new Error('updates go through the management API of kbtp appliance');
  const from = (await updateStatus()).running.slot;
  const to = otherSlot(from);
  const version = `${build.version}-u2`;
  const files = await serveFiles(
    new Map([
      ['u2.kbtpupdate', await buildBundle(version, false)],
      ['forged.kbtpupdate', await forgedBundle()],
    ]),
  );
  try {
    // Signed by another key: refused before anything is written, the node stays where it is.
    await expectRefused(files.url('forged.kbtpupdate'), /signature does not verify/);
    const since = node.console.log.length;
    await startUpdate(files.url('u2.kbtpupdate'));
    await node.console.waitForLine(new RegExp(`kbtp-boot\\[initramfs [0-9.]+s\\]: slot ${to}`), BOOT_TIMEOUT_MS, since);
    await node.console.waitForLine(new RegExp(`stage 2: kbtp ${escapeRegExp(version)} `), BOOT_TIMEOUT_MS, since);
    await node.console.waitForLine(new RegExp(`kbtp-bless\\[[0-9.]+s\\]: slot ${to} marked good`), BOOT_TIMEOUT_MS, since);
    await waitReady(since);
    const status = await updateStatus();
    assert.equal(status.running, { slot: to, version });
    assert.is(status.last.state, 'good');
    // Updates never touch config and data: the same secret and token work, every block is there.
    await checkBlocks();
    await storeBlocks(2, 300n);
  } finally {
    files.close();
  }
});

imageTest('an update whose daemon cannot start: the node returns to the previous slot by itself and reports it', async () => {
  if (build.service !== 'appliance') throw new Error('updates go through the management API of kbtp appliance');
  const good = await updateStatus();
  const trial = otherSlot(good.running.slot);
  const version = `${build.version}-broken`;
  const files = await serveFiles(new Map([['broken.kbtpupdate', await buildBundle(version, true)]]));
  try {
    const since = node.console.log.length;
    await startUpdate(files.url('broken.kbtpupdate'));
    await node.console.waitForLine(new RegExp(`kbtp-boot\\[initramfs [0-9.]+s\\]: slot ${trial}`), BOOT_TIMEOUT_MS, since);
    // No one intervenes: the loader sees the trial slot's tries used up and boots the good one again.
    const failed = await node.console.waitForLine(/kbtp-bless\[[0-9.]+s\]: TRIAL FAILED: /, BOOT_TIMEOUT_MS, since);
    const afterTrial = node.console.log.indexOf(failed[0], since);
    await node.console.waitForLine(new RegExp(`kbtp-boot\\[initramfs [0-9.]+s\\]: slot ${good.running.slot}`), BOOT_TIMEOUT_MS, afterTrial);
    await node.console.waitForLine(new RegExp(`kbtp-bless\\[[0-9.]+s\\]: UPDATE ROLLED BACK: slot ${trial}`), BOOT_TIMEOUT_MS, afterTrial);
    await waitReady(afterTrial);
    const status = await updateStatus();
    assert.equal(status.running, good.running);
    assert.is(status.last.state, 'rolled-back');
    assert.is(status.last.slot, trial);
    assert.is(status.last.version, version);
    assert.match(status.last.reason ?? '', /daemon exited|did not listen/);
    await checkBlocks();
    await storeBlocks(2, 400n);
  } finally {
    files.close();
  }
});

test.run();
