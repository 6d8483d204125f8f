// RFC 7306 FetchAdd over shared memory, masked and unmasked.

/**
 * The masked sum of RFC 7306 section 5.1.1: each 1 bit of `mask` is the most significant bit
 * of a field and the carry out of it is discarded. Clearing every field's top bit before the
 * add keeps carries inside their field; the top bits are then the XOR of both inputs and the
 * carry that arrived from below, which `low` already holds in those positions.
 */
// @ts-ignore: decorator
@inline
export function maskedSum(original: u64, addend: u64, mask: u64): u64 {
  const low = (original & ~mask) + (addend & ~mask);
  return low ^ ((original ^ addend) & mask);
}

/**
 * Atomically applies the masked add at `address` (8-octet aligned, memory byte order) and
 * returns the value before it. wasm has no masked add, so this is a compare-and-swap loop;
 * every wasm atomic is sequentially consistent, which the ring protocol relies on.
 */
export function maskedFetchAdd(address: usize, addend: u64, mask: u64): u64 {
  let observed = atomic.load<u64>(address);
  while (true) {
    const desired = maskedSum(observed, addend, mask);
    const witnessed = atomic.cmpxchg<u64>(address, observed, desired);
    if (witnessed == observed) return observed;
    observed = witnessed;
  }
}

/** Plain 64-bit wrap-around FetchAdd: the InfiniBand form and RFC 7306 with Add Mask 0. */
export function fetchAdd(address: usize, addend: u64): u64 {
  return atomic.add<u64>(address, addend);
}

/** RFC 7306 CmpSwap with masks: the compare and the swap each act only under their mask. */
export function maskedCompareSwap(address: usize, compare: u64, compareMask: u64, swap: u64, swapMask: u64): u64 {
  let observed = atomic.load<u64>(address);
  while (true) {
    if (((observed ^ compare) & compareMask) != 0) return observed;
    const desired = (observed & ~swapMask) | (swap & swapMask);
    const witnessed = atomic.cmpxchg<u64>(address, observed, desired);
    if (witnessed == observed) return observed;
    observed = witnessed;
  }
}
