// Executes RFC 7306 atomics on registered memory with JavaScript Atomics, so they are atomic
// with respect to every other agent using Atomics or WebAssembly atomics on the same shared
// memory (engine workers, other RNIC instances), not merely within this RNIC. The 64-bit
// target is read and written in the host's byte order (little-endian here): RFC 7306 performs
// the operation "in the target memory's endianness"; only the wire carries big-endian operands.

import { ALL_ONES_64, AtomicOpcode, maskedCompareSwap, maskedFetchAdd } from './wire/atomics.ts';
import type { MemoryRegion } from './memory.ts';

export interface AtomicOperation {
  readonly atomicOpcode: number;
  readonly addOrSwapData: bigint;
  readonly addOrSwapMask: bigint;
  readonly compareData: bigint;
  readonly compareMask: bigint;
}

/** Whether byte `offset` of `region` is 8-octet aligned in its buffer (RFC 7306 §7.7). */
export function isAtomicAligned(region: MemoryRegion, offset: number): boolean {
  return (region.byteOffset + offset) % 8 === 0;
}

/**
 * Applies `operation` to the aligned 64-bit word at byte `offset` of `region` and returns the
 * value it held before. The caller has checked rights, bounds, alignment and the opcode.
 */
export function executeAtomic(region: MemoryRegion, offset: number, operation: AtomicOperation): bigint {
  const words = region.atomics();
  const index = (region.byteOffset + offset) / 8;
  if (operation.atomicOpcode === AtomicOpcode.FetchAdd) {
    if (operation.addOrSwapMask === 0n) return Atomics.add(words, index, operation.addOrSwapData);
    // Masked add has no hardware instruction: compute the new word and retry until no other
    // agent changed it in between.
    for (;;) {
      const original = Atomics.load(words, index);
      const updated = maskedFetchAdd(original, operation.addOrSwapData, operation.addOrSwapMask);
      if (Atomics.compareExchange(words, index, original, updated) === original) return original;
    }
  }
  if (operation.compareMask === ALL_ONES_64 && operation.addOrSwapMask === ALL_ONES_64) {
    return Atomics.compareExchange(words, index, operation.compareData, operation.addOrSwapData);
  }
  for (;;) {
    const original = Atomics.load(words, index);
    const updated = maskedCompareSwap(original, operation.compareData, operation.compareMask, operation.addOrSwapData, operation.addOrSwapMask);
    if (updated === original) return original; // no change to publish; the read was atomic
    if (Atomics.compareExchange(words, index, original, updated) === original) return original;
  }
}
