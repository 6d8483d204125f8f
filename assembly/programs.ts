// The per-opcode target programs of kbtp-v1 section 8. The host places a request's bytes in a
// request context and calls run(); the program checks it in the order of kbtp-v1 section 11,
// changes table, ring and quota state, and tells the host the one thing to do next: carry out
// a data operation (RDMA Write or Read) it has described, send the COMPLETION it has written,
// or come back later. The host makes no data-path decision of its own.
import * as S from './struct-offsets';
import * as K from './kbtp-constants';
import { loadU16, loadU32, loadU64, storeU16, storeU32, storeU64 } from './big-endian';
import {
  entryAddress, entryLock, entryFlagsGeneration, entryDataLength, entryBlockOffset, entryBind, entryUnbind,
  entryUpdateStore, tryLockShared, tryLockExclusive, unlockShared, unlockExclusive, entryPlace, generationWithinMark,
  nextGeneration,
} from './table';
import { blockAddress, releaseBlock } from './blocks';
import {
  CONSUMED, ringTakeTicket, ringSlotOffset, ringTryTake, ringTicketAbandoned, ringTicketTaken, ringSlotHolds,
  ringClaimTicket,
} from './ring';

/** Slot re-reads per run() before an allocation gives the thread back to the host. */
const SLOT_SPINS: u32 = 64;

// @ts-ignore: decorator
@inline function message(request: usize): usize {
  return request + S.REQUEST_MESSAGE;
}
// @ts-ignore: decorator
@inline function opcodeOf(request: usize): u32 {
  return <u32>load<u8>(message(request) + K.HEADER_OPCODE);
}
// @ts-ignore: decorator
@inline function flagsOf(request: usize): u32 {
  return loadU16(message(request) + K.HEADER_FLAGS);
}
// @ts-ignore: decorator
@inline function sessionOf(request: usize): usize {
  return <usize>load<u32>(request + S.REQUEST_SESSION);
}
// @ts-ignore: decorator
@inline function tenantOf(request: usize): usize {
  return <usize>load<u32>(sessionOf(request) + S.SESSION_TENANT);
}
// Data Descriptor fields (draft 5.2), right after the common header.
// @ts-ignore: decorator
@inline function descriptorStag(request: usize): u32 {
  return loadU32(message(request) + K.HEADER_SIZE + K.DESCRIPTOR_STAG);
}
// @ts-ignore: decorator
@inline function descriptorOffset(request: usize): u64 {
  return loadU64(message(request) + K.HEADER_SIZE + K.DESCRIPTOR_TAGGED_OFFSET);
}
// @ts-ignore: decorator
@inline function descriptorLength(request: usize): u32 {
  return loadU32(message(request) + K.HEADER_SIZE + K.DESCRIPTOR_LENGTH);
}

/** Inline data follows the Data Descriptor and, with RECORD, the Completion Descriptor. */
// @ts-ignore: decorator
@inline function inlineData(request: usize): usize {
  const record: usize = (flagsOf(request) & K.FLAG_RECORD) != 0 ? <usize>K.DESCRIPTOR_SIZE : 0;
  return message(request) + <usize>K.HEADER_SIZE + <usize>K.DESCRIPTOR_SIZE + record;
}

/** Flags each opcode accepts (kbtp-v1 section 1); 0xffffffff marks an opcode no initiator may send. */
function allowedFlags(opcode: u32): u32 {
  switch (opcode) {
    case K.OPCODE_LOAD: return K.FLAG_RECORD | K.FLAG_INVALIDATE | K.FLAG_ALLOW_UNSEALED;
    case K.OPCODE_STORE:
    case K.OPCODE_ALLOC_STORE: return K.FLAG_INLINE | K.FLAG_SEAL | K.FLAG_RECORD | K.FLAG_INVALIDATE;
    case K.OPCODE_FREE: return K.FLAG_RECORD;
    case K.OPCODE_BIND: return K.FLAG_SEAL | K.FLAG_RECORD;
    case K.OPCODE_GOODBYE: return 0;
  }
  return 0xffffffff;
}

/** The format check: INVALID_REQUEST or SUCCESS. */
function checkFormat(request: usize): u32 {
  const length = load<u32>(request + S.REQUEST_LENGTH);
  const header = message(request);
  if (length < <u32>K.HEADER_SIZE) return K.STATUS_INVALID_REQUEST;
  if (<u32>load<u8>(header + K.HEADER_VERSION) != K.KBTP_VERSION) return K.STATUS_INVALID_REQUEST;
  if (loadU16(header + K.HEADER_STATUS) != 0) return K.STATUS_INVALID_REQUEST;
  const opcode = opcodeOf(request);
  const flags = flagsOf(request);
  const allowed = allowedFlags(opcode);
  if (allowed == 0xffffffff || (flags & ~allowed) != 0) return K.STATUS_INVALID_REQUEST;
  const record: u64 = (flags & K.FLAG_RECORD) != 0 ? K.DESCRIPTOR_SIZE : 0;
  let expected: u64 = K.HEADER_SIZE + record;
  if (opcode == K.OPCODE_LOAD || opcode == K.OPCODE_STORE || opcode == K.OPCODE_ALLOC_STORE) {
    expected += K.DESCRIPTOR_SIZE;
    if (length < <u32>expected) return K.STATUS_INVALID_REQUEST;
    if ((flags & K.FLAG_INLINE) != 0) {
      if ((flags & K.FLAG_INVALIDATE) != 0) return K.STATUS_INVALID_REQUEST;
      if (descriptorStag(request) != 0 || descriptorOffset(request) != 0) return K.STATUS_INVALID_REQUEST;
      expected += <u64>descriptorLength(request);
    }
  } else if (opcode == K.OPCODE_BIND) {
    expected = K.BIND_SIZE + record;
  }
  return <u64>length == expected ? K.STATUS_SUCCESS : K.STATUS_INVALID_REQUEST;
}

// @ts-ignore: decorator
@inline function durable(engine: usize): bool {
  return load<u32>(engine + S.ENGINE_DURABLE) != 0;
}

// @ts-ignore: decorator
@inline function demotes(tenant: usize): bool {
  return tenant != 0 && load<u32>(tenant + S.TENANT_POLICY) == S.EVICTION_DEMOTE;
}

