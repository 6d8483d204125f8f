// Building blocks the experiments share: one RDMA message as the NIC structures it touches,
// and a throughput meter that turns modelled NIC time and payload into a rate.
import type { SramCache } from './cache.ts';
import { wireNs } from './costs.ts';
import { EntryKind } from './kinds.ts';

/**
 * One message at the NIC, in the order a hardware RNIC touches its structures: the QP context
 * (dirty: the next PSN/MSN moves), the buffer's MPT entry and one MTT entry per page touched,
 * then the completion queue's context when a completion is written (cq < 0: none). Returns the
 * modelled NIC time it took. Mirrors SramNicObserver, with an explicit owner (tenant).
 */
export function modelMessage(cache: SramCache, owner: number, qp: number, stag: number, offset: number, length: number, pageSize: number, cq: number): number {
  const before = cache.timeNs;
  cache.access(EntryKind.QPC, qp, 0, owner, true);
  cache.access(EntryKind.MPT, stag, 0, owner, false);
  if (length > 0) {
    const last = Math.floor((offset + length - 1) / pageSize);
    for (let page = Math.floor(offset / pageSize); page <= last; page++) cache.access(EntryKind.MTT, stag, page, owner, false);
  }
  if (cq >= 0) cache.access(EntryKind.CQC, cq, 0, owner, true);
  return cache.timeNs - before;
}

/**
 * Accumulates operations whose duration is the larger of their wire time and their NIC time:
 * the NIC pipeline and the link overlap, so whichever is slower sets the pace. Serialising the
 * NIC's own structure accesses (no parallel processing units) is the model's simplification.
 */
export class ThroughputMeter {
  operations = 0;
  bytes = 0;
  ns = 0;
  nicNs = 0;

  constructor(readonly linkGbps: number) {}

  add(nicNs: number, bytes: number): void {
    const wire = wireNs(bytes, this.linkGbps);
    this.operations++;
    this.bytes += bytes;
    this.nicNs += nicNs;
    this.ns += Math.max(nicNs, wire);
  }

  /** Payload rate in Gbit/s. */
  gbps(): number {
    return this.ns === 0 ? 0 : (this.bytes * 8) / this.ns;
  }

  /** Operations per second. */
  rate(): number {
    return this.ns === 0 ? 0 : (this.operations * 1e9) / this.ns;
  }

  nicNsPerOperation(): number {
    return this.operations === 0 ? 0 : this.nicNs / this.operations;
  }
}
