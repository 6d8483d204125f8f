// Prometheus metrics of the appliance (prom-client). The worker threads keep plain counters
// (host/kbtp/server/stats.ts: numbers in typed arrays, nothing allocated per request); at scrape
// time each worker's snapshot becomes prom-client metric JSON and AggregatorRegistry.aggregate
// sums them, as prom-client does for cluster workers, together with the metrics of the main
// thread (pool, tenants, jobs, default process metrics). Names follow Prometheus conventions:
// kbtp_ prefix, seconds and bytes, _total counters, labels of bounded cardinality only (opcode,
// status, tenant, ring, job), never a handle.
import type { WakeLatencyReport } from '../host/kbtp/server/wake-latency.ts';
import { AggregatorRegistry, Registry, Counter, Gauge, Histogram, collectDefaultMetrics } from 'prom-client';
import { LATENCY_BOUNDS_SECONDS, type StatsSnapshot } from '../host/kbtp/server/stats.ts';
import type { DurableStats } from '../host/kbtp/server/tier-host.ts';
import type { Engine } from '../host/engine/engine.ts';
import { poolOccupancy } from './pool-occupancy.ts';

type Labels = Record<string, string | number>;
interface MetricJson {
  name: string;
  help: string;
  type: 'counter' | 'gauge' | 'histogram';
  aggregator: 'sum';
  values: Array<{ value: number; labels: Labels; metricName?: string }>;
}

function metric(name: string, type: MetricJson['type'], help: string, values: MetricJson['values']): MetricJson {
  return { name, help, type, aggregator: 'sum', values };
}

/** One worker thread's counters as prom-client metric JSON (summed across threads at scrape time). */
export function workerMetrics(stats: StatsSnapshot): MetricJson[] {
  const requests: MetricJson['values'] = [];
  let creditsExhausted = 0;
  for (const [opcode, byStatus] of Object.entries(stats.requests)) {
    for (const [status, count] of Object.entries(byStatus)) {
      requests.push({ value: count, labels: { opcode, status } });
      if (status === 'TOO_MANY_REQUESTS') creditsExhausted += count;
    }
  }
  const latency: MetricJson['values'] = [];
  for (const [opcode, histogram] of Object.entries(stats.latency)) {
    let cumulative = 0;
    histogram.counts.forEach((count, bucket) => {
      cumulative += count;
      const le = bucket < LATENCY_BOUNDS_SECONDS.length ? String(LATENCY_BOUNDS_SECONDS[bucket]) : '+Inf';
      latency.push({ metricName: 'kbtp_request_duration_seconds_bucket', value: cumulative, labels: { opcode, le } });
    });
    latency.push({ metricName: 'kbtp_request_duration_seconds_sum', value: histogram.sumSeconds, labels: { opcode } });
    latency.push({ metricName: 'kbtp_request_duration_seconds_count', value: histogram.count, labels: { opcode } });
  }
  const metrics = [
    metric('kbtp_requests_total', 'counter', 'KBTP requests answered, by opcode and COMPLETION status', requests),
    metric('kbtp_request_duration_seconds', 'histogram', "Service time from a request's arrival to its COMPLETION being posted", latency),
    metric('kbtp_received_bytes_total', 'counter', 'Octets of KBTP messages received', [{ value: stats.bytesIn, labels: {} }]),
    metric('kbtp_data_bytes_total', 'counter', "Block data moved by the target's RDMA Reads and Writes", [{ value: stats.dataBytes, labels: {} }]),
    metric('kbtp_sessions_open', 'gauge', 'Sessions open now (HELLO accepted or pending)', [{ value: stats.sessionsOpen, labels: {} }]),
    metric('kbtp_sessions_total', 'counter', 'Connections served since start', [{ value: stats.sessionsTotal, labels: {} }]),
    metric(
      'kbtp_sessions_refused_total',
      'counter',
      'Connections and HELLOs refused, by reason (node/worker/tenant full, draining, auth, bad HELLO, version, not HELLO)',
      Object.entries(stats.refusals).map(([reason, count]) => ({ value: count, labels: { reason } })),
    ),
    metric(
      'kbtp_connection_timeouts_total',
      'counter',
      "Connections ended by a stage's timeout, by stage",
      Object.entries(stats.timeouts).map(([stage, count]) => ({ value: count, labels: { stage } })),
    ),
    metric(
      'kbtp_connection_setup_failures_total',
      'counter',
      'Connections that failed before their session existed, by kind',
      Object.entries(stats.setupFailures).map(([kind, count]) => ({ value: count, labels: { kind } })),
    ),
    metric('kbtp_auth_failures_total', 'counter', 'HELLOs refused with AUTH_FAILED (unknown tenant or wrong credential)', [
      { value: stats.authFailures, labels: {} },
    ]),
    metric('kbtp_credits_exhausted_total', 'counter', 'Requests answered TOO_MANY_REQUESTS (the session had no credit left)', [
      { value: creditsExhausted, labels: {} },
    ]),
    metric('kbtp_tickets_taken_total', 'counter', 'One-sided tickets taken by FetchAdd on a partition ring', [{ value: stats.ticketsTaken, labels: {} }]),
    metric('kbtp_tickets_abandoned_total', 'counter', 'Tickets given up: past the Ticket Timeout or held by an ended session', [
      { value: stats.ticketsAbandoned, labels: {} },
    ]),
    metric('kbtp_tickets_reclaimed_total', 'counter', 'Abandoned tickets whose block went back to the ring', [{ value: stats.ticketsReclaimed, labels: {} }]),
    metric('kbtp_internal_errors_total', 'counter', 'Connections closed by an internal error of the target', [{ value: stats.internalErrors, labels: {} }]),
    metric(
      'kbtp_tenant_sessions_open',
      'gauge',
      'Sessions open now, by tenant',
      Object.entries(stats.sessionsByTenant).map(([tenant, open]) => ({ value: open, labels: { tenant } })),
    ),
  ];
  if (stats.sramCounters !== undefined) {
    metrics.push(
      metric('kbtp_sram_lookups_total', 'counter', 'Lookups of the modelled RNIC SRAM cache, by result', [
        { value: stats.sramCounters.hits, labels: { result: 'hit' } },
        { value: stats.sramCounters.misses, labels: { result: 'miss' } },
      ]),
    );
  }
  return metrics;
}

