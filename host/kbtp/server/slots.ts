// Admission capacity shared by all worker threads of a target. The engine's arena is cut into
// one slot per session the node may hold (a session record and its 2 x credits request
// contexts); a connection claims a slot before it takes anything else and gives it back when it
// is cleaned up, so connections alone can never exhaust the arena. Slots and the per-tenant
// session counts live in shared memory: any worker can use any free slot, so one worker is
// never full while another has room.
import { UsageError } from '../../errors.ts';

/** The shared words: [0] a rotating start hint, then one owner per slot, then one count per tenant. */
const HINT = 0;
const FIRST_SLOT = 1;

export class SessionSlots {
  private readonly words: Int32Array;

  constructor(
    readonly buffer: SharedArrayBuffer,
    readonly slots: number,
    readonly tenants: number,
  ) {
    if (buffer.byteLength < SessionSlots.bytes(slots, tenants)) throw new UsageError('session slot buffer is too small');
    this.words = new Int32Array(buffer);
  }

  static bytes(slots: number, tenants: number): number {
    return 4 * (FIRST_SLOT + slots + tenants);
  }

  static create(slots: number, tenants: number): SessionSlots {
    return new SessionSlots(new SharedArrayBuffer(SessionSlots.bytes(slots, tenants)), slots, tenants);
  }

  /** Claims a free slot for `owner` (a worker's thread number, > 0); -1 when the node is full. */
  claim(owner: number): number {
    const start = (Atomics.add(this.words, HINT, 1) >>> 0) % this.slots;
    for (let i = 0; i < this.slots; i++) {
      const slot = (start + i) % this.slots;
      if (Atomics.compareExchange(this.words, FIRST_SLOT + slot, 0, owner) === 0) return slot;
    }
    return -1;
  }

  release(slot: number): void {
    Atomics.store(this.words, FIRST_SLOT + slot, 0);
  }

  /** Slots in use (all workers). */
  get inUse(): number {
    let count = 0;
    for (let slot = 0; slot < this.slots; slot++) if (Atomics.load(this.words, FIRST_SLOT + slot) !== 0) count += 1;
    return count;
  }

  /** Counts a session of `tenant` unless it already has `limit`; false when it is at its limit. */
  enterTenant(tenant: number, limit: number): boolean {
    const index = FIRST_SLOT + this.slots + tenant;
    for (;;) {
      const current = Atomics.load(this.words, index);
      if (current >= limit) return false;
      if (Atomics.compareExchange(this.words, index, current, current + 1) === current) return true;
    }
  }

  leaveTenant(tenant: number): void {
    Atomics.sub(this.words, FIRST_SLOT + this.slots + tenant, 1);
  }

  tenantSessions(tenant: number): number {
    return Atomics.load(this.words, FIRST_SLOT + this.slots + tenant);
  }
}