/** The tenant whose store range holds `handle` (kbtp-v1 section 11: at most one), or 0. */
function ownerOf(engine: usize, handle: u64): usize {
  const first = <usize>load<u32>(engine + S.ENGINE_TENANTS);
  const count = load<u32>(engine + S.ENGINE_TENANT_COUNT);
  for (let i: u32 = 0; i < count; i++) {
    const tenant = first + <usize>i * S.TENANT_SIZE;
    if (handle - load<u64>(tenant + S.TENANT_STORE_FIRST) < load<u64>(tenant + S.TENANT_STORE_COUNT)) return tenant;
  }
  return 0;
}

// @ts-ignore: decorator
@inline function handleOfEntry(engine: usize, entry: usize): u64 {
  return load<u64>(engine + S.ENGINE_BASE_HANDLE) + <u64>((entry - <usize>load<u32>(engine + S.ENGINE_TABLE_BASE)) >> 4);
}

/** Atomically adds one to the counter at `counter` unless it has reached `limit`. */
function incrementBelow(counter: usize, limit: u32): bool {
  let observed = atomic.load<u32>(counter);
  while (observed < limit) {
    const witnessed = atomic.cmpxchg<u32>(counter, observed, observed + 1);
    if (witnessed == observed) return true;
    observed = witnessed;
  }
  return false;
}

/** Takes one credit of the session unless all are in use (TOO_MANY_REQUESTS). */
// @ts-ignore: decorator
@inline function takeCredit(session: usize): bool {
  return incrementBelow(session + S.SESSION_OUTSTANDING, load<u32>(session + S.SESSION_CREDITS));
}

/** Reserves one unit of the tenant's Allocation Quota (draft 3.4); false is NO_SPACE. */
// @ts-ignore: decorator
@inline function reserveQuota(tenant: usize): bool {
  return incrementBelow(tenant + S.TENANT_USAGE, load<u32>(tenant + S.TENANT_QUOTA));
}

// @ts-ignore: decorator
@inline function releaseQuota(tenant: usize): void {
  atomic.sub<u32>(tenant + S.TENANT_USAGE, 1);
}

/**
 * Counts a ticket the host saw an initiator take one-sidedly (+1), or one reclaimed (-1), in the
 * tenant's usage (draft 3.4: bound handles plus tickets taken and not bound). Returns the new usage.
 */
export function quotaAdjust(tenant: usize, delta: i32): u32 {
  return atomic.add<u32>(tenant + S.TENANT_USAGE, <u32>delta) + <u32>delta;
}

// @ts-ignore: decorator
@inline function inRange(handle: u64, first: u64, count: u64): bool {
  return handle - first < count;
}

/**
 * The checks after the handle is known to be served and its lock is held: range or scope,
 * expected generation, entry state, lengths (kbtp-v1 section 11 order). Changes nothing.
 */
export function lookup(engine: usize, tenant: usize, opcode: u32, flags: u32, handle: u64, expectedGeneration: u32,
  length: u32, entry: usize): u32 {
  if (opcode == K.OPCODE_LOAD) {
    if (!inRange(handle, load<u64>(tenant + S.TENANT_LOAD_FIRST), load<u64>(tenant + S.TENANT_LOAD_COUNT))) {
      return K.STATUS_ACCESS_DENIED;
    }
  } else if (!inRange(handle, load<u64>(tenant + S.TENANT_STORE_FIRST), load<u64>(tenant + S.TENANT_STORE_COUNT))) {
    return K.STATUS_ACCESS_DENIED;
  }
  const flagsGeneration = entryFlagsGeneration(entry);
  if (expectedGeneration != 0 && expectedGeneration != (flagsGeneration & 0xffff)) return K.STATUS_GENERATION_MISMATCH;
  const valid = (flagsGeneration & (<u32>K.ENTRY_VALID << 16)) != 0;
  const sealed = (flagsGeneration & (<u32>K.ENTRY_SEALED << 16)) != 0;
  const mustBeValid = opcode == K.OPCODE_LOAD || opcode == K.OPCODE_STORE || opcode == K.OPCODE_FREE;
  if (mustBeValid && !valid) return K.STATUS_NOT_VALID;
  if ((opcode == K.OPCODE_ALLOC_STORE || opcode == K.OPCODE_BIND) && valid) return K.STATUS_ALREADY_VALID;
  if (opcode == K.OPCODE_STORE && sealed) return K.STATUS_SEALED;
  if (opcode == K.OPCODE_LOAD && !sealed && (flags & K.FLAG_ALLOW_UNSEALED) == 0) return K.STATUS_NOT_SEALED;
  const blockSize = load<u32>(engine + S.ENGINE_BLOCK_SIZE);
  if (opcode == K.OPCODE_LOAD) {
    if (entryDataLength(entry) > length) return K.STATUS_LENGTH_ERROR;
  } else if (opcode == K.OPCODE_STORE || opcode == K.OPCODE_ALLOC_STORE || opcode == K.OPCODE_BIND) {
    if (length > blockSize) return K.STATUS_LENGTH_ERROR;
    if ((flags & K.FLAG_INLINE) != 0 && length > load<u32>(engine + S.ENGINE_MAX_INLINE)) return K.STATUS_LENGTH_ERROR;
  }
  return K.STATUS_SUCCESS;
}

