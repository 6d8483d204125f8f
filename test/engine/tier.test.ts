// The engine with a durable tier (kbtp-v1 section 12): durable acknowledgement, TIER_ERROR that
// changes nothing, Generation marks, demotion and promotion with the Placement Epoch, eviction
// at the quota, drops. The tier here is a map in the test, answering synchronously.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import * as K from '../../assembly/kbtp-constants.ts';
import * as S from '../../assembly/struct-offsets.ts';
import { Engine } from '../../host/engine/engine.ts';
import { ThreadArena } from '../../host/engine/arena.ts';
import { LoopbackMover } from '../../host/demo/loopback-mover.ts';
import { Demoter } from '../../host/engine/demotion.ts';
import { auditPool } from '../../host/engine/audit.ts';
import { encodeRequest, decodeCompletion, statusName, type RequestFields, type Completion } from '../../host/kbtp/wire/messages.ts';

const BLOCK = 256;
const ALL_ONES = 0xffffffffffffffffn;

interface TierDouble {
  blocks: Map<number, Uint8Array>;
  /** Next persist fails (TIER_ERROR). */
  failPersist: boolean;
  fetchOutcome: number;
  persists: number;
  reserves: number;
  evictions: number;
  /** Runs while a persist is out with the tier (another request's work in the meantime). */
  duringPersist: (() => void) | undefined;
}

