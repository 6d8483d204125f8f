import { test } from 'uvu';
import * as assert from 'uvu/assert';
import * as K from '../../assembly/kbtp-constants.ts';
import * as S from '../../assembly/struct-offsets.ts';
import { rig, type Rig } from '../support/engine.ts';
import { encodeRequest, decodeCompletion, statusName } from '../../host/kbtp/wire/messages.ts';
import { auditPool } from '../../host/engine/audit.ts';

const BLOCK = 256;

function setup(): Rig & { alpha: number; beta: number; gamma: number } {
  const r = rig({
    blockSize: BLOCK,
    blockCount: 8,
    handleBase: 1000n,
    handleCount: 32,
    maxInline: 128,
    threads: 1,
    partitions: [{ blocks: 2 }],
    tenants: [
      { name: 'alpha', storeRange: { first: 1000n, count: 10n }, loadScope: { first: 1000n, count: 32n }, quota: 3 },
      { name: 'beta', storeRange: { first: 1010n, count: 10n }, loadScope: { first: 1010n, count: 10n }, quota: 3 },
      { name: 'gamma', storeRange: { first: 1020n, count: 10n }, loadScope: { first: 1000n, count: 32n }, quota: 2, partition: 0 },
    ],
  });
  return {
    ...r,
    alpha: r.arena.openSession({ tenant: 0, capabilities: 0, credits: 4 }),
    beta: r.arena.openSession({ tenant: 1, capabilities: 0, credits: 4 }),
    gamma: r.arena.openSession({ tenant: 2, capabilities: K.CAP_DIRECT_ALLOC, credits: 4 }),
  };
}

/** Everything a request may change: ring descriptors, tenants, locks, block homes, rings, table, pool. */
function snapshot(r: Rig): Buffer {
  const { layout, bytes } = r.engine;
  const firstRing = layout.rings[0]?.descriptor ?? 0;
  return Buffer.concat([bytes.slice(firstRing, layout.sessions), bytes.slice(layout.handleLocks, layout.totalBytes)]);
}

function inline(text: string): Uint8Array {
  return new TextEncoder().encode(text);
}

function store(r: Rig, session: number, handle: bigint, text: string, flags = K.FLAG_SEAL) {
  return r.send(session, { opcode: K.OPCODE_ALLOC_STORE, flags: flags | K.FLAG_INLINE, handle, inline: inline(text) });
}

function expectStatus(name: string, actual: number): void {
  assert.is(statusName(actual), name);
}

test('ALLOC_STORE, LOAD, STORE, FREE: data and completion fields as draft 6.1-6.4 and kbtp-v1 section 11 say', () => {
  const r = setup();
  const stored = store(r, r.alpha, 1001n, 'hello blocks', 0);
  expectStatus('SUCCESS', stored.status);
  assert.equal([stored.generation, stored.dataLength, stored.requestOpcode, stored.handle], [2, 12, K.OPCODE_ALLOC_STORE, 1001n]);
  assert.equal(r.engine.readEntry(1001n), { flags: K.ENTRY_VALID, generation: 2, dataLength: 12, blockOffset: stored.blockOffset });

  // Mapped store through the read path, then seal.
  const source = inline('rewritten through RDMA Read');
  const sourceStag = r.mover.register(source);
  const mapped = r.send(r.alpha, {
    opcode: K.OPCODE_STORE,
    flags: K.FLAG_SEAL,
    handle: 1001n,
    descriptor: { stag: sourceStag, taggedOffset: 0n, length: source.length },
  });
  expectStatus('SUCCESS', mapped.status);
  assert.equal(r.engine.readEntry(1001n), { flags: K.ENTRY_VALID | K.ENTRY_SEALED, generation: 2, dataLength: source.length, blockOffset: stored.blockOffset });

  // LOAD writes exactly Data Length octets and no more.
  const destination = new Uint8Array(64).fill(0xee);
  const loaded = r.send(r.alpha, {
    opcode: K.OPCODE_LOAD,
    flags: K.FLAG_INVALIDATE,
    handle: 1001n,
    descriptor: { stag: r.mover.register(destination), taggedOffset: 0n, length: 64 },
  });
  expectStatus('SUCCESS', loaded.status);
  assert.is(new TextDecoder().decode(destination.subarray(0, source.length)), 'rewritten through RDMA Read');
  assert.ok(destination.subarray(source.length).every((b) => b === 0xee));

  const freed = r.send(r.alpha, { opcode: K.OPCODE_FREE, handle: 1001n });
  expectStatus('SUCCESS', freed.status);
  assert.equal([freed.generation, freed.dataLength, freed.blockOffset], [3, 0, stored.blockOffset]);
  assert.is(r.engine.tenantUsage(0), 0);
  assert.ok(auditPool(r.engine).ok);
});

