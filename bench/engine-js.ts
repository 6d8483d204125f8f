// The comparison for bench/engine.ts: the same ring, table check and copy algorithms written in
// plain TypeScript over the same shared memory (Atomics on typed arrays, BigInt for 64-bit
// fields). It exists only to measure what the WebAssembly engine buys.
import * as S from '../assembly/struct-offsets.ts';
import * as K from '../assembly/kbtp-constants.ts';
import type { Engine } from '../host/engine/engine.ts';
import type { RingLayout } from '../host/engine/layout.ts';

const ALL_ONES = -1n; // as a signed BigInt64Array element
const U64 = (1n << 64n) - 1n;

function swap32(value: number): number {
  return (((value & 0xff) << 24) | ((value & 0xff00) << 8) | ((value >>> 8) & 0xff00) | (value >>> 24)) >>> 0;
}

function swap64(value: bigint): bigint {
  const v = BigInt.asUintN(64, value);
  const high = swap32(Number(v & 0xffffffffn));
  const low = swap32(Number(v >> 32n));
  return BigInt.asIntN(64, (BigInt(high) << 32n) | BigInt(low));
}

export class JsEngine {
  private readonly i32: Int32Array;
  private readonly i64: BigInt64Array;
  private readonly bytes: Uint8Array;
  private readonly view: DataView;

  constructor(private readonly engine: Engine) {
    const buffer = engine.memory.buffer;
    this.i32 = new Int32Array(buffer);
    this.i64 = new BigInt64Array(buffer);
    this.bytes = new Uint8Array(buffer);
    this.view = new DataView(buffer);
  }

  private maskedFetchAdd(address: number, addend: bigint, mask: bigint): bigint {
    const index = address / 8;
    let observed = Atomics.load(this.i64, index);
    for (;;) {
      const original = BigInt.asUintN(64, observed);
      const low = ((original & ~mask & U64) + (addend & ~mask & U64)) & U64;
      const desired = BigInt.asIntN(64, low ^ ((original ^ addend) & mask));
      const witnessed = Atomics.compareExchange(this.i64, index, observed, desired);
      if (witnessed === observed) return original;
      observed = witnessed;
    }
  }

  private counterFetchAdd(ring: RingLayout, counter: number): bigint {
    const mask = (1n << 63n) | (1n << 31n) | (1n << BigInt(ring.order + 3));
    return this.maskedFetchAdd(counter, BigInt(K.RING_ADD_DATA_MASKED), mask);
  }

  private lock(ring: RingLayout): void {
    const index = (ring.descriptor + S.RING_DEFERRED_LOCK) / 4;
    while (Atomics.compareExchange(this.i32, index, 0, 1) !== 0) {
      /* held only briefly */
    }
  }

  private unlock(ring: RingLayout): void {
    Atomics.store(this.i32, (ring.descriptor + S.RING_DEFERRED_LOCK) / 4, 0);
  }

  private fill(slot: number, ticket: number, blockOffset: bigint): void {
    Atomics.store(this.i64, (slot + 8) / 8, swap64(blockOffset));
    Atomics.store(this.i32, slot / 4, swap32(ticket) | 0);
  }

  private settle(ring: RingLayout, consumedTicket: number): void {
    if (Atomics.load(this.i32, (ring.descriptor + S.RING_DEFERRED_COUNT) / 4) === 0) return;
    const slotCount = 2 ** ring.order;
    const wanted = (consumedTicket + slotCount) >>> 0;
    this.lock(ring);
    const used = this.view.getUint32(ring.descriptor + S.RING_DEFERRED_USED, true);
    for (let i = 0; i < used; i++) {
      const entry = ring.deferredList + S.DEFERRED_ENTRY_SIZE * i;
      if (this.view.getUint32(entry, true) !== wanted) continue;
      const blockOffset = this.view.getBigUint64(entry + 8, true);
      const last = ring.deferredList + S.DEFERRED_ENTRY_SIZE * (used - 1);
      this.view.setUint32(entry, this.view.getUint32(last, true), true);
      this.view.setBigUint64(entry + 8, this.view.getBigUint64(last + 8, true), true);
      this.view.setUint32(ring.descriptor + S.RING_DEFERRED_USED, used - 1, true);
      this.fill(ring.slots + S.SLOT_SIZE * (wanted & (slotCount - 1)), wanted, blockOffset);
      Atomics.sub(this.i32, (ring.descriptor + S.RING_DEFERRED_COUNT) / 4, 1);
      break;
    }
    this.unlock(ring);
  }

