// Counters of one worker thread of the target; the main thread adds them up for `kbtp target`'s
// periodic and exit reports.
import { statusName } from '../wire/messages.ts';

const OPCODE_NAMES: Record<number, string> = { 0x10: 'LOAD', 0x11: 'STORE', 0x12: 'ALLOC_STORE', 0x13: 'FREE', 0x14: 'BIND' };

export interface StatsSnapshot {
  sessionsOpen: number;
  sessionsTotal: number;
  sessionsRefused: number;
  requests: Record<string, Record<string, number>>;
  bytesIn: number;
  dataBytes: number;
  ticketsReclaimed: number;
  internalErrors: number;
  /** Per worker, the SRAM cache model's report when the target runs with one. */
  sram?: string[];
}

export class TargetStats {
  private sessionsOpen = 0;
  private sessionsTotal = 0;
  private sessionsRefused = 0;
  private readonly counts = new Map<number, number>(); // opcode << 16 | status
  private received = 0;
  private moved = 0;
  private reclaimed = 0;
  private faults = 0;

  sessionOpened(): void { this.sessionsOpen += 1; this.sessionsTotal += 1; }
  sessionClosed(): void { this.sessionsOpen -= 1; }
  refused(): void { this.sessionsRefused += 1; }
  bytesIn(octets: number): void { this.received += octets; }
  dataMoved(octets: number): void { this.moved += octets; }
  ticketReclaimed(): void { this.reclaimed += 1; }
  internalError(): void { this.faults += 1; }
  completed(opcode: number, status: number): void {
    const key = (opcode << 16) | status;
    this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
  }

  snapshot(): StatsSnapshot {
    const requests: Record<string, Record<string, number>> = {};
    for (const [key, count] of this.counts) {
      const opcode = OPCODE_NAMES[key >>> 16] ?? `0x${(key >>> 16).toString(16)}`;
      const byStatus = (requests[opcode] ??= {});
      byStatus[statusName(key & 0xffff)] = count;
    }
    return {
      sessionsOpen: this.sessionsOpen, sessionsTotal: this.sessionsTotal, sessionsRefused: this.sessionsRefused, requests,
      bytesIn: this.received, dataBytes: this.moved, ticketsReclaimed: this.reclaimed, internalErrors: this.faults,
    };
  }
}

export function mergeStats(parts: readonly StatsSnapshot[]): StatsSnapshot {
  const total: StatsSnapshot = { sessionsOpen: 0, sessionsTotal: 0, sessionsRefused: 0, requests: {}, bytesIn: 0, dataBytes: 0, ticketsReclaimed: 0, internalErrors: 0 };
  for (const part of parts) {
    total.sessionsOpen += part.sessionsOpen;
    total.sessionsTotal += part.sessionsTotal;
    total.sessionsRefused += part.sessionsRefused;
    total.bytesIn += part.bytesIn;
    total.dataBytes += part.dataBytes;
    total.ticketsReclaimed += part.ticketsReclaimed;
    total.internalErrors += part.internalErrors;
    if (part.sram !== undefined) total.sram = [...(total.sram ?? []), ...part.sram];
    for (const [opcode, byStatus] of Object.entries(part.requests)) {
      const into = (total.requests[opcode] ??= {});
      for (const [status, count] of Object.entries(byStatus)) into[status] = (into[status] ?? 0) + count;
    }
  }
  return total;
}
