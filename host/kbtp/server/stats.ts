// Counters of one worker thread of the target; the main thread adds them up for `kbtp target`'s
// periodic and exit reports and for the appliance's metrics. The per-request hooks (arrival,
// completion) only write numbers into preallocated typed arrays: they run on the hot path.
// What happens before a session exists (refusals, handshake failures, timeouts) is counted
// always, whatever the log level.
import { statusName } from '../wire/messages.ts';
import { monotonicMsInto } from '../../util/clock.ts';
import type { DurableStats } from './tier-host.ts';
import { COUNT_FROM } from '../../util/counter.ts';

const OPCODE_NAMES: Record<number, string> = { 0x10: 'LOAD', 0x11: 'STORE', 0x12: 'ALLOC_STORE', 0x13: 'FREE', 0x14: 'BIND' };
const FIRST_OPCODE = 0x10;
const LATENCY_OPCODES = 5; // LOAD .. BIND; anything else is not timed
/** Opcodes below this (every one KBTP defines) and statuses below COMMON_STATUSES are counted in a table. */
const COMMON_OPCODES = 0x20;
const COMMON_STATUSES = 0x20;

/** Upper bounds (seconds) of the service-time histogram buckets; the last bucket is +Inf. */
export const LATENCY_BOUNDS_SECONDS: readonly number[] = [
  25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5,
];

export interface LatencyHistogram {
  /** Per bucket (not cumulative), LATENCY_BOUNDS_SECONDS.length + 1 entries, the last for +Inf. */
  counts: number[];
  sumSeconds: number;
  count: number;
}

/** Why a connection or session was refused. */
export type RefusalReason = 'node-full' | 'worker-full' | 'tenant-full' | 'draining' | 'auth' | 'bad-hello' | 'version' | 'not-hello';
/** The stage whose timeout ended a connection. */
export type TimeoutStage = 'mpa-request' | 'rtr' | 'hello' | 'idle-session' | 'rdma-read';
/** Why a connection failed before its session existed (besides timeouts and refusals). */
export type SetupFailure = 'bad-mpa' | 'closed-during-setup' | 'setup-error' | 'closed-before-hello' | 'evicted';

function bump(record: Record<string, number>, key: string): void {
  record[key] = (record[key] ?? 0) + 1;
}

function addInto(into: Record<string, number>, from: Record<string, number>): void {
  for (const [key, count] of Object.entries(from)) into[key] = (into[key] ?? 0) + count;
}

export interface StatsSnapshot {
  /** Connections (MPA accepted, HELLO or not yet) open now. */
  sessionsOpen: number;
  sessionsTotal: number;
  sessionsRefused: number;
  /** Refusals by reason (RefusalReason). */
  refusals: Record<string, number>;
  /** Connections ended by a stage's timeout (TimeoutStage). */
  timeouts: Record<string, number>;
  /** Connections that failed before their session existed (SetupFailure). */
  setupFailures: Record<string, number>;
  requests: Record<string, Record<string, number>>;
  bytesIn: number;
  dataBytes: number;
  ticketsReclaimed: number;
  internalErrors: number;
  /** HELLOs refused with AUTH_FAILED (unknown tenant or wrong credential). */
  authFailures: number;
  /** One-sided tickets taken by FetchAdd on a partition ring head. */
  ticketsTaken: number;
  /** Tickets given up: past the Ticket Timeout, or held by a session that ended. */
  ticketsAbandoned: number;
  /** Open sessions by tenant name. */
  sessionsByTenant: Record<string, number>;
  /** Service time from a request's arrival to its COMPLETION being posted, by opcode name. */
  latency: Record<string, LatencyHistogram>;
  /** Sealed blocks demoted to the durable tier alone, and tier-only blocks promoted by a LOAD. */
  demotions: number;
  promotions: number;
  /** The durable tier's own figures (added by the main thread when the target has one). */
  durable?: DurableStats;
  /** Per worker, the SRAM cache model's report when the target runs with one. */
  sram?: string[];
  /** The SRAM model's lookups, all workers together, when the target runs with one. */
  sramCounters?: { hits: number; misses: number };
  /** Wall-clock milliseconds the workers spent busy polling instead of sleeping (0 with the poll off). */
  busyPollMs?: number;
  /** Requests the busy poll read itself, where it found them inside their channel's read callback (host/rnic/busy-poll.ts). */
  busyPollReads?: number;
}