function setup(options: { quota?: number; eviction?: 'none' | 'demote' } = {}) {
  const engine = Engine.create({
    blockSize: BLOCK,
    blockCount: 10,
    partitions: [{ blocks: 2 }],
    handleBase: 1000n,
    handleCount: 48,
    maxInline: 200,
    threads: 1,
    durable: true,
    tenants: [
      {
        name: 'alpha',
        storeRange: { first: 1000n, count: 16n },
        loadScope: { first: 1000n, count: 32n },
        quota: options.quota ?? 4,
        eviction: options.eviction ?? 'demote',
      },
      { name: 'beta', storeRange: { first: 1016n, count: 16n }, loadScope: { first: 1000n, count: 32n }, quota: 4 },
      { name: 'gamma', storeRange: { first: 1032n, count: 16n }, loadScope: { first: 1000n, count: 48n }, quota: 2, partition: 0 },
    ],
  });
  for (let i = 0; i < 32; i++) engine.setGenerationMark(i, 100);
  const arena = new ThreadArena(engine, 0);
  const mover = new LoopbackMover(engine);
  const demoter = new Demoter(engine);
  const tier: TierDouble = {
    blocks: new Map(),
    failPersist: false,
    fetchOutcome: S.FETCH_OK,
    persists: 0,
    reserves: 0,
    evictions: 0,
    duringPersist: undefined,
  };
  const alpha = arena.openSession({ tenant: 0, capabilities: 0, credits: 8 });
  const beta = arena.openSession({ tenant: 1, capabilities: 0, credits: 8 });
  const gamma = arena.openSession({ tenant: 2, capabilities: K.CAP_DIRECT_ALLOC, credits: 8 });
  let requestId = 0n;

  /** Runs a request to its COMPLETION, carrying out data and tier actions as the target would. */
  const send = (session: number, fields: Omit<RequestFields, 'requestId'>): Completion => {
    const request = arena.acquireRequest(session);
    try {
      arena.place(request, encodeRequest({ requestId: ++requestId, ...fields }));
      let action = arena.run(request);
      for (let steps = 0; steps < 1000; steps++) {
        if (action === S.ACTION_SEND) return decodeCompletion(arena.completion(request).slice());
        if (action === S.ACTION_RETRY) {
          action = arena.run(request);
        } else if (action === S.ACTION_DATA || action === S.ACTION_DATA_AND_SEND) {
          const op = arena.dataOperation(request);
          const moved = mover.carryOut(op.kind, op.local, op.length, op.stag, op.remoteOffset);
          const after = arena.complete(request, moved);
          action = action === S.ACTION_DATA ? after : S.ACTION_SEND;
        } else if (action === S.ACTION_PERSIST) {
          const t = arena.tierRequest(request);
          tier.persists += 1;
          const during = tier.duringPersist;
          tier.duringPersist = undefined;
          during?.();
          const ok = !tier.failPersist;
          if (ok && t.kind === S.TIER_SEAL) {
            const data = t.staging !== 0 ? engine.bytes.subarray(t.staging, t.staging + t.dataLength) : engine.block(t.blockOffset, t.dataLength);
            tier.blocks.set(t.index, data.slice());
          }
          if (ok && (t.kind === S.TIER_UNBIND || t.kind === S.TIER_UNBIND_LOST || t.kind === S.TIER_UNBIND_UNDO)) tier.blocks.delete(t.index);
          action = arena.persisted(request, ok);
        } else if (action === S.ACTION_RESERVE) {
          const t = arena.tierRequest(request);
          tier.reserves += 1;
          engine.setGenerationMark(t.index, (t.generation + 10) % 0xffff);
          action = arena.run(request);
        } else if (action === S.ACTION_FETCH) {
          const t = arena.tierRequest(request);
          const data = tier.blocks.get(t.index);
          if (data !== undefined && tier.fetchOutcome === S.FETCH_OK) engine.block(t.blockOffset, data.length).set(data);
          action = arena.fetched(request, data === undefined ? S.FETCH_FAILED : tier.fetchOutcome);
        } else if (action === S.ACTION_EVICT) {
          const t = arena.tierRequest(request);
          tier.evictions += 1;
          if (!demoter.demoteOne(engine.tenantIndexOf(t.evictTenant))) arena.noEviction(request);
          action = arena.run(request);
        } else {
          throw new Error(`unexpected action ${action}`);
        }
      }
      throw new Error('request did not finish');
    } finally {
      arena.releaseRequest(request);
    }
  };
  const store = (session: number, handle: bigint, text: string, seal = true): Completion => {
    const completion = send(session, {
      opcode: K.OPCODE_ALLOC_STORE,
      flags: K.FLAG_INLINE | (seal ? K.FLAG_SEAL : 0),
      handle,
      inline: new TextEncoder().encode(text),
    });
    if (completion.status === K.STATUS_SUCCESS) engine.stamp(Number(handle - 1000n));
    return completion;
  };
  const loadText = (session: number, handle: bigint): { completion: Completion; text: string } => {
    const into = new Uint8Array(BLOCK);
    const completion = send(session, { opcode: K.OPCODE_LOAD, handle, descriptor: { stag: mover.register(into), taggedOffset: 0n, length: BLOCK } });
    if (completion.status === K.STATUS_SUCCESS) engine.stamp(Number(handle - 1000n));
    return { completion, text: new TextDecoder().decode(into.subarray(0, completion.dataLength)) };
  };
  const snapshot = (): Buffer =>
    Buffer.concat([
      engine.bytes.slice(engine.layout.rings[0]?.descriptor ?? 0, engine.layout.sessions),
      engine.bytes.slice(engine.layout.handleLocks, engine.layout.generationMarks),
      // Everything up to the staging blocks, whose contents are scratch.
      engine.bytes.slice(engine.layout.blockRings, engine.layout.staging),
    ]);
  return { engine, arena, tier, demoter, mover, alpha, beta, gamma, send, store, loadText, snapshot };
}

const expectStatus = (name: string, completion: Completion): void => assert.is(statusName(completion.status), name);
const epochOf = (flags: number): number => (flags >> 8) & 0xff;

