// The engine's exports. Every function works on addresses in the one shared memory and keeps
// no state of its own, so any number of instances over that memory can run them at once.
export { maskedFetchAdd, fetchAdd, maskedCompareSwap } from './masked-fetch-add';
export {
  ringAddMask, ringCounterFetchAdd, ringSlotOffset, ringTakeTicket, ringTryTake, ringReturn, ringAbandon,
  ringClaimTicket, ringTicketAbandoned, ringTicketTaken, ringSlotHolds,
} from './ring';
export { entryAddress, entryBind, entryUnbind, entryUpdateStore } from './table';
export { copyIntoBlock, copyFromBlock, clearBlock, homeRing, releaseBlock } from './blocks';
export { run, placeInline, complete, lookup, quotaAdjust, persisted, fetched, demote, dropClaim, dropSettle, fail } from './programs';

/** First free byte above the module's static data: the host lays its structures above it. */
export function heapBase(): usize {
  return __heap_base;
}
