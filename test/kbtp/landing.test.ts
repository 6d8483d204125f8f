// registerLoadBuffer: LOADs into a registered buffer land there directly (the target's RDMA Write
// is placed in it), through load({ into }), loadInto and loadMany; nothing is copied into it
// afterwards. A buffer shorter than the block still goes through staging (LENGTH_ERROR for a
// longer block); a buffer cannot be deregistered while a LOAD into it waits for its answer. A
// STORE of a registered buffer is sent from the buffer itself (inline or by RDMA Read).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { KbtpError, KbtpStatusError } from '../../host/kbtp/errors.ts';
import { connect, type KbtpSession } from '../../host/kbtp/initiator.ts';
import { spawnTarget } from '../../host/bench/spawn.ts';
import { openInProcessSession } from './in-process-session.ts';

const BLOCK = 65536;

function pattern(length: number, seed: number): Uint8Array {
  return new Uint8Array(length).map((_, i) => (i * 31 + seed * 7) & 0xff);
}

/** A buffer whose own `set` counts the copies made into it (a typed-array copy into it goes through this method). */
function countingBuffer(length: number): { buffer: Uint8Array; copies: () => number } {
  const buffer = new Uint8Array(length);
  let copies = 0;
  const set = buffer.set.bind(buffer);
  Object.defineProperty(buffer, 'set', {
    value: (source: ArrayLike<number>, offset?: number) => {
      copies++;
      set(source, offset);
    },
  });
  return { buffer, copies: () => copies };
}

/** What `call` threw (undefined if it returned). */
function thrown(call: () => void): unknown {
  try {
    call();
  } catch (error) {
    return error;
  }
  return undefined;
}

function loadInto(session: KbtpSession, handle: bigint, into: Uint8Array): Promise<{ error: Error | undefined; dataLength: number }> {
  return new Promise((resolve) => session.loadInto(handle, into, (error, dataLength) => resolve({ error, dataLength })));
}

test('load({ into }), loadInto and loadMany place the block in a registered buffer, copying nothing into it', async () => {
  const { session, target } = await openInProcessSession(BLOCK, 16, 4);
  try {
    const blocks = [pattern(BLOCK, 1), pattern(BLOCK - 100, 2), pattern(300, 3)];
    for (let i = 0; i < blocks.length; i++) await session.allocStore(BigInt(i + 1), blocks[i]!, { seal: true });

    const single = countingBuffer(BLOCK);
    session.registerLoadBuffer(single.buffer);
    session.registerLoadBuffer(single.buffer); // again: no change
    const loaded = await session.load(1n, { into: single.buffer });
    assert.is(loaded.dataLength, BLOCK);
    assert.ok(loaded.data === single.buffer, 'data is the caller buffer');
    assert.equal(Buffer.compare(single.buffer, blocks[0]!), 0);
    const callback = await loadInto(session, 2n, single.buffer);
    assert.is(callback.error, undefined);
    assert.is(callback.dataLength, BLOCK - 100);
    assert.equal(Buffer.compare(single.buffer.subarray(0, BLOCK - 100), blocks[1]!), 0);
    assert.is(single.copies(), 0, 'the blocks were placed, not copied');

    const many = [countingBuffer(BLOCK), countingBuffer(BLOCK + 10), countingBuffer(BLOCK)];
    for (const { buffer } of many) session.registerLoadBuffer(buffer);
    const lengths = new Uint32Array(3);
    await session.loadMany(
      [3n, 1n, 2n],
      many.map(({ buffer }) => buffer),
      { lengths },
    );
    assert.equal([...lengths], [300, BLOCK, BLOCK - 100]);
    assert.equal(Buffer.compare(many[0]!.buffer.subarray(0, 300), blocks[2]!), 0);
    assert.equal(Buffer.compare(many[1]!.buffer.subarray(0, BLOCK), blocks[0]!), 0);
    assert.equal(Buffer.compare(many[2]!.buffer.subarray(0, BLOCK - 100), blocks[1]!), 0);
    for (const { copies } of many) assert.is(copies(), 0);

    // The same calls into an unregistered buffer copy the block out of the slot's staging area.
    const plain = countingBuffer(BLOCK);
    await session.load(1n, { into: plain.buffer });
    assert.is(plain.copies(), 1);
    assert.equal(Buffer.compare(plain.buffer, blocks[0]!), 0);
    session.deregisterLoadBuffer(single.buffer);
    await session.load(2n, { into: single.buffer });
    assert.is(single.copies(), 1, 'after deregistering, the block is copied again');
    assert.equal(Buffer.compare(single.buffer.subarray(0, BLOCK - 100), blocks[1]!), 0);
  } finally {
    await session.close(500);
    await target.stop();
  }
});

test('a registered buffer shorter than the block size goes through staging: a longer block is LENGTH_ERROR, a shorter one lands', async () => {
  const { session, target } = await openInProcessSession(BLOCK, 16, 4);
  try {
    await session.allocStore(1n, pattern(BLOCK, 4), { seal: true });
    await session.allocStore(2n, pattern(1000, 5), { seal: true });
    const short = new Uint8Array(4096);
    session.registerLoadBuffer(short);
    const error = await session.load(1n, { into: short }).then(
      () => undefined,
      (thrown: unknown) => thrown,
    );
    assert.instance(error, KbtpStatusError);
    assert.is((error as KbtpStatusError).statusName, 'LENGTH_ERROR');
    const fits = await session.load(2n, { into: short });
    assert.is(fits.dataLength, 1000);
    assert.equal(Buffer.compare(short.subarray(0, 1000), pattern(1000, 5)), 0);
  } finally {
    await session.close(500);
    await target.stop();
  }
});

