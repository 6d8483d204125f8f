// placeInline(): an inline STORE whose first segment passes every check has the rest of its data
// placed by the transport straight into its block (issue 16, the STORE rows); everything else
// runs on arrival as before.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import * as K from '../../assembly/kbtp-constants.ts';
import * as S from '../../assembly/struct-offsets.ts';
import { rig, type Rig } from '../support/engine.ts';
import { encodeRequest, decodeCompletion, statusName } from '../../host/kbtp/wire/messages.ts';
import { auditPool } from '../../host/engine/audit.ts';

const BLOCK = 256;
const PREFIX = K.HEADER_SIZE + K.DESCRIPTOR_SIZE;

type Placing = Rig & { alpha: number; beta: number };

function setup(): Placing {
  const r = rig({
    blockSize: BLOCK,
    blockCount: 8,
    handleBase: 1000n,
    handleCount: 32,
    maxInline: 200,
    threads: 1,
    tenants: [{ name: 'alpha', storeRange: { first: 1000n, count: 10n }, loadScope: { first: 1000n, count: 32n }, quota: 4 }],
  });
  return {
    ...r,
    alpha: r.arena.openSession({ tenant: 0, capabilities: 0, credits: 4 }),
    beta: r.arena.openSession({ tenant: 0, capabilities: 0, credits: 4 }),
  };
}

function data(length: number, seed: number): Uint8Array {
  return Uint8Array.from({ length }, (_, i) => (i * 7 + seed) & 0xff);
}

/** Binds `handle` (unsealed, so that STOREs may follow) and returns its block's address. */
function bind(r: Placing, handle: bigint): number {
  const done = r.send(r.alpha, { opcode: K.OPCODE_ALLOC_STORE, flags: K.FLAG_INLINE, handle, inline: data(10, 99) });
  assert.is(statusName(done.status), 'SUCCESS');
  return r.engine.layout.pool + Number(done.blockOffset);
}

/** A request context holding the first `received` octets of `message`, the rest of its message area 0xee. */
function firstSegment(r: Rig, session: number, message: Uint8Array, received: number): number {
  const request = r.arena.acquireRequest(session);
  const at = r.arena.messageAddress(request);
  r.engine.bytes.fill(0xee, at, at + message.length);
  r.engine.bytes.set(message.subarray(0, received), at);
  return request;
}

/** A LOAD of `handle` by session beta, placed in a context of its own and not run yet. */
function placedLoad(r: Placing, handle: bigint, requestId: bigint): number {
  const load = r.arena.acquireRequest(r.beta);
  r.arena.place(
    load,
    encodeRequest({ opcode: K.OPCODE_LOAD, flags: K.FLAG_ALLOW_UNSEALED, requestId, handle, descriptor: { stag: 1, taggedOffset: 0n, length: 256 } }),
  );
  return load;
}

function loaded(r: Placing, handle: bigint, length: number): Uint8Array {
  const destination = new Uint8Array(length);
  const done = r.send(r.beta, {
    opcode: K.OPCODE_LOAD,
    flags: K.FLAG_ALLOW_UNSEALED,
    handle,
    descriptor: { stag: r.mover.register(destination), taggedOffset: 0n, length },
  });
  assert.is(statusName(done.status), 'SUCCESS');
  return destination;
}

test('an inline STORE passed on its first segment: the rest goes to the block, run() adds the first share and answers', () => {
  const r = setup();
  const block = bind(r, 1001n);
  const payload = data(150, 3);
  const message = encodeRequest({ opcode: K.OPCODE_STORE, flags: K.FLAG_INLINE, requestId: 5n, handle: 1001n, inline: payload });
  const received = PREFIX + 40;
  const request = firstSegment(r, r.alpha, message, received);

  const address = r.arena.placeInline(request, received);
  assert.is(address, block + 40, 'message octet `received` is data octet 40 of the block');
  assert.is(r.arena.placingLength(request), message.length - received);
  assert.ok(r.arena.placing(request));
  assert.is(r.arena.outstanding(r.alpha), 1, 'the credit is taken');
  const load = placedLoad(r, 1001n, 6n);
  assert.is(r.arena.run(load), S.ACTION_RETRY, 'the handle is held while the data arrives');

  // The transport places the rest in the block; the context never sees it.
  r.engine.bytes.set(message.subarray(received), address);
  const context = r.arena.messageAddress(request);
  assert.ok(r.engine.bytes.subarray(context + received, context + message.length).every((b) => b === 0xee));
  r.arena.arrived(request, message.length);
  assert.is(r.arena.run(request), S.ACTION_SEND);
  const completion = decodeCompletion(r.arena.completion(request).slice());
  assert.is(statusName(completion.status), 'SUCCESS');
  assert.is(completion.dataLength, 150);
  assert.is(r.arena.outstanding(r.alpha), 0);
  r.arena.releaseRequest(request);
  assert.is(r.arena.run(load), S.ACTION_DATA_AND_SEND, 'the handle is free again');
  r.arena.complete(load, true);
  r.arena.releaseRequest(load);
  assert.equal(loaded(r, 1001n, 150), payload);
  assert.is(r.engine.readEntry(1001n)?.dataLength, 150);
  assert.ok(auditPool(r.engine).ok);
});

