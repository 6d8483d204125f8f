// Benchmark loops around the engine's own functions, compiled by bench/engine.ts into a separate
// module over the same memory, so the measured work runs in WebAssembly without a JS call (and
// a BigInt) per operation. Never shipped in build/engine.wasm.
import { CONSUMED, ringTakeTicket, ringSlotOffset, ringTryTake, ringReturn } from '../../assembly/ring';
import { lookup } from '../../assembly/programs';
import { entryAddress } from '../../assembly/table';
import { copyIntoBlock } from '../../assembly/blocks';
import { OPCODE_LOAD, FLAG_ALLOW_UNSEALED, STATUS_SUCCESS } from '../../assembly/kbtp-constants';

/** Allocates and frees one block `pairs` times; returns how many allocations found nothing. */
export function allocFreePairs(ring: usize, pairs: u32): u32 {
  let empty: u32 = 0;
  for (let i: u32 = 0; i < pairs; i++) {
    const counter = ringTakeTicket(ring);
    const blockOffset = ringTryTake(ring, <u32>(counter >>> 32), ringSlotOffset(ring, counter), 0x40000000);
    if (blockOffset == CONSUMED) empty++;
    else ringReturn(ring, blockOffset);
  }
  return empty;
}

/** Runs the full LOAD check sequence on `count` handles in turn; returns how many passed. */
export function lookups(engine: usize, tenant: usize, firstHandle: u64, handles: u32, count: u32): u32 {
  let passed: u32 = 0;
  for (let i: u32 = 0; i < count; i++) {
    const handle = firstHandle + <u64>(i % handles);
    const entry = entryAddress(engine, handle);
    if (lookup(engine, tenant, OPCODE_LOAD, FLAG_ALLOW_UNSEALED, handle, 0, 0x7fffffff, entry) == STATUS_SUCCESS) passed++;
  }
  return passed;
}

export function copies(engine: usize, blockOffset: u64, source: usize, length: u32, count: u32): void {
  for (let i: u32 = 0; i < count; i++) copyIntoBlock(engine, blockOffset, source, length);
}
