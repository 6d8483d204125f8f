import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Engine } from '../../host/engine/engine.ts';
import { hex } from '../support/engine.ts';
import { RING_TAIL } from '../../assembly/struct-offsets.ts';

test('shared ring starts as draft 3.3 says, byte for byte (masked counters)', () => {
  const engine = Engine.create({ blockSize: 64, blockCount: 5, ringOrder: 3, threads: 1 });
  const ring = engine.sharedRing;
  const slots = engine.bytes.subarray(ring.slots, ring.slots + 16 * 8);
  assert.is(
    hex(slots),
    '00000000' +
      '00000000' +
      '0000000000000000' +
      '00000001' +
      '00000000' +
      '0000000000000040' +
      '00000002' +
      '00000000' +
      '0000000000000080' +
      '00000003' +
      '00000000' +
      '00000000000000c0' +
      '00000004' +
      '00000000' +
      '0000000000000100' +
      'fffffffd' +
      '00000000' +
      'ffffffffffffffff' +
      'fffffffe' +
      '00000000' +
      'ffffffffffffffff' +
      'ffffffff' +
      '00000000' +
      'ffffffffffffffff',
  );
  // Head: ticket 0, offset 0. Tail: ticket F = 5, Slot Offset 16 * (5 mod 8) = 0x50, in memory order.
  assert.is(hex(engine.bytes.subarray(ring.head, ring.head + 8)), '0000000000000000');
  assert.is(hex(engine.bytes.subarray(ring.descriptor + RING_TAIL, ring.descriptor + RING_TAIL + 8)), '5000000005000000');
  assert.equal(engine.readCounters(ring), { headTicket: 0, headSlotOffset: 0, tailTicket: 5, tailSlotOffset: 0x50 });
});

test('unmasked ring keeps the ticket in the high half and zero below', () => {
  const engine = Engine.create({ blockSize: 64, blockCount: 8, ringOrder: 3, ringMode: 'unmasked', threads: 1 });
  const ring = engine.sharedRing;
  assert.is(hex(engine.bytes.subarray(ring.descriptor + RING_TAIL, ring.descriptor + RING_TAIL + 8)), '0000000008000000');
  // F = N: every slot holds a block, and the Tail's slot (8 mod 8 = 0) is slot 0 again.
  assert.equal(engine.readSlot(ring, 7), { sequence: 7, blockOffset: 7n * 64n });
  assert.is(engine.readCounters(ring).tailSlotOffset, 0);
});

test('a fresh table holds Flags 0, Generation 1, Data Length 0, Block Offset 0 in every entry', () => {
  const engine = Engine.create({ blockSize: 64, blockCount: 4, handleBase: 100n, handleCount: 3, threads: 1 });
  const table = engine.bytes.subarray(engine.layout.table, engine.layout.table + 48);
  assert.is(hex(table), ('0000' + '0001' + '00000000' + '0000000000000000').repeat(3));
  assert.is(engine.entryAddress(99n), 0);
  assert.is(engine.entryAddress(103n), 0);
  assert.is(engine.entryAddress(102n), engine.layout.table + 32);
});

test('partitions are carved from the end of the pool onto their own rings', () => {
  const engine = Engine.create({
    blockSize: 64,
    blockCount: 10,
    threads: 1,
    partitions: [{ blocks: 3 }, { blocks: 2 }],
    tenants: [
      { name: 'a', storeRange: { first: 0n, count: 10n }, loadScope: { first: 0n, count: 40n }, quota: 5 },
      { name: 'b', storeRange: { first: 10n, count: 10n }, loadScope: { first: 0n, count: 40n }, quota: 3, partition: 0 },
      { name: 'c', storeRange: { first: 20n, count: 10n }, loadScope: { first: 0n, count: 40n }, quota: 2, partition: 1 },
    ],
  });
  assert.is(engine.config.sharedBlocks, 5);
  const p0 = engine.partitionRing(0);
  const p1 = engine.partitionRing(1);
  assert.equal([p0.firstBlock, p0.blocks, p0.order], [7, 3, 2]);
  assert.equal([p1.firstBlock, p1.blocks, p1.order], [5, 2, 1]);
  assert.equal(engine.readSlot(p0, 0), { sequence: 0, blockOffset: 7n * 64n });
  assert.equal(engine.readSlot(p0, 3), { sequence: 0xffffffff, blockOffset: 0xffffffffffffffffn });
  assert.is(engine.readCounters(p0).tailSlotOffset, 0x30);
  // The Ring STag covers Head and the slots: Head sits right before slot 0's cache line.
  assert.is(p0.slots - p0.head, 64);
  assert.is(engine.exports.homeRing(engine.address, 7n * 64n), p0.descriptor);
  assert.is(engine.exports.homeRing(engine.address, 4n * 64n), engine.sharedRing.descriptor);
});

test.run();
