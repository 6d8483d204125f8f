// `make image-test`: the appliance image booted under QEMU TCG from its own disk (UEFI, no -kernel),
// reached from the host only through 127.0.0.1 port forwards. One node goes through the steps in
// order: first boot to ready, kbtp info and byte-exact put/get, /metrics, the watchdog (a stopped
// supervisor resets the node, which serves again), an A/B update through the API, and an update
// whose daemon cannot start (rolled back by the boot loader). Logs and pcaps: .cache/image-test/.
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { execFile, execFileSync } from 'node:child_process';
import { createReadStream, statSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { connect, type KbtpSession } from '../../host/kbtp/initiator.ts';
import { ApplianceNode, applianceBuild } from './appliance-vm.ts';
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
  ...(build.service === 'appliance' ? { management: { listen: '0.0.0.0:7118', token } } : {}),
};

const test = suite('appliance image');
let node: ApplianceNode;
const stored = new Map<bigint, Buffer>();

function sleep(ms: number): Promise<void> {
  return new Promise((resolveSleep) => setTimeout(resolveSleep, ms));
}

const escapeRegExp = (text: string): string => text.replace(/[.+*?^$()[\]{}|\\]/g, '\\$&');

async function session(): Promise<KbtpSession> {
  return connect(`127.0.0.1:${node.kbtpPort}`, { tenant: 'fleet', secret, timeoutMs: 60_000 });
}

