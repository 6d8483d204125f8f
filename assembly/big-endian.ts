// Wire-visible structures (table entries, ring slots, messages) are big-endian; wasm memory is
// little-endian. The atomic forms are used where another thread or the RNIC may read concurrently,
// because the draft's write orders (Block Offset before Sequence, Data Length and Block Offset
// before Flags and Generation) only hold when each store is ordered.

// @ts-ignore: decorator
@inline export function loadU16(address: usize): u32 {
  return <u32>bswap<u16>(load<u16>(address));
}
// @ts-ignore: decorator
@inline export function loadU32(address: usize): u32 {
  return bswap<u32>(load<u32>(address));
}
// @ts-ignore: decorator
@inline export function loadU64(address: usize): u64 {
  return bswap<u64>(load<u64>(address));
}
// @ts-ignore: decorator
@inline export function storeU16(address: usize, value: u32): void {
  store<u16>(address, bswap<u16>(<u16>value));
}
// @ts-ignore: decorator
@inline export function storeU32(address: usize, value: u32): void {
  store<u32>(address, bswap<u32>(value));
}
// @ts-ignore: decorator
@inline export function storeU64(address: usize, value: u64): void {
  store<u64>(address, bswap<u64>(value));
}
// @ts-ignore: decorator
@inline export function atomicLoadU32(address: usize): u32 {
  return bswap<u32>(atomic.load<u32>(address));
}
// @ts-ignore: decorator
@inline export function atomicLoadU64(address: usize): u64 {
  return bswap<u64>(atomic.load<u64>(address));
}
// @ts-ignore: decorator
@inline export function atomicStoreU32(address: usize, value: u32): void {
  atomic.store<u32>(address, bswap<u32>(value));
}
// @ts-ignore: decorator
@inline export function atomicStoreU64(address: usize, value: u64): void {
  atomic.store<u64>(address, bswap<u64>(value));
}