test('a message placeInline() does not take runs on arrival exactly as before', () => {
  const r = setup();
  bind(r, 1001n);
  const cases: Array<{ why: string; message: Uint8Array; received: number; status: string }> = [
    {
      why: 'a STORE of a handle that is not VALID',
      message: encodeRequest({ opcode: K.OPCODE_STORE, flags: K.FLAG_INLINE, requestId: 1n, handle: 1002n, inline: data(100, 1) }),
      received: PREFIX + 10,
      status: 'NOT_VALID',
    },
    {
      why: 'a STORE over Max Inline',
      message: encodeRequest({ opcode: K.OPCODE_STORE, flags: K.FLAG_INLINE, requestId: 2n, handle: 1001n, inline: data(210, 1) }),
      received: PREFIX + 10,
      status: 'LENGTH_ERROR',
    },
    {
      why: 'an ALLOC_STORE (its block comes from the ring on arrival)',
      message: encodeRequest({ opcode: K.OPCODE_ALLOC_STORE, flags: K.FLAG_INLINE, requestId: 3n, handle: 1003n, inline: data(100, 1) }),
      received: PREFIX + 10,
      status: 'SUCCESS',
    },
    {
      why: 'a first segment that ends inside the Data Descriptor',
      message: encodeRequest({ opcode: K.OPCODE_STORE, flags: K.FLAG_INLINE, requestId: 4n, handle: 1001n, inline: data(100, 1) }),
      received: K.HEADER_SIZE + 4,
      status: 'SUCCESS',
    },
  ];
  for (const { why, message, received, status } of cases) {
    const request = firstSegment(r, r.alpha, message, received);
    assert.is(r.arena.placeInline(request, received), 0, why);
    assert.not.ok(r.arena.placing(request), why);
    assert.is(r.arena.outstanding(r.alpha), 0, `${why}: no credit held`);
    r.arena.place(request, message);
    assert.is(r.arena.run(request), S.ACTION_SEND, why);
    assert.is(statusName(decodeCompletion(r.arena.completion(request).slice()).status), status, why);
    r.arena.releaseRequest(request);
  }

  // A STORE that finds the handle held waits for it on arrival, holding nothing meanwhile.
  const load = placedLoad(r, 1001n, 7n);
  assert.is(r.arena.run(load), S.ACTION_DATA_AND_SEND);
  const payload = data(100, 5);
  const message = encodeRequest({ opcode: K.OPCODE_STORE, flags: K.FLAG_INLINE, requestId: 8n, handle: 1001n, inline: payload });
  const request = firstSegment(r, r.alpha, message, PREFIX + 10);
  assert.is(r.arena.placeInline(request, PREFIX + 10), 0);
  assert.is(r.arena.outstanding(r.alpha), 0);
  r.arena.place(request, message);
  assert.is(r.arena.run(request), S.ACTION_RETRY);
  r.arena.complete(load, true);
  r.arena.releaseRequest(load);
  assert.is(r.arena.run(request), S.ACTION_SEND);
  assert.is(statusName(decodeCompletion(r.arena.completion(request).slice()).status), 'SUCCESS');
  r.arena.releaseRequest(request);
  assert.equal(loaded(r, 1001n, 100), payload);
});

test('a PLACING STORE that never arrives whole gives back credit and handle; one that ends short is INVALID_REQUEST', () => {
  const r = setup();
  bind(r, 1001n);
  const before = r.engine.readEntry(1001n);
  const message = encodeRequest({ opcode: K.OPCODE_STORE, flags: K.FLAG_INLINE, requestId: 1n, handle: 1001n, inline: data(150, 8) });

  const broken = firstSegment(r, r.alpha, message, PREFIX + 20);
  assert.ok(r.arena.placeInline(broken, PREFIX + 20) !== 0);
  assert.is(r.arena.complete(broken, false), S.ACTION_NONE, 'the stream failed: no COMPLETION');
  assert.not.ok(r.arena.placing(broken));
  assert.is(r.arena.outstanding(r.alpha), 0);
  assert.equal(r.engine.readEntry(1001n), before, 'the entry is as it was');
  r.arena.releaseRequest(broken);

  const short = firstSegment(r, r.alpha, message, PREFIX + 20);
  assert.ok(r.arena.placeInline(short, PREFIX + 20) !== 0);
  r.arena.arrived(short, PREFIX + 100);
  assert.is(r.arena.run(short), S.ACTION_SEND);
  assert.is(statusName(decodeCompletion(r.arena.completion(short).slice()).status), 'INVALID_REQUEST');
  assert.is(r.arena.outstanding(r.alpha), 0);
  assert.equal(r.engine.readEntry(1001n), before);
  r.arena.releaseRequest(short);

  // Nothing stayed held: the next STORE of the handle goes through.
  const again = r.send(r.alpha, { opcode: K.OPCODE_STORE, flags: K.FLAG_INLINE, handle: 1001n, inline: data(60, 2) });
  assert.is(statusName(again.status), 'SUCCESS');
  assert.equal(loaded(r, 1001n, 60), data(60, 2));
});

test.run();