test('a sealing ALLOC_STORE is answered only after the tier has it; TIER_ERROR changes nothing', () => {
  const r = setup();
  r.tier.failPersist = true;
  const entry = r.engine.readEntry(1000n);
  const held = r.engine.readCounters(r.engine.sharedRing);
  const before = r.snapshot();
  expectStatus('TIER_ERROR', r.store(r.alpha, 1000n, 'lost'));
  // No ticket was taken: the ring, its slots, the pool and the quota are as they were.
  assert.equal(r.engine.readEntry(1000n), entry);
  assert.equal(r.engine.readCounters(r.engine.sharedRing), held);
  assert.ok(r.snapshot().equals(before), 'a failed ALLOC_STORE changed engine state');
  assert.is(r.engine.tenantUsage(0), 0);
  assert.ok(auditPool(r.engine).ok);
  r.tier.failPersist = false;
  const ok = r.store(r.alpha, 1000n, 'kept');
  expectStatus('SUCCESS', ok);
  assert.is(ok.generation, 2);
  assert.is(new TextDecoder().decode(r.tier.blocks.get(0)), 'kept');
  assert.ok(auditPool(r.engine).ok);
});

test('an unsealed block is volatile: no tier record; its Generation stays within the reserved mark', () => {
  const r = setup();
  r.engine.setGenerationMark(1, 2);
  expectStatus('SUCCESS', r.store(r.alpha, 1001n, 'volatile', false));
  assert.is(r.tier.persists, 0);
  assert.is(r.tier.reserves, 0);
  // The FREE would show Generation 3, past the mark 2: the tier reserves first.
  expectStatus('SUCCESS', r.send(r.alpha, { opcode: K.OPCODE_FREE, handle: 1001n }));
  assert.is(r.tier.reserves, 1);
  assert.ok(r.engine.generationMark(1) >= 3);
});

test('FREE of a sealed block waits for the tier; a failed one leaves the block', () => {
  const r = setup();
  expectStatus('SUCCESS', r.store(r.alpha, 1002n, 'x'));
  r.tier.failPersist = true;
  const before = r.snapshot();
  expectStatus('TIER_ERROR', r.send(r.alpha, { opcode: K.OPCODE_FREE, handle: 1002n }));
  assert.ok(r.snapshot().equals(before));
  r.tier.failPersist = false;
  const freed = r.send(r.alpha, { opcode: K.OPCODE_FREE, handle: 1002n });
  expectStatus('SUCCESS', freed);
  assert.not.ok(r.tier.blocks.has(2));
  assert.is(r.engine.tenantUsage(0), 0);
  assert.ok(auditPool(r.engine).ok);
});

test('demotion and promotion: Block Offset all ones and the Placement Epoch, the right bytes, quota and ring audit', () => {
  const r = setup();
  expectStatus('SUCCESS', r.store(r.alpha, 1003n, 'warm block'));
  const resident = r.engine.readEntry(1003n);
  assert.ok(resident !== undefined);
  assert.is(r.engine.demote(3), S.DEMOTED);
  const demoted = r.engine.readEntry(1003n);
  assert.is(demoted?.blockOffset, ALL_ONES);
  assert.is(demoted?.generation, resident?.generation);
  assert.is(epochOf(demoted?.flags ?? 0), (epochOf(resident?.flags ?? 0) + 1) & 0xff);
  assert.is((demoted?.flags ?? 0) & 3, 3, 'still VALID and SEALED');
  assert.is(r.engine.tenantUsage(0), 0, 'under demote the quota counts resident blocks');
  assert.ok(auditPool(r.engine).ok);
  const loaded = r.loadText(r.beta, 1003n);
  expectStatus('SUCCESS', loaded.completion);
  assert.is(loaded.text, 'warm block');
  assert.is.not(loaded.completion.blockOffset, ALL_ONES);
  const promoted = r.engine.readEntry(1003n);
  assert.is(epochOf(promoted?.flags ?? 0), (epochOf(resident?.flags ?? 0) + 2) & 0xff);
  assert.is(r.engine.tenantUsage(0), 1, 'the owner pays for the promotion, not the loader');
  assert.is(r.engine.tenantUsage(1), 0);
  assert.ok(auditPool(r.engine).ok);
  assert.is(r.engine.demote(3), S.DEMOTED);
  assert.is(r.engine.demote(3), S.DEMOTE_NOT_ELIGIBLE, 'already on the tier alone');
  expectStatus('SUCCESS', r.send(r.alpha, { opcode: K.OPCODE_FREE, handle: 1003n }));
  assert.is(r.engine.tenantUsage(0), 0);
  assert.ok(auditPool(r.engine).ok);
});

