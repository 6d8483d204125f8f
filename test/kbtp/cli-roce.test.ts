// `kbtp target --transport roce` end to end through the command line: a target process on the
// IB RC / RoCEv2 binding (UDP data path, TCP setup), and put/get/info/free as separate client
// processes with --transport roce (or KBTP_TRANSPORT=roce), exit codes and data checked; an
// iWARP client is refused at once; the target shuts down cleanly with nothing lost.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cli, kbtp } from '../support/kbtp-cli.ts';

interface RunningTarget {
  child: ChildProcessWithoutNullStreams;
  address: string;
  output: () => string;
  exited: Promise<number>;
}

/** Starts `kbtp target` on an ephemeral port and waits (bounded) for its start-up lines. */
function startTarget(args: string[]): Promise<RunningTarget> {
  const child = spawn(process.execPath, ['--import', 'tsx', cli, 'target', '--listen', '127.0.0.1:0', ...args]);
  let output = '';
  const exited = new Promise<number>((resolve) => child.on('close', (code) => resolve(code ?? -1)));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the target did not print its address within 120 s:\n${output}`));
    }, 120_000);
    const seen = (chunk: Buffer): void => {
      output += chunk.toString();
      const match = /listening on (127\.0\.0\.1:\d+)/.exec(output);
      // The hint line is the last one the target prints before serving.
      if (match !== null && /try: kbtp info/.test(output)) {
        clearTimeout(timer);
        resolve({ child, address: match[1]!, output: () => output, exited });
      }
    };
    child.stdout.on('data', seen);
    child.stderr.on('data', seen);
    child.on('error', reject);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`the target exited (${code}) before listening:\n${output}`));
    });
  });
}

test('kbtp target --transport roce serves put/get/info/free from client processes with --transport roce', async () => {
  const target = await startTarget(['--transport', 'roce', '--blocks', '64', '--block-size', '4096', '--workers', '2']);
  try {
    assert.match(target.output(), /IB RC over RoCEv2/);
    assert.match(target.output(), /try: kbtp info --target 127\.0\.0\.1:\d+ --transport roce/, 'the hint names the binding');
    const flags = ['--target', target.address, '--transport', 'roce'];
    const payload = randomBytes(3000);
    const put = await kbtp(['put', '7', ...flags], payload);
    assert.is(put.code, 0, put.stderr);
    assert.match(put.stderr, /stored 3000 octets at handle 7/);
    const get = await kbtp(['get', '7', ...flags]);
    assert.is(get.code, 0, get.stderr);
    assert.ok(get.stdout.equals(payload), 'the block comes back octet for octet over RoCE');
    const info = await kbtp(['info', '--json', ...flags]);
    assert.is(info.code, 0, info.stderr);
    const ack = JSON.parse(info.stdout.toString()) as { blockSize: number; blockCount: number };
    assert.equal([ack.blockSize, ack.blockCount], [4096, 64]);
    // The environment variable picks the binding as well as the flag.
    const env = { KBTP_TARGET: target.address, KBTP_TRANSPORT: 'roce' };
    const again = await kbtp(['put', '7'], payload, env);
    assert.is(again.code, 3, again.stderr);
    assert.match(again.stderr, /ALREADY_VALID/);
    const free = await kbtp(['free', '7'], undefined, env);
    assert.is(free.code, 0, free.stderr);
    const gone = await kbtp(['get', '7'], undefined, env);
    assert.is(gone.code, 3, gone.stderr);
    assert.match(gone.stderr, /NOT_VALID/);
    // An iWARP client at the RoCE target is refused at its MPA Request, not left waiting for a Reply.
    const iwarp = await kbtp(['info', '--target', target.address]);
    assert.is(iwarp.code, 1, iwarp.stderr);
    assert.match(iwarp.stderr, /closed the connection during MPA setup/);
  } finally {
    target.child.kill('SIGTERM');
  }
  const code = await target.exited;
  assert.is(code, 0, target.output());
  assert.match(target.output(), /pool audit: 0 bound, 64 free, lost 0, doubled 0/);
});

test.run();
