// copyInto (host/rnic/rc/shared-copy.ts): the RC receive path's copy between shared buffers
// through memmove gives exactly what TypedArray.set gives (offsets inside both buffers, odd
// lengths, overlapping ranges of one buffer, plain buffers, short copies) and refuses to write
// past the target view. The send side's ICRC over a payload in shared memory (ISA-L at its
// address where libisal2 is installed) equals the one over the same octets in plain memory.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { fillIcrc, fillIcrcAfterUdp, socketIcrcHeaders } from '../../host/rnic/rc/link.ts';
import { copyInto, sharedAddress } from '../../host/rnic/rc/shared-copy.ts';
import { icrcAfterUdp } from '../../host/rnic/wire/icrc.ts';

function filled(buffer: ArrayBufferLike, seed: number): Uint8Array {
  const bytes = new Uint8Array(buffer);
  for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 31 + seed) & 0xff;
  return bytes;
}

test('shared to shared: the same octets as TypedArray.set, nothing around the range touched', () => {
  for (const length of [0, 1, 511, 512, 4096, 4099, 65536]) {
    for (const [sourceOffset, targetOffset, at] of [
      [0, 0, 0],
      [7, 13, 5],
      [4096, 100, 4093],
    ] as const) {
      const source = new Uint8Array(filled(new SharedArrayBuffer(80_000), 1).buffer, sourceOffset, length);
      const target = new Uint8Array(filled(new SharedArrayBuffer(80_000), 2).buffer, targetOffset, length + at + 9);
      const expected = new Uint8Array(target.buffer.byteLength);
      expected.set(new Uint8Array(target.buffer));
      new Uint8Array(expected.buffer, targetOffset, target.length).set(source, at);
      copyInto(target, at, source);
      assert.equal(new Uint8Array(target.buffer), expected, `length ${length} from +${sourceOffset} to +${targetOffset}+${at}`);
    }
  }
});

test('overlapping ranges of one shared buffer move as TypedArray.set moves them', () => {
  for (const [from, to] of [
    [0, 1000],
    [1000, 0],
    [100, 612],
  ] as const) {
    const bytes = filled(new SharedArrayBuffer(8192), 3);
    const expected = bytes.slice();
    expected.set(expected.slice(from, from + 4096), to);
    copyInto(bytes, to, bytes.subarray(from, from + 4096));
    assert.equal(bytes.slice(), expected, `${from} -> ${to}`);
  }
});

test('plain buffers and mixed ones take TypedArray.set', () => {
  const shared = filled(new SharedArrayBuffer(8192), 4);
  const plain = filled(new ArrayBuffer(8192), 5);
  copyInto(plain, 100, shared.subarray(0, 4096));
  assert.equal(plain.subarray(100, 4196), shared.subarray(0, 4096));
  copyInto(shared, 1, plain.subarray(0, 2048));
  assert.equal(shared.subarray(1, 2049), plain.subarray(0, 2048));
});

test('a copy past the end of the target view throws and writes nothing', () => {
  const buffer = new SharedArrayBuffer(16384);
  const target = new Uint8Array(buffer, 0, 8192);
  const source = filled(new SharedArrayBuffer(4096), 6);
  for (const offset of [4097, 8192, -1]) {
    assert.throws(() => copyInto(target, offset, source), RangeError);
  }
  assert.equal(new Uint8Array(buffer), new Uint8Array(16384));
});

test('the ICRC of a payload in shared memory (read in place by ISA-L where installed) equals the plain-memory one', () => {
  const ip = new Uint8Array(20);
  const udp = new Uint8Array(8);
  const header = new Uint8Array(28).map((_, i) => i * 13);
  for (const length of [1023, 1024, 4096, 4097]) {
    socketIcrcHeaders(ip, udp, { address: '127.0.0.1', port: 4791 }, { address: '127.0.0.2', port: 5000 }, 28 + length + (-length & 3) + 4);
    const shared = new Uint8Array(new SharedArrayBuffer(length + 100), 37, length);
    for (let i = 0; i < length; i++) shared[i] = i * 7 + length;
    assert.ok(sharedAddress(shared) > 0);
    const plain = shared.slice();
    const viaShared = new Uint8Array((-length & 3) + 4);
    const viaPlain = viaShared.slice();
    fillIcrcAfterUdp(icrcAfterUdp(ip, udp), header, shared, viaShared);
    fillIcrc(ip, udp, header, plain, viaPlain);
    assert.equal(viaShared, viaPlain, `payload of ${length} octets`);
    assert.not.equal(viaPlain.subarray(-4), new Uint8Array(4));
  }
});

test('addresses kept per view stay right: views of several buffers, past the bound that starts the cache over', () => {
  const buffers = [new SharedArrayBuffer(1 << 16), new SharedArrayBuffer(1 << 16)];
  const bases = buffers.map((buffer) => sharedAddress(new Uint8Array(buffer)));
  assert.ok(bases[0]! > 0 && bases[1]! > 0 && bases[0] !== bases[1]);
  const views: Uint8Array[] = [];
  for (let i = 0; i < 5000; i++) views.push(new Uint8Array(buffers[i & 1]!, (i * 13) % 60000, 512));
  for (let pass = 0; pass < 2; pass++) {
    for (let i = 0; i < views.length; i++) assert.is(sharedAddress(views[i]!), bases[i & 1]! + ((i * 13) % 60000), `view ${i}, pass ${pass}`);
  }
  // Plain memory is never taken for shared, however often it is asked about.
  const plain = new Uint8Array(4096);
  for (let i = 0; i < 3; i++) assert.is(sharedAddress(plain), -1);
  // A copy between kept views lands where TypedArray.set puts it.
  const source = views[2]!;
  source.fill(0x5a);
  const target = views[3]!;
  copyInto(target, 0, source);
  assert.equal(target, source);
});

test.run();