test('INVALIDATE asks for Send with Invalidate of the Data Descriptor STag', () => {
  const r = setup();
  store(r, r.alpha, 1000n, 'x');
  const request = r.arena.acquireRequest(r.alpha);
  r.arena.place(
    request,
    encodeRequest({
      opcode: K.OPCODE_LOAD,
      flags: K.FLAG_INVALIDATE,
      requestId: 9n,
      handle: 1000n,
      descriptor: { stag: 0x4242_4200, taggedOffset: 0n, length: 16 },
    }),
  );
  // A LOAD's COMPLETION is ready with its Write; complete() then only releases the handle.
  assert.is(r.arena.run(request), S.ACTION_DATA_AND_SEND);
  assert.is(r.arena.invalidateStag(request), 0x4242_4200);
  assert.is(r.arena.outstanding(r.alpha), 0, 'the credit returns with the COMPLETION');
  assert.is(statusName(decodeCompletion(r.arena.completion(request).slice()).status), 'SUCCESS');
  const free = r.arena.acquireRequest(r.alpha);
  r.arena.place(free, encodeRequest({ opcode: K.OPCODE_FREE, requestId: 10n, handle: 1000n }));
  assert.is(r.arena.run(free), S.ACTION_RETRY, 'the handle is held until the Write is done');
  assert.is(r.arena.complete(request, true), S.ACTION_NONE);
  assert.is(r.arena.run(free), S.ACTION_SEND);
  r.arena.releaseRequest(free);
  r.arena.releaseRequest(request);
});

test('malformed requests get INVALID_REQUEST and change nothing', () => {
  const r = setup();
  store(r, r.alpha, 1002n, 'keep me');
  const base = { requestId: 1n, handle: 1002n };
  const good = encodeRequest({ ...base, opcode: K.OPCODE_LOAD, descriptor: { stag: 1, taggedOffset: 0n, length: 8 } });
  const cases: Array<[string, Uint8Array]> = [];
  const mutate = (name: string, edit: (m: Uint8Array) => void, from = good): void => {
    const m = from.slice();
    edit(m);
    cases.push([name, m]);
  };
  mutate('version 2', (m) => {
    m[0] = 2;
  });
  mutate('version 0', (m) => {
    m[0] = 0;
  });
  mutate('unknown opcode', (m) => {
    m[1] = 0x15;
  });
  mutate('COMPLETION sent by an initiator', (m) => {
    m[1] = K.OPCODE_COMPLETION;
  });
  mutate('second HELLO', (m) => {
    m[1] = K.OPCODE_HELLO;
  });
  mutate('SEAL on LOAD', (m) => {
    m[3] = K.FLAG_SEAL;
  });
  mutate('non-zero Status', (m) => {
    m[23] = 1;
  });
  cases.push(['one octet short', good.slice(0, good.length - 1)]);
  cases.push(['one octet long', new Uint8Array([...good, 0])]);
  cases.push(['header only', good.slice(0, 24)]);
  cases.push([
    'inline length disagrees',
    encodeRequest({ ...base, opcode: K.OPCODE_STORE, flags: K.FLAG_INLINE, descriptor: { stag: 0, taggedOffset: 0n, length: 5 }, inline: inline('abc') }),
  ]);
  cases.push([
    'inline with an STag',
    encodeRequest({ ...base, opcode: K.OPCODE_STORE, flags: K.FLAG_INLINE, descriptor: { stag: 7, taggedOffset: 0n, length: 3 }, inline: inline('abc') }),
  ]);
  cases.push(['INVALIDATE with INLINE', encodeRequest({ ...base, opcode: K.OPCODE_STORE, flags: K.FLAG_INLINE | K.FLAG_INVALIDATE, inline: inline('abc') })]);
  cases.push(['FREE with SEAL', encodeRequest({ ...base, opcode: K.OPCODE_FREE, flags: K.FLAG_SEAL })]);
  cases.push(['GOODBYE with flags', encodeRequest({ ...base, opcode: K.OPCODE_GOODBYE, flags: 1 })]);
  const before = snapshot(r);
  for (const [name, message] of cases) {
    const request = r.arena.acquireRequest(r.alpha);
    r.arena.place(request, message);
    assert.is(r.arena.run(request), S.ACTION_SEND, name);
    const completion = decodeCompletion(r.arena.completion(request).slice());
    r.arena.releaseRequest(request);
    assert.is(statusName(completion.status), 'INVALID_REQUEST', name);
    assert.is(completion.requestId, 1n, `${name}: Request ID echoed`);
    // The handle is served, so its entry's current fields come back (kbtp-v1 section 11).
    assert.equal([completion.generation, completion.dataLength], [2, 7], name);
    assert.is(r.arena.outstanding(r.alpha), 0, `${name}: no credit kept`);
  }
  assert.ok(snapshot(r).equals(before), 'nothing changed');

  // Shorter than a header: all zeros (nothing to echo).
  const request = r.arena.acquireRequest(r.alpha);
  r.arena.place(request, good.slice(0, 10));
  assert.is(r.arena.run(request), S.ACTION_SEND);
  const short = decodeCompletion(r.arena.completion(request).slice());
  assert.equal([short.status, short.handle, short.generation, short.dataLength, short.blockOffset], [K.STATUS_INVALID_REQUEST, 0n, 0, 0, 0n]);
  r.arena.releaseRequest(request);
});

