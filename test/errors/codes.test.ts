// Every error kbtp throws is a KbtpError with a stable code and the exit code the CLI uses for it:
// each case below makes the real code path fail (no error is built by hand) and checks the promise.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EXIT_FAILURE, EXIT_STATUS, EXIT_USAGE, KbtpError, withContext, exitCodeOf } from '../../host/errors.ts';
import { KbtpStatusError, ProtocolError } from '../../host/kbtp/errors.ts';
import { parsePcap } from '../../host/capture/pcap.ts';
import { parseBlockTrace, loadBlockTrace } from '../../host/sram/trace.ts';
import { SramCache } from '../../host/sram/cache.ts';
import { createPolicy } from '../../host/sram/policy.ts';
import { decodeMpaFrameHeader } from '../../host/rnic/wire/mpa.ts';
import { decodeCompletion } from '../../host/kbtp/wire/messages.ts';
import { decodeDdpHeader } from '../../host/rnic/wire/ddp.ts';
import { sizeTier } from '../../host/tier/capacity.ts';
import { nodeFiles } from '../../host/tier/files.ts';
import { DurableTier } from '../../host/tier/tier.ts';
import { selfTestTarget } from '../../firmware/self-test.ts';
import { startTarget } from '../../host/kbtp/server/target.ts';
import { Engine } from '../../host/engine/engine.ts';
import { ThreadArena } from '../../host/engine/arena.ts';
import { testSettings } from '../support/rig.ts';

/** What `work` threw; fails the test when it threw nothing. */
async function thrown(work: () => unknown): Promise<unknown> {
  try {
    await work();
  } catch (error) {
    return error;
  }
  assert.unreachable('expected an error');
  return undefined;
}

async function expectKbtpError(work: () => unknown, code: string, exitCode: number, message: RegExp): Promise<KbtpError> {
  const error = await thrown(work);
  assert.instance(error, KbtpError, String(error));
  const kbtp = error as KbtpError;
  assert.is(kbtp.code, code, kbtp.message);
  assert.is(kbtp.exitCode, exitCode, kbtp.message);
  assert.is(exitCodeOf(kbtp), exitCode);
  assert.match(kbtp.message, message);
  return kbtp;
}

test('malformed input data: KBTP_FORMAT, exit 2', async () => {
  const pcap = await expectKbtpError(() => parsePcap(new Uint8Array(3)), 'KBTP_FORMAT', EXIT_USAGE, /shorter than the 24-byte file header/);
  assert.is(pcap.name, 'PcapFormatError');
  await expectKbtpError(() => parseBlockTrace('{"hash_ids": [1, "x"]}\n', 'trace.jsonl'), 'KBTP_FORMAT', EXIT_USAGE, /^trace\.jsonl:1: hash id "x"/);
});

test('a file that cannot be read: KBTP_IO, exit 1, with the errno as cause', async () => {
  const error = await expectKbtpError(() => loadBlockTrace('/nonexistent/kbtp-trace.jsonl'), 'KBTP_IO', EXIT_FAILURE, /cannot read trace .*ENOENT/);
  assert.is((error.cause as NodeJS.ErrnoException).code, 'ENOENT');
});

test('bad arguments to the SRAM model: KBTP_USAGE, exit 2', async () => {
  await expectKbtpError(() => new SramCache({ lines: 0 }), 'KBTP_USAGE', EXIT_USAGE, /lines must be a whole number/);
  await expectKbtpError(() => createPolicy('no-such-policy'), 'KBTP_USAGE', EXIT_USAGE, /unknown policy 'no-such-policy'/);
});

test('what a peer sends wrong: KBTP_PROTOCOL, exit 1 (MPA and KBTP decoders)', async () => {
  const mpa = await expectKbtpError(() => decodeMpaFrameHeader(new Uint8Array(20)), 'KBTP_PROTOCOL', EXIT_FAILURE, /not an MPA Request\/Reply key/);
  assert.is(mpa.name, 'MpaFrameError');
  const kbtp = await expectKbtpError(() => decodeCompletion(new Uint8Array(7)), 'KBTP_PROTOCOL', EXIT_FAILURE, /COMPLETION is \d+ octets, got 7/);
  assert.is(kbtp.name, 'MessageFormatError');
  const ddp = await expectKbtpError(() => decodeDdpHeader(new Uint8Array(1)), 'KBTP_PROTOCOL', EXIT_FAILURE, /DDP segment shorter than its control octets/);
  assert.instance(ddp, ProtocolError);
  assert.instance(mpa, ProtocolError, 'the MPA and KBTP decoders share the one ProtocolError');
  assert.instance(kbtp, ProtocolError);
});