/** Writes the COMPLETION (kbtp-v1 section 2) for the request, from the entry as it is now. */
function writeCompletion(request: usize, status: u32): void {
  const out = request + S.REQUEST_COMPLETION;
  const length = load<u32>(request + S.REQUEST_LENGTH);
  const header = message(request);
  const entry = <usize>load<u32>(request + S.REQUEST_ENTRY);
  store<u8>(out + K.HEADER_VERSION, K.KBTP_VERSION);
  store<u8>(out + K.HEADER_OPCODE, K.OPCODE_COMPLETION);
  storeU16(out + K.HEADER_FLAGS, length >= <u32>K.HEADER_OPCODE + 1 ? <u32>load<u8>(header + K.HEADER_OPCODE) : 0);
  storeU64(out + K.HEADER_REQUEST_ID, length >= <u32>K.HEADER_REQUEST_ID + 8 ? loadU64(header + K.HEADER_REQUEST_ID) : 0);
  storeU64(out + K.HEADER_HANDLE, length >= <u32>K.HEADER_HANDLE + 8 ? loadU64(header + K.HEADER_HANDLE) : 0);
  storeU16(out + K.HEADER_GENERATION, entry != 0 ? entryFlagsGeneration(entry) & 0xffff : 0);
  storeU16(out + K.HEADER_STATUS, status);
  storeU32(out + K.COMPLETION_DATA_LENGTH, entry != 0 ? entryDataLength(entry) : 0);
  storeU32(out + K.COMPLETION_RESERVED, 0);
  storeU64(out + K.COMPLETION_BLOCK_OFFSET, entry != 0 ? entryBlockOffset(entry) : 0);
}

/** Releases whatever the request holds, writes its COMPLETION and returns ACTION_SEND. */
function finish(engine: usize, request: usize, status: u32): u32 {
  writeCompletion(request, status);
  // An accepted INVALIDATE asks for Send with Invalidate of the descriptor's STag whatever the status.
  const invalidate = status != K.STATUS_INVALID_REQUEST && (flagsOf(request) & K.FLAG_INVALIDATE) != 0;
  store<u32>(request + S.REQUEST_INVALIDATE_STAG, invalidate ? descriptorStag(request) : 0);
  release(engine, request);
  return S.ACTION_SEND;
}

/** Drops the request's handle lock and its credit; the request is done. */
function release(engine: usize, request: usize): void {
  const lock = load<u32>(request + S.REQUEST_LOCK);
  if (lock == S.LOCK_SHARED) unlockShared(entryLock(engine, <usize>load<u32>(request + S.REQUEST_ENTRY)));
  else if (lock == S.LOCK_EXCLUSIVE) unlockExclusive(entryLock(engine, <usize>load<u32>(request + S.REQUEST_ENTRY)));
  store<u32>(request + S.REQUEST_LOCK, S.LOCK_NONE);
  if (load<u32>(request + S.REQUEST_STATE) != S.REQUEST_STATE_NEW) {
    atomic.sub<u32>(sessionOf(request) + S.SESSION_OUTSTANDING, 1);
  }
  store<u32>(request + S.REQUEST_STATE, S.REQUEST_STATE_DONE);
}

/** Lets go of the handle only; the request keeps its credit and can run again. */
function dropLock(engine: usize, request: usize): void {
  const lock = load<u32>(request + S.REQUEST_LOCK);
  const word = entryLock(engine, <usize>load<u32>(request + S.REQUEST_ENTRY));
  if (lock == S.LOCK_SHARED) unlockShared(word);
  else if (lock == S.LOCK_EXCLUSIVE) unlockExclusive(word);
  store<u32>(request + S.REQUEST_LOCK, S.LOCK_NONE);
}

/** The next Generation would pass the handle's mark: the host reserves more, then runs the request again. */
function askReserve(engine: usize, request: usize, entry: usize): u32 {
  store<u32>(request + S.REQUEST_TIER, S.TIER_RESERVE);
  store<u32>(request + S.REQUEST_TIER_GENERATION, entryFlagsGeneration(entry) & 0xffff);
  dropLock(engine, request);
  return S.ACTION_RESERVE;
}

/** The tenant's quota is full under `demote`: the host demotes one of its blocks, then runs the request again. */
function askEvict(engine: usize, request: usize, tenant: usize): u32 {
  if (load<u32>(request + S.REQUEST_NO_EVICT) != 0) return finish(engine, request, K.STATUS_NO_SPACE);
  store<u32>(request + S.REQUEST_EVICT_TENANT, <u32>tenant);
  dropLock(engine, request);
  return S.ACTION_EVICT;
}

/** Hands the change to the tier; the handle stays held until persisted() (kbtp-v1 section 12). */
function askPersist(request: usize, kind: u32, generation: u32, blockOffset: u64): u32 {
  store<u32>(request + S.REQUEST_TIER, kind);
  store<u32>(request + S.REQUEST_TIER_GENERATION, generation);
  store<u64>(request + S.REQUEST_BLOCK_OFFSET, blockOffset);
  store<u32>(request + S.REQUEST_STATE, S.REQUEST_STATE_PERSIST);
  return S.ACTION_PERSIST;
}

/**
 * Takes a free staging block (kbtp-v1 section 12: a sealing request's data waits there until it
 * is durable), recording it in the request; false when all are in use (the request runs again,
 * marked REQUEST_STAGING_WAIT).
 */
function takeStaging(engine: usize, request: usize): bool {
  const count = load<u32>(engine + S.ENGINE_STAGING_COUNT);
  const flags = <usize>load<u32>(engine + S.ENGINE_STAGING_FLAGS);
  const start = atomic.add<u32>(engine + S.ENGINE_STAGING_HINT, 1);
  for (let k: u32 = 0; k < count; k++) {
    const index = (start + k) % count;
    if (atomic.cmpxchg<u32>(flags + <usize>index * 4, 0, 1) == 0) {
      const address = <usize>load<u32>(engine + S.ENGINE_STAGING) + <usize>index * <usize>load<u32>(engine + S.ENGINE_BLOCK_SIZE);
      store<u32>(request + S.REQUEST_STAGING, <u32>address);
      return true;
    }
  }
  store<u32>(request + S.REQUEST_STAGING_WAIT, 1);
  return false;
}

/** Gives back the request's staging block, if it holds one. */
function releaseStaging(engine: usize, request: usize): void {
  const address = <usize>load<u32>(request + S.REQUEST_STAGING);
  if (address == 0) return;
  store<u32>(request + S.REQUEST_STAGING, 0);
  const index = (address - <usize>load<u32>(engine + S.ENGINE_STAGING)) / <usize>load<u32>(engine + S.ENGINE_BLOCK_SIZE);
  atomic.store<u32>(<usize>load<u32>(engine + S.ENGINE_STAGING_FLAGS) + index * 4, 0);
}

