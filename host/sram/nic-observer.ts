// Turns the software RNIC's NicObserver calls into SRAM model accesses and keeps the books per
// queue pair. Attribution: a QP context access starts the work of that QP's message, so the
// STag resolutions, completions and events that follow are charged to it until the next QP
// context access. Registrations, deregistrations and anything before the first message are
// charged to the "control" owner.
import type { NicObserver } from '../rnic/nic-observer.ts';
import type { SramCache } from './cache.ts';
import type { KindStats, OwnerStats } from './counters.ts';
import { EntryKind } from './kinds.ts';
import { UsageError } from '../errors.ts';

/** Owner index of work no queue pair is doing (registration, deregistration). */
export const CONTROL_OWNER = 0;

export interface QueuePairReport {
  qp: number;
  /** The QP was destroyed; its figures are final. */
  destroyed: boolean;
  hits: number;
  misses: number;
  hitRate: number;
  translationLookups: number;
  translationMisses: number;
  pcieReads: number;
  pcieWrites: number;
  nicTimeNs: number;
  /** Lines holding this QP's entries that another QP's access evicted. */
  linesLost: number;
  /** Lines holding this QP's entries dropped by an invalidation: a deregistration, or the QP's destruction. */
  linesDropped: number;
}

export interface SramNicReport {
  model: { lines: number; associativity: number; policy: string };
  total: {
    accesses: number;
    hits: number;
    misses: number;
    hitRate: number;
    pcieReads: number;
    pcieWrites: number;
    pcieCrossings: number;
    nicTimeNs: number;
    registrations: number;
    deregistrations: number;
  };
  perKind: Record<string, KindStats>;
  perQueuePair: QueuePairReport[];
  control: QueuePairReport;
}

function queuePairReport(qp: number, destroyed: boolean, stats: OwnerStats): QueuePairReport {
  return {
    qp,
    destroyed,
    hits: stats.hits,
    misses: stats.misses,
    hitRate: stats.hitRate,
    translationLookups: stats.translationLookups,
    translationMisses: stats.translationMisses,
    pcieReads: stats.pcieReads,
    pcieWrites: stats.pcieWrites,
    nicTimeNs: stats.timeNs,
    linesLost: stats.linesLost,
    linesDropped: stats.linesDropped,
  };
}

export class SramNicObserver implements NicObserver {
  private readonly liveOwners = new Map<number, number>();
  /** QP number of each owner index (index 0 is the control owner). */
  private readonly qpOfOwner: number[] = [-1];
  private readonly destroyedOwners = new Set<number>();
  private currentOwner = CONTROL_OWNER;

  constructor(readonly cache: SramCache) {}

  queuePairContext(qpNumber: number, dirty: boolean): void {
    const owner = this.liveOwners.get(qpNumber) ?? this.newOwner(qpNumber);
    this.currentOwner = owner;
    this.cache.access(EntryKind.QPC, qpNumber, 0, owner, dirty);
  }

  memoryTranslation(stag: number, offset: number, length: number, pageSize: number): void {
    if (!(pageSize > 0) || !(offset >= 0) || !(length >= 0)) {
      throw new UsageError(
        `memoryTranslation(stag ${stag}, offset ${offset}, length ${length}, pageSize ${pageSize}): ` +
          'offset and length must be non-negative and pageSize positive',
      );
    }
    const owner = this.currentOwner;
    const cache = this.cache;
    cache.access(EntryKind.MPT, stag, 0, owner, false);
    if (length === 0) return;
    const last = Math.floor((offset + length - 1) / pageSize);
    for (let page = Math.floor(offset / pageSize); page <= last; page++) {
      cache.access(EntryKind.MTT, stag, page, owner, false);
    }
  }

  completionQueue(cqNumber: number): void {
    this.cache.access(EntryKind.CQC, cqNumber, 0, this.currentOwner, true);
  }

  eventQueue(eqNumber: number): void {
    this.cache.access(EntryKind.EQC, eqNumber, 0, this.currentOwner, true);
  }

  registerRegion(stag: number, bytes: number, pageSize: number): void {
    const pages = pageSize > 0 && bytes >= 0 ? Math.ceil(bytes / pageSize) : undefined;
    this.cache.registerRegion(stag, CONTROL_OWNER, pages);
  }

  deregisterRegion(stag: number): void {
    this.cache.deregisterRegion(stag);
  }