test('every status the engine decides, each with nothing changed on failure', () => {
  const r = setup();
  store(r, r.alpha, 1000n, 'sealed block');
  store(r, r.alpha, 1001n, 'open block', 0);
  const checks: Array<[string, number, Parameters<Rig['send']>[1]]> = [
    ['NOT_SUPPORTED', r.alpha, { opcode: K.OPCODE_FREE, flags: K.FLAG_RECORD, handle: 1000n }],
    ['NOT_SUPPORTED', r.alpha, { opcode: K.OPCODE_BIND, handle: 1003n, bind: { ticket: 0, dataLength: 0, blockOffset: 0n } }],
    ['OUT_OF_RANGE', r.alpha, { opcode: K.OPCODE_FREE, handle: 999n }],
    ['OUT_OF_RANGE', r.alpha, { opcode: K.OPCODE_LOAD, handle: 1032n, descriptor: { stag: 1, taggedOffset: 0n, length: 9 } }],
    ['ACCESS_DENIED', r.alpha, { opcode: K.OPCODE_FREE, handle: 1015n }],
    ['ACCESS_DENIED', r.beta, { opcode: K.OPCODE_LOAD, handle: 1000n, descriptor: { stag: 1, taggedOffset: 0n, length: 99 } }],
    ['ACCESS_DENIED', r.beta, { opcode: K.OPCODE_FREE, handle: 1000n }],
    ['GENERATION_MISMATCH', r.alpha, { opcode: K.OPCODE_FREE, handle: 1000n, generation: 7 }],
    ['NOT_VALID', r.alpha, { opcode: K.OPCODE_FREE, handle: 1005n }],
    ['NOT_VALID', r.alpha, { opcode: K.OPCODE_LOAD, handle: 1005n, descriptor: { stag: 1, taggedOffset: 0n, length: 9 } }],
    ['ALREADY_VALID', r.alpha, { opcode: K.OPCODE_ALLOC_STORE, flags: K.FLAG_INLINE, handle: 1000n, inline: inline('x') }],
    ['SEALED', r.alpha, { opcode: K.OPCODE_STORE, flags: K.FLAG_INLINE, handle: 1000n, inline: inline('x') }],
    ['NOT_SEALED', r.alpha, { opcode: K.OPCODE_LOAD, handle: 1001n, descriptor: { stag: 1, taggedOffset: 0n, length: 99 } }],
    ['LENGTH_ERROR', r.alpha, { opcode: K.OPCODE_LOAD, handle: 1000n, descriptor: { stag: 1, taggedOffset: 0n, length: 11 } }],
    ['LENGTH_ERROR', r.alpha, { opcode: K.OPCODE_STORE, handle: 1001n, descriptor: { stag: 1, taggedOffset: 0n, length: BLOCK + 1 } }],
    ['LENGTH_ERROR', r.alpha, { opcode: K.OPCODE_ALLOC_STORE, flags: K.FLAG_INLINE, handle: 1004n, inline: new Uint8Array(129) }],
    // Several rules broken at once: the first in kbtp-v1 section 11's order names the status.
    ['NOT_SUPPORTED', r.alpha, { opcode: K.OPCODE_FREE, flags: K.FLAG_RECORD, handle: 5n }],
    ['OUT_OF_RANGE', r.beta, { opcode: K.OPCODE_FREE, handle: 2000n, generation: 3 }],
    ['ACCESS_DENIED', r.beta, { opcode: K.OPCODE_FREE, handle: 1005n, generation: 3 }],
    ['GENERATION_MISMATCH', r.alpha, { opcode: K.OPCODE_FREE, handle: 1005n, generation: 3 }],
    ['NOT_VALID', r.alpha, { opcode: K.OPCODE_STORE, handle: 1005n, descriptor: { stag: 1, taggedOffset: 0n, length: BLOCK + 1 } }],
    ['SEALED', r.alpha, { opcode: K.OPCODE_STORE, handle: 1000n, descriptor: { stag: 1, taggedOffset: 0n, length: BLOCK + 1 } }],
  ];
  for (const [expected, session, fields] of checks) {
    const before = snapshot(r);
    const completion = r.send(session, fields);
    assert.is(statusName(completion.status), expected, `${statusName(fields.opcode)} ${fields.handle}`);
    assert.ok(snapshot(r).equals(before), `${expected}: nothing changed`);
    const entry = r.engine.readEntry(fields.handle);
    assert.equal(
      [completion.generation, completion.dataLength, completion.blockOffset],
      entry === undefined ? [0, 0, 0n] : [entry.generation, entry.dataLength, entry.blockOffset],
      `${expected}: completion fields`,
    );
  }
});