/** Describes the RDMA operation the host carries out before complete(). */
function emitData(request: usize, kind: u32, localAddress: usize, length: u32): u32 {
  store<u32>(request + S.REQUEST_OP_KIND, kind);
  store<u32>(request + S.REQUEST_OP_LENGTH, length);
  store<u32>(request + S.REQUEST_OP_LOCAL, <u32>localAddress);
  store<u32>(request + S.REQUEST_OP_STAG, descriptorStag(request));
  store<u64>(request + S.REQUEST_OP_REMOTE_OFFSET, descriptorOffset(request));
  store<u32>(request + S.REQUEST_STATE, S.REQUEST_STATE_DATA);
  return S.ACTION_DATA;
}

/**
 * Runs a request placed in `request` (REQUEST_SESSION and REQUEST_LENGTH set, message at
 * REQUEST_MESSAGE, REQUEST_STATE 0), or resumes one that returned ACTION_RETRY.
 */
export function run(engine: usize, request: usize): u32 {
  store<u32>(request + S.REQUEST_STAGING_WAIT, 0);
  const state = load<u32>(request + S.REQUEST_STATE);
  if (state == S.REQUEST_STATE_NEW) {
    store<u32>(request + S.REQUEST_PLACED, 0);
    return start(engine, request);
  }
  if (state == S.REQUEST_STATE_PLACING) return finishPlacement(engine, request);
  if (state == S.REQUEST_STATE_CREDITED) return proceed(engine, request);
  if (state == S.REQUEST_STATE_WAIT_SLOT) return continueAllocation(engine, request);
  if (state == S.REQUEST_STATE_FETCH_SLOT) return continueFetch(engine, request);
  if (state == S.REQUEST_STATE_PLACE_SLOT) return continuePlacement(engine, request);
  return S.ACTION_NONE;
}

function start(engine: usize, request: usize): u32 {
  store<u32>(request + S.REQUEST_LOCK, S.LOCK_NONE);
  store<u32>(request + S.REQUEST_INVALIDATE_STAG, 0);
  store<u32>(request + S.REQUEST_NO_EVICT, 0);
  store<u32>(request + S.REQUEST_TIER, 0);
  store<u32>(request + S.REQUEST_STAGING, 0);
  const length = load<u32>(request + S.REQUEST_LENGTH);
  const handle = length >= <u32>K.HEADER_HANDLE + 8 ? loadU64(message(request) + K.HEADER_HANDLE) : 0;
  store<u32>(request + S.REQUEST_ENTRY, length >= 20 ? <u32>entryAddress(engine, handle) : 0);
  const format = checkFormat(request);
  if (format != K.STATUS_SUCCESS) return finish(engine, request, format);
  if (opcodeOf(request) == K.OPCODE_GOODBYE) {
    store<u32>(request + S.REQUEST_STATE, S.REQUEST_STATE_DONE);
    return S.ACTION_GOODBYE;
  }
  if (!takeCredit(sessionOf(request))) return finish(engine, request, K.STATUS_TOO_MANY_REQUESTS);
  store<u32>(request + S.REQUEST_STATE, S.REQUEST_STATE_CREDITED);
  return proceed(engine, request);
}

