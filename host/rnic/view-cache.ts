// Views of one buffer, kept by offset: a steady stream of messages names the same ranges over
// and over (a session's request slots, completion buffers, pool blocks, the frame ring's first
// octets after it emptied), and a fresh typed-array view per message is an allocation per
// message. Bounded: past `limit` offsets the cache starts over, so a scan over a large buffer
// costs what it did without it.

export class ViewCache {
  private readonly views = new Map<number, Uint8Array>();

  constructor(
    private readonly bytes: Uint8Array,
    private readonly limit: number,
  ) {}

  /** `bytes[offset, offset + length)`, the same view each time the same range is asked for. */
  view(offset: number, length: number): Uint8Array {
    const cached = this.views.get(offset);
    if (cached !== undefined && cached.length === length) return cached;
    if (this.views.size >= this.limit) this.views.clear();
    const view = this.bytes.subarray(offset, offset + length);
    this.views.set(offset, view);
    return view;
  }
}