test('a busy handle is not demoted; unsealed blocks never are', () => {
  const r = setup();
  expectStatus('SUCCESS', r.store(r.alpha, 1004n, 'open', false));
  assert.is(r.engine.demote(4), S.DEMOTE_NOT_ELIGIBLE);
  expectStatus('SUCCESS', r.store(r.alpha, 1005n, 'sealed'));
  const lock = r.engine.layout.handleLocks + 4 * 5;
  r.engine.view.setUint32(lock, 1, true); // a LOAD holds it
  assert.is(r.engine.demote(5), S.DEMOTE_BUSY);
  r.engine.view.setUint32(lock, 0, true);
  assert.is(r.engine.demote(5), S.DEMOTED);
});

test('at the quota under demote, the least recently used sealed resident block is demoted first', () => {
  const r = setup({ quota: 2 });
  expectStatus('SUCCESS', r.store(r.alpha, 1000n, 'a'));
  expectStatus('SUCCESS', r.store(r.alpha, 1001n, 'b'));
  r.loadText(r.alpha, 1000n); // 1001 is now the least recently used
  expectStatus('SUCCESS', r.store(r.alpha, 1002n, 'c'));
  assert.is(r.engine.readEntry(1001n)?.blockOffset, ALL_ONES);
  assert.is.not(r.engine.readEntry(1000n)?.blockOffset, ALL_ONES);
  assert.is(r.engine.tenantUsage(0), 2);
  // Promotion at the quota demotes the least recently used again (1000 now).
  assert.is(r.loadText(r.alpha, 1001n).text, 'b');
  assert.is(r.engine.readEntry(1000n)?.blockOffset, ALL_ONES);
  // Nothing demotable (two unsealed blocks hold the quota): NO_SPACE.
  const s = setup({ quota: 2 });
  expectStatus('SUCCESS', s.store(s.alpha, 1000n, 'a', false));
  expectStatus('SUCCESS', s.store(s.alpha, 1001n, 'b', false));
  expectStatus('NO_SPACE', s.store(s.alpha, 1002n, 'c'));
  assert.ok(auditPool(r.engine).ok && auditPool(s.engine).ok);
});

test('a block whose data fails its checksum is never served: TIER_ERROR, then not VALID', () => {
  const r = setup();
  expectStatus('SUCCESS', r.store(r.alpha, 1006n, 'rotten'));
  r.engine.demote(6);
  r.tier.fetchOutcome = S.FETCH_LOST;
  const before = r.engine.readEntry(1006n);
  expectStatus('TIER_ERROR', r.loadText(r.alpha, 1006n).completion);
  const after = r.engine.readEntry(1006n);
  assert.is((after?.flags ?? 0) & K.ENTRY_VALID, 0);
  assert.is(after?.generation, ((before?.generation ?? 0) + 1) & 0xffff);
  expectStatus('NOT_VALID', r.loadText(r.alpha, 1006n).completion);
  assert.ok(auditPool(r.engine).ok);
  assert.is(r.engine.tenantUsage(0), 0);
});

