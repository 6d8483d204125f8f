// The appliance daemon's lifecycle: management server first (so a supervisor sees the node alive
// but not ready while it starts), then the target workers, then ready; draining on request.
import { startTarget, type RunningTarget } from '../host/kbtp/server/target.ts';
import { mergeStats, type StatsSnapshot } from '../host/kbtp/server/stats.ts';
import type { ApplianceSettings } from './appliance-config.ts';
import type { Logger } from './logger.ts';
import { startManagementServer, sendJson, sendText, type ManagementServer, type RouteHandler } from './management-server.ts';
import { applianceImageUpdateOptions, updateRoutes } from './update-api.ts';
import { ApplianceMetrics } from './metrics.ts';
import { statusPageRoutes } from './status-page.ts';
import { poolOccupancy, type PoolOccupancy } from './pool-occupancy.ts';
import { Scheduler, type JobDefinition, type JobStatus } from './scheduler.ts';
import { poolAuditJob, statsSnapshotJob } from './jobs.ts';
import { TrafficHistory, totalRequests, type TrafficSample } from './traffic-history.ts';
import { summarizeLatency, type LatencySummary } from './percentiles.ts';
import type { WarningLog, WarningEntry } from './warnings.ts';

export type ApplianceState = 'starting' | 'ready' | 'draining' | 'stopped';

export interface ApplianceStatus {
  state: ApplianceState;
  ready: boolean;
  startedAt: string;
  uptimeSeconds: number;
  kbtp: { host: string; port: number } | null;
  management: { host: string; port: number };
  workers: number;
  pool: PoolOccupancy | null;
  /** The durable tier's usage; null on a memory-only node. */
  tier: { usedBytes: number; capacityBytes: number; blocks: number } | null;
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

/** How long to keep trying when the KBTP address is still held (a previous instance draining). */
const LISTEN_RETRY_PERIOD_MS = 500;

export class KbtpListenError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'KbtpListenError';
  }
}

export class Appliance {
  private stateValue: ApplianceState = 'starting';
  private target: RunningTarget | undefined;
  private management: ManagementServer | undefined;
  private readonly startedAt = new Date();
  readonly metrics: ApplianceMetrics;
  private readonly scheduler: Scheduler;
  private readonly history = new TrafficHistory();
  private sampler: NodeJS.Timeout | undefined;

  constructor(
    readonly settings: ApplianceSettings,
    private readonly log: Logger,
    private readonly warnings: WarningLog,
  ) {
    this.metrics = new ApplianceMetrics({
      engine: () => this.target?.engine,
      tenants: () => this.settings.target.tenants.map((tenant) => tenant.name),
      ready: () => this.stateValue === 'ready',
    });
    this.scheduler = new Scheduler(log, this.metrics);
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
    ];
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
    if (this.management === undefined) throw new Error('the management server is not running');
    return { host: this.management.host, port: this.management.port };
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
          sendText(response, 200, this.metrics.contentType, await this.metrics.render(await this.workerStats()));
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
    for (;;) {
      try {
        this.target = await startTarget(this.settings.target, {
          verbose: this.settings.log.sessions,
          log: (line) => this.log.info(line),
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
    if (recovery !== undefined) {
      // kbtp-v1 section 12: recovered before the target listened.
      this.log.info(recovery.fresh ? 'durable tier: new, empty' : 'durable tier recovered', {
        blocksRecovered: recovery.blocksRecovered,
        seconds: recovery.seconds,
        recordsDropped: recovery.recordsDropped,
        tornBytes: recovery.tornBytes,
        checksumFailures: recovery.checksumFailures,
        blocksOverCapacity: recovery.blocksOverCapacity,
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
      tier: null,
      tenants: this.settings.target.tenants.map((tenant, index) => ({
        name: tenant.name,
        sessions: stats?.sessionsByTenant[tenant.name] ?? 0,
        blocks: engine === undefined ? 0 : engine.tenantUsage(index),
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
   * SIGTERM/SIGINT: not ready at once, new requests get SHUTTING_DOWN, outstanding ones finish.
   * Resolves true when every session closed within the drain bound, false when some had to be cut.
   */
  async drain(): Promise<boolean> {
    if (this.stateValue === 'draining' || this.stateValue === 'stopped') return false;
    this.stateValue = 'draining';
    clearInterval(this.sampler);
    await this.scheduler.stop(Math.min(5000, this.settings.drainTimeoutMs));
    const target = this.target;
    if (target === undefined) return true;
    target.drain();
    let open = (await target.stats()).sessionsOpen;
    this.log.info('draining', { sessionsOpen: open, boundSeconds: this.settings.drainTimeoutMs / 1000 });
    const deadline = Date.now() + this.settings.drainTimeoutMs;
    while (open > 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      open = (await target.stats()).sessionsOpen;
    }
    if (open > 0) this.log.warn('drain bound reached; cutting the sessions still open', { sessionsOpen: open });
    await target.stop(0);
    return open === 0;
  }

  /** Stops everything; the management server last, so /readyz says "draining" until the end. */
  async close(): Promise<void> {
    clearInterval(this.sampler);
    await this.scheduler.stop(0);
    if (this.target !== undefined && this.stateValue !== 'draining') await this.target.stop(0);
    this.stateValue = 'stopped';
    await this.management?.close();
  }
}
