// CRC-32 continued by table for short runs (host/util/crc32.ts) gives @node-rs/crc32's values:
// kbtp bench's stamp check and RoCE's ICRC rely on the two agreeing octet for octet.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { crc32 } from '@node-rs/crc32';
import { crc32Continue, crc32Range, CRC32_NATIVE_FROM } from '../../host/util/crc32.ts';
import { fillPattern } from '../../host/bench/blocks.ts';

test('crc32Continue and crc32Range equal the native CRC-32 below, at and above the native threshold, from any running value', () => {
  const bytes = new Uint8Array(CRC32_NATIVE_FROM + 64);
  fillPattern(bytes, 99);
  for (const running of [0, 1, 0xcbf43926, 0xffffffff, crc32(bytes.subarray(0, 1000 % bytes.length))]) {
    for (const length of [0, 1, 15, 16, 17, CRC32_NATIVE_FROM - 1, CRC32_NATIVE_FROM, CRC32_NATIVE_FROM + 64]) {
      const run = bytes.subarray(0, length);
      const native = length === 0 ? running : crc32(run, running);
      assert.is(crc32Continue(running, run), native, `continue, length ${length}, running ${running}`);
      assert.is(crc32Range(running, bytes, 0, length), native, `range, length ${length}, running ${running}`);
    }
  }
});

test('a CRC continued over a block in two parts is the CRC of the whole block', () => {
  const block = new Uint8Array(16 * 1024);
  fillPattern(block, 7);
  const body = block.subarray(0, block.length - 16);
  assert.is(crc32Continue(crc32(body), block.subarray(body.length)), crc32(block));
});

test.run();
