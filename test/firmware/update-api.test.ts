// The update API with a stand-in for the image's kbtp-update (a shell script): the bundle is
// fetched from the given URL byte for byte, handed to the command, the node reboots only after
// the command succeeded, a second update while one runs is refused, and failures are reported.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createServer, type Server } from 'node:http';
import { mkdtempSync, readFileSync, writeFileSync, chmodSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { startManagementServer, type ManagementServer } from '../../firmware/management-server.ts';
import { updateRoutes, parseUpdateRequest } from '../../firmware/update-api.ts';

const dir = mkdtempSync(join(tmpdir(), 'kbtp-update-api-'));
const bundle = randomBytes(300_000);

function listen(server: Server): Promise<number> {
  return new Promise((resolveListen) => server.listen(0, '127.0.0.1', () => resolveListen((server.address() as AddressInfo).port)));
}

async function rig(script: string) {
  const command = join(dir, `kbtp-update-${randomBytes(4).toString('hex')}`);
  writeFileSync(command, `#!/bin/sh\n${script}\n`);
  chmodSync(command, 0o755);
  let rebooted = 0;
  const logs: string[] = [];
  const routes = updateRoutes({
    command,
    statusFile: join(dir, 'update-status.json'),
    downloadDir: dir,
    running: { slot: 'a', version: '1.0' },
    reboot: () => {
      rebooted += 1;
    },
    log: (level, message) => logs.push(`${level} ${message}`),
    rebootDelayMs: 0,
  });
  const management: ManagementServer = await startManagementServer({ host: '127.0.0.1', port: 0, token: null, routes, onError: (m) => logs.push(m) });
  const files = createServer((request, response) => {
    if (request.url === '/b.kbtpupdate') response.end(bundle);
    else {
      response.statusCode = 404;
      response.end();
    }
  });
  const filesPort = await listen(files);
  const base = `http://127.0.0.1:${management.port}/api/update`;
  const post = (body: string) => fetch(base, { method: 'POST', body, headers: { 'content-type': 'application/json' } });
  const status = async () => (await (await fetch(base)).json()) as { running: { slot: string }; operation: { state: string; detail: string } };
  const settle = async () => {
    for (let i = 0; i < 400; i++) {
      const s = await status();
      if (s.operation.state === 'rebooting' || s.operation.state === 'failed') return s;
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error('the update never finished');
  };
  return {
    post,
    status,
    settle,
    logs,
    get rebooted() {
      return rebooted;
    },
    url: (path: string) => JSON.stringify({ url: `http://127.0.0.1:${filesPort}${path}` }),
    async close() {
      await management.close();
      files.close();
    },
  };
}

test('parseUpdateRequest: a JSON object with an http(s) url, nothing else', () => {
  assert.ok('url' in parseUpdateRequest(Buffer.from('{"url":"http://10.0.2.2:8080/x.kbtpupdate"}')));
  assert.match(JSON.stringify(parseUpdateRequest(Buffer.from('nope'))), /must be JSON/);
  assert.match(JSON.stringify(parseUpdateRequest(Buffer.from('{"url":"file:///etc/passwd"}'))), /http: or https:/);
  assert.match(JSON.stringify(parseUpdateRequest(Buffer.from('{"uri":"http://x"}'))), /address as/);
});

test('POST fetches the bundle byte-exact, runs kbtp-update on it, then reboots; a second POST meanwhile gets 409', async () => {
  const received = join(dir, 'received');
  const r = await rig(`cp "$1" "${received}"; sleep 1; echo "slot b holds kbtp 2.0"`);
  try {
    assert.is((await r.post('{"url": 3}')).status, 400);
    const accepted = await r.post(r.url('/b.kbtpupdate'));
    assert.is(accepted.status, 202);
    assert.is((await r.post(r.url('/b.kbtpupdate'))).status, 409);
    const done = await r.settle();
    assert.is(done.operation.state, 'rebooting', done.operation.detail);
    assert.is(done.operation.detail, 'slot b holds kbtp 2.0');
    await new Promise((resolveTick) => setTimeout(resolveTick, 50));
    assert.is(r.rebooted, 1);
    assert.ok(readFileSync(received).equals(bundle), 'kbtp-update got other bytes than the server sent');
    assert.not.ok(existsSync(join(dir, '.incoming.kbtpupdate')), 'the downloaded bundle is left behind');
    assert.is(done.running.slot, 'a');
  } finally {
    await r.close();
  }
});

test('a failing kbtp-update or download is reported and never reboots', async () => {
  const r = await rig('echo "kbtp-update: the bundle is for arm64, this node is x86_64" >&2; exit 1');
  try {
    assert.is((await r.post(r.url('/b.kbtpupdate'))).status, 202);
    const failed = await r.settle();
    assert.is(failed.operation.state, 'failed');
    assert.match(failed.operation.detail, /for arm64/);
    assert.is((await r.post(r.url('/missing.kbtpupdate'))).status, 202);
    const missing = await r.settle();
    assert.match(missing.operation.detail, /HTTP 404/);
    assert.is(r.rebooted, 0);
  } finally {
    await r.close();
  }
});

test.run();
