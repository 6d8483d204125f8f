// The free-block ring of draft 3.3: tickets from FetchAdd on Head and Tail, slots that are
// filled by frees and consumed by allocations, and the parked frees that arrive for a slot
// whose previous turn has not been consumed yet.
import {
  RING_TAIL, RING_MODE, RING_ORDER, RING_SLOTS, RING_HEAD, RING_DEFERRED_COUNT, RING_DEFERRED_LOCK,
  RING_DEFERRED_LIST, RING_DEFERRED_USED, RING_ABANDONED, RING_MODE_MASKED, DEFERRED_ENTRY_SIZE, SLOT_SIZE, SLOT_BLOCK_OFFSET,
} from './struct-offsets';
import { RING_ADD_DATA_MASKED, RING_ADD_DATA_UNMASKED } from './kbtp-constants';
import { maskedFetchAdd } from './masked-fetch-add';
import { atomicLoadU32, atomicStoreU32, atomicStoreU64 } from './big-endian';

/** Block Offset all ones: the slot's block has been taken. Byte order does not matter for it. */
export const CONSUMED: u64 = 0xffffffffffffffff;
export const RECLAIM_NOT_FILLED: i64 = -2;
export const RECLAIM_ALREADY_CONSUMED: i64 = -1;
export const RECLAIM_NOT_TAKEN: i64 = -3;

// @ts-ignore: decorator
@inline function slotCount(ring: usize): u32 {
  return <u32>1 << load<u32>(ring + RING_ORDER);
}

/** Add Mask of draft 3.3: bit 63 | bit 31 | bit (n + 3). */
export function ringAddMask(order: u32): u64 {
  return (<u64>1 << 63) | (<u64>1 << 31) | (<u64>1 << (order + 3));
}

/** One FetchAdd on a counter of this ring, in the ring's counter mode; returns the old value. */
export function ringCounterFetchAdd(ring: usize, counter: usize): u64 {
  if (load<u32>(ring + RING_MODE) == RING_MODE_MASKED) {
    return maskedFetchAdd(counter, RING_ADD_DATA_MASKED, ringAddMask(load<u32>(ring + RING_ORDER)));
  }
  return atomic.add<u64>(counter, RING_ADD_DATA_UNMASKED);
}

/** Slot Offset named by a counter value: its low n+4 bits (masked) or 16 * (ticket mod N) (unmasked). */
export function ringSlotOffset(ring: usize, counter: u64): u32 {
  const order = load<u32>(ring + RING_ORDER);
  if (load<u32>(ring + RING_MODE) == RING_MODE_MASKED) {
    return <u32>counter & ((<u32>1 << (order + 4)) - 1);
  }
  return (<u32>(counter >>> 32) & ((<u32>1 << order) - 1)) * SLOT_SIZE;
}

/** Takes the next allocation ticket: FetchAdd on Head. Returns Head's value before the add. */
export function ringTakeTicket(ring: usize): u64 {
  return ringCounterFetchAdd(ring, load<u32>(ring + RING_HEAD));
}

// The parked-free list is guarded by a spin lock. It is held only to search or edit the list
// and to write one slot, never while waiting for anything, so a holder always finishes quickly.
// @ts-ignore: decorator
@inline function lockParked(ring: usize): void {
  while (atomic.cmpxchg<u32>(ring + RING_DEFERRED_LOCK, 0, 1) != 0) {}
}
// @ts-ignore: decorator
@inline function unlockParked(ring: usize): void {
  atomic.store<u32>(ring + RING_DEFERRED_LOCK, 0);
}

/** Writes a freed block into a slot: Block Offset first, then Sequence (draft 3.3). */
// @ts-ignore: decorator
@inline function fillSlot(slot: usize, ticket: u32, blockOffset: u64): void {
  atomicStoreU64(slot + SLOT_BLOCK_OFFSET, blockOffset);
  atomicStoreU32(slot, ticket);
}

/**
 * Called right after the slot of `consumedTicket` was consumed: if the free of the slot's next
 * turn (ticket + N) was parked, it is written now. The consumer marks the slot before reading the
 * parked count, and a parking free raises the count before it looks at the slot, so with
 * sequentially consistent atomics one of the two always sees the other.
 */
