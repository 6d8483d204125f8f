// Which block to demote (kbtp-v1 section 12, `demote`): the least recently used sealed block of
// a tenant that is resident in the pool. Requests stamp their handle from one shared counter
// (Engine.stamp); a scan of the tenant's store range collects the oldest candidates at once, so
// most demotions cost no scan. The engine's demote() re-checks everything under the handle's lock.
import * as S from '../../assembly/struct-offsets.ts';
import { ENTRY_VALID, ENTRY_SEALED } from '../../assembly/kbtp-constants.ts';
import type { Engine } from './engine.ts';
import { readStoreRange } from './tenant-record.ts';

const ALL_ONES = 0xffffffffffffffffn;
/** Candidates gathered per scan. */
const BATCH = 32;

export class Demoter {
  /** Per tenant index: candidates, oldest last, with the stamp they had when collected. */
  private readonly candidates = new Map<number, Array<{ index: number; stamp: number }>>();
  demotions = 0;

  constructor(private readonly engine: Engine) {}

  /** Demotes the least recently used sealed resident block of the tenant; false when there is none. */
  demoteOne(tenant: number): boolean {
    for (let pass = 0; pass < 2; pass++) {
      const queue = this.candidates.get(tenant) ?? [];
      while (queue.length > 0) {
        const candidate = queue.pop();
        if (candidate === undefined) break;
        // Used since the scan: no longer among the least recent.
        if (this.engine.stampOf(candidate.index) !== candidate.stamp) continue;
        if (this.engine.demote(candidate.index) === S.DEMOTED) {
          this.demotions += 1;
          return true;
        }
      }
      this.candidates.set(tenant, this.scan(tenant));
    }
    return false;
  }

  private scan(tenant: number): Array<{ index: number; stamp: number }> {
    const { engine } = this;
    if (tenant < 0 || tenant >= engine.config.tenants.length) return [];
    // The live record, not the start-up configuration: a reload (SIGHUP) may have added the tenant or moved its range.
    const range = readStoreRange(engine, tenant);
    const first = Number(range.first - engine.config.handleBase);
    const end = Math.min(engine.config.handleCount, first + Number(range.count));
    const found: Array<{ index: number; stamp: number }> = [];
    const bound = ENTRY_VALID | ENTRY_SEALED;
    for (let index = Math.max(0, first); index < end; index++) {
      const entry = engine.entryAt(index);
      if ((engine.view.getUint16(entry, false) & bound) !== bound) continue;
      if (engine.view.getBigUint64(entry + 8, false) === ALL_ONES) continue;
      found.push({ index, stamp: engine.stampOf(index) });
    }
    found.sort((a, b) => b.stamp - a.stamp);
    return found.slice(Math.max(0, found.length - BATCH));
  }
}
