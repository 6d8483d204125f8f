// Views kept by (offset, length): the same range gives the same view, several lengths at one
// offset are all kept (the frame ring's first octets hold a request, then a Write's headers,
// turn after turn), and every view shows exactly its range of the buffer.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ViewCache } from '../../host/rnic/view-cache.ts';

test('lengths that alternate at one offset are all served from the cache', () => {
  const bytes = new Uint8Array(4096).map((_, i) => i & 0xff);
  const cache = new ViewCache(bytes, 16);
  const request = cache.view(0, 64);
  const write = cache.view(0, 1044);
  const header = cache.view(0, 52);
  for (let turn = 0; turn < 3; turn++) {
    assert.ok(cache.view(0, 64) === request);
    assert.ok(cache.view(0, 1044) === write);
    assert.ok(cache.view(0, 52) === header);
  }
  assert.is(write.length, 1044);
  assert.is(write.byteOffset, 0);
  assert.is(cache.view(100, 8)[0], 100);
  assert.is(cache.view(100, 8).length, 8);
});

test('a further length at a full offset replaces one, and the cache stays bounded by offsets', () => {
  const bytes = new Uint8Array(1024);
  const cache = new ViewCache(bytes, 2);
  const first = [1, 2, 3, 4].map((length) => cache.view(8, length));
  const fifth = cache.view(8, 5);
  assert.is(fifth.length, 5);
  assert.ok(cache.view(8, 5) === fifth);
  const kept = [1, 2, 3, 4].filter((length, i) => cache.view(8, length) === first[i]);
  assert.ok(kept.length < 4, 'one of the four earlier lengths made room');
  // Past the limit of offsets the cache starts over: views stay correct.
  const other = cache.view(16, 4);
  const third = cache.view(24, 4);
  assert.is(other.byteOffset, 16);
  assert.is(third.byteOffset, 24);
  bytes[24] = 7;
  assert.is(cache.view(24, 4)[0], 7);
});

test('many ranges that recur (the blocks of a pool) are all kept once the table has grown to them', () => {
  const bytes = new Uint8Array(1 << 20);
  const cache = new ViewCache(bytes, 4096);
  const block = 16384;
  const first = Array.from({ length: 64 }, (_, i) => cache.view(i * block, block));
  // A 64-octet header at each block too: two lengths per offset.
  const headers = Array.from({ length: 64 }, (_, i) => cache.view(i * block, 64));
  for (let i = 0; i < 64; i++) {
    assert.ok(cache.view(i * block, block) === first[i], `block ${i}`);
    assert.ok(cache.view(i * block, 64) === headers[i], `header ${i}`);
    assert.is(first[i]!.byteOffset, i * block);
    assert.is(headers[i]!.length, 64);
  }
});

test.run();
