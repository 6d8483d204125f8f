// The host's handle on the engine: one shared WebAssembly.Memory with the pool, table and rings,
// and an instance of the engine module over it in this thread. Worker threads attach to the
// same memory with Engine.attach(engine.handoff()).
import * as S from '../../assembly/struct-offsets.ts';
import { decodeRingSlot, decodeTableEntry, type RingSlot, type TableEntry } from './table-entry.ts';
import { resolveEngineConfig, type EngineConfig, type ResolvedEngineConfig } from './config.ts';
import { computeLayout, type EngineLayout, type RingLayout } from './layout.ts';
import { engineModule, instantiateEngine, type EngineExports } from './wasm.ts';
import { initializeEngine } from './initialize.ts';
import { InternalError, UsageError } from '../errors.ts';

/** Everything a worker thread needs to run the same engine (structured-cloneable). */
export interface EngineHandoff {
  memory: WebAssembly.Memory;
  module: WebAssembly.Module;
  config: ResolvedEngineConfig;
  layout: EngineLayout;
}

export interface RingCounters {
  headTicket: number;
  headSlotOffset: number;
  tailTicket: number;
  tailSlotOffset: number;
}

export class Engine {
  readonly exports: EngineExports;
  readonly bytes: Uint8Array;
  readonly view: DataView;
  /** The memory as u32 words, for atomics on host-side words (stamps, marks). */
  readonly words: Uint32Array;
  /** Address of the engine descriptor: the first argument of the engine's entry points. */
  readonly address: number;

  private constructor(
    readonly memory: WebAssembly.Memory,
    readonly module: WebAssembly.Module,
    readonly config: ResolvedEngineConfig,
    readonly layout: EngineLayout,
  ) {
    this.exports = instantiateEngine(module, memory);
    this.bytes = new Uint8Array(memory.buffer);
    this.view = new DataView(memory.buffer);
    this.words = new Uint32Array(memory.buffer);
    this.address = layout.engine;
  }

  /** Validates the configuration, lays out and creates the shared memory, and initialises it. */
  static create(config: EngineConfig, module: WebAssembly.Module = engineModule()): Engine {
    const resolved = resolveEngineConfig(config);
    const probe = instantiateEngine(module, new WebAssembly.Memory({ initial: 1, maximum: 1, shared: true }));
    const layout = computeLayout(resolved, probe.heapBase());
    const memory = new WebAssembly.Memory({ initial: layout.pages, maximum: layout.pages, shared: true });
    initializeEngine(memory, resolved, layout);
    return new Engine(memory, module, resolved, layout);
  }

  /** Attaches to an engine created in another thread. */
  static attach(handoff: EngineHandoff): Engine {
    return new Engine(handoff.memory, handoff.module, handoff.config, handoff.layout);
  }

  handoff(): EngineHandoff {
    return { memory: this.memory, module: this.module, config: this.config, layout: this.layout };
  }

  get sharedRing(): RingLayout {
    const ring = this.layout.rings[0];
    if (ring === undefined) throw new InternalError('engine has no shared ring');
    return ring;
  }

  /** The ring of partition `index`. */
  partitionRing(index: number): RingLayout {
    const ring = this.layout.rings[index + 1];
    if (ring === undefined) throw new UsageError(`no partition ${index}`);
    return ring;
  }

  tenantAddress(index: number): number {
    if (!Number.isInteger(index) || index < 0 || index >= this.config.tenants.length) throw new UsageError(`no tenant ${index}`);
    return this.layout.tenants + S.TENANT_SIZE * index;
  }

  tenantUsage(index: number): number {
    return Atomics.load(new Uint32Array(this.memory.buffer, this.tenantAddress(index) + S.TENANT_USAGE, 1), 0);
  }

  /** Address of the entry of `handle`, or 0 when the table does not serve it. */
  entryAddress(handle: bigint): number {
    // Unsigned: a wasm i32 result reads negative in JavaScript at 2 GiB and above.
    return this.exports.entryAddress(this.address, handle) >>> 0;
  }

  /** The entry of `handle` as an initiator would read it (big-endian fields). */
  readEntry(handle: bigint): TableEntry | undefined {
    const entry = this.entryAddress(handle);
    if (entry === 0) return undefined;
    return decodeTableEntry(this.view, entry);
  }

  readSlot(ring: RingLayout, slot: number): RingSlot {
    return decodeRingSlot(this.view, ring.slots + S.SLOT_SIZE * slot);
  }

  readCounters(ring: RingLayout): RingCounters {
    const head = this.view.getBigUint64(ring.head, true);
    const tail = this.view.getBigUint64(ring.descriptor + S.RING_TAIL, true);
    return {
      headTicket: Number(head >> 32n),
      headSlotOffset: this.exports.ringSlotOffset(ring.descriptor, head),
      tailTicket: Number(tail >> 32n),
      tailSlotOffset: this.exports.ringSlotOffset(ring.descriptor, tail),
    };
  }