function proceed(engine: usize, request: usize): u32 {
  const session = sessionOf(request);
  const tenant = tenantOf(request);
  const opcode = opcodeOf(request);
  const flags = flagsOf(request);
  // The node-wide word is set by the main thread before it tells the workers: a request a worker
  // reads before that message arrives is refused all the same.
  if (load<u32>(session + S.SESSION_DRAINING) != 0 || atomic.load<u32>(engine + S.ENGINE_DRAINING) != 0) {
    return finish(engine, request, K.STATUS_SHUTTING_DOWN);
  }
  const capabilities = load<u32>(session + S.SESSION_CAPABILITIES);
  if ((flags & K.FLAG_RECORD) != 0 && (capabilities & K.CAP_RECORD_COMPLETION) == 0) {
    return finish(engine, request, K.STATUS_NOT_SUPPORTED);
  }
  if (opcode == K.OPCODE_BIND && (capabilities & K.CAP_DIRECT_ALLOC) == 0) {
    return finish(engine, request, K.STATUS_NOT_SUPPORTED);
  }
  const entry = <usize>load<u32>(request + S.REQUEST_ENTRY);
  if (entry == 0) return finish(engine, request, K.STATUS_OUT_OF_RANGE);
  const lock = entryLock(engine, entry);
  if (opcode == K.OPCODE_LOAD) {
    if (!tryLockShared(lock)) return S.ACTION_RETRY;
    store<u32>(request + S.REQUEST_LOCK, S.LOCK_SHARED);
  } else {
    if (!tryLockExclusive(lock)) return S.ACTION_RETRY;
    store<u32>(request + S.REQUEST_LOCK, S.LOCK_EXCLUSIVE);
  }
  const header = message(request);
  const handle = loadU64(header + K.HEADER_HANDLE);
  const length = opcode == K.OPCODE_BIND ? loadU32(header + K.BIND_DATA_LENGTH) : descriptorLength(request);
  const status = lookup(engine, tenant, opcode, flags, handle, loadU16(header + K.HEADER_GENERATION), length, entry);
  if (status != K.STATUS_SUCCESS) return finish(engine, request, status);
  store<u32>(request + S.REQUEST_DATA_LENGTH, length);

  if (opcode == K.OPCODE_LOAD) {
    const dataLength = entryDataLength(entry);
    if (dataLength == 0) return finish(engine, request, K.STATUS_SUCCESS);
    if (entryBlockOffset(entry) == CONSUMED) return startPromotion(engine, request, entry, handle, lock);
    // A LOAD changes nothing, so its COMPLETION is known now and can travel right behind the Write.
    // The credit returns with it; the handle stays held until the Write has left the pool.
    emitData(request, S.OP_WRITE_TO_INITIATOR, blockAddress(engine, entryBlockOffset(entry)), dataLength);
    writeCompletion(request, K.STATUS_SUCCESS);
    store<u32>(request + S.REQUEST_INVALIDATE_STAG, (flags & K.FLAG_INVALIDATE) != 0 ? descriptorStag(request) : 0);
    atomic.sub<u32>(session + S.SESSION_OUTSTANDING, 1);
    store<u32>(request + S.REQUEST_STATE, S.REQUEST_STATE_DATA_SENT);
    return S.ACTION_DATA_AND_SEND;
  }
  if (opcode == K.OPCODE_STORE) {
    if (durable(engine) && (flags & K.FLAG_SEAL) != 0) {
      // Staged: the block keeps its octets unless the seal becomes durable.
      if (!takeStaging(engine, request)) {
        dropLock(engine, request);
        return S.ACTION_RETRY;
      }
      const staging = <usize>load<u32>(request + S.REQUEST_STAGING);
      if ((flags & K.FLAG_INLINE) == 0 && length != 0) return emitData(request, S.OP_READ_FROM_INITIATOR, staging, length);
      memory.copy(staging, inlineData(request), length);
      return askPersist(request, S.TIER_SEAL, entryFlagsGeneration(entry) & 0xffff, entryBlockOffset(entry));
    }
    const block = blockAddress(engine, entryBlockOffset(entry));
    if ((flags & K.FLAG_INLINE) == 0 && length != 0) return emitData(request, S.OP_READ_FROM_INITIATOR, block, length);
    if (load<u32>(request + S.REQUEST_PLACED) != 0) {
      // Run by placeInline(): the rest of the data goes straight to the block, run() finishes.
      store<u32>(request + S.REQUEST_OP_LOCAL, <u32>block);
      store<u32>(request + S.REQUEST_STATE, S.REQUEST_STATE_PLACING);
      return S.ACTION_PLACE;
    }
    memory.copy(block, inlineData(request), length);
    entryUpdateStore(entry, length, (flags & K.FLAG_SEAL) != 0);
    return finish(engine, request, K.STATUS_SUCCESS);
  }
  if (opcode == K.OPCODE_FREE) {
    const flagsGeneration = entryFlagsGeneration(entry);
    if (durable(engine)) {
      // A FREE of a sealed block is durable before it is answered; other frees move the
      // Generation without a record, so they stay within the reserved mark.
      if ((flagsGeneration & (<u32>K.ENTRY_SEALED << 16)) != 0) {
        return askPersist(request, S.TIER_UNBIND, nextGeneration(flagsGeneration & 0xffff), entryBlockOffset(entry));
      }
      if (!generationWithinMark(engine, entry)) return askReserve(engine, request, entry);
    }
    unbindAndRelease(engine, tenant, entry);
    return finish(engine, request, K.STATUS_SUCCESS);
  }
  const ring = <usize>load<u32>(tenant + S.TENANT_RING);
  const sealing = (flags & K.FLAG_SEAL) != 0;
  if (durable(engine) && !sealing && !generationWithinMark(engine, entry)) return askReserve(engine, request, entry);
  if (opcode == K.OPCODE_BIND) {
    const ticket = loadU32(header + K.BIND_TICKET);
    const blockOffset = loadU64(header + K.BIND_BLOCK_OFFSET);
    if (ringTicketAbandoned(ring, ticket)) return finish(engine, request, K.STATUS_TICKET_ABANDONED);
    if (!ringTicketTaken(ring, ticket) || !ringSlotHolds(ring, ticket, blockOffset)) {
      return finish(engine, request, K.STATUS_BAD_TICKET);
    }
    // The ticket was counted in the tenant's usage when the host saw it taken (quotaAdjust), so
    // binding it adds nothing; usage over the quota means the initiator took too many.
    if (atomic.load<u32>(tenant + S.TENANT_USAGE) > load<u32>(tenant + S.TENANT_QUOTA)) {
      return demotes(tenant) ? askEvict(engine, request, tenant) : finish(engine, request, K.STATUS_NO_SPACE);
    }
    if (durable(engine) && sealing) {
      // The ticket is claimed only once the seal is durable, so a seal the tier fails leaves the
      // ticket unbound, as it was (kbtp-v1 section 6).
      store<u32>(request + S.REQUEST_RING, <u32>ring);
      store<u32>(request + S.REQUEST_TICKET, ticket);
      return askPersist(request, S.TIER_SEAL, nextGeneration(entryFlagsGeneration(entry) & 0xffff), blockOffset);
    }
    if (!ringClaimTicket(ring, ticket, blockOffset)) {
      // A reclaim took the slot between the check and the claim.
      return finish(engine, request, ringTicketAbandoned(ring, ticket) ? K.STATUS_TICKET_ABANDONED : K.STATUS_BAD_TICKET);
    }
    entryBind(entry, blockOffset, length, sealing);
    return finish(engine, request, K.STATUS_SUCCESS);
  }
  // ALLOC_STORE: every check has passed, so from here on the request succeeds unless the
  // transport or the tier fails, and the ticket it takes is always bound or returned.
  if (!reserveQuota(tenant)) {
    return demotes(tenant) ? askEvict(engine, request, tenant) : finish(engine, request, K.STATUS_NO_SPACE);
  }
  if (durable(engine) && sealing) {
    // Staged: the ticket is taken only once the seal is durable, so a seal the tier fails
    // leaves the ring as it was (kbtp-v1 section 6).
    if (!takeStaging(engine, request)) {
      releaseQuota(tenant);
      dropLock(engine, request);
      return S.ACTION_RETRY;
    }
    const staging = <usize>load<u32>(request + S.REQUEST_STAGING);
    if ((flags & K.FLAG_INLINE) == 0 && length != 0) return emitData(request, S.OP_READ_FROM_INITIATOR, staging, length);
    memory.copy(staging, inlineData(request), length);
    return askPersist(request, S.TIER_SEAL, nextGeneration(entryFlagsGeneration(entry) & 0xffff), CONSUMED);
  }
  takeTicketFor(request, ring, S.REQUEST_STATE_WAIT_SLOT);
  return continueAllocation(engine, request);
}

