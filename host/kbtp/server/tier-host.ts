// The durable tier in the target's main thread (kbtp-v1 section 12, docs/TIER.md): recovers it
// before any worker listens, writes the recovered entries into the engine's table, answers the
// workers' asks (seal, unbind, reserve, fetch), and lets the tier drop blocks through the engine.
import path from 'node:path';
import * as S from '../../../assembly/struct-offsets.ts';
import type { Engine } from '../../engine/engine.ts';
import { DurableTier, TierError, type TierStats, type DropGate, type TierTenant, type CheckpointResult, type ScrubResult } from '../../tier/tier.ts';
import { generationPlus, GENERATION_RESERVE_BATCH } from '../../tier/generations.ts';
import type { FileLayer } from '../../tier/files.ts';
import type { TargetSettings, TenantSettings } from './target-config.ts';
import { ENTRY_VALID, ENTRY_SEALED } from '../../../assembly/kbtp-constants.ts';
import type { TierAsk, TierAnswer } from './tier-messages.ts';
import { InternalError } from '../../errors.ts';
import { WatermarkDemoter } from '../../engine/watermark.ts';
import { DEFAULT_LOW_WATERMARK } from './target-config.ts';

export interface DurableStats extends TierStats {
  /** Sealed blocks that left the pool for the tier alone: at a quota (all workers) and at the pool's low watermark. */
  demotions: number;
  /** Of those, demoted ahead of need because a ring fell below its low watermark. */
  watermarkDemotions: number;
  /** Blocks brought back into the pool by a LOAD. */
  promotions: number;
  /** Requests answered TIER_ERROR (seal, free, reserve or fetch that failed). */
  tierErrors: number;
}

export class TierHost {
  private promotions = 0;
  private tierErrors = 0;
  /** Per handle, the stamp it had when the tier last put it in order (see DropGate 'recent'). */
  private readonly seen: Uint32Array;
  private readonly watermark: WatermarkDemoter;

  private constructor(
    readonly tier: DurableTier,
    private readonly engine: Engine,
    lowWatermark: number,
  ) {
    this.seen = new Uint32Array(engine.config.handleCount);
    this.watermark = new WatermarkDemoter(engine, lowWatermark);
  }

  /** Opens or recovers the tier and restores the engine's table from it, before anything is served. */
  static async open(
    engine: Engine,
    settings: TargetSettings,
    files?: FileLayer,
    recoveryProgress?: (journalsDone: number, journals: number) => void,
  ): Promise<TierHost> {
    const durable = settings.durable;
    if (durable === undefined) throw new InternalError('no durable tier configured');
    const { config } = engine;
    const gate: DropGate = {
      claim: (index) => host.claim(index),
      settle: (index, generation) => engine.dropSettle(index, generation !== undefined),
    };
    const tier = await DurableTier.open({
      directory: path.join(durable.dataDir, 'tier'),
      capacityBytes: durable.capacityBytes,
      blockSize: config.blockSize,
      handleBase: config.handleBase,
      handleCount: config.handleCount,
      drops: gate,
      tenants: tierTenants(settings.tenants, config.handleBase),
      ...(files === undefined ? {} : { files }),
      ...(recoveryProgress === undefined ? {} : { recoveryProgress }),
    });
    const host = new TierHost(tier, engine, durable.lowWatermark ?? DEFAULT_LOW_WATERMARK);
    host.restore();
    host.watermark.start();
    return host;
  }

  /** The table as recovered: sealed blocks on the tier alone, every other entry above what it showed. */
  private restore(): void {
    const { engine, tier } = this;
    for (let index = 0; index < engine.config.handleCount; index++) {
      engine.restoreEntry(index, tier.resumeGeneration(index), undefined);
      engine.setGenerationMark(index, tier.generationMark(index));
    }
    const bound = engine.config.tenants.map(() => 0);
    // In least-recently-used order, so the stamps keep the order the tier kept.
    for (const [index, block] of tier.entries()) {
      engine.restoreEntry(index, block.generation, block.dataLength);
      engine.stamp(index);
      this.seen[index] = engine.stampOf(index);
      const handle = engine.config.handleBase + BigInt(index);
      const tenant = engine.config.tenants.findIndex((t) => handle - t.storeRange.first >= 0n && handle - t.storeRange.first < t.storeRange.count);
      if (tenant >= 0) bound[tenant] = (bound[tenant] ?? 0) + 1;
    }
    // Under 'none' the quota counts every bound handle, resident or not.
    engine.config.tenants.forEach((tenant, index) => {
      if (tenant.eviction === 'none') engine.setTenantUsage(index, bound[index] ?? 0);
    });
  }

  private claim(index: number): 'claimed' | 'skip' | 'recent' {
    const stamp = this.engine.stampOf(index);
    if (stamp !== this.seen[index]) {
      this.seen[index] = stamp;
      return 'recent';
    }
    return this.engine.dropClaim(index) ? 'claimed' : 'skip';
  }

