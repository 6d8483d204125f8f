// Protection domains, memory regions and the STag table of one RNIC instance. An STag is a
// 24-bit table index and an 8-bit key chosen at registration, so a stale STag whose index was
// reused is rejected by the key. Every access names an STag, a tagged offset and a length and is
// checked in the order Linux siw uses: STag valid -> PD -> rights -> TO wrap -> bounds.

import type { NicObserver } from './nic-observer.ts';
import { RnicError } from './errors.ts';
import { ViewCache } from './view-cache.ts';

/** Access rights of a memory region (bit mask). Any region may be read locally. */
export const Access = {
  LocalWrite: 0x1,
  RemoteWrite: 0x2,
  RemoteRead: 0x4,
  RemoteAtomic: 0x8,
} as const;
export const ACCESS_ALL = Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead | Access.RemoteAtomic;

/** Outcome of an access check; Ok is 0 so callers can test `!== AccessStatus.Ok`. */
export const AccessStatus = {
  Ok: 0,
  InvalidStag: 1,
  PdMismatch: 2,
  AccessRights: 3,
  ToWrap: 4,
  BaseBounds: 5,
} as const;
export type AccessStatus = (typeof AccessStatus)[keyof typeof AccessStatus];

/**
 * Indices the table picks itself stay below 2^23, so the STags it hands out (index << 8 | key)
 * are below 2^31: V8 keeps such a number as a small integer, where an STag at or above 2^31 is
 * a heap number allocated at every call boundary it crosses (16 octets each; half the devices
 * drew such an index and paid 16-40 octets per request, issue 16). STags given by the caller
 * (`options.stag`) may use the whole 24-bit index.
 */
const PICKED_INDEX_LIMIT = 0x007fffff;
const TWO_POW_64 = 1n << 64n;
/** Views a region keeps (MemoryRegion.view): a pool's blocks and a session's slots, not a byte map. */
const VIEW_CACHE_LIMIT = 4096;
export const DEFAULT_PAGE_SIZE = 4096;

export class ProtectionDomain {
  constructor(
    readonly handle: number,
    /** Identifies the RNIC the domain belongs to; regions and QPs must share it. */
    readonly deviceId: number,
  ) {}
}

export interface RegisterMemoryOptions {
  /** Rights, a mask of `Access` bits. */
  access: number;
  /** First byte of the range inside the buffer (default 0; for a view, relative to the view). */
  offset?: number;
  /** Length of the range (default: to the end of the buffer or view). */
  length?: number;
  /**
   * Tagged offset of the region's first byte. Default 0 ("zero-based"): a peer addresses byte i of
   * the region as TO i. Any 64-bit base is allowed as long as base + length fits in 64 bits.
   */
  taggedOffsetBase?: bigint | number;
  /** Page size reported to the observer's translation model (default 4096). */
  pageSize?: number;
  /** 8-bit STag key; default random. */
  key?: number;
  /**
   * A specific STag (index and key), for replaying recorded traffic or matching a peer's
   * expectations; registration fails if the index is taken. Default: the next free index.
   */
  stag?: number;
}

export class MemoryRegion {
  /** True until invalidated (locally or by a remote Send with Invalidate) or deregistered. */
  valid = true;
  /** True until deregistered; an invalidated region stays registered. */
  registered = true;
  private atomicView: BigUint64Array | undefined;
  /**
   * Called after a peer's atomic executed on this region, with the byte offset and the value
   * before it. The KBTP target uses it to learn which ring tickets a session took one-sidedly.
   */
  onRemoteAtomic: ((offset: number, original: bigint) => void) | undefined = undefined;
  /**
   * How many octets a peer's RDMA Write into this region spans at most from its first octet, when
   * the owner knows (0: unknown), that memory being the Write's alone until it completes: a
   * buffer one LOAD at a time lands in (kbtp landing.ts). The receive path then reads the Write's
   * later segments straight into it with one readv, guessing where they fall (receive-vector.ts;
   * issue 16: a 256 KiB LOAD took six reads on the client, one per segment, and a Write carries
   * no length). A wrong guess (a peer that cuts its segments otherwise, or a shorter Write) still
   * places what was sent where it belongs; it only leaves stream octets in memory of this extent,
   * which the peer may write anyway.
   */
  remoteWriteExtent = 0;

