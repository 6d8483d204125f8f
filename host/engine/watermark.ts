// The pool's low watermark (issue 12, kbtp-v1 section 12 `demote`): when a ring's free blocks
// fall below the watermark, the least recently used sealed resident blocks of the tenants that
// allocate from it (under `demote`) leave the pool ahead of need, up to twice the watermark, so
// allocations and one-sided tickets find a block without demoting inline. Their data is on the
// tier already (sealing made it durable): a demotion only rewrites the entry and returns the block.
import type { Engine } from './engine.ts';
import type { RingLayout } from './layout.ts';
import { Demoter } from './demotion.ts';
import * as S from '../../assembly/struct-offsets.ts';

/** Demotions one check may make, so a check never holds the thread long. */
const PER_CHECK = 256;

interface WatchedRing {
  ring: RingLayout;
  low: number;
  high: number;
}

export class WatermarkDemoter {
  private readonly demoter: Demoter;
  private readonly rings: WatchedRing[];
  private timer: NodeJS.Timeout | undefined;

  /** `percent` of each ring's blocks is its low watermark (0 turns this off). */
  constructor(
    private readonly engine: Engine,
    percent: number,
  ) {
    this.demoter = new Demoter(engine);
    this.rings = engine.layout.rings.flatMap((ring) => {
      if (percent <= 0 || ring.blocks === 0) return [];
      const low = Math.max(1, Math.ceil((ring.blocks * percent) / 100));
      return [{ ring, low, high: Math.min(ring.blocks, 2 * low) }];
    });
  }

  /** Tenants under `demote` that allocate from `ring`, from their live engine records (a reload may add some). */
  private tenantsOf(ring: RingLayout): number[] {
    const { engine } = this;
    const found: number[] = [];
    for (let index = 0; index < engine.config.tenants.length; index++) {
      const address = engine.tenantAddress(index);
      if (engine.view.getUint32(address + S.TENANT_POLICY, true) !== S.EVICTION_DEMOTE) continue;
      if (engine.view.getUint32(address + S.TENANT_RING, true) === ring.descriptor) found.push(index);
    }
    return found;
  }

  get demotions(): number {
    return this.demoter.demotions;
  }

  /** Free blocks of the ring: returned (Tail) and not yet taken (Head). */
  free(ring: RingLayout): number {
    const { headTicket, tailTicket } = this.engine.readCounters(ring);
    const free = (tailTicket - headTicket) | 0; // tickets wrap at 2^32
    return Math.max(0, free);
  }

  /** Demotes where a ring is below its watermark; returns the demotions made. */
  check(): number {
    let made = 0;
    for (const watched of this.rings) {
      if (this.free(watched.ring) >= watched.low) continue;
      // The tenants with the most resident blocks give first; a tenant with nothing to demote drops out.
      const candidates = this.tenantsOf(watched.ring);
      while (made < PER_CHECK && candidates.length > 0 && this.free(watched.ring) < watched.high) {
        candidates.sort((a, b) => this.engine.tenantUsage(b) - this.engine.tenantUsage(a));
        const tenant = candidates[0] ?? -1;
        if (this.demoter.demoteOne(tenant)) made += 1;
        else candidates.shift();
      }
    }
    return made;
  }

  /** Checks every `periodMs` until stop(). */
  start(periodMs = 20): void {
    if (this.rings.length === 0 || this.timer !== undefined) return;
    this.timer = setInterval(() => this.check(), periodMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }
}
