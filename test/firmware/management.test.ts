// The appliance's management server and lifecycle, against `kbtp appliance` as a real process:
// readiness transitions, the token, bounded requests, unknown routes, clear start-up failures.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import net from 'node:net';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '../../host/kbtp/initiator.ts';
import { KbtpStatusError } from '../../host/kbtp/errors.ts';
import { startDaemon, runCli, get, eventually, SMALL_POOL } from './daemon.ts';

function holdPort(): Promise<net.Server> {
  return new Promise((resolve, reject) => {
    const server = net.createServer((socket) => socket.destroy());
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}

const portOf = (server: net.Server): number => (server.address() as net.AddressInfo).port;

test('/readyz: not ready while the KBTP address is still held, ready once listening, not ready while draining', async () => {
  const holder = await holdPort();
  const port = portOf(holder);
  const daemon = await startDaemon({ listen: `127.0.0.1:${port}`, drainTimeoutMs: 60_000, listenWaitMs: 120_000 });
  try {
    await daemon.waitForLog(/KBTP address .* is in use; retrying/);
    const starting = await get(`${daemon.management}/readyz`);
    assert.is(starting.status, 503);
    assert.equal(JSON.parse(starting.text), { ready: false, state: 'starting' });
    assert.is((await get(`${daemon.management}/healthz`)).status, 200, 'alive while starting');
    await new Promise<void>((resolve) => holder.close(() => resolve()));
    await eventually(
      'ready',
      () => get(`${daemon.management}/readyz`),
      (r) => r.status === 200,
    );
    assert.is(await daemon.kbtp, `127.0.0.1:${port}`);

    // A session that stays open keeps the drain going: readiness must say so meanwhile.
    const session = await connect(await daemon.kbtp, { tenant: 'default' });
    await session.allocStore(1n, new TextEncoder().encode('before the drain'));
    daemon.child.kill('SIGTERM');
    const draining = await eventually(
      'draining',
      () => get(`${daemon.management}/readyz`),
      (r) => r.status === 503,
    );
    assert.equal(JSON.parse(draining.text), { ready: false, state: 'draining' });
    const refused = await session.allocStore(2n, new TextEncoder().encode('after')).then(
      () => 'stored',
      (error: unknown) => error,
    );
    assert.ok(refused instanceof KbtpStatusError && refused.statusName === 'SHUTTING_DOWN', `got ${String(refused)}`);
    await session.close();
    assert.is(await daemon.exited, 0, daemon.stderr());
    assert.match(daemon.stderr(), /stopped cleanly/);
  } finally {
    if (holder.listening) holder.close();
    await daemon.stop();
  }
});

test('routes: unknown 404, wrong method 405, a huge body refused unread; health and status answer', async () => {
  const daemon = await startDaemon();
  try {
    await daemon.kbtp;
    const missing = await get(`${daemon.management}/no/such/thing`);
    assert.is(missing.status, 404);
    assert.match(missing.text, /no such route/);
    const post = await fetch(`${daemon.management}/readyz`, { method: 'POST', body: 'x' });
    assert.is(post.status, 405);
    // 64 MiB announced, 64 KiB of it sent: the answer and the close come without the rest.
    const rawRequest = (head: string, sendSome: boolean): Promise<string> =>
      new Promise<string>((resolve, reject) => {
        const socket = net.connect(Number(new URL(daemon.management).port), '127.0.0.1');
        let answer = '';
        socket.on('data', (chunk: Buffer) => {
          answer += chunk.toString();
        });
        socket.on('error', reject);
        socket.on('close', () => resolve(answer));
        socket.on('connect', () => socket.write(head + (sendSome ? Buffer.alloc(64 * 1024).toString() : '')));
        setTimeout(() => reject(new Error(`no answer and close; got ${JSON.stringify(answer)}`)), 30_000).unref();
      });
    const huge = await rawRequest(`POST /api/status HTTP/1.1\r\nhost: x\r\ncontent-length: ${64 * 2 ** 20}\r\n\r\n`, true);
    const asked = await rawRequest(`POST /api/status HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: ${64 * 2 ** 20}\r\n\r\n`, false);
    assert.match(asked, /^HTTP\/1\.1 413/, 'refused before the body is sent');
    assert.not.match(asked, /100 Continue/);
    assert.match(huge, /^HTTP\/1\.1 413/);
    const chunked = await fetch(`${daemon.management}/api/status`, {
      method: 'POST',
      body: new ReadableStream({
        start(controller) {
          controller.enqueue(new Uint8Array(1024));
          controller.close();
        },
      }),
      duplex: 'half',
    } as RequestInit);
    assert.is(chunked.status, 413, 'a body of unknown length is refused too');
    assert.is((await get(`${daemon.management}/healthz`)).status, 200, 'still serving after the refusals');
    const status = JSON.parse((await get(`${daemon.management}/api/status`)).text) as { state: string; pool: { blockCount: number; free: number } };
    assert.is(status.state, 'ready');
    assert.is(status.pool.blockCount, SMALL_POOL.blockCount);
    assert.is(status.pool.free, SMALL_POOL.blockCount);
  } finally {
    assert.is(await daemon.stop(), 0);
  }
});

test('token: missing or wrong gets 401 with nothing echoed; Bearer and Basic (a browser) get in', async () => {
  const token = 'management-token-0123456789abcdef';
  const wrong = 'wrong-token-fedcba9876543210';
  const daemon = await startDaemon({ management: { listen: '127.0.0.1:0', token } });
  try {
    await daemon.kbtp;
    for (const path of ['/api/status', '/readyz', '/no/such/route']) {
      const none = await get(`${daemon.management}${path}`);
      assert.is(none.status, 401, path);
      assert.match(none.headers.get('www-authenticate') ?? '', /Basic/);
      const bad = await get(`${daemon.management}${path}`, { authorization: `Bearer ${wrong}` });
      assert.is(bad.status, 401, path);
      assert.is(bad.text, none.text, 'a wrong token is answered exactly like a missing one');
      assert.not.match(bad.text, /wrong-token|management-token/);
    }
    const bearer = await get(`${daemon.management}/api/status`, { authorization: `Bearer ${token}` });
    assert.is(bearer.status, 200);
    assert.not.match(bearer.text, /management-token/, 'the status never shows the token');
    const basic = await get(`${daemon.management}/readyz`, { authorization: `Basic ${Buffer.from(`admin:${token}`).toString('base64')}` });
    assert.is(basic.status, 200);
  } finally {
    assert.is(await daemon.stop(), 0);
    assert.not.match(daemon.stderr() + daemon.stdout(), /wrong-token|management-token/, 'no token in the log');
  }
});

test('management address in use: a clear error and exit 2; beyond loopback without a token: refused', async () => {
  const holder = await holdPort();
  try {
    const daemon = await startDaemon({ management: { listen: `127.0.0.1:${portOf(holder)}` } }, [], { waitForManagement: false });
    const code = await daemon.exited;
    await daemon.stop();
    assert.is(code, 2, daemon.stderr());
    assert.match(daemon.stderr(), new RegExp(`management address 127\\.0\\.0\\.1:${portOf(holder)} is in use`));
  } finally {
    holder.close();
  }
  // Nothing is bound here: the configuration is refused before any socket is made.
  const exposed = await runCli(['appliance', '--listen', '127.0.0.1:0', '--http', '0.0.0.0:0']);
  assert.is(exposed.code, 2);
  assert.match(exposed.stderr, /--http: the management server would listen on 0\.0\.0\.0 without a token; set management\.token/);
});

test('a malformed configuration names the field and the fix, and exits 2', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'kbtp-appliance-config-'));
  try {
    const cases: Array<[unknown, RegExp]> = [
      [{ management: { listen: 7118 } }, /management\.listen: must be a string/],
      [{ management: { listen: '127.0.0.1:7118', tokn: 'x' } }, /management\.tokn: unknown key; did you mean "token"\?/],
      [{ management: { token: 'short' } }, /management\.token: must be a string of at least 16 characters/],
      [{ log: { level: 'loud' } }, /log\.level: must be one of error, warn, info, debug/],
      [{ drainTimeoutMs: -1 }, /drainTimeoutMs: must be an integer from 0 to 3600000/],
      [{ managment: {} }, /managment: unknown key; did you mean "management"\?/],
      [{ log: { levl: 'info' } }, /log\.levl: unknown key; did you mean "level"\?/],
      [{ pool: { blockCount: 0 } }, /pool\.blockCount: must be an integer/],
      [{ jobs: { poolAudit: 'every minute' } }, /jobs\.poolAudit: "every minute" is not a cron expression; e\.g\. "\*\/5 \* \* \* \*"/],
      [{ jobs: { scrub: '* * * * *' } }, /jobs\.scrub: unknown key/],
    ];
    for (const [config, expected] of cases) {
      const path = join(dir, 'kbtp.json');
      writeFileSync(path, JSON.stringify(config));
      const result = await runCli(['appliance', '--config', path]);
      assert.is(result.code, 2, `${JSON.stringify(config)}: ${result.stderr}`);
      assert.match(result.stderr, expected);
      assert.not.match(result.stderr, /short/, 'a token value is never echoed');
    }
    writeFileSync(join(dir, 'broken.json'), '{ "listen": ');
    const broken = await runCli(['appliance', '--config', join(dir, 'broken.json')]);
    assert.is(broken.code, 2);
    assert.match(broken.stderr, /broken\.json: is not valid JSON/);
    // V8 quotes the text around a bad token; a token or secret written without quotes must not reach the log.
    writeFileSync(join(dir, 'unquoted.json'), '{\n  "management": {\n    "token": hunter2-never-shown-0123\n  }\n}\n');
    const unquoted = await runCli(['appliance', '--config', join(dir, 'unquoted.json')]);
    assert.is(unquoted.code, 2);
    assert.match(unquoted.stderr, /unquoted\.json: is not valid JSON \(Unexpected token near line 3\)/);
    assert.not.match(unquoted.stderr + unquoted.stdout, /hunter|never-shown/);
    writeFileSync(join(dir, 'comma.json'), '{\n  "tenants": [{ "name": "a", "secret": "s3cr3t-value" }],\n}');
    const comma = await runCli(['appliance', '--config', join(dir, 'comma.json')]);
    assert.match(comma.stderr, /comma\.json: is not valid JSON \(Expected double-quoted property name at line 3, column 1\)/);
    assert.not.match(comma.stderr, /s3cr3t/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