test('TOO_MANY_REQUESTS past the credits and SHUTTING_DOWN while draining; neither changes anything', () => {
  const r = setup();
  const narrow = r.arena.openSession({ tenant: 0, capabilities: 0, credits: 3 });
  // Three mapped stores through RDMA Read keep the session's three credits until their data arrives.
  for (const handle of [1000n, 1001n, 1002n]) store(r, r.alpha, handle, 'open', 0);
  const held: number[] = [];
  for (const handle of [1000n, 1001n, 1002n]) {
    const request = r.arena.acquireRequest(narrow);
    r.arena.place(request, encodeRequest({ opcode: K.OPCODE_STORE, requestId: handle, handle, descriptor: { stag: 1, taggedOffset: 0n, length: 16 } }));
    assert.is(r.arena.run(request), S.ACTION_DATA);
    held.push(request);
  }
  const before = snapshot(r);
  const refused = r.send(narrow, { opcode: K.OPCODE_FREE, handle: 1000n });
  expectStatus('TOO_MANY_REQUESTS', refused.status);
  assert.ok(snapshot(r).equals(before));
  // A malformed request is answered INVALID_REQUEST even when credits are gone (format comes first).
  expectStatus('INVALID_REQUEST', r.send(narrow, { opcode: K.OPCODE_FREE, flags: K.FLAG_SEAL, handle: 1000n }).status);
  // Other sessions of the tenant have their own credits.
  expectStatus('NOT_VALID', r.send(r.alpha, { opcode: K.OPCODE_FREE, handle: 1005n }).status);
  for (const request of held) {
    assert.is(r.arena.complete(request, true), S.ACTION_SEND);
    r.arena.releaseRequest(request);
  }
  assert.is(r.arena.outstanding(narrow), 0);
  r.arena.setDraining(narrow, true);
  expectStatus('SHUTTING_DOWN', r.send(narrow, { opcode: K.OPCODE_FREE, handle: 1000n }).status);
  r.arena.setDraining(narrow, false);
  expectStatus('SUCCESS', r.send(narrow, { opcode: K.OPCODE_FREE, handle: 1000n }).status);
});

test("a node drain (the engine's word the main thread sets) refuses every session's new requests; nothing changes", () => {
  const r = setup();
  expectStatus('SUCCESS', store(r, r.alpha, 1000n, 'kept').status);
  const before = snapshot(r);
  assert.is(r.engine.draining, false);
  r.engine.startDraining();
  assert.is(r.engine.draining, true);
  for (const session of [r.alpha, r.beta, r.gamma]) expectStatus('SHUTTING_DOWN', r.send(session, { opcode: K.OPCODE_FREE, handle: 1000n }).status);
  expectStatus('SHUTTING_DOWN', store(r, r.beta, 1010n, 'late').status);
  expectStatus('SHUTTING_DOWN', r.send(r.alpha, { opcode: K.OPCODE_LOAD, handle: 1000n }).status);
  assert.ok(snapshot(r).equals(before));
});

