// An engine whose memory runs past 2 GiB: addresses from there on are above int32, so the host's
// word indexes into them must be unsigned. `kbtp target` with Max Inline 256 KiB at the default
// credits and sessions (2 x 64 x 64 request contexts of 256 KiB) puts the handle stamps and the
// LRU clock there; a signed shift made every STORE's connection end in an internal error.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import * as K from '../../assembly/kbtp-constants.ts';
import { rig } from '../support/engine.ts';
import * as S from '../../assembly/struct-offsets.ts';
import { statusName, encodeRequest, decodeCompletion } from '../../host/kbtp/wire/messages.ts';

const BLOCK = 256 * 1024;

test('an engine laid out past 2 GiB: stamps, generation marks, entries, draining, inline STOREs (steered too) and LOADs work there', () => {
  const r = rig({
    blockSize: BLOCK,
    blockCount: 4,
    handleBase: 0n,
    handleCount: 16,
    maxInline: BLOCK,
    threads: 1,
    sessionsPerThread: 2,
    // 8,200 contexts of 256 KiB and a header: the request area alone ends past 2^31.
    requestsPerThread: 8200,
    tenants: [{ name: 'a', storeRange: { first: 0n, count: 16n }, loadScope: { first: 0n, count: 16n }, quota: 4 }],
  });
  const { engine, arena } = r;
  assert.ok(engine.layout.lruClock > 2 ** 31, `the LRU clock is at ${engine.layout.lruClock}`);
  assert.ok(engine.layout.handleStamps > 2 ** 31 && engine.layout.generationMarks > 2 ** 31);

  engine.stamp(3);
  engine.stamp(5);
  assert.is(engine.stampOf(3), 1);
  assert.is(engine.stampOf(5), 2);
  engine.setGenerationMark(2, 7);
  assert.is(engine.generationMark(2), 7);

  const session = arena.openSession({ tenant: 0, capabilities: 0, credits: 4 });
  const data = Uint8Array.from({ length: BLOCK }, (_, i) => (i * 13 + 5) & 0xff);
  const stored = r.send(session, { opcode: K.OPCODE_ALLOC_STORE, flags: K.FLAG_INLINE | K.FLAG_SEAL, handle: 9n, inline: data });
  assert.is(statusName(stored.status), 'SUCCESS');
  assert.ok(engine.layout.pool + Number(stored.blockOffset) > 2 ** 31);
  const into = new Uint8Array(BLOCK);
  const loaded = r.send(session, { opcode: K.OPCODE_LOAD, handle: 9n, descriptor: { stag: r.mover.register(into), taggedOffset: 0n, length: BLOCK } });
  assert.is(statusName(loaded.status), 'SUCCESS');
  assert.equal(into, data);
  assert.is(engine.entryAddress(9n), engine.layout.table + 9 * S.ENTRY_SIZE);

  // An inline STORE steered on its first segment: the rest of its data goes to the block, whose address is past 2^31.
  const again = data.map((b) => b ^ 0x5a);
  const unsealed = r.send(session, { opcode: K.OPCODE_ALLOC_STORE, flags: K.FLAG_INLINE, handle: 10n, inline: data.subarray(0, 10) });
  assert.is(statusName(unsealed.status), 'SUCCESS');
  const steered = encodeRequest({ opcode: K.OPCODE_STORE, flags: K.FLAG_INLINE, requestId: 78n, handle: 10n, inline: again });
  const request = arena.acquireRequest(session);
  const received = K.HEADER_SIZE + K.DESCRIPTOR_SIZE + 100;
  engine.bytes.set(steered.subarray(0, received), arena.messageAddress(request));
  const address = arena.placeInline(request, received);
  assert.is(address, engine.layout.pool + Number(unsealed.blockOffset) + 100);
  engine.bytes.set(steered.subarray(received), address);
  arena.arrived(request, steered.length);
  assert.is(arena.run(request), S.ACTION_SEND);
  assert.is(statusName(decodeCompletion(arena.completion(request).slice()).status), 'SUCCESS');
  arena.releaseRequest(request);
  const back = new Uint8Array(BLOCK);
  const reloaded = r.send(session, {
    opcode: K.OPCODE_LOAD,
    flags: K.FLAG_ALLOW_UNSEALED,
    handle: 10n,
    descriptor: { stag: r.mover.register(back), taggedOffset: 0n, length: BLOCK },
  });
  assert.is(statusName(reloaded.status), 'SUCCESS');
  assert.equal(back, again);

  engine.startDraining();
  assert.ok(engine.draining);
});

test.run();
