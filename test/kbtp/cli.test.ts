// The client commands as a script would use them: stdin/stdout, exit codes, --help.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { kbtp } from '../support/kbtp-cli.ts';
import { startRig, SECRETS, type Rig } from '../support/rig.ts';

let rig: Rig;
test.before(async () => {
  rig = await startRig();
});
test.after(async () => {
  await rig.stop();
});

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

test('exit codes follow the help: bad --target is usage, local files are named, oversized puts and OUT_OF_RANGE explain', async () => {
  const env = { KBTP_TARGET: rig.address, KBTP_TENANT: 'alpha', KBTP_SECRET: SECRETS.alpha };
  const malformed = await kbtp(['info', '--target', 'host:port:what']);
  assert.is(malformed.code, 2, malformed.stderr);
  assert.match(malformed.stderr, /is not a target address/);
  const missing = await kbtp(['put', '5', '/nonexistent/block.bin'], undefined, env);
  assert.is(missing.code, 1, missing.stderr);
  assert.match(missing.stderr, /cannot read \/nonexistent\/block\.bin: no such file or directory \(ENOENT\)/);
  const big = await kbtp(['put', '5'], Buffer.alloc(5000, 1), env);
  assert.is(big.code, 2, big.stderr);
  assert.match(big.stderr, /5000 octets do not fit the target's 4096-octet blocks/);
  assert.not.match(big.stderr, /usage:/, 'an oversized put is not a usage problem');
  const far = await kbtp(['get', '99999'], undefined, env);
  assert.is(far.code, 3, far.stderr);
  assert.match(far.stderr, /OUT_OF_RANGE: handle 99999 is outside the target's table \(handles 0\.\.255\)/);
  const unwritable = await kbtp(['put', '6'], Buffer.from('x'), env);
  assert.is(unwritable.code, 0, unwritable.stderr);
  const cannotWrite = await kbtp(['get', '6', '/nonexistent/out.bin'], undefined, env);
  assert.is(cannotWrite.code, 1, cannotWrite.stderr);
  assert.match(cannotWrite.stderr, /cannot write \/nonexistent\/out\.bin/);
  assert.is((await kbtp(['free', '6'], undefined, env)).code, 0);
});

test('target --check-config: typos name their path and the nearest key; a valid file prints the effective config, secrets masked', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'kbtp-config-'));
  const typo = join(dir, 'typo.json');
  writeFileSync(typo, JSON.stringify({ tenants: [{ name: 'a', secrte: 'hunter2', quota: 1 }] }));
  const bad = await kbtp(['target', '--check-config', typo]);
  assert.is(bad.code, 2, bad.stderr);
  assert.match(bad.stderr, /configuration error in .*typo\.json: tenants\[0\]\.secrte: unknown key; did you mean "secret"\?/);
  assert.not.match(bad.stderr, /hunter2/);
  const good = join(dir, 'good.json');
  writeFileSync(good, JSON.stringify({ pool: { blockCount: 64, blockSize: 4096 }, timeouts: { helloMs: 2000 }, tenants: [{ name: 'a', secret: 'hunter2' }] }));
  const ok = await kbtp(['target', '--check-config', good]);
  assert.is(ok.code, 0, ok.stderr);
  assert.not.match(ok.stdout.toString(), /hunter2/);
  const effective = JSON.parse(ok.stdout.toString()) as {
    tenants: Array<{ quota: number; secret: string }>;
    timeouts: { helloMs: number; idleSessionMs: number };
  };
  assert.equal(
    [effective.tenants[0]?.quota, effective.tenants[0]?.secret, effective.timeouts.helloMs, effective.timeouts.idleSessionMs],
    [64, '(set, not shown)', 2000, 600_000],
  );
  const unreadable = await kbtp(['target', '--check-config', join(dir, 'absent.json')]);
  assert.is(unreadable.code, 2);
  assert.match(unreadable.stderr, /absent\.json: cannot be read \(ENOENT\)/);
  rmSync(dir, { recursive: true, force: true });
});

