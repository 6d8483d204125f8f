// The block table of draft 3.2 (big-endian 16-octet entries) and the per-handle lock words that
// keep two requests on one handle from interleaving their check-then-act sequences.
import {
  ENGINE_TABLE_BASE, ENGINE_HANDLE_COUNT, ENGINE_BASE_HANDLE, ENGINE_HANDLE_LOCKS, ENTRY_SIZE, ENTRY_DATA_LENGTH, ENTRY_BLOCK_OFFSET, LOCK_WRITER_BIT,
  ENGINE_DURABLE, ENGINE_GENERATION_MARKS,
} from './struct-offsets';
import { ENTRY_VALID, ENTRY_SEALED, ENTRY_EPOCH_MASK, ENTRY_EPOCH_SHIFT } from './kbtp-constants';
import { atomicLoadU32, atomicStoreU32, atomicStoreU64 } from './big-endian';

/** Address of the entry of `handle`, or 0 when the table does not serve it. */
export function entryAddress(engine: usize, handle: u64): usize {
  const index = handle - load<u64>(engine + ENGINE_BASE_HANDLE);
  if (index >= <u64>load<u32>(engine + ENGINE_HANDLE_COUNT)) return 0;
  return <usize>load<u32>(engine + ENGINE_TABLE_BASE) + <usize>index * ENTRY_SIZE;
}

/** Lock word of the entry at `entry`. */
// @ts-ignore: decorator
@inline export function entryLock(engine: usize, entry: usize): usize {
  return <usize>load<u32>(engine + ENGINE_HANDLE_LOCKS) + ((entry - <usize>load<u32>(engine + ENGINE_TABLE_BASE)) >> 2);
}

/** Flags in the high half, Generation in the low half, read in one atomic load. */
// @ts-ignore: decorator
@inline export function entryFlagsGeneration(entry: usize): u32 {
  return atomicLoadU32(entry);
}

// @ts-ignore: decorator
@inline export function entryDataLength(entry: usize): u32 {
  return atomicLoadU32(entry + ENTRY_DATA_LENGTH);
}

// @ts-ignore: decorator
@inline export function entryBlockOffset(entry: usize): u64 {
  return bswap<u64>(atomic.load<u64>(entry + ENTRY_BLOCK_OFFSET));
}

/** The next Generation: incremented by one, skipping zero (draft 3.2, 6.3, 6.4). */
// @ts-ignore: decorator
@inline export function nextGeneration(generation: u32): u32 {
  const next = (generation + 1) & 0xffff;
  return next == 0 ? 1 : next;
}

/**
 * Binds the entry: Data Length and Block Offset first, then Flags and Generation (draft 3.2).
 * The Placement Epoch (Flags bits 15..8) carries on.
 */
export function entryBind(entry: usize, blockOffset: u64, dataLength: u32, seal: bool): void {
  const flagsGeneration = entryFlagsGeneration(entry);
  atomicStoreU32(entry + ENTRY_DATA_LENGTH, dataLength);
  atomicStoreU64(entry + ENTRY_BLOCK_OFFSET, blockOffset);
  const flags: u32 = ((flagsGeneration >>> 16) & ENTRY_EPOCH_MASK) | ENTRY_VALID | (seal ? ENTRY_SEALED : 0);
  atomicStoreU32(entry, (flags << 16) | nextGeneration(flagsGeneration & 0xffff));
}

/**
 * Moves a sealed block between the pool and the durable tier (kbtp-v1 section 12): the new Block
 * Offset (all ones: on the tier alone), then the Placement Epoch plus one, before the pool block
 * is reused or filled, so a direct reader's two entry reads always differ across a move.
 */
export function entryPlace(entry: usize, blockOffset: u64): void {
  atomicStoreU64(entry + ENTRY_BLOCK_OFFSET, blockOffset);
  const flagsGeneration = entryFlagsGeneration(entry);
  const epoch = ((flagsGeneration >>> (16 + ENTRY_EPOCH_SHIFT)) + 1) & 0xff;
  const flags = ((flagsGeneration >>> 16) & ~ENTRY_EPOCH_MASK) | (epoch << ENTRY_EPOCH_SHIFT);
  atomicStoreU32(entry, (flags << 16) | (flagsGeneration & 0xffff));
}

/**
 * With a durable tier, a Generation that moves without a durable record (an unsealed bind, a
 * FREE of an unsealed block) may not pass the handle's mark (kbtp-v1 section 12: reserved
 * ahead). True when the next Generation is within the mark; compared on the 65535-value cycle.
 */
export function generationWithinMark(engine: usize, entry: usize): bool {
  if (load<u32>(engine + ENGINE_DURABLE) == 0) return true;
  const index = (entry - <usize>load<u32>(engine + ENGINE_TABLE_BASE)) >> 4;
  const mark = <i32>atomic.load<u32>(<usize>load<u32>(engine + ENGINE_GENERATION_MARKS) + index * 4);
  let ahead = mark - <i32>(entryFlagsGeneration(entry) & 0xffff);
  if (ahead < 0) ahead += 0xffff;
  return ahead >= 1 && ahead < 0x8000;
}

/**
 * Unbinds the entry for FREE: VALID and SEALED cleared and the Generation moved on first, so a
 * direct loader sees the change before the block can be reused; Data Length 0 after, Block
 * Offset left naming the freed block (kbtp-v1 section 11).
 */
export function entryUnbind(entry: usize): void {
  const flagsGeneration = entryFlagsGeneration(entry);
  const flags = (flagsGeneration >>> 16) & ~(ENTRY_VALID | ENTRY_SEALED);
  atomicStoreU32(entry, (flags << 16) | nextGeneration(flagsGeneration & 0xffff));
  atomicStoreU32(entry + ENTRY_DATA_LENGTH, 0);
}

/** Mapped store: new Data Length, then SEALED if asked; the Generation stays. */
export function entryUpdateStore(entry: usize, dataLength: u32, seal: bool): void {
  atomicStoreU32(entry + ENTRY_DATA_LENGTH, dataLength);
  if (seal) {
    const flagsGeneration = entryFlagsGeneration(entry);
    atomicStoreU32(entry, flagsGeneration | (<u32>ENTRY_SEALED << 16));
  }
}

/** Shared lock for LOAD: many readers, no writer. Never waits: false means try again later. */
export function tryLockShared(lock: usize): bool {
  let observed = atomic.load<u32>(lock);
  while ((observed & LOCK_WRITER_BIT) == 0) {
    const witnessed = atomic.cmpxchg<u32>(lock, observed, observed + 1);
    if (witnessed == observed) return true;
    observed = witnessed;
  }
  return false;
}

/** Exclusive lock for requests that change the entry. Never waits. */
// @ts-ignore: decorator
@inline export function tryLockExclusive(lock: usize): bool {
  return atomic.cmpxchg<u32>(lock, 0, LOCK_WRITER_BIT) == 0;
}

// @ts-ignore: decorator
@inline export function unlockShared(lock: usize): void {
  atomic.sub<u32>(lock, 1);
}

// @ts-ignore: decorator
@inline export function unlockExclusive(lock: usize): void {
  atomic.store<u32>(lock, 0);
}