export function ringSettleParked(ring: usize, consumedTicket: u32): void {
  if (atomic.load<u32>(ring + RING_DEFERRED_COUNT) == 0) return;
  const wanted = consumedTicket + slotCount(ring);
  const list = load<u32>(ring + RING_DEFERRED_LIST);
  lockParked(ring);
  const used = load<u32>(ring + RING_DEFERRED_USED);
  for (let i: u32 = 0; i < used; i++) {
    const entry = <usize>list + <usize>i * DEFERRED_ENTRY_SIZE;
    if (load<u32>(entry) != wanted) continue;
    const blockOffset = load<u64>(entry + 8);
    const last = <usize>list + <usize>(used - 1) * DEFERRED_ENTRY_SIZE;
    store<u32>(entry, load<u32>(last));
    store<u64>(entry + 8, load<u64>(last + 8));
    store<u32>(ring + RING_DEFERRED_USED, used - 1);
    const slotIndex = wanted & (slotCount(ring) - 1);
    fillSlot(<usize>load<u32>(ring + RING_SLOTS) + <usize>slotIndex * SLOT_SIZE, wanted, blockOffset);
    atomic.sub<u32>(ring + RING_DEFERRED_COUNT, 1);
    break;
  }
  unlockParked(ring);
}

/**
 * Tries to take the block of `ticket` from its slot, re-reading at most `spins` times.
 * Returns the Block Offset, or CONSUMED when the slot is not filled for this ticket yet.
 */
export function ringTryTake(ring: usize, ticket: u32, slotOffset: u32, spins: u32): u64 {
  const slot = <usize>load<u32>(ring + RING_SLOTS) + <usize>slotOffset;
  for (let attempt: u32 = 0; attempt <= spins; attempt++) {
    if (atomicLoadU32(slot) != ticket) continue;
    const raw = atomic.load<u64>(slot + SLOT_BLOCK_OFFSET);
    if (raw == CONSUMED) continue;
    atomic.store<u64>(slot + SLOT_BLOCK_OFFSET, CONSUMED);
    ringSettleParked(ring, ticket);
    return bswap<u64>(raw);
  }
  return CONSUMED;
}

/**
 * Returns a block to the ring (the free path of draft 3.3, after the table entry was updated):
 * FetchAdd on Tail, then fill the slot, or park the free while the slot's previous turn is
 * still unconsumed. The slot is never overwritten before it is consumed.
 */
export function ringReturn(ring: usize, blockOffset: u64): void {
  const counter = ringCounterFetchAdd(ring, ring + RING_TAIL);
  const ticket = <u32>(counter >>> 32);
  const slot = <usize>load<u32>(ring + RING_SLOTS) + <usize>ringSlotOffset(ring, counter);
  const previousTurn = ticket - slotCount(ring);
  if (atomicLoadU32(slot) == previousTurn && atomic.load<u64>(slot + SLOT_BLOCK_OFFSET) == CONSUMED) {
    // Consumed already: only this free can write the slot's next turn, so no lock is needed.
    fillSlot(slot, ticket, blockOffset);
    return;
  }
  atomic.add<u32>(ring + RING_DEFERRED_COUNT, 1);
  lockParked(ring);
  if (atomicLoadU32(slot) == previousTurn && atomic.load<u64>(slot + SLOT_BLOCK_OFFSET) == CONSUMED) {
    fillSlot(slot, ticket, blockOffset);
    atomic.sub<u32>(ring + RING_DEFERRED_COUNT, 1);
  } else {
    const used = load<u32>(ring + RING_DEFERRED_USED);
    const entry = <usize>load<u32>(ring + RING_DEFERRED_LIST) + <usize>used * DEFERRED_ENTRY_SIZE;
    store<u32>(entry, ticket);
    store<u64>(entry + 8, blockOffset);
    store<u32>(ring + RING_DEFERRED_USED, used + 1);
  }
  unlockParked(ring);
}

/** Address of the abandonment record of the slot that `ticket` maps to. */
// @ts-ignore: decorator
@inline function abandonedRecord(ring: usize, ticket: u32): usize {
  return <usize>load<u32>(ring + RING_ABANDONED) + <usize>(ticket & (slotCount(ring) - 1)) * 8;
}

// @ts-ignore: decorator
@inline function abandonedMark(ticket: u32): u64 {
  return (<u64>1 << 32) | <u64>ticket;
}