test("target --max-inline and --loopback-congestion-control: shown by --check-config, defaults 8192 and the host's, bad values refused", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'kbtp-config-'));
  const file = join(dir, 'pool.json');
  writeFileSync(file, JSON.stringify({ pool: { blockCount: 16, blockSize: 262144 } }));
  const maxInline = (out: { stdout: Buffer | string }): number => (JSON.parse(out.stdout.toString()) as { pool: { maxInline: number } }).pool.maxInline;
  const byDefault = await kbtp(['target', '--check-config', file]);
  assert.is(byDefault.code, 0, byDefault.stderr);
  assert.is(maxInline(byDefault), 8192);
  const whole = await kbtp(['target', '--check-config', file, '--max-inline', '256K']);
  assert.is(whole.code, 0, whole.stderr);
  assert.is(maxInline(whole), 262144);
  const smallerBlocks = await kbtp(['target', '--check-config', file, '--block-size', '16384', '--max-inline', '16384']);
  assert.is(smallerBlocks.code, 0, smallerBlocks.stderr);
  assert.is(maxInline(smallerBlocks), 16384);
  // The block size takes units as --max-inline does.
  const blockSizeOf = (out: { stdout: Buffer | string }): number => (JSON.parse(out.stdout.toString()) as { pool: { blockSize: number } }).pool.blockSize;
  const inUnits = await kbtp(['target', '--check-config', file, '--block-size', '16K', '--max-inline', '16K']);
  assert.is(inUnits.code, 0, inUnits.stderr);
  assert.is(blockSizeOf(inUnits), 16384);
  assert.is(maxInline(inUnits), 16384);
  const tinyBlocks = await kbtp(['target', '--check-config', file, '--block-size', '4']);
  assert.is(tinyBlocks.code, 2);
  assert.match(tinyBlocks.stderr, /--block-size: 4 is less than 8 octets/);
  const none = await kbtp(['target', '--check-config', file, '--max-inline', '0']);
  assert.is(maxInline(none), 0);
  const tooLarge = await kbtp(['target', '--check-config', file, '--max-inline', '1M']);
  assert.is(tooLarge.code, 2);
  assert.match(tooLarge.stderr, /--max-inline: 1048576 is more than the block size \(262144\)/);
  const congestion = (out: { stdout: Buffer | string }): string =>
    (JSON.parse(out.stdout.toString()) as { loopbackCongestionControl: string }).loopbackCongestionControl;
  assert.is(congestion(byDefault), "the host's");
  assert.is(congestion(await kbtp(['target', '--check-config', file, '--loopback-congestion-control', 'reno'])), 'reno');
  assert.is(congestion(await kbtp(['target', '--check-config', file, '--loopback-congestion-control', 'host'])), "the host's");
  assert.is(congestion(await kbtp(['target', '--check-config', file, '--loopback-congestion-control', 'cubic'])), 'cubic');
  const badName = await kbtp(['target', '--check-config', file, '--loopback-congestion-control', 'no such']);
  assert.is(badName.code, 2);
  assert.match(badName.stderr, /--loopback-congestion-control: "no such" is not a congestion control's name/);
  const notASize = await kbtp(['target', '--check-config', file, '--max-inline', 'lots']);
  assert.is(notASize.code, 2);
  assert.match(notASize.stderr, /--max-inline: "lots" is not a size in octets/);
  rmSync(dir, { recursive: true, force: true });
});

test('target --busy-poll-us: overrides the file, shown by --check-config; out of range or with roce is a configuration error', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'kbtp-config-'));
  const file = join(dir, 'poll.json');
  writeFileSync(file, JSON.stringify({ busyPollUs: 100, pool: { blockCount: 64, blockSize: 4096 } }));
  const fromFile = await kbtp(['target', '--check-config', file]);
  assert.is(fromFile.code, 0, fromFile.stderr);
  assert.is((JSON.parse(fromFile.stdout.toString()) as { busyPollUs: number }).busyPollUs, 100);
  const flag = await kbtp(['target', '--check-config', file, '--busy-poll-us', '250']);
  assert.is(flag.code, 0, flag.stderr);
  assert.is((JSON.parse(flag.stdout.toString()) as { busyPollUs: number }).busyPollUs, 250);
  const tooMuch = await kbtp(['target', '--check-config', file, '--busy-poll-us', '20000']);
  assert.is(tooMuch.code, 2);
  assert.match(tooMuch.stderr, /--busy-poll-us: 20000 is more than 10000/);
  const roce = await kbtp(['target', '--check-config', file, '--transport', 'roce', '--busy-poll-us', '50']);
  assert.is(roce.code, 2);
  assert.match(roce.stderr, /--busy-poll-us: the busy poll covers the iwarp transport only/);
  rmSync(dir, { recursive: true, force: true });
});

test("bench: the target's block size without --sizes; a run cut short prints what it finished; bad --target is usage", async () => {
  const common = [
    'bench',
    '--target',
    rig.address,
    '--tenant',
    'alpha',
    '--secret',
    SECRETS.alpha,
    '--mix',
    'store',
    '--sessions',
    '1',
    '--in-flight',
    '1',
    '--count',
    '20',
    '--warmup',
    '0',
    '-q',
  ];
  const sized = await kbtp([...common, '--json']);
  assert.is(sized.code, 0, sized.stderr);
  const result = JSON.parse(sized.stdout.toString()) as { rows: Array<{ size: number; ops: number }> };
  assert.equal(
    result.rows.map((row) => row.size),
    [4096],
  );
  const cut = await kbtp([...common, '--sizes', '4096,8192']);
  assert.is(cut.code, 2, cut.stderr);
  assert.match(cut.stderr, /cut short/);
  assert.match(cut.stderr, /8 KiB blocks do not fit the target's 4096-octet blocks/);
  assert.match(cut.stdout.toString(), /STORE\s+4 KiB/);
  const malformed = await kbtp(['bench', '--target', 'a:b:c', '-q']);
  assert.is(malformed.code, 2, malformed.stderr);
});

test.run();