/**
 * The first `received` octets of a message that has more are in the request context. When it is
 * an inline STORE that passes every check now (kbtp-v1 section 11, with the length its Data
 * Descriptor announces), the request takes its credit and the handle's exclusive lock at once
 * (state PLACING) and the host places the rest of the message straight into the block: returns
 * the address where message octet `received` goes, with REQUEST_OP_LENGTH octets still to come.
 * The octets of data in the context are copied when run() finishes the request on its arrival
 * (the first segment's share, instead of all of it: issue 16, the copy was an eighth of the
 * target's CPU per 256 KiB STORE). Otherwise returns 0 and changes nothing: the message goes on
 * into the context and run() decides everything when it has arrived, as for any request.
 *
 * As with a STORE by RDMA Read, a message that then fails (its stream breaks, or it ends short of
 * its Data Descriptor's length: INVALID_REQUEST) may have changed octets of the block; the
 * entry's Generation, Data Length and Block Offset stay as they were.
 */
export function placeInline(engine: usize, request: usize, received: u32): usize {
  // Before its message has arrived a posted context holds what its previous request left (DONE).
  const before = load<u32>(request + S.REQUEST_STATE);
  if (before != S.REQUEST_STATE_NEW && before != S.REQUEST_STATE_DONE) return 0;
  if (received < <u32>(K.HEADER_SIZE + K.DESCRIPTOR_SIZE)) return 0;
  const flags = flagsOf(request);
  if (opcodeOf(request) != K.OPCODE_STORE || (flags & K.FLAG_INLINE) == 0) return 0;
  // A durable seal is staged first (proceed()); the tier reads the staging block.
  if (durable(engine) && (flags & K.FLAG_SEAL) != 0) return 0;
  const prefix = <u32>(inlineData(request) - message(request));
  const length = descriptorLength(request);
  if (received < prefix || <u64>received >= <u64>prefix + <u64>length) return 0;
  store<u32>(request + S.REQUEST_LENGTH, prefix + length);
  store<u32>(request + S.REQUEST_PLACED, received);
  store<u32>(request + S.REQUEST_STATE, S.REQUEST_STATE_NEW);
  if (start(engine, request) == S.ACTION_PLACE) {
    store<u32>(request + S.REQUEST_OP_LENGTH, prefix + length - received);
    return <usize>load<u32>(request + S.REQUEST_OP_LOCAL) + <usize>(received - prefix);
  }
  // Refused or waiting for the handle: give back what the checks took and start over on arrival.
  const state = load<u32>(request + S.REQUEST_STATE);
  if (state == S.REQUEST_STATE_CREDITED) atomic.sub<u32>(sessionOf(request) + S.SESSION_OUTSTANDING, 1);
  dropLock(engine, request);
  store<u32>(request + S.REQUEST_STATE, before);
  store<u32>(request + S.REQUEST_PLACED, 0);
  return 0;
}

/** All of a PLACING STORE arrived: its first segment's data joins the rest in the block. */
function finishPlacement(engine: usize, request: usize): u32 {
  const placed = load<u32>(request + S.REQUEST_PLACED);
  store<u32>(request + S.REQUEST_PLACED, 0);
  const data = inlineData(request);
  const length = load<u32>(request + S.REQUEST_DATA_LENGTH);
  if (load<u32>(request + S.REQUEST_LENGTH) != <u32>(data - message(request)) + length) {
    return finish(engine, request, K.STATUS_INVALID_REQUEST);
  }
  memory.copy(<usize>load<u32>(request + S.REQUEST_OP_LOCAL), data, placed - <u32>(data - message(request)));
  entryUpdateStore(<usize>load<u32>(request + S.REQUEST_ENTRY), length, (flagsOf(request) & K.FLAG_SEAL) != 0);
  return finish(engine, request, K.STATUS_SUCCESS);
}

/** Takes an allocation ticket of `ring` for the request, whose slot it then polls in state `waiting`. */
function takeTicketFor(request: usize, ring: usize, waiting: u32): void {
  const counter = ringTakeTicket(ring);
  store<u32>(request + S.REQUEST_RING, <u32>ring);
  store<u32>(request + S.REQUEST_TICKET, <u32>(counter >>> 32));
  store<u32>(request + S.REQUEST_SLOT, ringSlotOffset(ring, counter));
  store<u32>(request + S.REQUEST_STATE, waiting);
}

/** The block of the request's ticket, or CONSUMED while its slot is not filled yet. */
// @ts-ignore: decorator
@inline function blockOfTicket(request: usize): u64 {
  const ring = <usize>load<u32>(request + S.REQUEST_RING);
  return ringTryTake(ring, load<u32>(request + S.REQUEST_TICKET), load<u32>(request + S.REQUEST_SLOT), SLOT_SPINS);
}

function continueAllocation(engine: usize, request: usize): u32 {
  const blockOffset = blockOfTicket(request);
  if (blockOffset == CONSUMED) return S.ACTION_RETRY;
  store<u64>(request + S.REQUEST_BLOCK_OFFSET, blockOffset);
  const flags = flagsOf(request);
  const length = load<u32>(request + S.REQUEST_DATA_LENGTH);
  const block = blockAddress(engine, blockOffset);
  if ((flags & K.FLAG_INLINE) == 0 && length != 0) return emitData(request, S.OP_READ_FROM_INITIATOR, block, length);
  memory.copy(block, inlineData(request), length);
  const entry = <usize>load<u32>(request + S.REQUEST_ENTRY);
  entryBind(entry, blockOffset, length, (flags & K.FLAG_SEAL) != 0);
  return finish(engine, request, K.STATUS_SUCCESS);
}

/** A durable ALLOC_STORE's seal is durable: its ticket's block gets the staged data and the entry. */
function continuePlacement(engine: usize, request: usize): u32 {
  const blockOffset = blockOfTicket(request);
  if (blockOffset == CONSUMED) return S.ACTION_RETRY;
  const length = load<u32>(request + S.REQUEST_DATA_LENGTH);
  memory.copy(blockAddress(engine, blockOffset), <usize>load<u32>(request + S.REQUEST_STAGING), length);
  releaseStaging(engine, request);
  entryBind(<usize>load<u32>(request + S.REQUEST_ENTRY), blockOffset, length, true);
  return finish(engine, request, K.STATUS_SUCCESS);
}

/** FREE's change: the entry first, then the block back to its ring and the quota unit back. */
function unbindAndRelease(engine: usize, tenant: usize, entry: usize): void {
  const blockOffset = entryBlockOffset(entry);
  entryUnbind(entry);
  if (blockOffset != CONSUMED) {
    releaseBlock(engine, blockOffset);
    releaseQuota(tenant);
  } else if (!demotes(tenant)) {
    // On the tier alone: under `none` the quota counts it anyway.
    releaseQuota(tenant);
  }
}

