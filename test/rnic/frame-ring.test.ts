// The transmitter's frame ring: space is handed out at the head and freed from the tail as
// writes complete in order; what does not fit is allocated apart; nothing in use is handed out twice.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { FrameRing } from '../../host/rnic/frame-ring.ts';

/** Reserves `size` octets and marks them with `mark`; returns where they are. */
function take(ring: FrameRing, size: number, mark: number, done?: () => void): { bytes: Uint8Array; start: number } {
  const bytes = ring.reserve(size, done);
  const start = ring.start;
  bytes.fill(mark, start, start + size);
  return { bytes, start };
}

test('reservations wrap around and never overlap one in use', () => {
  const ring = new FrameRing(1024);
  const live: Array<{ bytes: Uint8Array; start: number; size: number; mark: number }> = [];
  let mark = 1;
  let apart = 0;
  for (let step = 0; step < 5000; step++) {
    // Reserve 1 to 3 messages of 10..250 octets, then complete 0 to 3 of the oldest.
    for (let i = 0; i < 1 + (step % 3); i++) {
      const size = 10 + ((step * 37 + i * 11) % 241);
      const { bytes, start } = take(ring, size, mark);
      if (bytes.length === size && start === 0 && bytes.length !== 1024) apart++;
      live.push({ bytes, start, size, mark });
      mark = (mark % 250) + 1;
    }
    for (let i = 0; i < (step * 7) % 4 && live.length > 0; i++) {
      const oldest = live.shift()!;
      // Nothing reserved since wrote over it.
      for (let k = oldest.start; k < oldest.start + oldest.size; k++) assert.is(oldest.bytes[k], oldest.mark);
      ring.release();
    }
  }
  assert.ok(apart > 0, 'a full ring allocated apart');
});

test('release hands back each reservation done in order', () => {
  const ring = new FrameRing(4096);
  const order: number[] = [];
  for (let i = 0; i < 300; i++) take(ring, 100, 1, () => order.push(i));
  for (let i = 0; i < 300; i++) ring.release()?.();
  assert.equal(
    order,
    Array.from({ length: 300 }, (_, i) => i),
  );
  assert.is(ring.release(), undefined);
  // Empty again: the next reservation starts at the beginning.
  take(ring, 100, 1);
  assert.is(ring.start, 0);
});

test('a message larger than a quarter of the ring is allocated apart', () => {
  const ring = new FrameRing(1024);
  const small = ring.reserve(100, undefined);
  const large = ring.reserve(600, undefined);
  assert.not.equal(large, small);
  assert.is(large.length, 600);
});

test.run();