/** Until the node answers: /readyz for `kbtp appliance`, a KBTP session for `kbtp target`. */
async function waitReady(sinceLogOffset: number): Promise<void> {
  const deadline = Date.now() + BOOT_TIMEOUT_MS;
  // The daemon first has to start at all; only then is polling the forwarded port meaningful
  // (QEMU accepts forwarded connections before anything listens in the guest).
  await node.console.waitForLine(/kbtp-supervise\[[0-9.]+s\]: daemon started/, BOOT_TIMEOUT_MS, sinceLogOffset);
  let lastError = '';
  while (Date.now() < deadline) {
    if (!node.console.running) throw new Error(`the node powered off while we waited for it; log: ${node.logPath}`);
    try {
      if (build.service === 'appliance') {
        const response = await fetch(`http://127.0.0.1:${node.managementPort}/readyz`, {
          headers: { authorization: `Bearer ${token}` },
          signal: AbortSignal.timeout(10_000),
        });
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
    await sleep(2000);
  }
  throw new Error(`the node was not ready within ${BOOT_TIMEOUT_MS} ms (last: ${lastError}); log: ${node.logPath}`);
}

async function storeBlocks(count: number, firstHandle: bigint): Promise<void> {
  const s = await session();
  try {
    for (let i = 0; i < count; i++) {
      const handle = firstHandle + BigInt(i);
      const data = randomBytes(1 + Math.floor(Math.random() * 65536));
      await s.allocStore(handle, data, { seal: true });
      stored.set(handle, data);
    }
  } finally {
    await s.close();
  }
}

async function checkBlocks(handles: Iterable<bigint>): Promise<void> {
  const s = await session();
  try {
    for (const handle of handles) {
      const loaded = await s.load(handle);
      assert.ok(Buffer.from(loaded.data).equals(stored.get(handle) ?? Buffer.alloc(0)), `block ${handle} differs`);
    }
  } finally {
    await s.close();
  }
}

test.before(async () => {
  node = await ApplianceNode.create({ name: 'appliance', config, diskGiB: 2, testHooks: true });
});

test.after(async () => {
  await node.stop();
});

test('first boot from the disk alone reaches ready; the data partition grows to the disk', async () => {
  const poweredOn = Date.now();
  node.boot();
  await node.console.waitForLine(/kbtp-boot\[initramfs [0-9.]+s\]: slot a/, BOOT_TIMEOUT_MS);
  await waitReady(0);
  console.log(`  power-on to ready: ${((Date.now() - poweredOn) / 1000).toFixed(1)} s (TCG, load ${(await import('node:os')).loadavg()[0]?.toFixed(1)})`);
  const data = await node.console.waitForLine(/kbtp-boot\[[0-9.]+s\]: data: (\d+) MiB on/, 10_000);
  assert.ok(Number(data[1]) > 1024, `the data partition holds ${data[1]} MiB of a 2 GiB disk: it did not grow`);
  assert.match(node.console.log, /kbtp-supervise\[[0-9.]+s\]: watchdog armed \(i6300ESB/);
  assert.match(node.console.log, new RegExp(`stage 2: kbtp ${escapeRegExp(build.version)} `));
  assert.not.match(node.console.log, /KBTP-BOOT-FAILED/);
});

test('kbtp info shows the node; blocks put and get byte-exact', async () => {
  const { stdout } = await run(process.execPath, [cli, 'info', '--target', `127.0.0.1:${node.kbtpPort}`, '--tenant', 'fleet'], {
    env: { ...process.env, KBTP_SECRET: secret },
    timeout: 120_000,
  });
  assert.match(stdout, /block size\s+65536 octets/);
  assert.match(stdout, /allocation quota\s+512 blocks/);
  await storeBlocks(8, 100n);
  await checkBlocks(stored.keys());
  // Through the CLI as well, byte for byte.
  const { stdout: got } = await run(process.execPath, [cli, 'get', '100', '--target', `127.0.0.1:${node.kbtpPort}`, '--tenant', 'fleet'], {
    env: { ...process.env, KBTP_SECRET: secret },
    timeout: 120_000,
    encoding: 'buffer',
    maxBuffer: 1 << 20,
  });
  assert.ok(got.equals(stored.get(100n) ?? Buffer.alloc(0)), 'kbtp get returned other bytes');
});

test('/metrics scrapes (Prometheus text) and counts the stores; no token, no metrics', async () => {
  if (build.service !== 'appliance') {
    console.log('  (this build runs kbtp target: no management server to scrape)');
    return;
  }
  const response = await fetch(`http://127.0.0.1:${node.managementPort}/metrics`, {
    headers: { authorization: `Bearer ${token}` },
    signal: AbortSignal.timeout(60_000),
  });
  assert.is(response.status, 200);
  assert.match(response.headers.get('content-type') ?? '', /^text\/plain/);
  const text = await response.text();
  assert.match(text, /^# TYPE kbtp_\w+ /m);
  const stores = [...text.matchAll(/^kbtp_requests_total\{[^}]*opcode="ALLOC_STORE"[^}]*status="SUCCESS"[^}]*\} (\d+)/gm)];
  assert.ok(stores.length > 0, 'no kbtp_requests_total for ALLOC_STORE/SUCCESS in /metrics');
  assert.ok(stores.reduce((sum, m) => sum + Number(m[1]), 0) >= 8, 'the eight stores are not counted');
  const anonymous = await fetch(`http://127.0.0.1:${node.managementPort}/metrics`, { signal: AbortSignal.timeout(60_000) });
  assert.is(anonymous.status, 401);
});

test('watchdog: a stopped supervisor resets the node, which boots and serves again', async () => {
  const since = node.console.log.length;
  node.console.send('kbtp-test-hook stop-supervisor');
  await node.console.waitForLine(/kbtp-test-hooks\[[0-9.]+s\]: stopping the supervisor/, 60_000, since);
  // i6300esb: two heartbeats of 15 s without a feed, then a reset; the node boots from the disk again.
  await node.console.waitForLine(/kbtp-boot\[initramfs [0-9.]+s\]: slot a/, BOOT_TIMEOUT_MS, since);
  await waitReady(since);
  stored.clear();
  await storeBlocks(2, 200n);
  await checkBlocks(stored.keys());
});

/** An update bundle of this build under another version (built by images/appliance/build.sh). */
function buildBundle(version: string, brokenDaemon: boolean): string {
  const output = execFileSync(
    join(import.meta.dirname, '../../images/appliance/build.sh'),
    ['--bundle-only', '--version', version, ...(brokenDaemon ? ['--broken-daemon'] : [])],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], timeout: 1_200_000 },
  );
  return output.trim().split('\n').pop() ?? '';
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

