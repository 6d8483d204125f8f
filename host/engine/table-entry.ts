// A block table entry and a ring slot as they sit in the target's memory, big-endian, readable
// by an initiator's one-sided RDMA Read (draft 3.2 and 3.3): the engine reads them in place, the
// initiator from the bytes its Read brought back. One decoder for both.
import * as S from '../../assembly/struct-offsets.ts';

/** A block table entry (draft 3.2). */
export interface TableEntry {
  flags: number;
  generation: number;
  dataLength: number;
  blockOffset: bigint;
}

/** A ring slot: the ticket whose turn it holds and the block it carries (all ones: none yet). */
export interface RingSlot {
  sequence: number;
  blockOffset: bigint;
}

export function decodeTableEntry(view: DataView, at: number): TableEntry {
  return {
    flags: view.getUint16(at + S.ENTRY_FLAGS, false),
    generation: view.getUint16(at + S.ENTRY_GENERATION, false),
    dataLength: view.getUint32(at + S.ENTRY_DATA_LENGTH, false),
    blockOffset: view.getBigUint64(at + S.ENTRY_BLOCK_OFFSET, false),
  };
}

export function decodeRingSlot(view: DataView, at: number): RingSlot {
  return { sequence: view.getUint32(at + S.SLOT_SEQUENCE, false), blockOffset: view.getBigUint64(at + S.SLOT_BLOCK_OFFSET, false) };
}