  /** Allocation: FetchAdd on Head, poll the slot, consume it. Returns the Block Offset or -1n. */
  allocate(ring: RingLayout, spins: number): bigint {
    const counter = this.counterFetchAdd(ring, ring.head);
    const ticket = Number(counter >> 32n);
    const slot = ring.slots + Number(counter & BigInt((1 << (ring.order + 4)) - 1));
    for (let attempt = 0; attempt <= spins; attempt++) {
      if (swap32(Atomics.load(this.i32, slot / 4)) >>> 0 !== ticket) continue;
      const raw = Atomics.load(this.i64, (slot + 8) / 8);
      if (raw === ALL_ONES) continue;
      Atomics.store(this.i64, (slot + 8) / 8, ALL_ONES);
      this.settle(ring, ticket);
      return BigInt.asUintN(64, swap64(raw));
    }
    return -1n;
  }

  /** Free: FetchAdd on Tail, fill the slot, or park the free while the slot is owed. */
  release(ring: RingLayout, blockOffset: bigint): void {
    const counter = this.counterFetchAdd(ring, ring.descriptor + S.RING_TAIL);
    const ticket = Number(counter >> 32n);
    const slot = ring.slots + Number(counter & BigInt((1 << (ring.order + 4)) - 1));
    const previousTurn = (ticket - 2 ** ring.order) >>> 0;
    const consumed = (): boolean => swap32(Atomics.load(this.i32, slot / 4)) >>> 0 === previousTurn && Atomics.load(this.i64, (slot + 8) / 8) === ALL_ONES;
    if (consumed()) {
      this.fill(slot, ticket, blockOffset);
      return;
    }
    Atomics.add(this.i32, (ring.descriptor + S.RING_DEFERRED_COUNT) / 4, 1);
    this.lock(ring);
    if (consumed()) {
      this.fill(slot, ticket, blockOffset);
      Atomics.sub(this.i32, (ring.descriptor + S.RING_DEFERRED_COUNT) / 4, 1);
    } else {
      const used = this.view.getUint32(ring.descriptor + S.RING_DEFERRED_USED, true);
      const entry = ring.deferredList + S.DEFERRED_ENTRY_SIZE * used;
      this.view.setUint32(entry, ticket, true);
      this.view.setBigUint64(entry + 8, blockOffset, true);
      this.view.setUint32(ring.descriptor + S.RING_DEFERRED_USED, used + 1, true);
    }
    this.unlock(ring);
  }

  /** The LOAD checks of the engine's lookup(): served, scope, generation, VALID, SEALED, length. */
  lookupLoad(tenant: number, handle: bigint, flags: number, expectedGeneration: number, length: number): number {
    const { config, layout } = this.engine;
    const index = handle - config.handleBase;
    if (index < 0n || index >= BigInt(config.handleCount)) return K.STATUS_OUT_OF_RANGE;
    const entry = layout.table + S.ENTRY_SIZE * Number(index);
    const first = this.view.getBigUint64(tenant + S.TENANT_LOAD_FIRST, true);
    const count = this.view.getBigUint64(tenant + S.TENANT_LOAD_COUNT, true);
    if (BigInt.asUintN(64, handle - first) >= count) return K.STATUS_ACCESS_DENIED;
    const flagsGeneration = swap32(Atomics.load(this.i32, entry / 4));
    if (expectedGeneration !== 0 && expectedGeneration !== (flagsGeneration & 0xffff)) return K.STATUS_GENERATION_MISMATCH;
    if ((flagsGeneration & (K.ENTRY_VALID << 16)) === 0) return K.STATUS_NOT_VALID;
    if ((flagsGeneration & (K.ENTRY_SEALED << 16)) === 0 && (flags & K.FLAG_ALLOW_UNSEALED) === 0) return K.STATUS_NOT_SEALED;
    if (swap32(Atomics.load(this.i32, (entry + 4) / 4)) > length) return K.STATUS_LENGTH_ERROR;
    return K.STATUS_SUCCESS;
  }

  copyIntoBlock(blockOffset: bigint, source: number, length: number): void {
    const destination = this.engine.layout.pool + Number(blockOffset);
    this.bytes.set(this.bytes.subarray(source, source + length), destination);
  }
}
