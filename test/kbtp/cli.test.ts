// The client commands as a script would use them: stdin/stdout, exit codes, --help.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { startRig, SECRETS, type Rig } from './rig.ts';

const cli = fileURLToPath(new URL('../../host/cli.ts', import.meta.url));

function kbtp(args: string[], input?: Uint8Array, env: Record<string, string> = {}): Promise<{ code: number; stdout: Buffer; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', cli, ...args], { env: { ...process.env, ...env } });
    const out: Buffer[] = [];
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => { err += chunk.toString(); });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? -1, stdout: Buffer.concat(out), stderr: err }));
    child.stdin.end(input ?? Buffer.alloc(0));
  });
}

let rig: Rig;
test.before(async () => { rig = await startRig(); });
test.after(async () => { await rig.stop(); });

test('put from stdin, get to stdout, free; exit codes a script can use', async () => {
  const env = { KBTP_TARGET: rig.address, KBTP_TENANT: 'alpha', KBTP_SECRET: SECRETS.alpha };
  const payload = Buffer.from('bytes through the command line\n'.repeat(50));
  const put = await kbtp(['put', '9'], payload, env);
  assert.is(put.code, 0, put.stderr);
  const get = await kbtp(['get', '0x9'], undefined, env);
  assert.is(get.code, 0, get.stderr);
  assert.ok(get.stdout.equals(payload));
  const again = await kbtp(['put', '9'], payload, env);
  assert.is(again.code, 3);
  assert.match(again.stderr, /ALREADY_VALID/);
  const denied = await kbtp(['free', '70'], undefined, env);
  assert.is(denied.code, 3);
  assert.match(denied.stderr, /ACCESS_DENIED/);
  assert.is((await kbtp(['free', '9'], undefined, env)).code, 0);
  const gone = await kbtp(['get', '9'], undefined, env);
  assert.is(gone.code, 3);
  assert.match(gone.stderr, /NOT_VALID/);
});

test('info prints the HELLO_ACK; bad credentials and unreachable targets are clear', async () => {
  const info = await kbtp(['info', '--json', '--target', rig.address, '--tenant', 'gamma', '--secret', SECRETS.gamma]);
  assert.is(info.code, 0, info.stderr);
  const ack = JSON.parse(info.stdout.toString()) as { blockSize: number; capabilities: number; quota: number };
  assert.equal([ack.blockSize, ack.capabilities, ack.quota], [4096, 3, 16]);
  const refused = await kbtp(['info', '--target', rig.address, '--tenant', 'alpha', '--secret', 'nope']);
  assert.is(refused.code, 3);
  assert.match(refused.stderr, /AUTH_FAILED/);
  assert.not.match(refused.stderr, /nope/, 'the credential is never echoed');
  const nowhere = await kbtp(['info', '--target', '127.0.0.1:1']);
  assert.is(nowhere.code, 1);
  assert.match(nowhere.stderr, /127\.0\.0\.1:1/);
});

test('--help everywhere; usage errors exit 2 with what to fix', async () => {
  for (const command of ['target', 'info', 'put', 'get', 'free', 'demo']) {
    const help = await kbtp([command, '--help']);
    assert.is(help.code, 0, command);
    assert.match(help.stdout.toString(), new RegExp(`usage: kbtp ${command}`));
  }
  const bad = await kbtp(['get', 'twelve']);
  assert.is(bad.code, 2);
  assert.match(bad.stderr, /not a handle/);
  const unknown = await kbtp(['fly']);
  assert.is(unknown.code, 2);
  const config = await kbtp(['target', '--listen', 'everywhere']);
  assert.is(config.code, 2);
  assert.match(config.stderr, /--listen: "everywhere" is not host:port/);
});

test.run();
