// Views of one buffer, kept by offset: a steady stream of messages names the same ranges over
// and over (a session's request slots, completion buffers, pool blocks, the frame ring's first
// octets after it emptied), and a fresh typed-array view per message is an allocation per
// message. An offset keeps views of a few lengths: the frame ring's first octets hold a 64-octet
// request, a COMPLETION or a Read Request header, then a Write's headers, turn after turn, and
// one view per offset missed every time the length changed (issue 16: about 80 octets per
// request). Bounded: past `limit` offsets the cache starts over, so a scan over a large buffer
// costs what it did without it.

/** Lengths kept per offset; a further length replaces them in turn. */
const WAYS = 4;

export class ViewCache {
  private readonly views = new Map<number, Uint8Array[]>();
  /** Which way of a full offset the next new length replaces. */
  private victim = 0;

  constructor(
    private readonly bytes: Uint8Array,
    private readonly limit: number,
  ) {}

  /** `bytes[offset, offset + length)`, the same view each time the same range is asked for. */
  view(offset: number, length: number): Uint8Array {
    let ways = this.views.get(offset);
    if (ways !== undefined) {
      for (let i = 0; i < ways.length; i++) {
        const cached = ways[i]!;
        if (cached.length === length) return cached;
      }
    } else {
      if (this.views.size >= this.limit) this.views.clear();
      ways = [];
      this.views.set(offset, ways);
    }
    const view = this.bytes.subarray(offset, offset + length);
    if (ways.length < WAYS) {
      ways.push(view);
    } else {
      ways[this.victim] = view;
      this.victim = (this.victim + 1) % WAYS;
    }
    return view;
  }
}