test('drops: only blocks on the tier alone, as if freed', () => {
  const r = setup();
  expectStatus('SUCCESS', r.store(r.alpha, 1007n, 'resident'));
  assert.not.ok(r.engine.dropClaim(7), 'a resident block is not dropped');
  r.engine.demote(7);
  assert.ok(r.engine.dropClaim(7));
  // dropSettle ends the claim: the entry is not VALID with the next Generation.
  const generation = r.engine.readEntry(1007n)?.generation ?? 0;
  r.engine.dropSettle(7, true);
  assert.is((r.engine.readEntry(1007n)?.flags ?? 1) & 3, 0);
  assert.is(r.engine.readEntry(1007n)?.generation, generation + 1);
  assert.ok(auditPool(r.engine).ok);
});

test("a sealing STORE the tier fails leaves the unsealed block's octets and entry as they were (inline and mapped)", () => {
  const r = setup();
  expectStatus('SUCCESS', r.store(r.alpha, 1008n, 'first draft', false));
  const entry = r.engine.readEntry(1008n);
  const block = r.engine.block(entry?.blockOffset ?? 0n, BLOCK).slice();
  r.tier.failPersist = true;
  const before = r.snapshot();
  const inlineStore = r.send(r.alpha, {
    opcode: K.OPCODE_STORE,
    flags: K.FLAG_INLINE | K.FLAG_SEAL,
    handle: 1008n,
    inline: new TextEncoder().encode('overwritten?'),
  });
  expectStatus('TIER_ERROR', inlineStore);
  const source = new TextEncoder().encode('mapped overwrite');
  const mapped = r.send(r.alpha, {
    opcode: K.OPCODE_STORE,
    flags: K.FLAG_SEAL,
    handle: 1008n,
    descriptor: { stag: r.mover.register(source), taggedOffset: 0n, length: source.length },
  });
  expectStatus('TIER_ERROR', mapped);
  assert.ok(r.snapshot().equals(before), 'a failed sealing STORE changed the pool or the table');
  assert.equal(r.engine.block(entry?.blockOffset ?? 0n, BLOCK), block);
  r.tier.failPersist = false;
  expectStatus(
    'SUCCESS',
    r.send(r.alpha, {
      opcode: K.OPCODE_STORE,
      flags: K.FLAG_SEAL,
      handle: 1008n,
      descriptor: { stag: r.mover.register(source), taggedOffset: 0n, length: source.length },
    }),
  );
  assert.is(r.loadText(r.beta, 1008n).text, 'mapped overwrite');
  assert.is(new TextDecoder().decode(r.tier.blocks.get(8)), 'mapped overwrite');
  assert.ok(auditPool(r.engine).ok);
});

/** Takes a ticket of gamma's partition one-sidedly, as a DIRECT_ALLOC initiator does, and writes `text` into its block. */
function directTicket(r: ReturnType<typeof setup>, text: string): { ticket: number; blockOffset: bigint } {
  const ring = r.engine.partitionRing(0);
  const x = r.engine.exports;
  const counter = BigInt.asUintN(64, x.maskedFetchAdd(ring.head, BigInt(K.RING_ADD_DATA_MASKED), x.ringAddMask(ring.order)));
  x.quotaAdjust(r.engine.tenantAddress(2), 1); // the target saw the ticket taken
  const seen = r.engine.readSlot(ring, Number(counter & 0xffffffffn) / 16);
  r.engine.block(seen.blockOffset).set(new TextEncoder().encode(text));
  return { ticket: Number(counter >> 32n), blockOffset: seen.blockOffset };
}

test('a sealing BIND the tier fails keeps its ticket unbound; the same BIND succeeds later', () => {
  const r = setup();
  const t = directTicket(r, 'direct');
  const bind = (handle: bigint) =>
    r.send(r.gamma, { opcode: K.OPCODE_BIND, flags: K.FLAG_SEAL, handle, bind: { ticket: t.ticket, dataLength: 6, blockOffset: t.blockOffset } });
  r.tier.failPersist = true;
  const before = r.snapshot();
  expectStatus('TIER_ERROR', bind(1032n));
  assert.ok(r.snapshot().equals(before), 'a failed BIND used up its ticket or changed the table');
  r.tier.failPersist = false;
  const bound = bind(1032n);
  expectStatus('SUCCESS', bound);
  assert.is(bound.blockOffset, t.blockOffset);
  assert.is(r.loadText(r.gamma, 1032n).text, 'direct');
  assert.is(new TextDecoder().decode(r.tier.blocks.get(32)), 'direct');
  assert.ok(auditPool(r.engine).ok);
});

