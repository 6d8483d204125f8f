// The appliance daemon's lifecycle: management server first (so a supervisor sees the node alive
// but not ready while it starts), then the target workers, then ready; draining on request.
import { startTarget, type RunningTarget } from '../host/kbtp/server/target.ts';
import { InternalError, ListenError } from '../host/errors.ts';
import { crc32cImplementation } from '../host/tier/checksum.ts';
import { mergeStats, type StatsSnapshot } from '../host/kbtp/server/stats.ts';
import type { DurableStats } from '../host/kbtp/server/tier-host.ts';
import type { ApplianceSettings } from './appliance-config.ts';
import type { Logger } from './logger.ts';
import { startManagementServer, sendJson, sendText, type ManagementServer, type RouteHandler } from './management-server.ts';
import { applianceImageUpdateOptions, updateRoutes } from './update-api.ts';
import { ApplianceMetrics } from './metrics.ts';
import { statusPageRoutes } from './status-page.ts';
import { poolOccupancy, type PoolOccupancy } from './pool-occupancy.ts';
import { Scheduler, type JobDefinition, type JobStatus } from './scheduler.ts';
import { poolAuditJob, statsSnapshotJob } from './jobs.ts';
import { TierMaintenance } from './tier-jobs.ts';
import { planTenantReload } from './tenant-reload.ts';
import { writeTenantRecord, clearOnFree } from '../host/engine/tenant-record.ts';
import { TrafficHistory, totalRequests, type TrafficSample } from './traffic-history.ts';
import { summarizeLatency, type LatencySummary } from './percentiles.ts';
import type { WarningLog, WarningEntry } from './warnings.ts';

export type ApplianceState = 'starting' | 'recovering' | 'ready' | 'draining' | 'stopped';

export interface ApplianceStatus {
  state: ApplianceState;
  ready: boolean;
  startedAt: string;
  uptimeSeconds: number;
  kbtp: { host: string; port: number } | null;
  management: { host: string; port: number };
  workers: number;
  pool: PoolOccupancy | null;
  /** The durable tier's usage, movements, recovery and scrub; null on a memory-only node. */
  tier: {
    usedBytes: number;
    capacityBytes: number;
    blocks: number;
    demotions: number;
    promotions: number;
    drops: number;
    checksumFailures: number;
    recoveredBlocks: number;
    recoverySeconds: number;
    scrub: { pass: number; progress: number };
  } | null;
  tenants: Array<{ name: string; sessions: number; blocks: number; quota: number }>;
  requests: { total: number; byOpcode: Record<string, Record<string, number>> };
  latency: Record<string, LatencySummary>;
  traffic: TrafficSample[];
  jobs: JobStatus[];
  warnings: WarningEntry[];
  stats: StatsSnapshot | null;
}

/** How often the traffic chart gets a sample. */
const SAMPLE_PERIOD_MS = 1000;

/** A long recovery logs how far it is at most this often. */
const RECOVERY_PROGRESS_MS = 2000;

/** How long to keep trying when the KBTP address is still held (a previous instance draining). */
const LISTEN_RETRY_PERIOD_MS = 500;

/** The KBTP address cannot be listened on (code KBTP_LISTEN, exit 2). */
export class KbtpListenError extends ListenError {}

export class Appliance {
  private stateValue: ApplianceState = 'starting';
  private target: RunningTarget | undefined;
  private management: ManagementServer | undefined;
  private readonly startedAt = new Date();
  readonly metrics: ApplianceMetrics;
  private readonly scheduler: Scheduler;
  private readonly tierMaintenance: TierMaintenance;
  private readonly history = new TrafficHistory();
  private sampler: NodeJS.Timeout | undefined;
  /** A stop was asked for while starting: the start finishes (or gives up waiting) without going ready. */
  private startCancelled = false;
  private targetStopped = false;

  constructor(
    readonly settings: ApplianceSettings,
    private readonly log: Logger,
    private readonly warnings: WarningLog,
  ) {
    this.metrics = new ApplianceMetrics({
      engine: () => this.target?.engine,
      tenants: () => this.settings.target.tenants.map((tenant, index) => ({ name: tenant.name, slot: tenant.slot ?? index, quota: tenant.quota })),
      ready: () => this.stateValue === 'ready',
      wakeLatency: () => this.target?.wakeLatency(),
    });
    this.scheduler = new Scheduler(log, this.metrics);
    this.tierMaintenance = new TierMaintenance(this.metrics, settings.scrubBlocksPerRun);
  }