  /** Frees parked on `ring` because their slot was not consumed yet. */
  parkedFrees(ring: RingLayout): Array<{ ticket: number; blockOffset: bigint }> {
    const used = this.view.getUint32(ring.descriptor + S.RING_DEFERRED_USED, true);
    const parked: Array<{ ticket: number; blockOffset: bigint }> = [];
    for (let i = 0; i < used; i++) {
      const entry = ring.deferredList + S.DEFERRED_ENTRY_SIZE * i;
      parked.push({ ticket: this.view.getUint32(entry, true), blockOffset: this.view.getBigUint64(entry + 8, true) });
    }
    return parked;
  }

  /** Handle index (from the table's base handle) of an entry address. */
  entryIndex(entry: number): number {
    return (entry - this.layout.table) / S.ENTRY_SIZE;
  }

  /** Address of the entry of handle index `index`. */
  entryAt(index: number): number {
    return this.layout.table + S.ENTRY_SIZE * index;
  }

  /**
   * The node drains: from this call on, every thread's engine answers new requests of every
   * session with SHUTTING_DOWN (requests already admitted finish). Shared memory, so it needs no
   * message to reach the workers first.
   */
  startDraining(): void {
    Atomics.store(this.words, (this.address + S.ENGINE_DRAINING) >>> 2, 1);
  }

  get draining(): boolean {
    return Atomics.load(this.words, (this.address + S.ENGINE_DRAINING) >>> 2) !== 0;
  }

  /** The handle was used now (least-recently-used order for demotion and drops). */
  stamp(index: number): void {
    Atomics.store(this.words, (this.layout.handleStamps >>> 2) + index, Atomics.add(this.words, this.layout.lruClock >>> 2, 1) + 1);
  }

  stampOf(index: number): number {
    return Atomics.load(this.words, (this.layout.handleStamps >>> 2) + index);
  }

  /** Highest Generation of the handle that may be shown without a durable record (kbtp-v1 section 12). */
  setGenerationMark(index: number, mark: number): void {
    Atomics.store(this.words, (this.layout.generationMarks >>> 2) + index, mark);
  }

  generationMark(index: number): number {
    return Atomics.load(this.words, (this.layout.generationMarks >>> 2) + index);
  }

  /** Demotes the handle's sealed resident block to the tier alone: S.DEMOTED, DEMOTE_BUSY or DEMOTE_NOT_ELIGIBLE. */
  demote(index: number): number {
    return this.exports.demote(this.address, this.entryAt(index));
  }

  /** Claims the handle's block for a drop: true when it lives on the tier alone and is now held. */
  dropClaim(index: number): boolean {
    return this.exports.dropClaim(this.address, this.entryAt(index)) !== 0;
  }

  /** Ends a claimed drop: the entry becomes not VALID with the next Generation (`commit`), or stays. */
  dropSettle(index: number, commit: boolean): void {
    this.exports.dropSettle(this.address, this.entryAt(index), commit ? 1 : 0);
  }

  /**
   * Start-up only, before any thread serves: the entry as the durable tier recovered it. A sealed
   * block comes back on the tier alone (VALID, SEALED, Block Offset all ones); anything else is
   * not VALID with the Generation it resumes at.
   */
  restoreEntry(index: number, generation: number, sealedDataLength: number | undefined): void {
    const entry = this.entryAt(index);
    const sealed = sealedDataLength !== undefined;
    this.view.setUint32(entry + 4, sealed ? sealedDataLength : 0, false);
    this.view.setBigUint64(entry + 8, sealed ? 0xffffffffffffffffn : 0n, false);
    this.view.setUint16(entry, sealed ? 0x3 : 0, false);
    this.view.setUint16(entry + 2, generation, false);
  }

  /** Start-up only: the tenant's usage as recovery found it (bound handles, under 'none'). */
  setTenantUsage(index: number, usage: number): void {
    Atomics.store(this.words, (this.tenantAddress(index) + S.TENANT_USAGE) >>> 2, usage);
  }

  /** Index of the tenant at `address` (a tenant descriptor address the engine reported). */
  tenantIndexOf(address: number): number {
    return (address - this.layout.tenants) / S.TENANT_SIZE;
  }

  blockAddress(blockOffset: bigint): number {
    return this.layout.pool + Number(blockOffset);
  }

  /** A view of the block's octets in the shared pool (no copy). */
  block(blockOffset: bigint, length: number = this.config.blockSize): Uint8Array {
    return new Uint8Array(this.memory.buffer, this.blockAddress(blockOffset), length);
  }
}
