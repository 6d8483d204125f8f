// One-sided tickets (DIRECT_ALLOC): an initiator takes a slot of its partition ring with a masked
// FetchAdd and must bind it within the Ticket Timeout; a ticket it abandons is reclaimed here so
// the ring keeps turning and the tenant's usage comes back (kbtp-v1 section 11, draft 3.4).
import type { Engine } from '../../engine/engine.ts';
import type { RingLayout } from '../../engine/layout.ts';
import type { MemoryRegion, Rnic } from '../../rnic/verbs.ts';
import type { TargetSettings } from './target-config.ts';
import type { TargetStats } from './stats.ts';
import type { Demoter } from '../../engine/demotion.ts';

const ALL_ONES = 0xffffffffffffffffn;

/**
 * Reclaims an abandoned one-sided ticket and releases its unit of the tenant's usage.
 * 'waiting': its slot has no block yet, try again later; 'gone': bound or reclaimed already.
 */
export function reclaimTicket(engine: Engine, ring: RingLayout, ticket: number, tenant: number): 'reclaimed' | 'waiting' | 'gone' {
  const result = BigInt.asIntN(64, engine.exports.ringAbandon(ring.descriptor, ticket));
  if (result === -2n) return 'waiting';
  if (result < 0n) return 'gone';
  engine.exports.quotaAdjust(tenant, -1);
  return 'reclaimed';
}

/** Tickets of ended sessions whose slot was not filled yet; reclaimed when it is. */
export class LateReclaims {
  private readonly pending: Array<{ ring: RingLayout; ticket: number; tenant: number }> = [];
  private timer: NodeJS.Timeout | undefined;
  constructor(
    private readonly engine: Engine,
    private readonly onReclaimed: () => void = () => undefined,
  ) {}

  add(ring: RingLayout, ticket: number, tenant: number): void {
    this.pending.push({ ring, ticket, tenant });
    this.timer ??= setInterval(() => this.sweep(), 20);
    this.timer.unref();
  }

  get size(): number {
    return this.pending.length;
  }

  sweep(): void {
    for (let i = this.pending.length - 1; i >= 0; i--) {
      const item = this.pending[i];
      if (item === undefined) continue;
      const result = reclaimTicket(this.engine, item.ring, item.ticket, item.tenant);
      if (result === 'waiting') continue;
      if (result === 'reclaimed') this.onReclaimed();
      this.pending.splice(i, 1);
    }
    if (this.pending.length === 0 && this.timer !== undefined) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }
}

/** What a session's ticket watch needs from its worker thread. */
export interface TicketContext {
  engine: Engine;
  rnic: Rnic;
  settings: TargetSettings;
  stats: TargetStats;
  lateReclaims: LateReclaims;
  demoter?: Demoter;
  log(line: string): void;
}

/** The one-sided tickets one session took, watched for the Ticket Timeout. */
export class SessionTickets {
  /** Ticket -> when the target saw it taken. */
  private readonly taken = new Map<number, number>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly ctx: TicketContext,
    private readonly ring: RingLayout,
    private readonly partitionRegion: MemoryRegion,
    private readonly tenantAddress: number,
    private readonly label: string,
  ) {}

  /** The session's FetchAdd on the ring head took `ticket`: it counts against the tenant's quota until bound or reclaimed. */
  take(ticket: number): void {
    this.taken.set(ticket, Date.now());
    this.ctx.stats.ticketTaken();
    const usage = this.ctx.engine.exports.quotaAdjust(this.tenantAddress, 1);
    // Under `demote` a partition ring holds exactly the quota: past it, the slot of this ticket is
    // filled only once the tenant's least recently used sealed resident block is demoted.
    const { engine } = this.ctx;
    const tenant = engine.tenantIndexOf(this.tenantAddress);
    if (engine.config.tenants[tenant]?.eviction === 'demote' && usage > (engine.config.tenants[tenant]?.quota ?? 0)) {
      if (this.ctx.demoter?.demoteOne(tenant) === true) this.ctx.stats.demoted();
    }
    this.watch();
  }

  private watch(): void {
    if (this.timer !== undefined) return;
    const period = Math.max(5, Math.floor(this.ctx.settings.session.ticketTimeoutMs / 4));
    this.timer = setInterval(() => this.check(false), period);
    this.timer.unref();
  }

  /** Drops bound tickets and reclaims those past the timeout (all of them when `ending`). */
  check(ending: boolean): void {
    const { engine } = this.ctx;
    const ring = this.ring;
    const slotCount = 2 ** ring.order;
    const now = Date.now();
    for (const [ticket, takenAt] of this.taken) {
      const slot = engine.readSlot(ring, ticket & (slotCount - 1));
      const filled = slot.sequence === ticket;
      const waiting = slot.sequence === (ticket - slotCount) >>> 0;
      if ((filled && slot.blockOffset === ALL_ONES) || (!filled && !waiting)) {
        this.taken.delete(ticket); // bound (or reclaimed): its turn is over
        continue;
      }
      if (!ending && now - takenAt < this.ctx.settings.session.ticketTimeoutMs) continue;
      // Draft 3.4: no Write of the initiator may reach the block any more before it is reclaimed.
      if (this.partitionRegion.valid) {
        this.ctx.rnic.invalidate(this.partitionRegion);
        this.ctx.log(`${this.label}: ticket ${ticket} abandoned; Partition STag invalidated, DIRECT_ALLOC off for this session`);
      }
      const result = reclaimTicket(engine, ring, ticket, this.tenantAddress);
      if (result === 'waiting') {
        if (ending) {
          this.ctx.stats.ticketAbandoned();
          this.ctx.lateReclaims.add(ring, ticket, this.tenantAddress);
          this.taken.delete(ticket);
        }
        continue;
      }
      if (result === 'reclaimed') {
        this.ctx.stats.ticketAbandoned();
        this.ctx.stats.ticketReclaimed();
      }
      this.taken.delete(ticket);
    }
    if (this.taken.size === 0) this.stop();
  }

  stop(): void {
    if (this.timer === undefined) return;
    clearInterval(this.timer);
    this.timer = undefined;
  }
}
