// The data file's free slots, lowest first. Taking the lowest free slot gives the seals of a group
// consecutive slots whenever consecutive slots are free (after a run of FREEs, the usual case), so
// the group's data goes out in one vectored write instead of one write per block, and it keeps the
// blocks at the front of the file, so that a checkpoint can give the free tail back
// (maintenance.ts). A binary min-heap: O(log n) per slot, no allocation once grown.

export class FreeSlots {
  private heap: Int32Array;
  private count = 0;

  constructor(capacity = 64) {
    this.heap = new Int32Array(Math.max(1, capacity));
  }

  get size(): number {
    return this.count;
  }

  push(slot: number): void {
    if (this.count === this.heap.length) {
      const grown = new Int32Array(this.heap.length * 2);
      grown.set(this.heap);
      this.heap = grown;
    }
    const heap = this.heap;
    let at = this.count++;
    while (at > 0) {
      const parent = (at - 1) >> 1;
      const above = heap[parent] as number;
      if (above <= slot) break;
      heap[at] = above;
      at = parent;
    }
    heap[at] = slot;
  }

  /** The lowest free slot, taken; undefined when none is free. */
  take(): number | undefined {
    if (this.count === 0) return undefined;
    const heap = this.heap;
    const lowest = heap[0] as number;
    const last = heap[--this.count] as number;
    let at = 0;
    for (;;) {
      let child = 2 * at + 1;
      if (child >= this.count) break;
      const right = child + 1;
      if (right < this.count && (heap[right] as number) < (heap[child] as number)) child = right;
      if ((heap[child] as number) >= last) break;
      heap[at] = heap[child] as number;
      at = child;
    }
    heap[at] = last;
    return lowest;
  }

  /** Forgets every free slot at or past `limit` (the data file was cut there). */
  keepBelow(limit: number): void {
    const kept: number[] = [];
    for (let i = 0; i < this.count; i++) {
      const slot = this.heap[i] as number;
      if (slot < limit) kept.push(slot);
    }
    this.count = 0;
    for (const slot of kept) this.push(slot);
  }
}