test('the durable tier: a bad capacity is KBTP_CONFIG (exit 2); a closed tier refuses with KBTP_TIER', async () => {
  const capacity = await expectKbtpError(() => sizeTier(-1, 4096, 16), 'KBTP_CONFIG', EXIT_USAGE, /durable capacity must be a positive number/);
  assert.is(capacity.name, 'TierCapacityError');
  const dir = mkdtempSync(join(tmpdir(), 'kbtp-errors-'));
  try {
    const tier = await DurableTier.open({
      directory: dir,
      capacityBytes: 1 << 20,
      blockSize: 4096,
      handleBase: 0n,
      handleCount: 16,
      tenants: [],
      files: nodeFiles,
    });
    await tier.close();
    const closed = await expectKbtpError(() => tier.seal(1, 1, new Uint8Array(4096)), 'KBTP_TIER', EXIT_FAILURE, /closed/);
    assert.is((closed as KbtpError & { reason: string }).reason, 'CLOSED');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("an engine thread's full session table: KBTP_CONFIG naming the setting", async () => {
  const engine = Engine.create({ blockSize: 4096, blockCount: 8, handleCount: 32, sessionsPerThread: 1, threads: 1 });
  const arena = new ThreadArena(engine, 0);
  arena.openSession({ tenant: 0, capabilities: 0, credits: 1 });
  await expectKbtpError(() => arena.openSession({ tenant: 0, capabilities: 0, credits: 1 }), 'KBTP_CONFIG', EXIT_FAILURE, /raise sessionsPerThread/);
});

test("misusing an engine thread's arena is a usage error (KBTP_USAGE), not a RangeError", async () => {
  const engine = Engine.create({ blockSize: 4096, blockCount: 8, handleCount: 32, threads: 1 });
  await expectKbtpError(() => new ThreadArena(engine, 3), 'KBTP_USAGE', EXIT_USAGE, /thread 3 is outside the engine's 1 threads/);
});

test('the self-test: a configuration without the tenant is a usage error (exit 2)', async () => {
  await expectKbtpError(() => selfTestTarget('{"tenants": []}'), 'KBTP_USAGE', EXIT_USAGE, /the configuration has no tenant/);
  await expectKbtpError(() => selfTestTarget('[1]'), 'KBTP_USAGE', EXIT_USAGE, /not a JSON object/);
});

test('a target whose address is taken: KBTP_LISTEN (exit 2), although the failure crossed a worker thread', async () => {
  const holder = net.createServer();
  await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
  try {
    const port = (holder.address() as AddressInfo).port;
    await expectKbtpError(
      () => startTarget(testSettings({ listen: `127.0.0.1:${port}`, workers: 1 }), { log: () => undefined }),
      'KBTP_LISTEN',
      EXIT_USAGE,
      /EADDRINUSE/,
    );
  } finally {
    await new Promise((resolve) => holder.close(resolve));
  }
});

test('withContext keeps a KbtpError its code and exit code; anything else is KBTP_INTERNAL', () => {
  const status = new KbtpStatusError(4, 'no such handle');
  const wrapped = withContext('preparing handle 7', status);
  assert.is(wrapped.code, 'KBTP_STATUS');
  assert.is(wrapped.exitCode, EXIT_STATUS);
  assert.is(wrapped.message, `preparing handle 7: ${status.message}`);
  assert.is(wrapped.cause, status);
  const other = withContext('preparing handle 8', new RangeError('odd'));
  assert.is(other.code, 'KBTP_INTERNAL');
  assert.is(other.exitCode, EXIT_FAILURE);
  assert.is(exitCodeOf(new RangeError('not ours')), EXIT_FAILURE);
});

test.run();
