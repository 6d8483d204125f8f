// loadMany / storeMany: a batch posted together, answered per slot, one promise for the batch.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { BatchError, EXIT_STATUS, KbtpError, KbtpStatusError } from '../../host/kbtp/index.ts';
import type { StreamChannel } from '../../host/rnic/verbs.ts';
import type { LinkedChannel } from '../../host/rnic/linked-channel.ts';
import { fpduPadding, MPA_LENGTH_FIELD } from '../../host/rnic/wire/mpa.ts';
import { CRC_LENGTH } from '../../host/rnic/wire/crc.ts';
import { RdmapOpcode } from '../../host/rnic/wire/rdmap.ts';
import { openInProcessSession } from './in-process-session.ts';

const pair = () => openInProcessSession(512, 32, 4);

test('storeMany then loadMany move every block, more blocks than credits', async () => {
  const { session, target } = await pair();
  try {
    const handles = Array.from({ length: 10 }, (_, i) => BigInt(i));
    for (const handle of handles) await session.allocStore(handle, new Uint8Array(512));
    const blocks = handles.map((_, i) => new Uint8Array(300 + i).map((__, j) => (i * 7 + j) & 0xff));
    await session.storeMany(handles, blocks);
    const into = handles.map(() => new Uint8Array(512));
    const lengths = new Uint32Array(handles.length);
    await session.loadMany(handles, into, { allowUnsealed: true, lengths });
    for (let i = 0; i < handles.length; i++) {
      assert.is(lengths[i], 300 + i, `length of block ${i}`);
      assert.equal([...into[i]!.subarray(0, 300 + i)], [...blocks[i]!], `block ${i}`);
    }
  } finally {
    await session.close(500);
    await target.stop();
  }
});

