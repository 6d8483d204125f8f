// The pool audit: at a quiet moment every block must be exactly once either bound in the table
// or held by a ring (in a filled slot or in a parked free). Anything else is a lost or doubled block.
import * as S from '../../assembly/struct-offsets.ts';
import { ENTRY_VALID } from '../../assembly/kbtp-constants.ts';
import type { Engine } from './engine.ts';

const ALL_ONES = 0xffffffffffffffffn;

export interface AuditReport {
  ok: boolean;
  bound: number;
  inRings: number;
  /** Block indices found nowhere. */
  lost: number[];
  /** Block indices found more than once, with where. */
  doubled: Array<{ block: number; places: string[] }>;
  /** Other inconsistencies (misaligned offsets, blocks on a foreign ring, counters out of step). */
  problems: string[];
}

export function auditPool(engine: Engine): AuditReport {
  const { config, layout, view } = engine;
  const places: string[][] = Array.from({ length: config.blockCount }, () => []);
  const problems: string[] = [];
  const note = (blockOffset: bigint, place: string, homeRing?: number): void => {
    const index = Number(blockOffset / BigInt(config.blockSize));
    if (blockOffset % BigInt(config.blockSize) !== 0n || index >= config.blockCount) {
      problems.push(`${place} holds ${blockOffset}, which is not a block offset`);
      return;
    }
    places[index]?.push(place);
    if (homeRing !== undefined) {
      const ring = layout.rings[homeRing];
      if (ring !== undefined && (index < ring.firstBlock || index >= ring.firstBlock + ring.blocks)) {
        problems.push(`block ${index} sits on ring ${homeRing}, which is not its home`);
      }
    }
  };

  let bound = 0;
  for (let index = 0; index < config.handleCount; index++) {
    const entry = layout.table + S.ENTRY_SIZE * index;
    const flags = view.getUint16(entry, false);
    if (view.getUint16(entry + 2, false) === 0) problems.push(`handle ${config.handleBase + BigInt(index)} has Generation 0`);
    if ((flags & ENTRY_VALID) === 0) continue;
    bound += 1;
    const blockOffset = view.getBigUint64(entry + 8, false);
    // On the durable tier alone (kbtp-v1 section 12): bound, but no pool block.
    if (blockOffset === ALL_ONES && config.durable) continue;
    note(blockOffset, `handle ${config.handleBase + BigInt(index)}`);
  }

  let inRings = 0;
  layout.rings.forEach((ring, ringIndex) => {
    const slotCount = 2 ** ring.order;
    const counters = engine.readCounters(ring);
    const held = (counters.tailTicket - counters.headTicket) >>> 0;
    if (held > ring.blocks) problems.push(`ring ${ringIndex}: Tail is ${held} tickets ahead of Head, over its ${ring.blocks} blocks`);
    for (let slot = 0; slot < slotCount; slot++) {
      const { sequence, blockOffset } = engine.readSlot(ring, slot);
      if (blockOffset === ALL_ONES) continue;
      if ((sequence & (slotCount - 1)) !== slot) problems.push(`ring ${ringIndex} slot ${slot} holds Sequence ${sequence} of another slot`);
      inRings += 1;
      note(blockOffset, `ring ${ringIndex} slot ${slot} (ticket ${sequence})`, ringIndex);
    }
    for (const parked of engine.parkedFrees(ring)) {
      inRings += 1;
      note(parked.blockOffset, `ring ${ringIndex} parked free (ticket ${parked.ticket})`, ringIndex);
    }
  });

  const lost: number[] = [];
  const doubled: Array<{ block: number; places: string[] }> = [];
  places.forEach((where, block) => {
    if (where.length === 0) lost.push(block);
    else if (where.length > 1) doubled.push({ block, places: where });
  });
  return { ok: lost.length === 0 && doubled.length === 0 && problems.length === 0, bound, inRings, lost, doubled, problems };
}
