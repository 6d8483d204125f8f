// The client library's failures are KbtpErrors with a stable code and the CLI's exit code, never
// plain Errors; every call honours { signal, timeoutMs }; a session supports `await using`.
import { createServer, type Server, type Socket } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { connect, TargetAddressError } from '../../host/kbtp/initiator.ts';
import { KbtpStatusError } from '../../host/kbtp/errors.ts';
import { startRig, SECRETS, type Rig } from '../support/rig.ts';
import { failure } from '../support/failure.ts';

let rig: Rig;
test.before(async () => {
  rig = await startRig();
});
test.after(async () => {
  await rig.stop();
});

function listen(server: Server): Promise<number> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as { port: number }).port)));
}

test('a malformed address is a usage error (exit 2)', async () => {
  const error = await failure(connect('no:port:here'));
  assert.instance(error, TargetAddressError);
  assert.is(error.code, 'KBTP_USAGE');
  assert.is(error.exitCode, 2);
});

test('nobody listening is a transport error (exit 1)', async () => {
  const closed = createServer();
  const port = await listen(closed);
  await new Promise((resolve) => closed.close(resolve));
  const error = await failure(connect(`127.0.0.1:${port}`, { timeoutMs: 20_000 }));
  assert.is(error.code, 'KBTP_TRANSPORT');
  assert.is(error.exitCode, 1);
});

test('a peer that accepts TCP and never answers MPA: connect times out', async () => {
  const sockets: Socket[] = [];
  const silent = createServer((socket) => sockets.push(socket));
  const port = await listen(silent);
  try {
    const error = await failure(connect(`127.0.0.1:${port}`, { timeoutMs: 300 }));
    assert.is(error.code, 'KBTP_TIMEOUT');
    assert.is(error.exitCode, 1);
  } finally {
    for (const socket of sockets) socket.destroy();
    silent.close();
  }
});

test('a refused session is a status error naming the status (exit 3)', async () => {
  const error = await failure(connect(rig.address, { tenant: 'alpha', secret: 'wrong' }));
  assert.instance(error, KbtpStatusError);
  assert.is((error as KbtpStatusError).statusName, 'AUTH_FAILED');
  assert.is(error.exitCode, 3);
});

test('an aborted call ends with KBTP_ABORTED, also while it waits for a free slot, and frees nothing it did not take', async () => {
  const session = await rig.session('alpha', { pipeline: 1 });
  assert.is(session.depth, 1);
  await session.allocStore(5n, new Uint8Array([1, 2, 3]), { seal: true });
  const before = new AbortController();
  before.abort(new Error('the user gave up'));
  const early = await failure(session.load(5n, { signal: before.signal }));
  assert.is(early.code, 'KBTP_ABORTED');
  // The first load holds the only slot; the second waits for it and is aborted while waiting.
  const waiting = new AbortController();
  const first = session.load(5n);
  const second = session.load(5n, { signal: waiting.signal });
  waiting.abort();
  assert.is((await failure(second)).code, 'KBTP_ABORTED');
  assert.equal([...(await first).data], [1, 2, 3]);
  assert.equal([...(await session.load(5n)).data], [1, 2, 3], 'the slot came back');
  await session.free(5n);
});

test('bad timeouts are usage errors', async () => {
  const session = await rig.session('alpha');
  assert.is((await failure(session.load(1n, { timeoutMs: 0 }))).code, 'KBTP_USAGE');
  assert.is((await failure(connect(rig.address, { timeoutMs: -5 }))).code, 'KBTP_USAGE');
});

test('await using closes the session at the end of the block; calls after close fail with KBTP_CLOSED', async () => {
  let escaped: Awaited<ReturnType<typeof connect>> | undefined;
  {
    await using session = await connect(rig.address, { tenant: 'alpha', secret: SECRETS.alpha });
    await session.allocStore(7n, new Uint8Array([7]), { seal: true });
    escaped = session;
  }
  const error = await failure(escaped.load(7n));
  assert.is(error.code, 'KBTP_CLOSED');
  const cleanup = await rig.session('alpha');
  await cleanup.free(7n);
});

test.run();
