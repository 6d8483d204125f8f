// Pool occupancy from the rings' counters alone: cheap enough for every scrape and every status
// poll (the full pool audit walks the whole table and runs as a scheduled job instead).
import type { Engine } from '../host/engine/engine.ts';

export interface RingOccupancy {
  /** 'shared' or 'partition N'. */
  name: string;
  blocks: number;
  /** Blocks the ring holds (between Head and Tail, plus frees parked for a slot not consumed yet). */
  free: number;
  slots: number;
}

export interface PoolOccupancy {
  blockSize: number;
  blockCount: number;
  free: number;
  /** Every block no ring holds: bound to a handle, or between allocation and binding. */
  inUse: number;
  rings: RingOccupancy[];
}

export function poolOccupancy(engine: Engine): PoolOccupancy {
  const rings = engine.layout.rings.map((ring, index): RingOccupancy => {
    const counters = engine.readCounters(ring);
    // Tickets taken on an empty ring put Head ahead of Tail (they wait for a free): none free then.
    const held = Math.max(0, (counters.tailTicket - counters.headTicket) | 0);
    // Head and Tail are read one after the other while other threads move them: clamp to the ring.
    const free = Math.min(ring.blocks, held + engine.parkedFrees(ring).length);
    return { name: index === 0 ? 'shared' : `partition ${index - 1}`, blocks: ring.blocks, free, slots: 2 ** ring.order };
  });
  const free = rings.reduce((sum, ring) => sum + ring.free, 0);
  return { blockSize: engine.config.blockSize, blockCount: engine.config.blockCount, free, inUse: engine.config.blockCount - free, rings };
}