  private jobDefinitions(): JobDefinition[] {
    const { jobs } = this.settings;
    return [
      {
        name: 'poolAudit',
        schedule: jobs.poolAudit,
        run: () => {
          const engine = this.target?.engine;
          return engine === undefined ? 'skipped: the pool is not up' : poolAuditJob(engine);
        },
      },
      {
        name: 'statsSnapshot',
        schedule: jobs.statsSnapshot,
        resultLevel: 'info',
        run: () =>
          statsSnapshotJob({
            stats: async () => mergeStats(await this.workerStats()),
            engine: () => this.target?.engine,
            dataDir: this.settings.dataDir,
          }),
      },
      // The tier's jobs are off on a memory-only node.
      {
        name: 'tierScrub',
        schedule: this.target?.tier === undefined ? null : jobs.tierScrub,
        run: () => {
          const tier = this.target?.tier;
          return tier === undefined ? 'skipped: no durable tier' : this.tierMaintenance.scrub(tier);
        },
      },
      {
        name: 'tierCheckpoint',
        schedule: this.target?.tier === undefined ? null : jobs.tierCheckpoint,
        run: () => {
          const tier = this.target?.tier;
          return tier === undefined ? 'skipped: no durable tier' : this.tierMaintenance.checkpoint(tier, this.settings.target.pool.blockSize);
        },
      },
    ];
  }

  /** The durable tier's figures; undefined on a memory-only node. */
  private async durableStats(): Promise<DurableStats | undefined> {
    if (this.target === undefined || this.stateValue === 'stopped' || this.settings.target.durable === undefined) return undefined;
    return (await this.target.stats()).durable;
  }

  /** Each worker's counters (none while starting or after the workers stopped). */
  private async workerStats(): Promise<StatsSnapshot[]> {
    if (this.target === undefined || this.stateValue === 'stopped') return [];
    return this.target.workerStats();
  }

  get state(): ApplianceState {
    return this.stateValue;
  }

  get managementAddress(): { host: string; port: number } {
    if (this.management === undefined) throw new InternalError('the management server is not running');
    return { host: this.management.host, port: this.management.port };
  }

  /** Resolves when the target failed (a worker died): the node must exit and be restarted. */
  get failure(): Promise<Error> {
    return this.target?.failure ?? new Promise(() => undefined);
  }

  get kbtpAddress(): { host: string; port: number } | null {
    return this.target === undefined ? null : { host: this.target.host, port: this.target.port };
  }

  /** Starts the management server; resolves once it listens (the node is alive, not ready). */
  async startManagement(): Promise<void> {
    const routes = new Map<string, RouteHandler>([
      ['/healthz', (_request, response) => sendJson(response, 200, { alive: true, state: this.stateValue })],
      [
        '/readyz',
        (_request, response) => {
          const ready = this.stateValue === 'ready';
          sendJson(response, ready ? 200 : 503, { ready, state: this.stateValue });
        },
      ],
      ['/api/status', async (_request, response) => sendJson(response, 200, await this.status())],
      ...statusPageRoutes(),
      [
        '/metrics',
        async (_request, response) => {
          const workers = await this.workerStats();
          sendText(response, 200, this.metrics.contentType, await this.metrics.render(workers, await this.durableStats()));
        },
      ],
    ]);
    // On the appliance image, A/B updates through this API (firmware/update-api.ts).
    const update = applianceImageUpdateOptions((level, message) => this.log[level](message), this.settings.dataDir);
    if (update !== undefined) for (const [key, handler] of updateRoutes(update)) routes.set(key, handler);
    const { listen, token } = this.settings.management;
    this.management = await startManagementServer({
      host: listen.host,
      port: listen.port,
      token,
      routes,
      onError: (message) => this.log.error(message),
    });
  }

