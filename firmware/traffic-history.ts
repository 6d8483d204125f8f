// The last minutes of traffic for the status page's chart: every second the workers' request and
// data counters are sampled and turned into rates, kept in a bounded ring of samples.
import type { StatsSnapshot } from '../host/kbtp/server/stats.ts';

export interface TrafficSample {
  /** Unix time in milliseconds at the end of the interval. */
  time: number;
  opsPerSecond: number;
  bytesPerSecond: number;
}

export function totalRequests(stats: StatsSnapshot): number {
  let total = 0;
  for (const byStatus of Object.values(stats.requests)) for (const count of Object.values(byStatus)) total += count;
  return total;
}

export class TrafficHistory {
  private readonly samples: TrafficSample[] = [];
  private last: { time: number; requests: number; bytes: number } | undefined;

  constructor(private readonly capacity = 300) {}

  /** Adds the rates since the previous call (the first call only sets the baseline). */
  record(stats: StatsSnapshot, time = Date.now()): void {
    const requests = totalRequests(stats);
    const bytes = stats.dataBytes;
    const previous = this.last;
    this.last = { time, requests, bytes };
    if (previous === undefined || time <= previous.time) return;
    const seconds = (time - previous.time) / 1000;
    // Counters only grow while the workers live; a drop means they restarted: count from zero.
    const ops = requests >= previous.requests ? requests - previous.requests : requests;
    const moved = bytes >= previous.bytes ? bytes - previous.bytes : bytes;
    this.samples.push({ time, opsPerSecond: ops / seconds, bytesPerSecond: moved / seconds });
    if (this.samples.length > this.capacity) this.samples.splice(0, this.samples.length - this.capacity);
  }

  get recent(): readonly TrafficSample[] {
    return this.samples;
  }
}
