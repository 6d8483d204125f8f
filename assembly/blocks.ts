// Block data movement. memory.copy on shared memory is the fastest copy available here
// (about twice TypedArray.set), so the host routes its block copies through these.
import { ENGINE_POOL_BASE, ENGINE_BLOCK_SIZE, ENGINE_BLOCK_RINGS, RING_CLEAR_ON_FREE } from './struct-offsets';
import { ringReturn } from './ring';

// @ts-ignore: decorator
@inline export function blockAddress(engine: usize, blockOffset: u64): usize {
  return <usize>load<u32>(engine + ENGINE_POOL_BASE) + <usize>blockOffset;
}

/** Copies `length` octets from `source` into the block, starting at its first octet. */
export function copyIntoBlock(engine: usize, blockOffset: u64, source: usize, length: u32): void {
  memory.copy(blockAddress(engine, blockOffset), source, length);
}

/** Copies `length` octets of the block to `destination`. */
export function copyFromBlock(engine: usize, blockOffset: u64, destination: usize, length: u32): void {
  memory.copy(destination, blockAddress(engine, blockOffset), length);
}

/** Zeroes the whole block. */
export function clearBlock(engine: usize, blockOffset: u64): void {
  memory.fill(blockAddress(engine, blockOffset), 0, load<u32>(engine + ENGINE_BLOCK_SIZE));
}

/** The ring a block belongs to: FREE returns it there (kbtp-v1 section 11). */
export function homeRing(engine: usize, blockOffset: u64): usize {
  const index = <usize>(blockOffset / <u64>load<u32>(engine + ENGINE_BLOCK_SIZE));
  return <usize>load<u32>(<usize>load<u32>(engine + ENGINE_BLOCK_RINGS) + index * 4);
}

/**
 * Returns a block to its home ring. A ring shared by several trust domains gets the block
 * zeroed first (draft 6.4), since the next allocation from it may belong to another domain.
 */
export function releaseBlock(engine: usize, blockOffset: u64): void {
  const ring = homeRing(engine, blockOffset);
  if (load<u32>(ring + RING_CLEAR_ON_FREE) != 0) clearBlock(engine, blockOffset);
  ringReturn(ring, blockOffset);
}
