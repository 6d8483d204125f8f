// Caller buffers registered with a session for LOADs to land in directly (issue 16): a LOAD into
// a registered buffer names that buffer's own STag, so the target's RDMA Write is placed there by
// the receive path (for large blocks read by the kernel straight into it) instead of into the
// slot's staging area and then copied. For a 1 MiB block that copy was about a quarter of the
// client's JavaScript time. The price is RDMA's usual one: while a LOAD into a buffer is on the
// wire the target may write it, also after the call timed out or was aborted; so a buffer cannot
// be deregistered while a LOAD naming it waits for its answer. A STORE from a registered buffer
// (the buffer itself, not a part of it) is sent from it, or read from it by the target's RDMA
// Read, without the copy into the slot (issue 16: at 1 MiB that copy was a tenth of the client's
// CPU per STORE); so the buffer is read when the request leaves or the target reads it, and must
// not change until the call settles, and is not deregistered while such a STORE waits either.
import { Access, type MemoryRegion, type ProtectionDomain, type Rnic } from '../rnic/verbs.ts';
import { UsageError } from './errors.ts';

/** One registered buffer: its region and the LOADs naming it that still wait for their answer. */
export interface LandingBuffer {
  readonly region: MemoryRegion;
  outstanding: number;
}

export class LandingBuffers {
  private readonly buffers = new Map<Uint8Array, LandingBuffer>();
  /** The registered buffer each slot's LOAD names, until the slot is given back. */
  private readonly bySlot: Array<LandingBuffer | undefined> = [];

  constructor(
    private readonly rnic: Rnic,
    private readonly pd: ProtectionDomain,
  ) {}

  /** Registers `buffer` for LOADs to land in (registering it again changes nothing). */
  register(buffer: Uint8Array): void {
    if (!(buffer instanceof Uint8Array)) throw new UsageError('registerLoadBuffer needs a Uint8Array');
    if (this.buffers.has(buffer)) return;
    // RemoteRead: a STORE too large to go inline names the buffer for the target's RDMA Read.
    const region = this.rnic.registerMemory(this.pd, buffer, { access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead });
    this.buffers.set(buffer, { region, outstanding: 0 });
  }

  /**
   * Forgets `buffer`; refused while a LOAD into it waits for its answer (the target may still
   * write it), unless the connection is gone (`connectionGone`: nothing can arrive any more).
   */
  deregister(buffer: Uint8Array, connectionGone: boolean): void {
    const entry = this.buffers.get(buffer);
    if (entry === undefined) throw new UsageError('deregisterLoadBuffer: the buffer is not registered with this session');
    if (entry.outstanding > 0 && !connectionGone) {
      throw new UsageError(
        `deregisterLoadBuffer: ${entry.outstanding} ${entry.outstanding === 1 ? 'request on the buffer waits' : 'requests on the buffer wait'} for the target's answer (the target may still write or read the buffer); deregister it after they ended`,
      );
    }
    this.buffers.delete(buffer);
    // Closing the RNIC (the session's end) may have dropped the region already.
    if (entry.region.registered) this.rnic.deregisterMemory(entry.region);
  }

  /**
   * The region slot `slot`'s LOAD of a `blockSize`-octet block lands in, when `into` is
   * registered and holds a whole block (a shorter buffer goes through staging, so that a longer
   * block is refused with LENGTH_ERROR, not placed); undefined otherwise.
   */
  claim(slot: number, into: Uint8Array | undefined, blockSize: number): MemoryRegion | undefined {
    if (into === undefined || this.buffers.size === 0) return undefined;
    const entry = this.buffers.get(into);
    if (entry === undefined || into.length < blockSize) return undefined;
    entry.outstanding++;
    this.bySlot[slot] = entry;
    // The LOAD's RDMA Write spans the block from the buffer's start, and nothing else writes the
    // buffer meanwhile: the receive path may read the Write's segments into it at once.
    entry.region.remoteWriteExtent = blockSize;
    return entry.region;
  }

  /**
   * The region slot `slot`'s STORE sends `data` from (inline, or by the target's RDMA Read) when
   * `data` is itself a registered buffer; undefined otherwise (the data is copied into the slot).
   */
  claimSource(slot: number, data: Uint8Array): MemoryRegion | undefined {
    if (this.buffers.size === 0) return undefined;
    const entry = this.buffers.get(data);
    if (entry === undefined) return undefined;
    entry.outstanding++;
    this.bySlot[slot] = entry;
    return entry.region;
  }

  /** True when slot `slot`'s LOAD landed in the caller's buffer (no copy out of staging needed). */
  landed(slot: number): boolean {
    return this.bySlot[slot] !== undefined;
  }

  /** Slot `slot` is given back: its LOAD's answer came (or it never left). */
  release(slot: number): void {
    const entry = this.bySlot[slot];
    if (entry === undefined) return;
    entry.outstanding--;
    this.bySlot[slot] = undefined;
  }
}