/**
 * LOAD of a sealed block on the tier alone (kbtp-v1 section 12): promotion. The LOAD's shared
 * lock becomes exclusive when it is the only holder; the owner's quota (under `demote`) and a
 * block of the owner's ring are taken, then the host fills the block from the tier.
 */
function startPromotion(engine: usize, request: usize, entry: usize, handle: u64, lock: usize): u32 {
  if (atomic.cmpxchg<u32>(lock, 1, S.LOCK_WRITER_BIT) != 1) {
    dropLock(engine, request);
    return S.ACTION_RETRY;
  }
  store<u32>(request + S.REQUEST_LOCK, S.LOCK_EXCLUSIVE);
  const owner = ownerOf(engine, handle);
  if (owner == 0) return finish(engine, request, K.STATUS_TIER_ERROR);
  store<u32>(request + S.REQUEST_OWNER, <u32>owner);
  if (demotes(owner) && !reserveQuota(owner)) return askEvict(engine, request, owner);
  takeTicketFor(request, <usize>load<u32>(owner + S.TENANT_RING), S.REQUEST_STATE_FETCH_SLOT);
  return continueFetch(engine, request);
}

function continueFetch(engine: usize, request: usize): u32 {
  const blockOffset = blockOfTicket(request);
  if (blockOffset == CONSUMED) return S.ACTION_RETRY;
  const entry = <usize>load<u32>(request + S.REQUEST_ENTRY);
  store<u64>(request + S.REQUEST_BLOCK_OFFSET, blockOffset);
  store<u32>(request + S.REQUEST_DATA_LENGTH, entryDataLength(entry));
  store<u32>(request + S.REQUEST_TIER, S.TIER_FETCH);
  store<u32>(request + S.REQUEST_STATE, S.REQUEST_STATE_FETCH);
  return S.ACTION_FETCH;
}

/**
 * The host read the block of ACTION_FETCH into the pool block (FETCH_OK), or could not
 * (FETCH_FAILED: TIER_ERROR, nothing changed), or found it corrupt (FETCH_LOST: the block is
 * given up, durably, next). On success the entry names the pool block with the next Placement
 * Epoch and the LOAD runs again as any LOAD.
 */
export function fetched(engine: usize, request: usize, outcome: u32): u32 {
  if (load<u32>(request + S.REQUEST_STATE) != S.REQUEST_STATE_FETCH) return S.ACTION_NONE;
  const entry = <usize>load<u32>(request + S.REQUEST_ENTRY);
  const blockOffset = load<u64>(request + S.REQUEST_BLOCK_OFFSET);
  if (outcome == S.FETCH_OK) {
    entryPlace(entry, blockOffset);
    dropLock(engine, request);
    store<u32>(request + S.REQUEST_STATE, S.REQUEST_STATE_CREDITED);
    return proceed(engine, request);
  }
  const owner = <usize>load<u32>(request + S.REQUEST_OWNER);
  releaseBlock(engine, blockOffset);
  if (demotes(owner)) releaseQuota(owner);
  if (outcome == S.FETCH_LOST) {
    return askPersist(request, S.TIER_UNBIND_LOST, nextGeneration(entryFlagsGeneration(entry) & 0xffff), CONSUMED);
  }
  return finish(engine, request, K.STATUS_TIER_ERROR);
}

/**
 * The tier made the change of ACTION_PERSIST durable (`ok`) or could not. Only now does the
 * entry change; a failure is TIER_ERROR and changes nothing (kbtp-v1 section 12).
 */
export function persisted(engine: usize, request: usize, ok: bool): u32 {
  if (load<u32>(request + S.REQUEST_STATE) != S.REQUEST_STATE_PERSIST) return S.ACTION_NONE;
  const kind = load<u32>(request + S.REQUEST_TIER);
  const entry = <usize>load<u32>(request + S.REQUEST_ENTRY);
  const tenant = tenantOf(request);
  const opcode = opcodeOf(request);
  if (kind == S.TIER_UNBIND_LOST) {
    // A LOAD found the block corrupt: it answers TIER_ERROR either way; the entry goes once that is durable.
    if (ok) {
      entryUnbind(entry);
      const owner = <usize>load<u32>(request + S.REQUEST_OWNER);
      if (!demotes(owner)) releaseQuota(owner);
    }
    return finish(engine, request, K.STATUS_TIER_ERROR);
  }
  if (kind == S.TIER_UNBIND) {
    if (!ok) return finish(engine, request, K.STATUS_TIER_ERROR);
    unbindAndRelease(engine, tenant, entry);
    return finish(engine, request, K.STATUS_SUCCESS);
  }
  if (kind == S.TIER_UNBIND_UNDO) {
    // Answered either way; when the undo itself failed, the tier knows (it starts its next group
    // from a new checkpoint) and the entry stays not VALID here.
    return finish(engine, request, load<u32>(request + S.REQUEST_UNDO_STATUS));
  }
  const blockOffset = load<u64>(request + S.REQUEST_BLOCK_OFFSET);
  const length = load<u32>(request + S.REQUEST_DATA_LENGTH);
  if (!ok) {
    // Nothing changed: the staged data is dropped, the pool block, the ring and the ticket are
    // untouched, and an ALLOC_STORE gives back the unit of quota it reserved.
    releaseStaging(engine, request);
    if (opcode == K.OPCODE_ALLOC_STORE) releaseQuota(tenant);
    return finish(engine, request, K.STATUS_TIER_ERROR);
  }
  if (opcode == K.OPCODE_STORE) {
    memory.copy(blockAddress(engine, blockOffset), <usize>load<u32>(request + S.REQUEST_STAGING), length);
    releaseStaging(engine, request);
    entryUpdateStore(entry, length, true);
    return finish(engine, request, K.STATUS_SUCCESS);
  }
  if (opcode == K.OPCODE_ALLOC_STORE) {
    takeTicketFor(request, <usize>load<u32>(tenant + S.TENANT_RING), S.REQUEST_STATE_PLACE_SLOT);
    return continuePlacement(engine, request);
  }
  // BIND: the ticket is claimed now. Another BIND of the same ticket or a reclaim may have taken
  // it meanwhile: then the durable seal is undone before the request fails.
  const ring = <usize>load<u32>(request + S.REQUEST_RING);
  const ticket = load<u32>(request + S.REQUEST_TICKET);
  if (ringClaimTicket(ring, ticket, blockOffset)) {
    entryBind(entry, blockOffset, length, true);
    return finish(engine, request, K.STATUS_SUCCESS);
  }
  store<u32>(request + S.REQUEST_UNDO_STATUS, ringTicketAbandoned(ring, ticket) ? K.STATUS_TICKET_ABANDONED : K.STATUS_BAD_TICKET);
  return askPersist(request, S.TIER_UNBIND_UNDO, load<u32>(request + S.REQUEST_TIER_GENERATION), blockOffset);
}

