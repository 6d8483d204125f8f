// A target places an inline STORE's data straight into its block once the first segment has
// said which (connection.ts steer, engine placeInline; issue 16, the STORE rows), and a STORE
// cut off on its way gives back the handle it held.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { randomBytes } from 'node:crypto';
import { openInProcessSession } from './in-process-session.ts';
import { connectChannel } from '../../host/kbtp/initiator.ts';
import { LinkedChannel } from '../../host/rnic/linked-channel.ts';
import type { StreamChannel } from '../../host/rnic/verbs.ts';

const BLOCK = 256 * 1024;

/** Whether `needle` occurs anywhere in the target's request contexts. */
function inRequestContexts(
  target: { engine: { bytes: Uint8Array }; context: { arena: { requestArea: { address: number; bytes: number } } } },
  needle: Uint8Array,
): boolean {
  const { address, bytes } = target.context.arena.requestArea;
  return Buffer.from(target.engine.bytes.buffer, address, bytes).indexOf(Buffer.from(needle)) >= 0;
}

test('a 256 KiB inline STORE reaches its block without its data passing through a request context', async () => {
  const { session, target } = await openInProcessSession(BLOCK, 8, 4, (channel) => channel, BLOCK);
  try {
    await session.allocStore(1n, randomBytes(BLOCK));
    const data = new Uint8Array(randomBytes(BLOCK));
    await session.store(1n, data, { seal: true });
    assert.equal((await session.load(1n)).data, data);
    // Without MPA CRC (this session's) the STORE is steered right after its header (work.ts
    // steerAt): none of its data lands in the context, the first segment's included.
    assert.not.ok(inRequestContexts(target, data.subarray(0, 4096)), "the first segment's data went to the block only");
    assert.not.ok(inRequestContexts(target, data.subarray(BLOCK - 4096)), 'the rest went to the block only');
    await session.close();
  } finally {
    await target.stop();
  }
});

/** Passes the initiator's writes through until one of a STORE's size, of which only `keep` octets go, then the stream breaks. */
function cutInsideStore(channel: LinkedChannel, keep: number): StreamChannel {
  return new Proxy(channel, {
    get(inner, property) {
      if (property === 'write') {
        return (chunks: readonly Uint8Array[], count: number, done: (() => void) | undefined) => {
          const bytes = Buffer.concat(chunks.slice(0, count));
          if (bytes.length < BLOCK) {
            inner.write(chunks, count, done);
            return;
          }
          inner.write([bytes.subarray(0, keep)], 1, undefined);
          setTimeout(() => inner.destroy(), 20);
        };
      }
      const value = Reflect.get(inner, property, inner) as unknown;
      return typeof value === 'function' ? value.bind(inner) : value;
    },
  });
}

test('a STORE whose stream breaks after its first segment gives back its handle and credit', async () => {
  const { session, target } = await openInProcessSession(BLOCK, 8, 4, (channel) => channel, BLOCK);
  const before = new Uint8Array(randomBytes(BLOCK));
  await session.allocStore(1n, before);
  // A second session of the same tenant sends a STORE of handle 1 and is cut off 100,000 octets in.
  const [targetEnd, initiatorEnd] = LinkedChannel.pair();
  const served = target.serve(targetEnd);
  const cut = await connectChannel(cutInsideStore(initiatorEnd, 100_000), { tenant: 'local', pipeline: 4, callTimeoutMs: 2000 });
  await served;
  try {
    const failed = await cut.store(1n, new Uint8Array(randomBytes(BLOCK))).then(
      () => 'stored',
      (error: unknown) => (error instanceof Error ? error.message : String(error)),
    );
    assert.is.not(failed, 'stored');
    // Were the handle still held, this STORE would wait for it until its call timed out.
    const after = new Uint8Array(randomBytes(BLOCK));
    await session.store(1n, after, { seal: true, timeoutMs: 2000 });
    assert.equal((await session.load(1n)).data, after);
    assert.is(target.engine.readEntry(1n)?.dataLength, BLOCK);
    await session.close();
  } finally {
    await cut.abandon().catch(() => undefined);
    // A connection that still held the STORE would never finish: do not wait for it forever.
    await Promise.race([target.stop(), new Promise((resolve) => setTimeout(resolve, 3000).unref())]);
  }
});

test.run();
