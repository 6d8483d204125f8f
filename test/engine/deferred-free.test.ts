import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Engine } from '../../host/engine/engine.ts';

const ALL_ONES = 0xffffffffffffffffn;
const block = (index: number): bigint => BigInt(index * 64);

/** Take a ticket (FetchAdd on Head) and read its slot, as separate steps. */
function ringOf(engine: Engine) {
  const ring = engine.sharedRing;
  const x = engine.exports;
  const take = (): { ticket: number; slotOffset: number } => {
    const counter = BigInt.asUintN(64, x.ringTakeTicket(ring.descriptor));
    return { ticket: Number(counter >> 32n), slotOffset: x.ringSlotOffset(ring.descriptor, counter) };
  };
  const read = (t: { ticket: number; slotOffset: number }): bigint => BigInt.asUintN(64, x.ringTryTake(ring.descriptor, t.ticket, t.slotOffset, 4));
  return { ring, x, take, read };
}

test('a free whose slot is still owed to a taken ticket waits, then lands when that ticket reads', () => {
  // F = N = 4 (n = 2), so the free with ticket 7 lands on slot 3, whose ticket 3 is taken but unread.
  const engine = Engine.create({ blockSize: 64, blockCount: 4, ringOrder: 2, threads: 1 });
  const { ring, x, take, read } = ringOf(engine);

  const taken = [take(), take(), take()].map(read);
  assert.equal(taken, [block(0), block(1), block(2)]);
  const owed = take(); // ticket 3: taken, its slot not read yet
  assert.equal(owed, { ticket: 3, slotOffset: 0x30 });

  x.ringReturn(ring.descriptor, block(0)); // Tail ticket 4 -> slot 0, consumed: written at once
  x.ringReturn(ring.descriptor, block(1)); // ticket 5 -> slot 1
  x.ringReturn(ring.descriptor, block(2)); // ticket 6 -> slot 2
  assert.equal(engine.readSlot(ring, 0), { sequence: 4, blockOffset: block(0) });
  const again = read(take()); // ticket 4 takes block 0 back
  assert.is(again, block(0));

  x.ringReturn(ring.descriptor, block(0)); // Tail ticket 7 -> slot 3, still owed to ticket 3
  assert.equal(engine.readSlot(ring, 3), { sequence: 3, blockOffset: block(3) }, 'the owed slot is not overwritten');
  assert.equal(engine.parkedFrees(ring), [{ ticket: 7, blockOffset: block(0) }]);

  assert.is(read(owed), block(3), 'ticket 3 still gets its own block');
  assert.equal(engine.readSlot(ring, 3), { sequence: 7, blockOffset: block(0) }, 'the parked free landed once the slot was read');
  assert.equal(engine.parkedFrees(ring), []);

  // Tickets 5, 6 and 7 find blocks 1, 2 and 0; ticket 8 finds nothing (the ring is empty).
  assert.equal([read(take()), read(take()), read(take())], [block(1), block(2), block(0)]);
  assert.is(read(take()), ALL_ONES);
});

test('a parked free chains: two turns of one slot wait behind the same unread ticket', () => {
  // F = 2, N = 2: tickets t, t+2, t+4 share a slot.
  const engine = Engine.create({ blockSize: 64, blockCount: 2, ringOrder: 1, threads: 1 });
  const { ring, x, take, read } = ringOf(engine);
  const first = take(); // ticket 0 on slot 0, left unread
  assert.is(read(take()), block(1)); // ticket 1
  x.ringReturn(ring.descriptor, block(1)); // Tail ticket 2 -> slot 0: owed to ticket 0, parked
  assert.equal(
    engine.parkedFrees(ring).map((p) => p.ticket),
    [2],
  );
  assert.is(read(first), block(0));
  assert.equal(engine.readSlot(ring, 0), { sequence: 2, blockOffset: block(1) });
  assert.equal(engine.parkedFrees(ring), []);
});

test('an abandoned ticket is reclaimed once, returns its block with a new ticket, and cannot be bound', () => {
  const engine = Engine.create({ blockSize: 64, blockCount: 4, ringOrder: 2, threads: 1 });
  const ring = engine.sharedRing;
  const x = engine.exports;
  const counter = BigInt.asUintN(64, x.ringTakeTicket(ring.descriptor)); // ticket 0, block 0, never read
  assert.is(counter, 0n);
  assert.is(x.ringTicketTaken(ring.descriptor, 0), 1);
  assert.is(x.ringTicketTaken(ring.descriptor, 1), 0, 'ticket 1 was never handed out');
  assert.is(BigInt.asIntN(64, x.ringAbandon(ring.descriptor, 1)), -3n, 'a ticket Head never handed out cannot be reclaimed');
  assert.equal(engine.readSlot(ring, 1), { sequence: 1, blockOffset: block(1) }, 'and its filled slot stays as it was');
  assert.is(BigInt.asUintN(64, x.ringAbandon(ring.descriptor, 0)), block(0));
  assert.is(x.ringTicketAbandoned(ring.descriptor, 0), 1);
  assert.is(BigInt.asIntN(64, x.ringAbandon(ring.descriptor, 0)), -1n, 'reclaimed only once');
  assert.is(x.ringClaimTicket(ring.descriptor, 0, block(0)), 0, 'a late claim fails');
  // The block came back with Tail ticket 4 on slot 0.
  assert.equal(engine.readSlot(ring, 0), { sequence: 4, blockOffset: block(0) });
  assert.equal(engine.readCounters(ring).tailTicket, 5);
  // Tickets 1..4 take the four blocks; ticket 5 is taken while slot 1 still holds consumed turn 1.
  for (let i = 1; i <= 4; i++) {
    const c = BigInt.asUintN(64, x.ringTakeTicket(ring.descriptor));
    assert.ok(BigInt.asUintN(64, x.ringTryTake(ring.descriptor, Number(c >> 32n), x.ringSlotOffset(ring.descriptor, c), 4)) !== ALL_ONES);
  }
  x.ringTakeTicket(ring.descriptor);
  assert.is(BigInt.asIntN(64, x.ringAbandon(ring.descriptor, 5)), -2n, 'no block has been freed to ticket 5 yet');
});

test.run();