/** The durable tier's figures (main thread; h12's TierHost.stats) as metric JSON. */
export function tierMetrics(tier: DurableStats): MetricJson[] {
  const one = (name: string, type: MetricJson['type'], help: string, value: number): MetricJson => metric(name, type, help, [{ value, labels: {} }]);
  return [
    one('kbtp_tier_used_bytes', 'gauge', "Octets of the durable tier's files (data extent, journals, checkpoints)", tier.bytesUsed),
    one('kbtp_tier_capacity_bytes', 'gauge', 'Hard cap of the durable tier', tier.capacityBytes),
    one('kbtp_tier_blocks', 'gauge', 'Sealed blocks durable on the tier', tier.blocksDurable),
    metric(
      'kbtp_tier_demotions_total',
      'counter',
      "Sealed blocks that left the pool for the tier alone, by reason (a tenant's quota, the pool's low watermark)",
      [
        { value: tier.demotions - tier.watermarkDemotions, labels: { reason: 'quota' } },
        { value: tier.watermarkDemotions, labels: { reason: 'watermark' } },
      ],
    ),
    one('kbtp_tier_promotions_total', 'counter', 'Tier-only blocks brought back into the pool by a LOAD', tier.promotions),
    one('kbtp_tier_drops_total', 'counter', 'Blocks dropped from the tier (capacity or Durable Quota)', tier.drops),
    one('kbtp_tier_fsyncs_total', 'counter', 'fsync/fdatasync calls of the tier', tier.fsyncs),
    one('kbtp_tier_group_commits_total', 'counter', 'Group commits (one durable batch each)', tier.groupCommits),
    one(
      'kbtp_tier_group_commit_records_total',
      'counter',
      'Records made durable by group commits (divide by group commits for the batch size)',
      tier.batchRecords,
    ),
    one('kbtp_tier_checksum_failures_total', 'counter', 'Tier records or blocks that failed their CRC32C', tier.checksumFailures),
    metric('kbtp_tier_io_errors_total', 'counter', 'Tier I/O errors, by operation', [
      { value: tier.writeErrors, labels: { op: 'write' } },
      { value: tier.readErrors, labels: { op: 'read' } },
    ]),
    one('kbtp_tier_errors_total', 'counter', 'Requests answered TIER_ERROR', tier.tierErrors),
    one('kbtp_tier_recovery_duration_seconds', 'gauge', 'How long recovering the tier took at start', tier.recovery.seconds),
    one('kbtp_tier_recovered_blocks', 'gauge', 'Sealed blocks recovered at start', tier.recovery.blocksRecovered),
    one('kbtp_tier_recovery_dropped_records', 'gauge', 'Journal records not replayed at start (torn or unchecked tail)', tier.recovery.recordsDropped),
    one(
      'kbtp_tier_recovery_discarded_blocks',
      'gauge',
      'Blocks not recovered at start because a journal record about them, or a whole group, was lost',
      tier.recovery.blocksDiscarded,
    ),
  ];
}