  constructor(
    readonly stag: number,
    readonly pd: ProtectionDomain,
    readonly access: number,
    readonly buffer: ArrayBufferLike,
    /** Offset of the region's first byte in `buffer`. */
    readonly byteOffset: number,
    readonly length: number,
    readonly taggedOffsetBase: bigint,
    readonly pageSize: number,
  ) {
    this.bytes = new Uint8Array(buffer, byteOffset, length);
    this.baseHigh = Number(taggedOffsetBase >> 32n);
    this.baseLow = Number(taggedOffsetBase & 0xffffffffn);
  }

  /** `taggedOffsetBase` as two 32-bit halves: the receive path checks TOs without BigInts. */
  readonly baseHigh: number;
  readonly baseLow: number;

  /** The registered bytes. */
  readonly bytes: Uint8Array;

  /** Local key; equal to the STag as in siw. */
  get lkey(): number {
    return this.stag;
  }

  /** Remote key (the STag a peer puts on the wire). */
  get rkey(): number {
    return this.stag;
  }

  get shared(): boolean {
    return typeof SharedArrayBuffer !== 'undefined' && this.buffer instanceof SharedArrayBuffer;
  }

  /** 64-bit view over the whole underlying buffer, for Atomics on 8-aligned targets. */
  atomics(): BigUint64Array {
    this.atomicView ??= new BigUint64Array(this.buffer, 0, Math.floor(this.buffer.byteLength / 8));
    return this.atomicView;
  }

  /**
   * `length` octets at `offset` of the region as a view, the same view each time the same range
   * is asked for (see ViewCache): what the RNIC gathers from and places into.
   */
  view(offset: number, length: number): Uint8Array {
    this.views ??= new ViewCache(this.bytes, VIEW_CACHE_LIMIT);
    return this.views.view(offset, length);
  }

  private views: ViewCache | undefined;

  /** Tagged offset of byte `offset` of the region. */
  taggedOffsetAt(offset: number): bigint {
    return this.taggedOffsetBase + BigInt(offset);
  }
}

export class MemoryTable {
  private readonly regions = new Map<number, MemoryRegion>();
  private nextIndex: number;
  private nextPdHandle = 1;
  /** Region and byte offset found by the last successful `checkRemote`. */
  resolvedRegion: MemoryRegion | undefined;
  resolvedOffset = 0;

  constructor(
    readonly deviceId: number,
    private readonly observer: NicObserver | undefined,
  ) {
    // siw also randomises the first index so STags are not guessable from a fresh device.
    this.nextIndex = 1 + Math.floor(Math.random() * PICKED_INDEX_LIMIT);
  }

  get size(): number {
    return this.regions.size;
  }

  allocatePd(): ProtectionDomain {
    return new ProtectionDomain(this.nextPdHandle++, this.deviceId);
  }