async function api(path: string, init: RequestInit = {}): Promise<Response> {
  return fetch(`http://127.0.0.1:${node.managementPort}${path}`, {
    ...init,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    signal: AbortSignal.timeout(120_000),
  });
}

/** GET /api/update; a guest busy downloading 100 MB under TCG may answer late, so this retries. */
async function updateStatus(): Promise<UpdateStatus> {
  const deadline = Date.now() + BOOT_TIMEOUT_MS;
  for (;;) {
    try {
      return (await (await api('/api/update')).json()) as UpdateStatus;
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await sleep(2000);
    }
  }
}

/** POST /api/update, then follows GET /api/update until the node reboots into the new slot. */
async function startUpdate(url: string): Promise<void> {
  const since = node.console.log.length;
  const accepted = await api('/api/update', { method: 'POST', body: JSON.stringify({ url }) });
  assert.is(accepted.status, 202, await accepted.text());
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

test('update through the API: the node boots the other slot once, passes its self-test, marks it good', async () => {
  if (build.service !== 'appliance') throw new Error('updates go through the management API of kbtp appliance');
  const version = `${build.version}-u2`;
  const files = await serveFiles(new Map([['u2.kbtpupdate', buildBundle(version, false)]]));
  try {
    const since = node.console.log.length;
    await startUpdate(files.url('u2.kbtpupdate'));
    await node.console.waitForLine(/kbtp-boot\[initramfs [0-9.]+s\]: slot b/, BOOT_TIMEOUT_MS, since);
    await node.console.waitForLine(new RegExp(`stage 2: kbtp ${escapeRegExp(version)} `), BOOT_TIMEOUT_MS, since);
    await node.console.waitForLine(/kbtp-bless\[[0-9.]+s\]: slot b marked good/, BOOT_TIMEOUT_MS, since);
    await waitReady(since);
    const status = await updateStatus();
    assert.equal(status.running, { slot: 'b', version });
    assert.is(status.last.state, 'good');
    // The config partition survived the update: the same tenant secret and token still work.
    stored.clear();
    await storeBlocks(2, 300n);
    await checkBlocks(stored.keys());
  } finally {
    files.close();
  }
});

test('an update whose daemon cannot start: the node returns to the previous slot by itself and reports it', async () => {
  const good = await updateStatus();
  const version = `${build.version}-broken`;
  const files = await serveFiles(new Map([['broken.kbtpupdate', buildBundle(version, true)]]));
  try {
    const since = node.console.log.length;
    await startUpdate(files.url('broken.kbtpupdate'));
    await node.console.waitForLine(/kbtp-boot\[initramfs [0-9.]+s\]: slot a/, BOOT_TIMEOUT_MS, since);
    await node.console.waitForLine(/kbtp-bless\[[0-9.]+s\]: TRIAL FAILED: /, BOOT_TIMEOUT_MS, since);
    // No one intervenes: the loader sees slot a's tries used up and boots slot b again.
    await node.console.waitForLine(/kbtp-boot\[initramfs [0-9.]+s\]: slot b/, BOOT_TIMEOUT_MS, since);
    await node.console.waitForLine(/kbtp-bless\[[0-9.]+s\]: UPDATE ROLLED BACK: slot a/, BOOT_TIMEOUT_MS, since);
    await waitReady(since);
    const status = await updateStatus();
    assert.equal(status.running, good.running);
    assert.is(status.last.state, 'rolled-back');
    assert.is(status.last.slot, 'a');
    assert.is(status.last.version, version);
    assert.match(status.last.reason ?? '', /daemon exited|did not listen/);
    stored.clear();
    await storeBlocks(2, 400n);
    await checkBlocks(stored.keys());
  } finally {
    files.close();
  }
});

test.run();