export class TargetStats {
  private sessionsOpen = 0;
  private sessionsTotal = 0;
  private sessionsRefused = 0;
  private readonly refusals: Record<string, number> = {};
  private readonly timeouts: Record<string, number> = {};
  private readonly setupFailures: Record<string, number> = {};
  /**
   * Requests by opcode and status: a table for the opcodes and statuses KBTP defines (a Map
   * get and set per request was a hash probe each, issue 16), a Map for anything else a peer sent.
   */
  private readonly commonCounts = new Float64Array(COMMON_OPCODES * COMMON_STATUSES);
  private readonly otherCounts = new Map<number, number>(); // opcode << 16 | status
  /** Octets in and data octets moved (COUNT_FROM: a worker passes 2^31 after 2 GiB). */
  private received = COUNT_FROM;
  private moved = COUNT_FROM;
  private reclaimed = 0;
  private faults = 0;
  private authFailed = 0;
  private taken = 0;
  private abandoned = 0;
  private demotionCount = 0;
  private promotionCount = 0;
  private readonly tenantSessions = new Map<string, number>();
  /** monotonicMs() at each request context's arrival, by context index. */
  private readonly arrivals: Float64Array;
  /** The completion's clock reading (monotonicMsInto: no heap number however V8 compiles it). */
  private readonly clock = new Float64Array(1);
  /** Per timed opcode, LATENCY_BOUNDS_SECONDS.length + 1 bucket counts. */
  private readonly latencyCounts = new Float64Array(LATENCY_OPCODES * (LATENCY_BOUNDS_SECONDS.length + 1));
  private readonly latencySums = new Float64Array(LATENCY_OPCODES);

  /**
   * `requestBase`, `requestSize`, `requests`: this thread's request contexts (ThreadArena), so a
   * context's arrival time is kept in a slot of its own without any allocation.
   */
  constructor(
    private readonly requestBase = 0,
    private readonly requestSize = 1,
    requests = 0,
  ) {
    this.arrivals = new Float64Array(requests);
  }

  sessionOpened(): void {
    this.sessionsOpen += 1;
    this.sessionsTotal += 1;
  }
  sessionClosed(): void {
    this.sessionsOpen -= 1;
  }
  tenantSessionOpened(tenant: string): void {
    this.tenantSessions.set(tenant, (this.tenantSessions.get(tenant) ?? 0) + 1);
  }
  tenantSessionClosed(tenant: string): void {
    const left = (this.tenantSessions.get(tenant) ?? 1) - 1;
    if (left > 0) this.tenantSessions.set(tenant, left);
    else this.tenantSessions.delete(tenant);
  }
  refused(reason: RefusalReason): void {
    this.sessionsRefused += 1;
    bump(this.refusals, reason);
    if (reason === 'auth') this.authFailed += 1;
  }
  timedOut(stage: TimeoutStage): void {
    bump(this.timeouts, stage);
  }
  setupFailed(kind: SetupFailure): void {
    bump(this.setupFailures, kind);
  }
  bytesIn(octets: number): void {
    this.received += octets;
  }
  dataMoved(octets: number): void {
    this.moved += octets;
  }
  ticketTaken(): void {
    this.taken += 1;
  }
  demoted(): void {
    this.demotionCount += 1;
  }
  promoted(): void {
    this.promotionCount += 1;
  }
  ticketAbandoned(): void {
    this.abandoned += 1;
  }
  ticketReclaimed(): void {
    this.reclaimed += 1;
  }
  internalError(): void {
    this.faults += 1;
  }
  /** A request landed in the context at `request` (its address). */
  arrived(request: number): void {
    const index = (request - this.requestBase) / this.requestSize;
    if (index >= 0 && index < this.arrivals.length) monotonicMsInto(this.arrivals, index);
  }
  /** Its COMPLETION is being posted: counted by opcode and status, timed since arrived(). */
  completed(opcode: number, status: number, request = -1): void {
    if (opcode < COMMON_OPCODES && status < COMMON_STATUSES) {
      const at = opcode * COMMON_STATUSES + status;
      this.commonCounts[at] = (this.commonCounts[at] as number) + 1;
    } else {
      const key = (opcode << 16) | status;
      this.otherCounts.set(key, (this.otherCounts.get(key) ?? 0) + 1);
    }
    const op = opcode - FIRST_OPCODE;
    const index = (request - this.requestBase) / this.requestSize;
    if (op < 0 || op >= LATENCY_OPCODES || !(index >= 0 && index < this.arrivals.length)) return;
    monotonicMsInto(this.clock, 0);
    const seconds = ((this.clock[0] as number) - (this.arrivals[index] ?? 0)) / 1000;
    let bucket = 0;
    while (bucket < LATENCY_BOUNDS_SECONDS.length && seconds > (LATENCY_BOUNDS_SECONDS[bucket] ?? 0)) bucket += 1;
    this.latencyCounts[op * (LATENCY_BOUNDS_SECONDS.length + 1) + bucket] = (this.latencyCounts[op * (LATENCY_BOUNDS_SECONDS.length + 1) + bucket] ?? 0) + 1;
    this.latencySums[op] = (this.latencySums[op] ?? 0) + seconds;
  }