  register(pd: ProtectionDomain, target: ArrayBufferLike | ArrayBufferView, options: RegisterMemoryOptions): MemoryRegion {
    if (pd.deviceId !== this.deviceId) throw new RnicError('EINVAL', 'protection domain belongs to another RNIC');
    const access = options.access;
    if (!Number.isInteger(access) || (access & ~0xf) !== 0) {
      throw new RnicError('EINVAL', `access ${access} is not a mask of Access.LocalWrite/RemoteWrite/RemoteRead/RemoteAtomic`);
    }
    if ((access & (Access.RemoteWrite | Access.RemoteAtomic)) !== 0 && (access & Access.LocalWrite) === 0) {
      // Same rule as ibv_reg_mr: remote writers need the region to be locally writable too.
      throw new RnicError('EINVAL', 'RemoteWrite and RemoteAtomic access require LocalWrite as well');
    }
    let buffer: ArrayBufferLike;
    let viewOffset: number;
    let viewLength: number;
    if (ArrayBuffer.isView(target)) {
      buffer = target.buffer;
      viewOffset = target.byteOffset;
      viewLength = target.byteLength;
    } else if (target instanceof ArrayBuffer || (typeof SharedArrayBuffer !== 'undefined' && target instanceof SharedArrayBuffer)) {
      buffer = target;
      viewOffset = 0;
      viewLength = target.byteLength;
    } else {
      throw new RnicError('EINVAL', 'memory must be an ArrayBuffer, a SharedArrayBuffer or a view of one');
    }
    const offset = options.offset ?? 0;
    const length = options.length ?? viewLength - offset;
    if (!Number.isSafeInteger(offset) || offset < 0 || !Number.isSafeInteger(length) || length < 0 || offset + length > viewLength) {
      throw new RnicError('EINVAL', `range offset ${offset} length ${length} does not fit a ${viewLength}-byte buffer`);
    }
    const base = BigInt(options.taggedOffsetBase ?? 0);
    if (base < 0n || base + BigInt(length) > TWO_POW_64) {
      throw new RnicError('EINVAL', `tagged offset base ${base} plus length ${length} does not fit 64 bits`);
    }
    const pageSize = options.pageSize ?? DEFAULT_PAGE_SIZE;
    if (!Number.isInteger(pageSize) || pageSize <= 0) throw new RnicError('EINVAL', `page size ${pageSize} must be a positive integer`);
    let index: number;
    let key: number;
    if (options.stag !== undefined) {
      const stag = options.stag;
      if (!Number.isInteger(stag) || stag < 0 || stag > 0xffffffff) throw new RnicError('EINVAL', `STag ${stag} is not a 32-bit value`);
      index = stag >>> 8;
      key = stag & 0xff;
      if (index === 0) throw new RnicError('EINVAL', 'STag index 0 is reserved');
      if (this.regions.has(index)) throw new RnicError('EINVAL', `STag index 0x${index.toString(16)} is already registered`);
    } else {
      key = options.key ?? Math.floor(Math.random() * 256);
      if (!Number.isInteger(key) || key < 0 || key > 0xff) throw new RnicError('EINVAL', `STag key ${key} is not an octet`);
      index = this.allocateIndex();
    }
    const stag = ((index << 8) | key) >>> 0;
    const region = new MemoryRegion(stag, pd, access, buffer, viewOffset + offset, length, base, pageSize);
    this.regions.set(index, region);
    this.observer?.registerRegion(stag, length, pageSize);
    return region;
  }

  deregister(region: MemoryRegion): void {
    if (!region.registered) throw new RnicError('EINVAL', `STag 0x${hex(region.stag)} is not registered`);
    region.valid = false;
    region.registered = false;
    this.regions.delete(region.stag >>> 8);
    this.observer?.deregisterRegion(region.stag);
  }

  /** Marks the STag invalid (local invalidate or remote Send with Invalidate). */
  invalidate(stag: number, pd: ProtectionDomain): AccessStatus {
    const region = this.regions.get(stag >>> 8);
    if (region === undefined || region.stag !== stag) return AccessStatus.InvalidStag;
    if (region.pd !== pd) return AccessStatus.PdMismatch;
    // An STag may already be invalid; invalidating again is not an error (verbs semantics).
    if (region.valid) {
      region.valid = false;
      this.observer?.deregisterRegion(stag);
    }
    return AccessStatus.Ok;
  }

  /** Makes an invalidated (still registered) STag usable again, optionally with a new key. */
  revalidate(region: MemoryRegion): void {
    if (!region.registered) throw new RnicError('EINVAL', `STag 0x${hex(region.stag)} was deregistered`);
    if (!region.valid) {
      region.valid = true;
      this.observer?.registerRegion(region.stag, region.length, region.pageSize);
    }
  }

  /** The registered region with exactly this STag (index and key), valid or not. */
  lookup(stag: number): MemoryRegion | undefined {
    const region = this.regions.get(stag >>> 8);
    return region !== undefined && region.stag === stag ? region : undefined;
  }

