// Views of one buffer, kept by offset and length: a steady stream of messages names the same
// ranges over and over (a session's request slots, completion buffers, pool blocks, the frame
// ring's first octets after it emptied), and a fresh typed-array view per message is an
// allocation per message. An offset keeps views of a few lengths: the frame ring's first octets
// hold a 64-octet request, a COMPLETION or a Read Request header, then a Write's headers, turn
// after turn, and one view per offset missed every time the length changed (issue 16: about 80
// octets per request).
//
// A set-associative table in flat arrays, not a Map of arrays: the lookup runs for every
// gathered and placed message on both sides, and a Map probe (FindOrderedHashMapEntry) plus the
// ways' array was about 3 % of the target's samples per 16 KiB LOAD (issue 16, session 10). The
// table starts small and doubles while a full set would otherwise evict, up to about `limit`
// sets; past that a new range replaces one of its set's in turn, so a scan over a large buffer
// costs what it did without the cache.

/** Ranges kept per set (an offset's lengths share its set). */
const WAYS = 4;
const INITIAL_BITS = 4;
/** Fibonacci hashing: the product's high bits mix every bit of the offset. */
const GOLDEN = 0x9e3779b1;

export class ViewCache {
  private readonly maxBits: number;
  private bits: number;
  private offsets: Float64Array;
  private views: Array<Uint8Array | undefined>;
  /** Which way of a full set the next new range replaces. */
  private victim = 0;

  constructor(
    private readonly bytes: Uint8Array,
    limit: number,
  ) {
    this.maxBits = Math.max(1, Math.ceil(Math.log2(Math.max(2, limit))));
    this.bits = Math.min(INITIAL_BITS, this.maxBits);
    this.offsets = new Float64Array(WAYS << this.bits);
    this.views = emptyWays(WAYS << this.bits);
  }

  /** `bytes[offset, offset + length)`, the same view each time the same range is asked for while it is kept. */
  view(offset: number, length: number): Uint8Array {
    const offsets = this.offsets;
    const views = this.views;
    const first = this.setOf(offset);
    for (let i = first; i < first + WAYS; i++) {
      const cached = views[i];
      if (cached !== undefined && offsets[i] === offset && cached.length === length) return cached;
    }
    const view = this.bytes.subarray(offset, offset + length);
    this.keep(offset, view);
    return view;
  }

  private setOf(offset: number): number {
    return (Math.imul(offset | 0, GOLDEN) >>> (32 - this.bits)) * WAYS;
  }

  private keep(offset: number, view: Uint8Array): void {
    if (this.place(offset, view)) return;
    if (this.bits < this.maxBits) {
      this.grow();
      if (this.place(offset, view)) return;
    }
    const at = this.setOf(offset) + this.victim;
    this.victim = (this.victim + 1) % WAYS;
    this.offsets[at] = offset;
    this.views[at] = view;
  }

  /** Puts the range in a free way of its set; false when the set is full. */
  private place(offset: number, view: Uint8Array): boolean {
    const first = this.setOf(offset);
    for (let i = first; i < first + WAYS; i++) {
      if (this.views[i] === undefined) {
        this.offsets[i] = offset;
        this.views[i] = view;
        return true;
      }
    }
    return false;
  }

  /** Doubles the sets and places every kept range again (one that finds its new set full is dropped). */
  private grow(): void {
    const offsets = this.offsets;
    const views = this.views;
    this.bits++;
    this.offsets = new Float64Array(WAYS << this.bits);
    this.views = emptyWays(WAYS << this.bits);
    for (let i = 0; i < views.length; i++) {
      const view = views[i];
      if (view !== undefined) this.place(offsets[i]!, view);
    }
  }
}

/** `count` empty ways, as a packed array (no hole checks on the lookup). */
function emptyWays(count: number): Array<Uint8Array | undefined> {
  const ways: Array<Uint8Array | undefined> = [];
  for (let i = 0; i < count; i++) ways.push(undefined);
  return ways;
}
