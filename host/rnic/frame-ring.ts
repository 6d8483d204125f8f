// Where a transmitter lays out its headers, trailers and short whole messages: one ring buffer,
// reused, instead of an allocation per message. The bytes of a message must stay untouched
// until the byte sink reports that the kernel took them, and a sink reports its writes in the
// order they were handed in (a TCP stream completes writes in order), so space is reserved at
// the head and released from the tail, one reservation per message, first in first out. A
// message that does not fit (a very large one, or a sink that has fallen far behind) gets an
// allocation of its own, as before, and releases nothing.

import type { WriteDone } from './transmit.ts';
import { ViewCache } from './view-cache.ts';

export class FrameRing {
  /** The ring; `reserve()` hands out this array or a fresh one for a message that did not fit. */
  private readonly ring: Uint8Array;
  private head = 0;
  private tail = 0;
  /** End (exclusive) of each outstanding reservation, oldest first, as a circular queue; -1: allocated apart. */
  private ends = new Int32Array(64);
  /** What to call when each outstanding reservation's write completes (same positions as `ends`). */
  private dones: Array<WriteDone | undefined> = new Array(64).fill(undefined);
  private first = 0;
  private count = 0;
  /** Outstanding reservations that hold ring space. */
  private held = 0;
  /** Offset of the last reservation in the array `reserve()` returned. */
  start = 0;

  /** Views of the ring: it starts over at 0 whenever it empties, so the same ranges recur. */
  private readonly views: ViewCache;

  constructor(capacity: number) {
    this.ring = new Uint8Array(capacity);
    this.views = new ViewCache(this.ring, 1024);
  }

  /** `length` octets at `start` of what `reserve()` returned, as a view (cached for the ring). */
  view(bytes: Uint8Array, start: number, length: number): Uint8Array {
    return bytes === this.ring ? this.views.view(start, length) : bytes.subarray(start, start + length);
  }

  /**
   * `size` octets that stay valid until their release: a slice of the ring (`start` says where)
   * or, when the ring has no room, a new zero-filled array (`start` 0). Ring space is not zeroed.
   */
  reserve(size: number, done: WriteDone | undefined): Uint8Array {
    if (this.count === this.ends.length) this.grow();
    const index = (this.first + this.count) & (this.ends.length - 1);
    this.dones[index] = done;
    this.count++;
    if (this.held === 0) {
      this.head = 0;
      this.tail = 0;
    }
    let at = -1;
    if (size <= this.ring.length >>> 2) {
      if (this.head >= this.tail) {
        // Free: [head, length) and [0, tail). A wrapped reservation stops short of tail, so
        // head === tail only ever means empty.
        if (this.ring.length - this.head >= size) at = this.head;
        else if (this.tail > size) at = 0;
      } else if (this.tail - this.head > size) {
        at = this.head;
      }
    }
    if (at < 0) {
      this.ends[index] = -1;
      this.start = 0;
      return new Uint8Array(size);
    }
    this.head = at + size;
    this.ends[index] = this.head;
    this.held++;
    this.start = at;
    return this.ring;
  }

  /** The oldest outstanding reservation's write completed: its space may be reused; returns its done. */
  release(): WriteDone | undefined {
    if (this.count === 0) return undefined;
    const end = this.ends[this.first]!;
    const done = this.dones[this.first];
    this.dones[this.first] = undefined;
    this.first = (this.first + 1) & (this.ends.length - 1);
    this.count--;
    if (end >= 0) {
      this.tail = end;
      this.held--;
    }
    return done;
  }

  /** Doubles the queue of outstanding reservations (a sink far behind; rare, then kept). */
  private grow(): void {
    const grown = new Int32Array(this.ends.length * 2);
    const grownDones: Array<WriteDone | undefined> = new Array(grown.length).fill(undefined);
    for (let i = 0; i < this.count; i++) {
      const from = (this.first + i) & (this.ends.length - 1);
      grown[i] = this.ends[from]!;
      grownDones[i] = this.dones[from];
    }
    this.ends = grown;
    this.dones = grownDones;
    this.first = 0;
  }
}