/** Stands between the initiator and its stream, counting the RDMA Read Responses it sends (each write holds whole FPDUs). */
function countReadResponses(channel: LinkedChannel): { wrap: StreamChannel; readResponses: () => number } {
  let readResponses = 0;
  const wrap = new Proxy(channel, {
    get(target, property) {
      if (property === 'write') {
        return (chunks: readonly Uint8Array[], count: number, done: unknown) => {
          const bytes = Buffer.concat(chunks.slice(0, count));
          for (let at = 0; at + MPA_LENGTH_FIELD + 2 <= bytes.length; ) {
            const ulpduLength = (bytes[at]! << 8) | bytes[at + 1]!;
            if ((bytes[at + 3]! & 0x0f) === RdmapOpcode.RdmaReadResponse) readResponses++;
            at += MPA_LENGTH_FIELD + ulpduLength + fpduPadding(ulpduLength) + CRC_LENGTH;
          }
          return (target.write as (...args: unknown[]) => void).call(target, chunks, count, done);
        };
      }
      const value = Reflect.get(target, property, target) as unknown;
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return { wrap, readResponses: () => readResponses };
}

test('storeMany sends blocks inline when they fit Max Inline (one round trip), larger ones by RDMA Read', async () => {
  let counter: ReturnType<typeof countReadResponses> | undefined;
  // The in-process target's Max Inline is 64 octets.
  const { session, target } = await openInProcessSession(512, 32, 4, (channel) => {
    counter = countReadResponses(channel);
    return counter.wrap;
  });
  try {
    const handles = Array.from({ length: 6 }, (_, i) => BigInt(i));
    for (const handle of handles) await session.allocStore(handle, new Uint8Array(512));
    const small = handles.map((_, i) => new Uint8Array(64 - i).map((__, j) => (i * 5 + j) & 0xff));
    const before = counter!.readResponses();
    await session.storeMany(handles, small);
    assert.is(counter!.readResponses() - before, 0, 'no RDMA Read for inline blocks');
    const large = handles.map((_, i) => new Uint8Array(65 + i).map((__, j) => (i * 3 + j) & 0xff));
    await session.storeMany(handles.slice(0, 3), large.slice(0, 3));
    assert.is(counter!.readResponses() - before, 3, 'one RDMA Read per block over Max Inline');
    const into = handles.map(() => new Uint8Array(512));
    const lengths = new Uint32Array(handles.length);
    await session.loadMany(handles, into, { allowUnsealed: true, lengths });
    for (let i = 0; i < handles.length; i++) {
      const stored = i < 3 ? large[i]! : small[i]!;
      assert.is(lengths[i], stored.length);
      assert.equal([...into[i]!.subarray(0, stored.length)], [...stored], `block ${i}`);
    }
  } finally {
    await session.close(500);
    await target.stop();
  }
});

test('a batch names the requests that failed; the others complete', async () => {
  const { session, target } = await pair();
  try {
    await session.allocStore(1n, new Uint8Array(512).fill(9));
    const into = [new Uint8Array(512), new Uint8Array(512), new Uint8Array(512)];
    const error = await session.loadMany([1n, 40n, 1n], into, { allowUnsealed: true }).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.instance(error, BatchError);
    const failures = (error as BatchError).failures;
    assert.equal(
      failures.map((f) => [f.index, f.handle]),
      [[1, 40n]],
    );
    assert.match((error as BatchError).message, /NOT_VALID/);
    // A status error like any other: callers that handle KbtpStatusError handle batches too.
    assert.instance(error, KbtpStatusError);
    assert.instance(error, KbtpError);
    assert.is((error as BatchError).code, 'KBTP_STATUS');
    assert.is((error as BatchError).exitCode, EXIT_STATUS);
    assert.is((error as BatchError).status, failures[0]!.status);
    assert.is((error as BatchError).name, 'BatchError');
    assert.is(into[0]![0], 9);
    assert.is(into[2]![511], 9);
    // The session is still good.
    await session.loadMany([1n], [into[1]!], { allowUnsealed: true });
    assert.is(into[1]![100], 9);
  } finally {
    await session.close(500);
    await target.stop();
  }
});

test('a batch keeps to its call options: a bad shape is a usage error; an abort posts nothing more, writes no buffer and frees every slot', async () => {
  const { session, target } = await pair();
  try {
    const handles = Array.from({ length: 12 }, (_, i) => BigInt(i));
    for (const handle of handles) await session.allocStore(handle, new Uint8Array(512).fill(7));
    const mismatch = await session.loadMany(handles, [new Uint8Array(512)]).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.is((mismatch as KbtpError).code, 'KBTP_USAGE');
    const controller = new AbortController();
    const into = handles.map(() => new Uint8Array(512));
    // The first requests leave at once (as many as there are slots); the rest wait for slots.
    const pending = session.loadMany(handles, into, { allowUnsealed: true, signal: controller.signal });
    controller.abort(new Error('the caller moved on'));
    const aborted = await pending.then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.is((aborted as KbtpError).code, 'KBTP_ABORTED');
    // A second batch of all twelve needs every slot back: it completes only once the aborted
    // batch's requests were answered and gave theirs up, and it posts its own requests only.
    const again = handles.map(() => new Uint8Array(512));
    await session.loadMany(handles, again, { allowUnsealed: true, timeoutMs: 30_000 });
    for (const block of again) assert.is(block[511], 7);
    // Batches reuse their records once ended with nothing on the wire (the aborted one too, once
    // its late answers came back): later batches still land only in their own buffers.
    await session.storeMany(
      handles,
      handles.map((_, i) => new Uint8Array(512).fill(20 + i)),
    );
    for (let round = 0; round < 3; round++) {
      const later = handles.map(() => new Uint8Array(512));
      await session.loadMany(handles, later, { allowUnsealed: true });
      for (let i = 0; i < later.length; i++)
        assert.ok(
          later[i]!.every((octet) => octet === 20 + i),
          `round ${round}, block ${i}`,
        );
    }
    for (const block of into)
      assert.ok(
        block.every((octet) => octet === 0),
        "nothing landed in the aborted batch's buffers",
      );
  } finally {
    await session.close(500);
    await target.stop();
  }
});

test('a batch whose session fails rejects', async () => {
  const { session, target, channel } = await pair();
  await session.allocStore(2n, new Uint8Array(512));
  const pending = session.loadMany(
    [2n, 2n, 2n, 2n, 2n, 2n],
    Array.from({ length: 6 }, () => new Uint8Array(512)),
    { allowUnsealed: true },
  );
  channel.destroy(); // the connection drops before the batch's requests are delivered
  const error = await pending.then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.instance(error, KbtpError);
  assert.not.instance(error, BatchError, 'a transport failure, not KBTP statuses');
  assert.is((error as KbtpError).code, 'KBTP_TRANSPORT');
  await session.close(200).catch(() => undefined);
  await target.stop();
});

test.run();