export interface MetricsSources {
  /** The running target's engine; undefined while starting. */
  engine(): Engine | undefined;
  /** The tenants with their engine slots. */
  tenants(): ReadonlyArray<{ name: string; slot: number; quota: number }>;
  ready(): boolean;
  /** The target's CPU wake-latency request (undefined while starting or when configured off). */
  wakeLatency(): WakeLatencyReport | undefined;
}

/** The main thread's metrics (pool, tenants, jobs, process) and the scrape that adds the workers'. */
export class ApplianceMetrics {
  readonly registry = new Registry();
  readonly jobRuns: Counter<'job' | 'result'>;
  readonly jobDuration: Histogram<'job'>;
  readonly jobLastSuccess: Gauge<'job'>;
  readonly jobSkipped: Counter<'job'>;
  readonly reloads: Counter<'result'>;
  readonly scrubbedBlocks: Counter;
  readonly scrubCorrupt: Counter<'outcome'>;
  readonly scrubPasses: Counter;
  readonly scrubProgress: Gauge;
  readonly trimmedBytes: Counter;

  constructor(sources: MetricsSources) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    new Gauge({
      name: 'kbtp_ready',
      help: '1 when the node serves KBTP (recovered and listening), 0 while starting or draining',
      registers,
      collect() {
        this.set(sources.ready() ? 1 : 0);
      },
    });
    // Absent (reset) while starting and when the request is configured off.
    const wakeLatencyGauge = (name: string, help: string, value: (report: WakeLatencyReport) => number): Gauge =>
      new Gauge({
        name,
        help,
        registers,
        collect() {
          const report = sources.wakeLatency();
          if (report === undefined) this.reset();
          else this.set(value(report));
        },
      });
    wakeLatencyGauge(
      'kbtp_cpu_wake_latency_held',
      '1 while the node holds its CPU wake-latency request (PM QoS; it does while busy), 0 when not; absent when configured off',
      (report) => (report.held ? 1 : 0),
    );
    wakeLatencyGauge(
      'kbtp_cpu_wake_latency_held_seconds',
      'Seconds the CPU wake-latency request has been in force since the node started (only grows)',
      (report) => report.heldMs / 1000,
    );
    new Gauge({
      name: 'kbtp_pool_blocks',
      help: 'Blocks of the pool, by state (free: held by a ring; in_use: bound or being allocated)',
      labelNames: ['state'],
      registers,
      collect() {
        const engine = sources.engine();
        if (engine === undefined) return;
        const pool = poolOccupancy(engine);
        this.set({ state: 'free' }, pool.free);
        this.set({ state: 'in_use' }, pool.inUse);
      },
    });
    new Gauge({
      name: 'kbtp_pool_capacity_bytes',
      help: 'Octets of block storage in the pool',
      registers,
      collect() {
        const engine = sources.engine();
        if (engine !== undefined) this.set(engine.config.blockSize * engine.config.blockCount);
      },
    });
    new Gauge({
      name: 'kbtp_ring_free_blocks',
      help: 'Free blocks each ring holds (its occupancy)',
      labelNames: ['ring'],
      registers,
      collect() {
        const engine = sources.engine();
        if (engine === undefined) return;
        for (const ring of poolOccupancy(engine).rings) this.set({ ring: ring.name }, ring.free);
      },
    });
    new Gauge({
      name: 'kbtp_ring_blocks',
      help: 'Blocks each ring owns',
      labelNames: ['ring'],
      registers,
      collect() {
        const engine = sources.engine();
        if (engine === undefined) return;
        for (const ring of poolOccupancy(engine).rings) this.set({ ring: ring.name }, ring.blocks);
      },
    });
    new Gauge({
      name: 'kbtp_tenant_blocks',
      help: "Blocks counted against each tenant's Allocation Quota",
      labelNames: ['tenant'],
      registers,
      collect() {
        const engine = sources.engine();
        if (engine === undefined) return;
        this.reset(); // a removed tenant leaves the metrics
        for (const tenant of sources.tenants()) this.set({ tenant: tenant.name }, engine.tenantUsage(tenant.slot));
      },
    });
    new Gauge({
      name: 'kbtp_tenant_quota_blocks',
      help: "Each tenant's Allocation Quota",
      labelNames: ['tenant'],
      registers,
      collect() {
        this.reset();
        for (const tenant of sources.tenants()) this.set({ tenant: tenant.name }, tenant.quota);
      },
    });
    this.jobRuns = new Counter({ name: 'kbtp_job_runs_total', help: 'Scheduled job runs, by job and result', labelNames: ['job', 'result'], registers });
    this.jobSkipped = new Counter({
      name: 'kbtp_job_skipped_total',
      help: 'Scheduled runs skipped because the previous run of the job was still going',
      labelNames: ['job'],
      registers,
    });
    this.jobDuration = new Histogram({
      name: 'kbtp_job_duration_seconds',
      help: 'Duration of scheduled job runs',
      labelNames: ['job'],
      registers,
      buckets: [0.001, 0.01, 0.1, 0.5, 1, 5, 30, 120],
    });
    this.reloads = new Counter({ name: 'kbtp_config_reloads_total', help: 'Configuration reloads (SIGHUP), by result', labelNames: ['result'], registers });
    this.scrubbedBlocks = new Counter({ name: 'kbtp_tier_scrubbed_blocks_total', help: 'Blocks re-read and checked by the tier scrub', registers });
    this.scrubCorrupt = new Counter({
      name: 'kbtp_tier_scrub_corrupt_blocks_total',
      help: 'Blocks the scrub found bad, by outcome (repaired from the pool, unbound as lost, deferred to the next pass, unreadable)',
      labelNames: ['outcome'],
      registers,
    });
    this.scrubPasses = new Counter({ name: 'kbtp_tier_scrub_passes_total', help: 'Complete passes of the scrub over the tier', registers });
    this.scrubProgress = new Gauge({
      name: 'kbtp_tier_scrub_progress_ratio',
      help: "How far the scrub's current pass is through the tier (0 to 1)",
      registers,
    });
    this.trimmedBytes = new Counter({
      name: 'kbtp_tier_trimmed_bytes_total',
      help: "Octets of the tier's data file given back to the file system by checkpoints",
      registers,
    });
    this.jobLastSuccess = new Gauge({
      name: 'kbtp_job_last_success_timestamp_seconds',
      help: 'When each job last succeeded (Unix time)',
      labelNames: ['job'],
      registers,
    });
  }

  /** The exposition text: every worker's counters summed, plus the main thread's metrics. */
  async render(workers: readonly StatsSnapshot[], tier?: DurableStats): Promise<string> {
    const main = await this.registry.getMetricsAsJSON();
    const merged = AggregatorRegistry.aggregate([...workers.map(workerMetrics), ...(tier === undefined ? [] : [tierMetrics(tier)]), main]);
    return merged.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
