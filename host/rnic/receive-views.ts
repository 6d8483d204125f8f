// Views of the memory a receiver reads straight into: a direct read lands in a range of the
// target's buffer that is rarely a view the sink handed out (the payload plus the octets read
// past it, or the rest of a payload after a staged start), and a fresh view per large FPDU was
// an allocation per 64 KiB of every large message (issue 16: `new Uint8Array` and `subarray`
// under the socket's read-buffer callback, about 3.5 % of a 256 KiB STORE's worker). A receiver
// meets few buffers (its QP's registered regions: a target's request contexts and block pool),
// so a handful of view caches, one per buffer, replaced in turn, cover a steady stream.

import { ViewCache } from './view-cache.ts';

/** Buffers whose views are kept at once (a target's contexts and pool, a client's regions). */
const BUFFERS = 4;
/** Ranges kept per buffer (see ViewCache): blocks times FPDUs per block for a busy pool. */
const RANGES_PER_BUFFER = 4096;

export class BufferViews {
  private readonly buffers: Array<ArrayBufferLike | undefined> = [undefined, undefined, undefined, undefined];
  private readonly caches: Array<ViewCache | undefined> = [undefined, undefined, undefined, undefined];
  private replace = 0;

  /** `length` octets at `byteOffset` of `buffer`, the same view each time the range recurs while it is kept. */
  view(buffer: ArrayBufferLike, byteOffset: number, length: number): Uint8Array {
    for (let i = 0; i < BUFFERS; i++) {
      if (this.buffers[i] === buffer) return this.caches[i]!.view(byteOffset, length);
    }
    const at = this.replace;
    this.replace = (at + 1) % BUFFERS;
    const cache = new ViewCache(new Uint8Array(buffer), RANGES_PER_BUFFER);
    this.buffers[at] = buffer;
    this.caches[at] = cache;
    return cache.view(byteOffset, length);
  }

  /** `target[from, from + length)` through the cache (the target itself when that is the whole of it). */
  within(target: Uint8Array, from: number, length: number): Uint8Array {
    if (from === 0 && length === target.length) return target;
    return this.view(target.buffer, target.byteOffset + from, length);
  }
}