/**
 * The host could not do what the program asked before running it again (a Generation
 * reservation the tier failed to make durable): the request ends with `status`, changing nothing.
 */
export function fail(engine: usize, request: usize, status: u32): u32 {
  return finish(engine, request, status);
}

/**
 * Demotion (kbtp-v1 section 12): a sealed, resident block whose handle no request holds leaves the
 * pool; its data is on the tier already (sealing made it durable). The entry says so (Block Offset
 * all ones, next Placement Epoch) before the block returns to its ring.
 */
export function demote(engine: usize, entry: usize): u32 {
  const lock = entryLock(engine, entry);
  if (!tryLockExclusive(lock)) return S.DEMOTE_BUSY;
  const flagsGeneration = entryFlagsGeneration(entry);
  const bound = (<u32>(K.ENTRY_VALID | K.ENTRY_SEALED)) << 16;
  const blockOffset = entryBlockOffset(entry);
  if (!durable(engine) || (flagsGeneration & bound) != bound || blockOffset == CONSUMED) {
    unlockExclusive(lock);
    return S.DEMOTE_NOT_ELIGIBLE;
  }
  entryPlace(entry, CONSUMED);
  releaseBlock(engine, blockOffset);
  const owner = ownerOf(engine, handleOfEntry(engine, entry));
  if (demotes(owner)) releaseQuota(owner);
  unlockExclusive(lock);
  return S.DEMOTED;
}

/** The tier wants to drop this block: true when it lives on the tier alone, with its handle now held. */
export function dropClaim(engine: usize, entry: usize): bool {
  const lock = entryLock(engine, entry);
  if (!tryLockExclusive(lock)) return false;
  const bound = (<u32>(K.ENTRY_VALID | K.ENTRY_SEALED)) << 16;
  if ((entryFlagsGeneration(entry) & bound) != bound || entryBlockOffset(entry) != CONSUMED) {
    unlockExclusive(lock);
    return false;
  }
  return true;
}

/** A claimed drop is durable (the entry becomes not VALID with the next Generation, as if freed) or abandoned. */
export function dropSettle(engine: usize, entry: usize, commit: bool): void {
  if (commit) {
    entryUnbind(entry);
    const owner = ownerOf(engine, handleOfEntry(engine, entry));
    if (owner != 0 && !demotes(owner)) releaseQuota(owner);
  }
  unlockExclusive(entryLock(engine, entry));
}

/**
 * The host reports the data operation of ACTION_DATA done (`ok`) or failed. On success the
 * program makes its state change and returns ACTION_SEND. On failure nothing has changed:
 * an allocated block goes back to its ring, the quota unit is released and ACTION_NONE says the
 * session ends without a COMPLETION (on RDMAP the initiator's RNIC has terminated the stream).
 */
export function complete(engine: usize, request: usize, ok: bool): u32 {
  const state = load<u32>(request + S.REQUEST_STATE);
  if (state == S.REQUEST_STATE_PLACING) {
    // The message never arrived whole (the stream failed): nothing changes but the block's octets.
    store<u32>(request + S.REQUEST_PLACED, 0);
    release(engine, request);
    return S.ACTION_NONE;
  }
  if (state == S.REQUEST_STATE_DATA_SENT) {
    // The LOAD's Write is done (or the stream failed): only the handle is still held.
    unlockShared(entryLock(engine, <usize>load<u32>(request + S.REQUEST_ENTRY)));
    store<u32>(request + S.REQUEST_LOCK, S.LOCK_NONE);
    store<u32>(request + S.REQUEST_STATE, S.REQUEST_STATE_DONE);
    return S.ACTION_NONE;
  }
  if (state != S.REQUEST_STATE_DATA) return S.ACTION_NONE;
  const opcode = opcodeOf(request);
  const flags = flagsOf(request);
  const entry = <usize>load<u32>(request + S.REQUEST_ENTRY);
  const length = load<u32>(request + S.REQUEST_DATA_LENGTH);
  const staged = load<u32>(request + S.REQUEST_STAGING) != 0;
  if (ok) {
    if (staged) {
      const current = entryFlagsGeneration(entry) & 0xffff;
      if (opcode == K.OPCODE_STORE) return askPersist(request, S.TIER_SEAL, current, entryBlockOffset(entry));
      return askPersist(request, S.TIER_SEAL, nextGeneration(current), CONSUMED);
    }
    if (opcode == K.OPCODE_STORE) entryUpdateStore(entry, length, (flags & K.FLAG_SEAL) != 0);
    if (opcode == K.OPCODE_ALLOC_STORE) {
      entryBind(entry, load<u64>(request + S.REQUEST_BLOCK_OFFSET), length, (flags & K.FLAG_SEAL) != 0);
    }
    return finish(engine, request, K.STATUS_SUCCESS);
  }
  if (staged) {
    // A staged ALLOC_STORE took no ticket yet: only its unit of quota goes back.
    releaseStaging(engine, request);
    if (opcode == K.OPCODE_ALLOC_STORE) releaseQuota(tenantOf(request));
  } else if (opcode == K.OPCODE_ALLOC_STORE) {
    releaseBlock(engine, load<u64>(request + S.REQUEST_BLOCK_OFFSET));
    releaseQuota(tenantOf(request));
  }
  release(engine, request);
  return S.ACTION_NONE;
}