test('a STORE from a registered buffer is sent from the buffer itself, inline or by RDMA Read; a part of it is copied', async () => {
  // Proof that nothing was copied at the call: the buffer changes right after store() returned,
  // before the request leaves (inline, at the end of the turn) or the target reads it (RDMA
  // Read), and the block stored is the changed one. A buffer not registered, or a part of a
  // registered one, is copied when the call is made, so the change does not reach the block.
  for (const maxInline of [BLOCK, 64]) {
    const { session, target } = await openInProcessSession(BLOCK, 16, 4, undefined, maxInline);
    try {
      const buffer = new Uint8Array(BLOCK);
      session.registerLoadBuffer(buffer);
      buffer.set(pattern(BLOCK, 10));
      const single = session.allocStore(1n, buffer, { seal: true });
      buffer.set(pattern(BLOCK, 11));
      await single;
      assert.equal(Buffer.compare((await session.load(1n)).data, pattern(BLOCK, 11)), 0, `allocStore() sent the buffer itself (Max Inline ${maxInline})`);

      await session.allocStore(2n, pattern(64, 1)); // bound, unsealed: storeMany stores into it
      buffer.set(pattern(BLOCK, 12));
      const batch = session.storeMany([2n], [buffer], { seal: true });
      buffer.set(pattern(BLOCK, 13));
      await batch;
      assert.equal(Buffer.compare((await session.load(2n)).data, pattern(BLOCK, 13)), 0, `storeMany sent the buffer itself (Max Inline ${maxInline})`);

      const part = buffer.subarray(0, BLOCK - 64);
      part.set(pattern(BLOCK - 64, 14));
      const copied = session.allocStore(3n, part, { seal: true });
      part.set(pattern(BLOCK - 64, 15));
      await copied;
      assert.equal(Buffer.compare((await session.load(3n)).data, pattern(BLOCK - 64, 14)), 0, `a part of the buffer was copied (Max Inline ${maxInline})`);

      // A STORE from the buffer holds it like a LOAD into it does.
      const pending = session.allocStore(4n, buffer, { seal: true });
      assert.match((thrown(() => session.deregisterLoadBuffer(buffer)) as Error).message, /1 request on the buffer waits/);
      await pending;
      session.deregisterLoadBuffer(buffer);
    } finally {
      await session.close(500);
      await target.stop();
    }
  }
});

test('deregisterLoadBuffer is refused while a LOAD into the buffer waits for its answer, allowed after it and after close', async () => {
  const { session, target } = await openInProcessSession(BLOCK, 16, 4);
  try {
    await session.allocStore(1n, pattern(BLOCK, 6), { seal: true });
    const buffer = new Uint8Array(BLOCK);
    session.registerLoadBuffer(buffer);
    const pending = loadInto(session, 1n, buffer);
    const refused = thrown(() => session.deregisterLoadBuffer(buffer));
    assert.instance(refused, KbtpError);
    assert.is((refused as KbtpError).code, 'KBTP_USAGE');
    assert.match((refused as Error).message, /1 request on the buffer waits for the target's answer/);
    assert.is((await pending).error, undefined);
    session.deregisterLoadBuffer(buffer);
    const unknown = thrown(() => session.deregisterLoadBuffer(buffer));
    assert.match((unknown as Error).message, /not registered/);

    // A LOAD still outstanding when the session ends no longer holds the buffer.
    session.registerLoadBuffer(buffer);
    const cut = loadInto(session, 1n, buffer);
    await session.close(500);
    await cut;
    session.deregisterLoadBuffer(buffer);
  } finally {
    await session.close(500);
    await target.stop();
  }
});

test('over RoCE as over iWARP an inline STORE from a registered buffer is one Send of two elements: the request in its slot, the block from the buffer', async () => {
  // The RC requester sends a gathered message from its elements (test/rnic/rc-gather), so a
  // RoCE session no longer copies the block into its slot at the call (session 21 did: the
  // requester then flattened every gathered Send into a new buffer of the message's length).
  const target = await spawnTarget({ blockSize: BLOCK, blocks: 16, workers: 1, credits: 4, sessions: 1, transport: 'roce', log: () => undefined });
  try {
    const session = await connect(`127.0.0.1:${target.port}`, { pipeline: 4, transport: 'roce' });
    try {
      assert.is(session.hello.maxInline, BLOCK);
      const qp = (session as unknown as { qp: { postSend(wr: { sgList?: Array<{ length: number }> }): void } }).qp;
      const post = qp.postSend.bind(qp);
      const sends: number[][] = [];
      qp.postSend = (wr) => {
        sends.push((wr.sgList ?? []).map((sge) => sge.length));
        post(wr);
      };
      const buffer = new Uint8Array(BLOCK);
      session.registerLoadBuffer(buffer);
      buffer.set(pattern(BLOCK, 20));
      await session.allocStore(1n, buffer, { seal: true });
      qp.postSend = post;
      assert.equal(Buffer.compare((await session.load(1n)).data, pattern(BLOCK, 20)), 0, 'the block stored');
      assert.is(sends.length, 1, 'one Send');
      assert.is(sends[0]!.length, 2, `a Send of elements ${sends[0]!.join(', ')}`);
      assert.is(sends[0]![1], BLOCK, 'the second element is the whole block');
      session.deregisterLoadBuffer(buffer);
    } finally {
      await session.close(500);
    }
  } finally {
    await target.stop(1000);
  }
});

test.run();