  queuePairCreated(qpNumber: number): void {
    const previous = this.liveOwners.get(qpNumber);
    if (previous !== undefined) this.retire(qpNumber, previous);
    this.cache.createQueuePair(qpNumber, this.newOwner(qpNumber));
  }

  queuePairDestroyed(qpNumber: number): void {
    this.cache.destroyQueuePair(qpNumber);
    const owner = this.liveOwners.get(qpNumber);
    if (owner !== undefined) this.retire(qpNumber, owner);
  }

  /** Live figures of one QP (undefined when the QP is unknown or destroyed). */
  queuePair(qpNumber: number): QueuePairReport | undefined {
    const owner = this.liveOwners.get(qpNumber);
    return owner === undefined ? undefined : queuePairReport(qpNumber, false, this.cache.ownerStats(owner));
  }

  report(): SramNicReport {
    const stats = this.cache.stats();
    const perQueuePair: QueuePairReport[] = [];
    for (let owner = 1; owner < this.qpOfOwner.length; owner++) {
      perQueuePair.push(queuePairReport(this.qpOfOwner[owner]!, this.destroyedOwners.has(owner), this.cache.ownerStats(owner)));
    }
    return {
      model: { lines: this.cache.lineCount, associativity: this.cache.associativity, policy: this.cache.policy.name },
      total: {
        accesses: stats.accesses,
        hits: stats.hits,
        misses: stats.misses,
        hitRate: stats.hitRate,
        pcieReads: stats.pcieReads,
        pcieWrites: stats.pcieWrites,
        pcieCrossings: stats.pcieCrossings,
        nicTimeNs: stats.timeNs,
        registrations: stats.registrations,
        deregistrations: stats.deregistrations,
      },
      perKind: stats.perKind,
      perQueuePair,
      control: queuePairReport(-1, false, this.cache.ownerStats(CONTROL_OWNER)),
    };
  }

  private newOwner(qpNumber: number): number {
    const owner = this.qpOfOwner.length;
    this.qpOfOwner.push(qpNumber);
    this.liveOwners.set(qpNumber, owner);
    return owner;
  }

  /** A destroyed QP keeps its figures under its own owner index; a reused QP number starts afresh. */
  private retire(qpNumber: number, owner: number): void {
    this.liveOwners.delete(qpNumber);
    this.destroyedOwners.add(owner);
    if (this.currentOwner === owner) this.currentOwner = CONTROL_OWNER;
  }
}

function percent(rate: number): string {
  return `${(rate * 100).toFixed(1)}%`;
}

function micros(ns: number): string {
  return `${(ns / 1000).toFixed(1)} us`;
}

/** The report as log lines: the total first, then one line per QP. */
export function formatSramNicReport(report: SramNicReport): string {
  const { total, model } = report;
  const lines = [
    `sram model (${model.lines} lines, ${model.associativity === 0 ? 'fully associative' : `${model.associativity}-way`}, ${model.policy}): ` +
      `${total.accesses} accesses, ${total.hits} hits, ${total.misses} misses (hit rate ${percent(total.hitRate)}), ` +
      `PCIe ${total.pcieReads} reads + ${total.pcieWrites} writes, modelled NIC time ${micros(total.nicTimeNs)}, ` +
      `${total.registrations} registrations, ${total.deregistrations} deregistrations`,
  ];
  for (const [kind, stats] of Object.entries(report.perKind)) {
    if (stats.hits + stats.misses + stats.inserts + stats.invalidations === 0) continue;
    lines.push(
      `  ${kind.padEnd(5)} ${stats.hits} hits, ${stats.misses} misses, ${stats.evictions} evicted, ` +
        `${stats.writeBacks} written back, ${stats.invalidations} invalidated`,
    );
  }
  for (const qp of report.perQueuePair) {
    lines.push(
      `  QP ${qp.qp}${qp.destroyed ? ' (destroyed)' : ''}: ${qp.hits} hits, ${qp.misses} misses (${percent(qp.hitRate)}), ` +
        `translations ${qp.translationMisses}/${qp.translationLookups} missed, PCIe ${qp.pcieReads}r+${qp.pcieWrites}w, ` +
        `NIC time ${micros(qp.nicTimeNs)}, ${qp.linesLost} lines lost to others, ${qp.linesDropped} invalidated`,
    );
  }
  return lines.join('\n');
}