  /**
   * Checks a remote access of `length` octets at tagged offset `taggedOffset` through `stag`.
   * On success sets `resolvedRegion` / `resolvedOffset` (byte offset in the region).
   */
  checkRemote(stag: number, pd: ProtectionDomain, required: number, taggedOffset: bigint, length: number): AccessStatus {
    const to = BigInt.asUintN(64, taggedOffset);
    // Outside 0..2^64-1 (no wire TO is): the region checks first, then the bounds, as always.
    if (to !== taggedOffset) {
      const region = this.remoteRegion(stag, pd, required);
      return typeof region === 'number' ? region : taggedOffset < 0n ? AccessStatus.BaseBounds : AccessStatus.ToWrap;
    }
    return this.checkRemoteAt(stag, pd, required, Number(to >> 32n), Number(to & 0xffffffffn), length);
  }

  /**
   * checkRemote with the tagged offset as two 32-bit halves (`high` * 2^32 + `low`), as it comes
   * off the wire: the per-segment form, which allocates no BigInt. `length` is below 2^32.
   */
  checkRemoteAt(stag: number, pd: ProtectionDomain, required: number, high: number, low: number, length: number): AccessStatus {
    const region = this.remoteRegion(stag, pd, required);
    if (typeof region === 'number') return region;
    // TO + length passes 2^64 only from the top 2^32 octets, since length < 2^32.
    if (high === 0xffffffff && low + length > 0x1_0000_0000) return AccessStatus.ToWrap;
    // A region is shorter than 2^53 octets, so an offset whose high halves differ by 2^21 or
    // more is out of bounds; below that, the difference is exact in a double.
    const highDelta = high - region.baseHigh;
    if (highDelta < 0 || highDelta >= 0x20_0000) return AccessStatus.BaseBounds;
    const offset = highDelta * 0x1_0000_0000 + (low - region.baseLow);
    if (offset < 0 || offset + length > region.length) return AccessStatus.BaseBounds;
    this.resolvedRegion = region;
    this.resolvedOffset = offset;
    this.observer?.memoryTranslation(stag, offset, length, region.pageSize);
    return AccessStatus.Ok;
  }

  /** The region `stag` names if `pd` may access it with `required` rights, else why not. */
  private remoteRegion(stag: number, pd: ProtectionDomain, required: number): MemoryRegion | AccessStatus {
    const region = this.regions.get(stag >>> 8);
    if (region === undefined || region.stag !== stag || !region.valid) return AccessStatus.InvalidStag;
    if (region.pd !== pd) return AccessStatus.PdMismatch;
    if ((region.access & required) !== required) return AccessStatus.AccessRights;
    return region;
  }

  /**
   * Checks a local scatter/gather element: `lkey`, byte `offset` into the region and `length`.
   * Local reads need no right; local writes need LocalWrite.
   */
  checkLocal(lkey: number, pd: ProtectionDomain, required: number, offset: number, length: number): AccessStatus {
    const region = this.regions.get(lkey >>> 8);
    if (region === undefined || region.stag !== lkey || !region.valid) return AccessStatus.InvalidStag;
    if (region.pd !== pd) return AccessStatus.PdMismatch;
    if ((region.access & required) !== required) return AccessStatus.AccessRights;
    if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0 || offset + length > region.length) {
      return AccessStatus.BaseBounds;
    }
    this.resolvedRegion = region;
    this.resolvedOffset = offset;
    this.observer?.memoryTranslation(lkey, offset, length, region.pageSize);
    return AccessStatus.Ok;
  }

  private allocateIndex(): number {
    if (this.regions.size >= PICKED_INDEX_LIMIT) throw new RnicError('ENOMEM', 'STag table is full (8M regions)');
    let index = this.nextIndex;
    while (this.regions.has(index)) index = index >= PICKED_INDEX_LIMIT ? 1 : index + 1;
    this.nextIndex = index >= PICKED_INDEX_LIMIT ? 1 : index + 1;
    return index;
  }
}

function hex(value: number): string {
  return value.toString(16).padStart(8, '0');
}
