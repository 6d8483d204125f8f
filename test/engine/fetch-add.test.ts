import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Engine } from '../../host/engine/engine.ts';

const engine = Engine.create({ blockSize: 64, blockCount: 8, ringOrder: 3, threads: 1 });
const cell = engine.layout.requests; // a request context no request uses in this file: 8-aligned scratch
const x = engine.exports;
const view = engine.view;

/** RFC 7306 5.1.1 restated bit by bit (iwarp.md 7.5), the reference for the branch-free form. */
function referenceMaskedSum(original: bigint, addend: bigint, mask: bigint): bigint {
  let result = 0n;
  let carry = 0n;
  for (let bit = 0n; bit < 64n; bit++) {
    const sum = ((original >> bit) & 1n) + ((addend >> bit) & 1n) + carry;
    if ((sum & 1n) !== 0n) result |= 1n << bit;
    carry = (sum >> 1n) & 1n;
    if (((mask >> bit) & 1n) !== 0n) carry = 0n;
  }
  return result;
}

function fetchAddAt(original: bigint, addend: bigint, mask: bigint): { returned: bigint; stored: bigint } {
  view.setBigUint64(cell, original, true);
  const returned = BigInt.asUintN(64, x.maskedFetchAdd(cell, addend, mask));
  return { returned, stored: view.getBigUint64(cell, true) };
}

test('iwarp.md 7.5 masked FetchAdd vectors', () => {
  const vectors: Array<[bigint, bigint, bigint, bigint]> = [
    [0x00000000ffffffffn, 1n, 0x8000000080000000n, 0x0000000000000000n],
    [0x7f7f7f7f7f7f7f7fn, 0x0101010101010101n, 0x8080808080808080n, 0x8080808080808080n],
    [0x00ff00ff00ff00ffn, 0x0001000100010001n, 0x8000800080008000n, 0x0100010001000100n],
    [0xffffffffffffffffn, 1n, 0n, 0n], // mask 0: ordinary 64-bit wrap-around addition
  ];
  for (const [original, addend, mask, expected] of vectors) {
    const { returned, stored } = fetchAddAt(original, addend, mask);
    assert.is(returned, original, 'FetchAdd returns the original value');
    assert.is(stored, expected, `0x${original.toString(16)} + 0x${addend.toString(16)} under 0x${mask.toString(16)}`);
  }
});

test('branch-free masked sum equals the RFC bit loop on random inputs', () => {
  let seed = 0x9e3779b97f4a7c15n;
  const next = (): bigint => {
    seed = BigInt.asUintN(64, seed * 6364136223846793005n + 1442695040888963407n);
    return seed;
  };
  const masks = [0n, 0xffffffffffffffffn, 0x8080808080808080n, 0x8000000080000000n, 1n << 63n];
  for (let i = 0; i < 4000; i++) {
    const original = next();
    const addend = next();
    const mask = i < masks.length * 100 ? (masks[i % masks.length] ?? 0n) : next();
    assert.is(fetchAddAt(original, addend, mask).stored, referenceMaskedSum(original, addend, mask));
  }
});

test('draft 3.3 counter, n = 3: offsets 0x00..0x70 wrap to 0x00, ticket +1, carries dropped', () => {
  const mask = x.ringAddMask(3);
  assert.is(BigInt.asUintN(64, mask), (1n << 63n) | (1n << 31n) | (1n << 6n));
  view.setBigUint64(cell, 0n, true);
  const seen: Array<[number, number]> = [];
  for (let i = 0; i < 10; i++) {
    const old = BigInt.asUintN(64, x.maskedFetchAdd(cell, 0x0000000100000010n, mask));
    seen.push([Number(old >> 32n), Number(old & 0xffffffffn)]);
  }
  assert.equal(seen, [
    [0, 0x00],
    [1, 0x10],
    [2, 0x20],
    [3, 0x30],
    [4, 0x40],
    [5, 0x50],
    [6, 0x60],
    [7, 0x70],
    [8, 0x00],
    [9, 0x10],
  ]);
  // Ticket 0xffffffff at the last slot: both fields wrap, nothing carries into bits 31..7 or past 63.
  assert.is(fetchAddAt(0xffffffff00000070n, 0x0000000100000010n, mask).stored, 0n);
  // A carry out of the Slot Offset field never reaches the zero field above it.
  assert.is(fetchAddAt(0x0000000500000070n, 0x0000000100000010n, mask).stored, 0x0000000600000000n);
});

test('ring tickets: masked mode returns the Slot Offset, unmasked mode derives 16 * (ticket mod N)', () => {
  const masked = Engine.create({ blockSize: 64, blockCount: 8, ringOrder: 3, threads: 1 });
  const unmasked = Engine.create({ blockSize: 64, blockCount: 8, ringOrder: 3, ringMode: 'unmasked', threads: 1 });
  for (let ticket = 0; ticket < 20; ticket++) {
    for (const e of [masked, unmasked]) {
      const counter = e.exports.ringTakeTicket(e.sharedRing.descriptor);
      assert.is(Number(BigInt.asUintN(64, counter) >> 32n), ticket);
      assert.is(e.exports.ringSlotOffset(e.sharedRing.descriptor, counter), 16 * (ticket % 8));
    }
  }
  assert.is(unmasked.view.getBigUint64(unmasked.sharedRing.head, true), 20n << 32n, 'unmasked Head has zero low half');
  assert.is(masked.view.getBigUint64(masked.sharedRing.head, true), (20n << 32n) | 0x40n);
});

test('masked CmpSwap compares and swaps only under the masks (iwarp.md 7.6)', () => {
  view.setBigUint64(cell, 0x1122334455667788n, true);
  // Compare the low byte only (matches), swap the high byte only.
  let old = BigInt.asUintN(64, x.maskedCompareSwap(cell, 0x88n, 0xffn, 0xaa00000000000000n, 0xff00000000000000n));
  assert.is(old, 0x1122334455667788n);
  assert.is(view.getBigUint64(cell, true), 0xaa22334455667788n);
  // A mismatch under the compare mask leaves memory alone and still returns the original.
  old = BigInt.asUintN(64, x.maskedCompareSwap(cell, 0x00n, 0xffn, 0n, 0xffffffffffffffffn));
  assert.is(old, 0xaa22334455667788n);
  assert.is(view.getBigUint64(cell, true), 0xaa22334455667788n);
});

test.run();