test('a sealing BIND whose ticket is reclaimed while the tier works undoes its durable seal: TICKET_ABANDONED', () => {
  const r = setup();
  const t = directTicket(r, 'late');
  const ring = r.engine.partitionRing(0);
  const entry = r.engine.readEntry(1033n);
  r.tier.duringPersist = () => {
    // The Ticket Timeout fires meanwhile: the host reclaims the ticket.
    assert.is(BigInt.asUintN(64, r.engine.exports.ringAbandon(ring.descriptor, t.ticket)), t.blockOffset);
    r.engine.exports.quotaAdjust(r.engine.tenantAddress(2), -1);
  };
  const persistsBefore = r.tier.persists;
  expectStatus(
    'TICKET_ABANDONED',
    r.send(r.gamma, { opcode: K.OPCODE_BIND, flags: K.FLAG_SEAL, handle: 1033n, bind: { ticket: t.ticket, dataLength: 4, blockOffset: t.blockOffset } }),
  );
  assert.is(r.tier.persists - persistsBefore, 2, 'the seal, then its undo');
  assert.not.ok(r.tier.blocks.has(33), 'the tier still holds the undone seal');
  assert.equal(r.engine.readEntry(1033n), entry);
  assert.is(r.engine.tenantUsage(2), 0);
  assert.ok(auditPool(r.engine).ok);
});

test('a sealing request that finds every staging block in use retries marked as waiting for one; a busy handle does not', () => {
  const r = setup();
  const flags = r.engine.layout.stagingFlags;
  const count = r.engine.config.stagingBlocks;
  for (let slot = 0; slot < count; slot++) r.engine.view.setUint32(flags + 4 * slot, 1, true);
  const request = r.arena.acquireRequest(r.alpha);
  try {
    r.arena.place(
      request,
      encodeRequest({
        requestId: 77n,
        opcode: K.OPCODE_ALLOC_STORE,
        flags: K.FLAG_INLINE | K.FLAG_SEAL,
        handle: 1009n,
        inline: new TextEncoder().encode('waits'),
      }),
    );
    assert.is(r.arena.run(request), S.ACTION_RETRY);
    assert.ok(r.arena.waitsForStaging(request), 'the retry does not say it waits for a staging block');
    assert.is(r.engine.tenantUsage(0), 0, 'the waiting ALLOC_STORE keeps no unit of quota');
    // Another request holds the handle: a retry, but not one that waits for a staging block.
    const lock = r.engine.layout.handleLocks + 4 * 9;
    r.engine.view.setUint32(lock, 1, true);
    assert.is(r.arena.run(request), S.ACTION_RETRY);
    assert.not.ok(r.arena.waitsForStaging(request));
    r.engine.view.setUint32(lock, 0, true);
    r.engine.view.setUint32(flags, 0, true); // a seal in flight was answered: its staging block is free
    assert.is(r.arena.run(request), S.ACTION_PERSIST);
    assert.not.ok(r.arena.waitsForStaging(request));
    assert.is(r.arena.persisted(request, true), S.ACTION_SEND);
    assert.is(statusName(decodeCompletion(r.arena.completion(request).slice()).status), 'SUCCESS');
  } finally {
    r.arena.releaseRequest(request);
  }
  for (let slot = 1; slot < count; slot++) r.engine.view.setUint32(flags + 4 * slot, 0, true);
  assert.is(r.loadText(r.beta, 1009n).text, 'waits');
  assert.ok(auditPool(r.engine).ok);
});

test.run();