test('NO_SPACE beyond the quota; a FREE gives the unit back', () => {
  const r = setup();
  for (const handle of [1000n, 1001n, 1002n]) expectStatus('SUCCESS', store(r, r.alpha, handle, 'q').status);
  const before = snapshot(r);
  expectStatus('NO_SPACE', store(r, r.alpha, 1003n, 'q').status);
  assert.ok(snapshot(r).equals(before));
  expectStatus('SUCCESS', r.send(r.alpha, { opcode: K.OPCODE_FREE, handle: 1001n }).status);
  expectStatus('SUCCESS', store(r, r.alpha, 1003n, 'q').status);
  assert.is(r.engine.tenantUsage(0), 3);
});

test('Generation is never 0: ALLOC_STORE and FREE step it, wrapping from 0xffff to 1', () => {
  const r = setup();
  const entry = r.engine.entryAddress(1000n);
  r.engine.view.setUint16(entry + 2, 0xfffe, false);
  assert.is(store(r, r.alpha, 1000n, 'a').generation, 0xffff);
  assert.is(r.send(r.alpha, { opcode: K.OPCODE_FREE, handle: 1000n }).generation, 1);
  assert.is(store(r, r.alpha, 1000n, 'b').generation, 2);
  // A mapped STORE keeps it.
  assert.is(r.send(r.alpha, { opcode: K.OPCODE_STORE, flags: K.FLAG_INLINE, handle: 1000n, inline: inline('c') }).status, K.STATUS_SEALED);
  assert.is(r.engine.readEntry(1000n)?.generation, 2);
});

test('a failed RDMA Read during ALLOC_STORE returns the block and the quota unit, and binds nothing', () => {
  const r = setup();
  const before = snapshot(r);
  // STag 0xdead00 is not registered with the mover: the read fails as a remote access error would.
  const request = r.arena.acquireRequest(r.alpha);
  r.arena.place(
    request,
    encodeRequest({ opcode: K.OPCODE_ALLOC_STORE, requestId: 1n, handle: 1000n, descriptor: { stag: 0xdead00, taggedOffset: 0n, length: 32 } }),
  );
  assert.is(r.arena.run(request), S.ACTION_DATA);
  assert.is(r.arena.complete(request, false), S.ACTION_NONE);
  r.arena.releaseRequest(request);
  assert.equal(r.engine.readEntry(1000n), { flags: 0, generation: 1, dataLength: 0, blockOffset: 0n });
  assert.is(r.engine.tenantUsage(0), 0);
  assert.is(r.arena.outstanding(r.alpha), 0);
  assert.ok(auditPool(r.engine).ok);
  assert.not.ok(snapshot(r).equals(before), 'the ring moved on (ticket taken, block returned with a new one)');
});

test('blocks freed on a ring shared by two trust domains are zeroed before reuse', () => {
  const r = setup();
  const stored = store(r, r.alpha, 1000n, 'secret of alpha');
  expectStatus('SUCCESS', r.send(r.alpha, { opcode: K.OPCODE_FREE, handle: 1000n }).status);
  assert.ok(r.engine.block(stored.blockOffset).every((b) => b === 0));
  // The partition ring serves gamma alone: its blocks keep their bytes (no clearing cost).
  assert.is(r.engine.view.getUint32(r.engine.partitionRing(0).descriptor + S.RING_CLEAR_ON_FREE, true), 0);
  assert.is(r.engine.view.getUint32(r.engine.sharedRing.descriptor + S.RING_CLEAR_ON_FREE, true), 1);
});

