// Block contents and the load check: a block from another handle, a stale version or one flipped
// octet is reported; the block that was stored passes.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { BlockMaker, checkBlock, type ExpectedBlock } from '../../host/bench/blocks.ts';

test("the stored block passes; others and corrupted ones do not (checkBlock and the maker's faster check)", () => {
  const ways = ['checkBlock', 'maker', 'maker with a kept stamp view'] as const;
  for (const [size, how] of [4096, 16 * 1024, 1024 * 1024 + 3].flatMap((size) => ways.map((way) => [size, way] as const))) {
    const maker = new BlockMaker(size);
    const check =
      how === 'checkBlock'
        ? checkBlock
        : how === 'maker'
          ? maker.check.bind(maker)
          : (data: Uint8Array, expected: ExpectedBlock, handle: bigint) => maker.check(data, expected, handle, maker.stampOf(data));
    const buffer = maker.buffer();
    const expected = maker.make(buffer, 42n, 7);
    assert.is(check(buffer, expected, 42n), undefined, `size ${size}`);

    const other = maker.buffer();
    maker.make(other, 43n, 7);
    assert.match(check(other, expected, 42n) ?? '', /block of handle 43/);

    const stale = maker.buffer();
    maker.make(stale, 42n, 6);
    assert.match(check(stale, expected, 42n) ?? '', /version 6, stored version 7/);

    const flipped = buffer.slice();
    flipped[size >> 1] = (flipped[size >> 1] ?? 0) ^ 0x01;
    assert.match(check(flipped, expected, 42n) ?? '', /checksum/);

    assert.match(check(buffer.subarray(0, size - 1), expected, 42n) ?? '', /loaded \d+ octets, stored/);
  }
});

test('blocks shorter than the stamp are checked too', () => {
  const maker = new BlockMaker(8);
  const buffer = maker.buffer();
  const expected = maker.make(buffer, 5n, 1);
  assert.is(checkBlock(buffer, expected, 5n), undefined);
  const wrong = buffer.slice();
  wrong[0] = (wrong[0] ?? 0) ^ 0xff;
  assert.ok(checkBlock(wrong, expected, 5n) !== undefined);
  assert.is(maker.check(buffer, expected, 5n), undefined);
  assert.ok(maker.check(wrong, expected, 5n) !== undefined);
});

test.run();
