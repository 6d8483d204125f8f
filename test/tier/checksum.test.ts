// The tier's CRC32C (host/tier/checksum.ts): ISA-L for large inputs where libisal.so.2 is
// installed, @node-rs/crc32 otherwise. Checked against a bitwise reference written here (not
// against either library), across the size at which the implementations change, at unaligned
// offsets of a SharedArrayBuffer (the engine's memory is one), and past one ISA-L piece (1 MiB).
import fs from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { crc32c, crc32cImplementation } from '../../host/tier/checksum.ts';

/** CRC32C, reflected polynomial 0x82F63B78, table-driven: slow and obviously right. */
const TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function reference(data: Uint8Array): number {
  let c = 0xffffffff;
  for (const octet of data) c = (TABLE[(c ^ octet) & 0xff] as number) ^ (c >>> 8);
  return ~c >>> 0;
}

test('RFC 3720 (iSCSI) test vectors', () => {
  assert.is(crc32c(new Uint8Array(32)), 0x8a9136aa);
  assert.is(crc32c(new Uint8Array(32).fill(0xff)), 0x62a8ab43);
  assert.is(crc32c(Uint8Array.from({ length: 32 }, (_, i) => i)), 0x46dd794e);
  assert.is(crc32c(Uint8Array.from({ length: 32 }, (_, i) => 31 - i)), 0x113fdb5c);
  assert.is(crc32c(new Uint8Array(0)), 0);
});

test('large and unaligned inputs in shared memory match the reference', () => {
  const memory = new Uint8Array(new SharedArrayBuffer(3 << 20));
  let x = 0x9e3779b9;
  for (let i = 0; i < memory.length; i++) {
    x = (x ^ (x << 13)) >>> 0;
    x = (x ^ (x >>> 17)) >>> 0;
    x = (x ^ (x << 5)) >>> 0;
    memory[i] = x & 0xff;
  }
  for (const [offset, length] of [
    [0, 4095],
    [0, 4096],
    [1, 4097],
    [4096, 65536],
    [13, 262144],
    [7, (1 << 20) - 1],
    [0, 1 << 20],
    [3, (1 << 20) + 4099],
    [5, (2 << 20) + 12345],
  ] as const) {
    const view = memory.subarray(offset, offset + length);
    assert.is(crc32c(view), reference(view), `offset ${offset}, length ${length} (${crc32cImplementation()})`);
  }
});

test('ISA-L is used for large inputs wherever libisal.so.2 is installed', () => {
  const installed = ['/usr/lib/x86_64-linux-gnu/libisal.so.2', '/usr/lib64/libisal.so.2', '/usr/lib/libisal.so.2'].some((file) => fs.existsSync(file));
  if (process.env.KBTP_CRC32C === 'node-rs' || !installed || process.platform !== 'linux') {
    assert.match(crc32cImplementation(), '@node-rs/crc32');
    return;
  }
  assert.match(crc32cImplementation(), 'ISA-L');
});

test.run();
