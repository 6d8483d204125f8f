// loadInto / storeFrom: load() and store() without a promise or a result object. The block moves
// as with load()/store(); a KBTP status, a bad option or a deadline reaches `done` as the same
// KbtpError; `done` is never called before the call that started it returned.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { KbtpError, KbtpStatusError } from '../../host/kbtp/errors.ts';
import type { KbtpSession } from '../../host/kbtp/initiator.ts';
import { openInProcessSession } from './in-process-session.ts';

interface Ended {
  error: Error | undefined;
  dataLength: number;
  generation: number;
  /** The call that started it had returned when `done` ran. */
  afterReturn: boolean;
}

function call(start: (done: (error: Error | undefined, dataLength: number, generation: number) => void) => void): Promise<Ended> {
  return new Promise((resolve) => {
    let returned = false;
    start((error, dataLength, generation) => resolve({ error, dataLength, generation, afterReturn: returned }));
    returned = true;
  });
}

const loadInto = (session: KbtpSession, handle: bigint, into: Uint8Array, options = {}) => call((done) => session.loadInto(handle, into, done, options));

test('storeFrom then loadInto move the block; done gets its length and generation, after the call returned', async () => {
  const { session, target } = await openInProcessSession(512, 16, 4);
  try {
    const info = await session.allocStore(3n, new Uint8Array(512));
    const data = new Uint8Array(300).map((_, i) => (i * 13) & 0xff);
    const stored = await call((done) => session.storeFrom(3n, data, done));
    assert.is(stored.error, undefined);
    assert.is(stored.dataLength, 300);
    assert.is(stored.generation, info.generation);
    assert.ok(stored.afterReturn);
    const into = new Uint8Array(512);
    const loaded = await loadInto(session, 3n, into, { allowUnsealed: true });
    assert.is(loaded.error, undefined);
    assert.is(loaded.dataLength, 300);
    assert.ok(loaded.afterReturn);
    assert.equal([...into.subarray(0, 300)], [...data]);
  } finally {
    await session.close(500);
    await target.stop();
  }
});

test('a status, a short buffer and a bad timeout reach done as KbtpErrors, after the call returned', async () => {
  const { session, target } = await openInProcessSession(512, 16, 4);
  try {
    const unbound = await loadInto(session, 9n, new Uint8Array(512));
    assert.instance(unbound.error, KbtpStatusError);
    assert.is((unbound.error as KbtpStatusError).statusName, 'NOT_VALID');
    assert.ok(unbound.afterReturn);
    await session.allocStore(4n, new Uint8Array(400), { seal: true });
    const short = await loadInto(session, 4n, new Uint8Array(100));
    assert.is((short.error as KbtpStatusError).statusName, 'LENGTH_ERROR');
    const bad = await loadInto(session, 4n, new Uint8Array(512), { timeoutMs: 0 });
    assert.instance(bad.error, KbtpError);
    assert.is((bad.error as KbtpError).code, 'KBTP_USAGE');
    assert.ok(bad.afterReturn, 'a call that cannot start still answers after it returned');
    const fine = await loadInto(session, 4n, new Uint8Array(512));
    assert.is(fine.error, undefined, 'the session is unharmed');
    assert.is(fine.dataLength, 400);
  } finally {
    await session.close(500);
    await target.stop();
  }
});

test('after close, done hears KBTP_CLOSED', async () => {
  const { session, target } = await openInProcessSession(512, 16, 4);
  await session.close(500);
  const closed = await loadInto(session, 1n, new Uint8Array(512));
  assert.is((closed.error as KbtpError).code, 'KBTP_CLOSED');
  assert.ok(closed.afterReturn);
  await target.stop();
});

test.run();