/** True when `ticket` was reclaimed by ringAbandon (TICKET_ABANDONED for a late BIND). */
export function ringTicketAbandoned(ring: usize, ticket: u32): bool {
  return atomic.load<u64>(abandonedRecord(ring, ticket)) == abandonedMark(ticket);
}

/**
 * True when Head has handed `ticket` out. Tickets wrap at 2^32, so "before Head" means within
 * the half of the ticket space behind it. Head may be many ring turns past an unbound ticket:
 * later tickets of its slot simply wait behind it.
 */
export function ringTicketTaken(ring: usize, ticket: u32): bool {
  const headTicket = <u32>(atomic.load<u64>(load<u32>(ring + RING_HEAD)) >>> 32);
  return headTicket - ticket - 1 < 0x80000000;
}

/** True when the slot of `ticket` holds Sequence `ticket` and exactly `blockOffset`, unconsumed. */
export function ringSlotHolds(ring: usize, ticket: u32, blockOffset: u64): bool {
  const slot = <usize>load<u32>(ring + RING_SLOTS) + <usize>(ticket & (slotCount(ring) - 1)) * SLOT_SIZE;
  return atomicLoadU32(slot) == ticket && atomic.load<u64>(slot + SLOT_BLOCK_OFFSET) == bswap<u64>(blockOffset);
}

/**
 * Consumes the slot of a one-sidedly taken ticket for BIND. The compare-and-swap decides between
 * BIND and a concurrent reclaim of the same ticket: exactly one of them consumes the slot.
 */
export function ringClaimTicket(ring: usize, ticket: u32, blockOffset: u64): bool {
  const slot = <usize>load<u32>(ring + RING_SLOTS) + <usize>(ticket & (slotCount(ring) - 1)) * SLOT_SIZE;
  if (atomicLoadU32(slot) != ticket) return false;
  const raw = bswap<u64>(blockOffset);
  if (atomic.cmpxchg<u64>(slot + SLOT_BLOCK_OFFSET, raw, CONSUMED) != raw) return false;
  ringSettleParked(ring, ticket);
  return true;
}

/**
 * Reclaims an abandoned ticket (draft 3.4): the host has already made sure no RDMA Write of the
 * initiator can reach the block. Consumes the slot, records the ticket as abandoned and returns
 * the block to the ring with a new ticket. Returns the Block Offset, RECLAIM_NOT_FILLED when
 * the slot has not been filled for this ticket yet (try again later),
 * RECLAIM_ALREADY_CONSUMED when the ticket was bound or reclaimed already, or RECLAIM_NOT_TAKEN
 * when Head has not handed the ticket out (its slot may already hold a block for it).
 */
export function ringAbandon(ring: usize, ticket: u32): i64 {
  if (!ringTicketTaken(ring, ticket)) return RECLAIM_NOT_TAKEN;
  const slot = <usize>load<u32>(ring + RING_SLOTS) + <usize>(ticket & (slotCount(ring) - 1)) * SLOT_SIZE;
  const sequence = atomicLoadU32(slot);
  // Still the previous turn: the free owed to this ticket has not landed yet. Any other
  // Sequence means the ticket's turn is over: it was bound or reclaimed and the slot reused.
  if (sequence != ticket) return sequence == ticket - slotCount(ring) ? RECLAIM_NOT_FILLED : RECLAIM_ALREADY_CONSUMED;
  const raw = atomic.load<u64>(slot + SLOT_BLOCK_OFFSET);
  if (raw == CONSUMED) return RECLAIM_ALREADY_CONSUMED;
  const record = abandonedRecord(ring, ticket);
  const previousRecord = atomic.load<u64>(record);
  // Recorded before the slot is consumed, so a BIND that loses the race below sees it.
  atomic.store<u64>(record, abandonedMark(ticket));
  if (atomic.cmpxchg<u64>(slot + SLOT_BLOCK_OFFSET, raw, CONSUMED) != raw) {
    atomic.store<u64>(record, previousRecord);
    return RECLAIM_ALREADY_CONSUMED;
  }
  ringSettleParked(ring, ticket);
  const blockOffset = bswap<u64>(raw);
  ringReturn(ring, blockOffset);
  return <i64>blockOffset;
}