  async answer(ask: TierAsk): Promise<TierAnswer> {
    const { engine, tier } = this;
    try {
      switch (ask.op) {
        case 'seal':
          // The staging block (or, for BIND, the pool block): the request holds both it and its
          // handle until this is answered.
          await tier.seal(
            ask.index,
            ask.generation,
            ask.staging !== 0 ? engine.bytes.subarray(ask.staging, ask.staging + ask.dataLength) : engine.block(ask.blockOffset, ask.dataLength),
            ask.crc,
          );
          this.seen[ask.index] = engine.stampOf(ask.index);
          return { ok: true, outcome: S.FETCH_OK };
        case 'unbind':
          await tier.unbind(ask.index, ask.generation, ask.why);
          return { ok: true, outcome: S.FETCH_OK };
        case 'reserve': {
          const mark = generationPlus(ask.generation, GENERATION_RESERVE_BATCH);
          await tier.reserve(ask.index, mark);
          engine.setGenerationMark(ask.index, mark);
          return { ok: true, outcome: S.FETCH_OK };
        }
        case 'fetch':
          await tier.read(ask.index, engine.block(ask.blockOffset));
          tier.touch(ask.index);
          this.seen[ask.index] = engine.stampOf(ask.index);
          this.promotions += 1;
          return { ok: true, outcome: S.FETCH_OK };
      }
    } catch (error) {
      this.tierErrors += 1;
      const lost = error instanceof TierError && (error.reason === 'CHECKSUM' || error.reason === 'NOT_HELD');
      return { ok: false, outcome: lost ? S.FETCH_LOST : S.FETCH_FAILED };
    }
  }

  stats(demotions: number): DurableStats {
    const early = this.watermark.demotions;
    return { ...this.tier.stats(), demotions: demotions + early, watermarkDemotions: early, promotions: this.promotions, tierErrors: this.tierErrors };
  }

  close(): Promise<void> {
    this.watermark.stop();
    return this.tier.close();
  }

  // --- maintenance (the appliance's scheduled jobs and SIGHUP) ---------------------------------

  /**
   * Scrubs a slice of the tier (DurableTier.scrub) and deals with what failed: a block that lives
   * on the tier alone is given up durably, exactly as a LOAD that finds it corrupt does (not VALID
   * with the next Generation); a resident block's copy on the tier is rewritten from the pool.
   * A block whose handle is busy is left for the next pass.
   */
  async scrub(fromSlot: number, maxBlocks: number): Promise<TierScrubReport> {
    const result = await this.tier.scrub(fromSlot, maxBlocks);
    const report: TierScrubReport = { ...result, repaired: 0, unbound: 0, deferred: 0 };
    for (const { index, generation } of result.corrupt) {
      const outcome = await this.settleCorrupt(index, generation);
      report[outcome] += 1;
    }
    return report;
  }

  private async settleCorrupt(index: number, generation: number): Promise<'repaired' | 'unbound' | 'deferred'> {
    const { engine, tier } = this;
    if (engine.dropClaim(index)) {
      // Held now: VALID, sealed, on the tier alone.
      let ok = false;
      try {
        if (engine.readEntry(engine.config.handleBase + BigInt(index))?.generation === generation) {
          await tier.unbind(index, generationPlus(generation, 1), 'lost');
          ok = true;
        }
      } catch {
        // TIER_ERROR-like: nothing changed; the next pass finds the block again.
      } finally {
        engine.dropSettle(index, ok);
      }
      return ok ? 'unbound' : 'deferred';
    }
    const entry = engine.readEntry(engine.config.handleBase + BigInt(index));
    const bound = ENTRY_VALID | ENTRY_SEALED;
    if (entry === undefined || (entry.flags & bound) !== bound || entry.generation !== generation || entry.blockOffset === ALL_ONES) return 'deferred';
    // A private copy: the pool block may be demoted and reused meanwhile; repair() checks the copy
    // against the CRC the block was sealed with, so a copy taken mid-change is refused.
    const copy = engine.block(entry.blockOffset, entry.dataLength).slice();
    return (await tier.repair(index, generation, copy)) ? 'repaired' : 'deferred';
  }

  /** A checkpoint now, and the data file's free tail given back (DurableTier.checkpoint). */
  checkpoint(): Promise<CheckpointResult> {
    return this.tier.checkpoint();
  }

  /** SIGHUP changed the tenants: their store ranges and Durable Quotas apply to the tier at once. */
  updateTenants(tenants: readonly TenantSettings[]): Promise<{ dropped: number; overQuota: number }> {
    return this.tier.setTenants(tierTenants(tenants, this.engine.config.handleBase));
  }
}

const ALL_ONES = 0xffffffffffffffffn;

/** A scrubbed slice (DurableTier.scrub) and what became of its corrupt blocks. */
export interface TierScrubReport extends ScrubResult {
  /** Corrupt copies on the tier rewritten from the pool. */
  repaired: number;
  /** Corrupt blocks on the tier alone, given up (their handles not VALID any more). */
  unbound: number;
  /** Corrupt blocks left for the next pass (handle busy, or changed meanwhile). */
  deferred: number;
}

/** The tenants as the tier sees them: store ranges in handle-index space and Durable Quotas. */
function tierTenants(tenants: readonly TenantSettings[], handleBase: bigint): TierTenant[] {
  return tenants.map((tenant) => ({
    first: Number(tenant.storeRange.first - handleBase),
    count: Number(tenant.storeRange.count),
    durableQuota: tenant.durableQuota ?? Number.MAX_SAFE_INTEGER,
  }));
}