  /** Starts the target workers, waiting (bounded) for the KBTP address when another process still holds it. */
  async startTarget(listenWaitMs: number): Promise<void> {
    const deadline = Date.now() + listenWaitMs;
    const { host, port } = this.settings.target.listen;
    let warned = false;
    let recoveryStarted = Date.now();
    let lastProgress = recoveryStarted;
    for (;;) {
      if (this.startCancelled) return;
      try {
        this.target = await startTarget(this.settings.target, {
          verbose: this.settings.log.sessions,
          log: (line) => this.log.info(line),
          // /readyz says "recovering" while the durable tier is recovered (it can take a while).
          // Progress of a long recovery, at most every few seconds.
          recoveryProgress: (done, total) => {
            if (Date.now() - lastProgress < RECOVERY_PROGRESS_MS) return;
            lastProgress = Date.now();
            this.log.info(`recovering the durable tier: ${done} of ${total} journals replayed`, { seconds: Math.round((Date.now() - recoveryStarted) / 1000) });
          },
          phase: (phase) => {
            if (this.stateValue === 'starting' || this.stateValue === 'recovering') this.stateValue = phase;
            if (phase === 'recovering') {
              recoveryStarted = Date.now();
              lastProgress = recoveryStarted;
              this.log.info('recovering the durable tier', { directory: this.settings.target.durable?.dataDir });
            }
          },
        });
        break;
      } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        if (!/EADDRINUSE/.test(message)) throw error;
        if (Date.now() >= deadline) {
          throw new KbtpListenError(`KBTP address ${host}:${port} is in use; stop what holds it or pick another with --listen HOST:PORT`);
        }
        if (!warned) this.log.warn(`KBTP address ${host}:${port} is in use; retrying for up to ${Math.ceil(listenWaitMs / 1000)} s`);
        warned = true;
        await new Promise((resolve) => setTimeout(resolve, LISTEN_RETRY_PERIOD_MS));
      }
    }
    const recovery = this.target.recovery;
    if (this.startCancelled) return; // close() stops the target that started meanwhile
    if (recovery !== undefined) {
      // kbtp-v1 section 12: recovered before the target listened.
      this.log.info(recovery.fresh ? 'durable tier: new, empty' : 'durable tier recovered', {
        blocksRecovered: recovery.blocksRecovered,
        seconds: recovery.seconds,
        recordsDropped: recovery.recordsDropped,
        tornBytes: recovery.tornBytes,
        checksumFailures: recovery.checksumFailures,
        blocksOverCapacity: recovery.blocksOverCapacity,
        blocksDiscarded: recovery.blocksDiscarded,
        // Which CRC32C seals blocks: ISA-L costs about a seventh of the fallback's CPU per sealed MiB.
        checksum: crc32cImplementation(),
      });
    }
    this.stateValue = 'ready';
    this.scheduler.setJobs(this.jobDefinitions());
    this.sampler = setInterval(() => {
      void this.workerStats().then((parts) => {
        if (parts.length > 0) this.history.record(mergeStats(parts));
      });
    }, SAMPLE_PERIOD_MS);
    this.sampler.unref();
  }

  /**
   * SIGTERM/SIGINT before the node was ready: nothing is served yet, so nothing drains. A start in
   * progress (recovering the tier, waiting for the KBTP address) stops at its next step and the
   * node does not turn ready; close() then stops whatever started.
   */
  cancelStart(): void {
    this.startCancelled = true;
    this.stateValue = 'draining';
  }

  async status(): Promise<ApplianceStatus> {
    const target = this.target;
    const engine = target?.engine;
    const stats = target === undefined || this.stateValue === 'stopped' ? null : mergeStats(await target.workerStats());
    const latency: Record<string, LatencySummary> = {};
    for (const [opcode, histogram] of Object.entries(stats?.latency ?? {})) latency[opcode] = summarizeLatency(histogram);
    return {
      state: this.stateValue,
      ready: this.stateValue === 'ready',
      startedAt: this.startedAt.toISOString(),
      uptimeSeconds: Math.round((Date.now() - this.startedAt.getTime()) / 1000),
      kbtp: this.kbtpAddress,
      management: this.managementAddress,
      workers: this.settings.target.workers,
      pool: engine === undefined ? null : poolOccupancy(engine),
      tier: await this.durableStats().then((tier) =>
        tier === undefined
          ? null
          : {
              usedBytes: tier.bytesUsed,
              capacityBytes: tier.capacityBytes,
              blocks: tier.blocksDurable,
              demotions: tier.demotions,
              promotions: tier.promotions,
              drops: tier.drops,
              checksumFailures: tier.checksumFailures,
              recoveredBlocks: tier.recovery.blocksRecovered,
              recoverySeconds: tier.recovery.seconds,
              scrub: this.tierMaintenance.progress(),
            },
      ),
      tenants: this.settings.target.tenants.map((tenant, index) => ({
        name: tenant.name,
        sessions: stats?.sessionsByTenant[tenant.name] ?? 0,
        blocks: engine === undefined ? 0 : engine.tenantUsage(tenant.slot ?? index),
        quota: tenant.quota,
      })),
      requests: { total: stats === null ? 0 : totalRequests(stats), byOpcode: stats?.requests ?? {} },
      latency,
      traffic: [...this.history.recent],
      jobs: this.scheduler.status(),
      warnings: this.warnings.recent(),
      stats,
    };
  }

  /**
   * SIGHUP: applies what can change while serving (tenants, their secrets, quotas and ranges; job
   * schedules; log level and session logging; the drain bound) and says what needs a restart.
   * A configuration that does not validate changes nothing. Sessions of tenants that stay, with
   * the same credential and trust, go on; those of removed or re-keyed tenants end.
   */
  reload(next: ApplianceSettings): void {
    const restartOnly: string[] = [];
    const json = (value: unknown): string => JSON.stringify(value, (_key, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
    const running = this.settings;
    const compare = (field: string, a: unknown, b: unknown): void => {
      if (json(a) !== json(b)) restartOnly.push(field);
    };
    compare('listen', running.target.listen, next.target.listen);
    compare('transport', running.target.transport, next.target.transport);
    compare('workers', running.target.workers, next.target.workers);
    compare('pool', running.target.pool, next.target.pool);
    compare('session', running.target.session, next.target.session);
    compare('timeouts', running.target.timeouts, next.target.timeouts);
    compare('sramModel', running.target.sramModel, next.target.sramModel);
    compare('maxTenants', running.target.tenantSlots, next.target.tenantSlots);
    compare('management', running.management, next.management);
    compare('dataDir', running.dataDir, next.dataDir);
    compare('log.format', running.log.format, next.log.format);
    const engine = this.target?.engine;
    if (engine !== undefined && this.target !== undefined) {
      const plan = planTenantReload(running.target, next.target.tenants, engine);
      for (const { slot, record } of plan.writes) writeTenantRecord(engine, slot, record);
      if (plan.clearSharedRing) clearOnFree(engine, 0);
      running.target.tenants = plan.tenants;
      this.target.updateTenants(plan.tenants);
      const changes = [...plan.added.map((n) => `+${n}`), ...plan.removed.map((n) => `-${n}`), ...plan.changed.map((n) => `~${n}`)];
      if (changes.length > 0) this.log.info(`tenants reloaded: ${changes.join(' ')}`, { tenants: plan.tenants.length });
    }
    running.jobs = next.jobs;
    this.scheduler.setJobs(this.jobDefinitions());
    compare('log.sessions', running.log.sessions, next.log.sessions); // the workers were started with it
    running.log.level = next.log.level;
    this.log.setLevel(next.log.level);
    running.drainTimeoutMs = next.drainTimeoutMs;
    if (restartOnly.length > 0) this.log.warn(`reloaded; these change only with a restart and keep their running values: ${restartOnly.join(', ')}`);
    else this.log.info('configuration reloaded');
  }

  /**
   * SIGTERM/SIGINT: not ready at once, new requests get SHUTTING_DOWN, outstanding ones finish.
   * Resolves true when every session closed within the drain bound, false when some had to be cut.
   */
  async drain(): Promise<boolean> {
    if (this.stateValue === 'draining' || this.stateValue === 'stopped') return false;
    this.stateValue = 'draining';
    clearInterval(this.sampler);
    const target = this.target;
    // Refuse new requests in the same tick as /readyz turns to "draining": waiting for a running
    // job (an audit, up to 5 s) first left a window in which readiness said draining and the
    // workers still stored new blocks.
    target?.drain();
    await this.scheduler.stop(Math.min(5000, this.settings.drainTimeoutMs));
    if (target === undefined) return true;
    let open = (await target.stats()).sessionsOpen;
    this.log.info('draining', { sessionsOpen: open, boundSeconds: this.settings.drainTimeoutMs / 1000 });
    const deadline = Date.now() + this.settings.drainTimeoutMs;
    while (open > 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      open = (await target.stats()).sessionsOpen;
    }
    if (open > 0) this.log.warn('drain bound reached; cutting the sessions still open', { sessionsOpen: open });
    const final = await target.stop(0);
    this.targetStopped = true;
    // What the node answered, for whoever reconciles it with what clients saw acknowledged.
    this.log.info(`final statistics: requests ${JSON.stringify(final.requests)}`, {
      sessionsTotal: final.sessionsTotal,
      dataBytes: final.dataBytes,
      internalErrors: final.internalErrors,
    });
    return open === 0;
  }

  /** Stops everything; the management server last, so /readyz says "draining" until the end. */
  async close(): Promise<void> {
    clearInterval(this.sampler);
    await this.scheduler.stop(0);
    if (this.target !== undefined && !this.targetStopped) await this.target.stop(0);
    this.stateValue = 'stopped';
    await this.management?.close();
  }
}