  snapshot(): StatsSnapshot {
    const requests: Record<string, Record<string, number>> = {};
    const count = (opcodeValue: number, status: number, n: number): void => {
      const opcode = OPCODE_NAMES[opcodeValue] ?? `0x${opcodeValue.toString(16)}`;
      // biome-ignore lint/suspicious/noAssignInExpressions: creates the bucket on first use and names it
      const byStatus = (requests[opcode] ??= {});
      byStatus[statusName(status)] = n;
    };
    for (let at = 0; at < this.commonCounts.length; at++) {
      const n = this.commonCounts[at] as number;
      if (n > 0) count(Math.floor(at / COMMON_STATUSES), at % COMMON_STATUSES, n);
    }
    for (const [key, n] of this.otherCounts) count(key >>> 16, key & 0xffff, n);
    const latency: Record<string, LatencyHistogram> = {};
    const width = LATENCY_BOUNDS_SECONDS.length + 1;
    for (let op = 0; op < LATENCY_OPCODES; op++) {
      const counts = Array.from(this.latencyCounts.subarray(op * width, (op + 1) * width));
      const count = counts.reduce((sum, n) => sum + n, 0);
      if (count > 0) latency[OPCODE_NAMES[FIRST_OPCODE + op] ?? String(op)] = { counts, sumSeconds: this.latencySums[op] ?? 0, count };
    }
    return {
      sessionsOpen: this.sessionsOpen,
      sessionsTotal: this.sessionsTotal,
      sessionsRefused: this.sessionsRefused,
      refusals: { ...this.refusals },
      timeouts: { ...this.timeouts },
      setupFailures: { ...this.setupFailures },
      requests,
      bytesIn: this.received,
      dataBytes: this.moved,
      ticketsReclaimed: this.reclaimed,
      internalErrors: this.faults,
      authFailures: this.authFailed,
      ticketsTaken: this.taken,
      ticketsAbandoned: this.abandoned,
      sessionsByTenant: Object.fromEntries(this.tenantSessions),
      latency,
      demotions: this.demotionCount,
      promotions: this.promotionCount,
    };
  }
}

export function mergeStats(parts: readonly StatsSnapshot[]): StatsSnapshot {
  const total: StatsSnapshot = {
    sessionsOpen: 0,
    sessionsTotal: 0,
    sessionsRefused: 0,
    refusals: {},
    timeouts: {},
    setupFailures: {},
    requests: {},
    bytesIn: 0,
    dataBytes: 0,
    ticketsReclaimed: 0,
    internalErrors: 0,
    authFailures: 0,
    ticketsTaken: 0,
    ticketsAbandoned: 0,
    sessionsByTenant: {},
    latency: {},
    demotions: 0,
    promotions: 0,
  };
  for (const part of parts) {
    total.demotions += part.demotions;
    total.promotions += part.promotions;
    total.authFailures += part.authFailures;
    total.ticketsTaken += part.ticketsTaken;
    total.ticketsAbandoned += part.ticketsAbandoned;
    for (const [tenant, open] of Object.entries(part.sessionsByTenant)) total.sessionsByTenant[tenant] = (total.sessionsByTenant[tenant] ?? 0) + open;
    for (const [opcode, histogram] of Object.entries(part.latency)) {
      // biome-ignore lint/suspicious/noAssignInExpressions: creates the bucket on first use and names it
      const into = (total.latency[opcode] ??= { counts: histogram.counts.map(() => 0), sumSeconds: 0, count: 0 });
      histogram.counts.forEach((n, bucket) => {
        into.counts[bucket] = (into.counts[bucket] ?? 0) + n;
      });
      into.sumSeconds += histogram.sumSeconds;
      into.count += histogram.count;
    }
    if (part.sramCounters !== undefined) {
      // biome-ignore lint/suspicious/noAssignInExpressions: creates the bucket on first use and names it
      const into = (total.sramCounters ??= { hits: 0, misses: 0 });
      into.hits += part.sramCounters.hits;
      into.misses += part.sramCounters.misses;
    }
    if (part.busyPollMs !== undefined) total.busyPollMs = (total.busyPollMs ?? 0) + part.busyPollMs;
    if (part.busyPollReads !== undefined) total.busyPollReads = (total.busyPollReads ?? 0) + part.busyPollReads;
    total.sessionsOpen += part.sessionsOpen;
    total.sessionsTotal += part.sessionsTotal;
    total.sessionsRefused += part.sessionsRefused;
    addInto(total.refusals, part.refusals);
    addInto(total.timeouts, part.timeouts);
    addInto(total.setupFailures, part.setupFailures);
    total.bytesIn += part.bytesIn;
    total.dataBytes += part.dataBytes;
    total.ticketsReclaimed += part.ticketsReclaimed;
    total.internalErrors += part.internalErrors;
    if (part.sram !== undefined) total.sram = [...(total.sram ?? []), ...part.sram];
    for (const [opcode, byStatus] of Object.entries(part.requests)) {
      // biome-ignore lint/suspicious/noAssignInExpressions: creates the bucket on first use and names it
      const into = (total.requests[opcode] ??= {});
      for (const [status, count] of Object.entries(byStatus)) into[status] = (into[status] ?? 0) + count;
    }
  }
  return total;
}