test('DIRECT_ALLOC: FetchAdd on the partition Head, read the slot, write, BIND; abandoned and bad tickets', () => {
  const r = setup();
  const ring = r.engine.partitionRing(0);
  const x = r.engine.exports;
  const mask = x.ringAddMask(ring.order);
  const direct = (filled = true): { ticket: number; blockOffset: bigint } => {
    const counter = BigInt.asUintN(64, x.maskedFetchAdd(ring.head, BigInt(K.RING_ADD_DATA_MASKED), mask));
    const slot = Number(counter & 0xffffffffn) / 16;
    r.engine.exports.quotaAdjust(r.engine.tenantAddress(2), 1); // the target saw the ticket taken
    const seen = r.engine.readSlot(ring, slot);
    const ticket = Number(counter >> 32n);
    assert.is(seen.sequence === ticket, filled, `slot of ticket ${ticket} filled`);
    return { ticket, blockOffset: seen.blockOffset };
  };
  const first = direct();
  r.engine.block(first.blockOffset).set(inline('direct data'));
  const bind = (handle: bigint, t: { ticket: number; blockOffset: bigint }, length = 11) =>
    r.send(r.gamma, { opcode: K.OPCODE_BIND, flags: K.FLAG_SEAL, handle, bind: { ticket: t.ticket, dataLength: length, blockOffset: t.blockOffset } });

  let before = snapshot(r);
  expectStatus('ACCESS_DENIED', bind(1000n, first).status);
  expectStatus('LENGTH_ERROR', bind(1020n, first, BLOCK + 1).status);
  expectStatus('BAD_TICKET', bind(1020n, { ticket: first.ticket, blockOffset: first.blockOffset + BigInt(BLOCK) }).status);
  expectStatus('BAD_TICKET', bind(1020n, { ticket: first.ticket + 1, blockOffset: first.blockOffset }).status);
  assert.ok(snapshot(r).equals(before));

  const bound = bind(1020n, first);
  expectStatus('SUCCESS', bound.status);
  assert.equal(r.engine.readEntry(1020n), { flags: K.ENTRY_VALID | K.ENTRY_SEALED, generation: 2, dataLength: 11, blockOffset: first.blockOffset });
  expectStatus('ALREADY_VALID', bind(1020n, first).status);
  expectStatus('BAD_TICKET', bind(1021n, first).status); // the slot is consumed

  const second = direct();
  // The ticket times out: the host reclaims it, and a late BIND is told so.
  assert.is(BigInt.asUintN(64, x.ringAbandon(ring.descriptor, second.ticket)), second.blockOffset);
  x.quotaAdjust(r.engine.tenantAddress(2), -1);
  before = snapshot(r);
  expectStatus('TICKET_ABANDONED', bind(1022n, second).status);
  assert.ok(snapshot(r).equals(before));
  assert.is(r.engine.tenantUsage(2), 1);

  // Loading through the shared path sees the directly written data.
  const destination = new Uint8Array(32);
  const loaded = r.send(r.alpha, { opcode: K.OPCODE_LOAD, handle: 1020n, descriptor: { stag: r.mover.register(destination), taggedOffset: 0n, length: 32 } });
  expectStatus('SUCCESS', loaded.status);
  assert.is(new TextDecoder().decode(destination.subarray(0, loaded.dataLength)), 'direct data');
  // FREE returns the block to the partition ring it came from.
  expectStatus('SUCCESS', r.send(r.gamma, { opcode: K.OPCODE_FREE, handle: 1020n }).status);
  assert.ok(auditPool(r.engine).ok);
  assert.is(r.engine.readCounters(ring).tailTicket, 4);
  assert.is(r.engine.tenantUsage(2), 0);
  // Tickets beyond the quota: usage over it makes BIND answer NO_SPACE and change nothing.
  const a = direct();
  const b = direct();
  const c = direct(false); // partition of 2 blocks: the third ticket's slot fills only after a free
  assert.is(r.engine.tenantUsage(2), 3);
  before = snapshot(r);
  expectStatus('NO_SPACE', bind(1023n, a).status);
  assert.ok(snapshot(r).equals(before));
  assert.is(BigInt.asIntN(64, x.ringAbandon(ring.descriptor, c.ticket)), -2n, 'the third ticket is still waiting for a block');
  assert.is(BigInt.asUintN(64, x.ringAbandon(ring.descriptor, b.ticket)), b.blockOffset);
  x.quotaAdjust(r.engine.tenantAddress(2), -1);
  expectStatus('SUCCESS', bind(1023n, a).status);
});

test('GOODBYE is handed to the host', () => {
  const r = setup();
  const request = r.arena.acquireRequest(r.alpha);
  r.arena.place(request, encodeRequest({ opcode: K.OPCODE_GOODBYE, requestId: 3n, handle: 0n }));
  assert.is(r.arena.run(request), S.ACTION_GOODBYE);
  r.arena.releaseRequest(request);
});

test.run();
