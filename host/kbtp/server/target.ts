// The target's main thread: creates the engine and its shared memory, starts the worker threads
// that serve connections on one shared listening socket, collects their statistics, and
// supervises them. A worker cannot be restarted in place: the listening socket is one file
// descriptor shared by all workers, and a worker thread that ends closes it for all of them. So
// a worker failure ends the node (`failure` resolves; `kbtp target` drains and exits 1) and
// the service supervisor starts a fresh one, rather than leaving a process that looks alive
// with a closed listener.
import type { Worker } from 'node:worker_threads';
import { Engine } from '../../engine/engine.ts';
import { auditPool, type AuditReport } from '../../engine/audit.ts';
import { spawnWorker } from '../../util/spawn-worker.ts';
import { InternalError, ListenError } from '../../errors.ts';
import { engineConfigFor, type TargetSettings, type TenantSettings } from './target-config.ts';
import { loadSramConfig } from '../../sram/index.ts';
import { mergeStats, type StatsSnapshot } from './stats.ts';
import { SessionSlots } from './slots.ts';
import type { TargetWorkerData, WorkerToMain, MainToWorker } from './worker.ts';
import { TierHost } from './tier-host.ts';
import { TierAnswers } from './tier-answers.ts';
import type { RecoveryReport } from '../../tier/recovery.ts';
import type { FileLayer } from '../../tier/files.ts';
import { duplicateDescriptor } from '../../util/descriptors.ts';
import { WakeLatencyHolder, type WakeLatencyReport } from './wake-latency.ts';

export interface TargetOptions {
  /** Per-session log lines (connections, refusals, GOODBYE). */
  verbose?: boolean;
  log?: (line: string) => void;
  /** The durable tier's file layer (tests inject faults); the real file system by default. */
  tierFiles?: FileLayer;
  /** Called as start-up moves on: 'recovering' before the durable tier is recovered, 'starting' after. */
  phase?: (phase: 'recovering' | 'starting') => void;
  /** Called before each journal the durable tier's recovery replays (done of total). */
  recoveryProgress?: (journalsDone: number, journals: number) => void;
  /** The PM QoS device the CPU wake-latency request is written to (tests give a file of their own). */
  cpuLatencyDevice?: string;
  /** Where the kernel names its cpuidle driver, which decides whether a request has any effect (tests give their own). */
  cpuIdleDriverFile?: string;
}

export type { DurableStats } from './tier-host.ts';

export interface RunningTarget {
  readonly host: string;
  readonly port: number;
  readonly engine: Engine;
  /** What the durable tier recovered before the target listened; undefined without a tier. */
  readonly recovery: RecoveryReport | undefined;
  /** The durable tier, for maintenance (scrub, checkpoint); undefined without one. */
  readonly tier: TierHost | undefined;
  /** Totals of all workers, with the durable tier's figures in `durable` when the target has one. */
  stats(): Promise<StatsSnapshot>;
  /** The same, one entry per worker thread. */
  workerStats(): Promise<StatsSnapshot[]>;
  audit(): AuditReport;
  /** New requests get SHUTTING_DOWN and no new connection is accepted; sessions finish and close. */
  drain(): void;
  /** Drains, waits for the sessions to close (at most `graceMs`), then stops the workers; resolves to the last statistics. */
  stop(graceMs?: number): Promise<StatsSnapshot>;
  /** Resolves (never rejects) when a worker failed or ended unexpectedly: the node must be stopped and restarted. */
  readonly failure: Promise<Error>;
  /** Session slots in use now, all workers together. */
  slotsInUse(): number;
  /** The worker threads' OS thread ids (Linux; 0 where unknown): kbtp bench reads their CPU time from /proc. */
  readonly threadIds: readonly number[];
  /**
   * Replaces the tenant list (the engine's tenant records are the caller's to write first):
   * new sessions are admitted by it, sessions of tenants it drops or changes end.
   */
  updateTenants(tenants: TenantSettings[]): void;
  /** The CPU wake-latency request held while the node is busy; undefined when configured off. */
  wakeLatency(): WakeLatencyReport | undefined;
}

const workerUrl = new URL(`./worker${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url);

/** A worker's startup failure crosses the thread as text: a socket it could not listen on is a ListenError again. */
function startError(message: string): InternalError | ListenError {
  return /\b(EADDRINUSE|EADDRNOTAVAIL|EACCES)\b/.test(message) ? new ListenError(message) : new InternalError(message);
}

function startWorker(
  data: TargetWorkerData,
  log: (line: string) => void,
  failed: (error: Error) => void,
  tier: TierHost | undefined,
): { worker: Worker; first: Promise<WorkerToMain> } {
  const worker = spawnWorker(workerUrl, { workerData: data });
  const first = new Promise<WorkerToMain>((resolve, reject) => {
    const onMessage = (message: WorkerToMain): void => {
      if (message.type === 'log') return;
      worker.off('message', onMessage);
      if (message.type === 'error') reject(startError(`target worker ${data.thread}: ${message.message}`));
      else resolve(message);
    };
    worker.on('message', onMessage);
    worker.once('error', reject);
  });
  worker.on('error', (error) => failed(new InternalError(`worker ${data.thread} failed: ${error.stack ?? error.message}`, { cause: error })));
  const answers = new TierAnswers((message) => worker.postMessage(message satisfies MainToWorker));
  worker.on('message', (message: WorkerToMain) => {
    if (message.type === 'log') log(message.line);
    else if (message.type === 'error') log(`worker ${data.thread}: ${message.message}`);
    else if (message.type === 'fatal') failed(new InternalError(`worker ${data.thread} failed: ${message.message}`));
    else if (message.type === 'tier') {
      if (tier === undefined) return;
      message.asks.forEach((ask, i) => {
        const id = message.ids[i] ?? 0;
        void tier.answer(ask).then((answer) => answers.add(id, answer));
      });
    }
  });
  return { worker, first };
}

export async function startTarget(settings: TargetSettings, options: TargetOptions = {}): Promise<RunningTarget> {
  const log = options.log ?? ((line: string) => console.error(line));
  // A bad SRAM model file is reported here, naming the field, before any thread starts.
  if (settings.sramModel !== undefined) loadSramConfig(settings.sramModel);
  const engine = Engine.create(engineConfigFor(settings));
  // kbtp-v1 section 12: the tier is recovered and the table rebuilt before anyone can connect.
  if (settings.durable !== undefined) options.phase?.('recovering');
  const tier = settings.durable === undefined ? undefined : await TierHost.open(engine, settings, options.tierFiles, options.recoveryProgress);
  options.phase?.('starting');
  const verbose = options.verbose ?? false;
  const workers: Worker[] = [];
  const slots = SessionSlots.create(settings.session.maxSessions, engine.config.tenants.length);
  let stopping = false;
  let reportFailure: (error: Error) => void = () => undefined;
  const failure = new Promise<Error>((resolve) => {
    reportFailure = resolve;
  });
  let failedAlready = false;
  const failed = (error: Error): void => {
    if (failedAlready) return;
    failedAlready = true;
    log(`kbtp target: ${error.message}`);
    reportFailure(error);
  };
  const firstData: TargetWorkerData = { handoff: engine.handoff(), settings, thread: 1, verbose, slots: slots.buffer };
  const first = startWorker(firstData, log, failed, tier);
  workers.push(first.worker);
  let listening: WorkerToMain;
  try {
    listening = await first.first;
  } catch (error) {
    await first.worker.terminate();
    await tier?.close();
    throw error;
  }
  if (listening.type !== 'listening') throw new InternalError('target worker 1 did not report its listening socket');
  const threadIds = [listening.threadId];
  try {
    const rest = [];
    for (let thread = 2; thread <= settings.workers; thread++) {
      // Its own descriptor of the listening socket: each worker's server closes the one it holds (host/util/descriptors.ts).
      const fd = duplicateDescriptor(listening.fd);
      const started = startWorker({ handoff: engine.handoff(), settings, thread, fd, verbose, slots: slots.buffer }, log, failed, tier);
      workers.push(started.worker);
      rest.push(started.first);
    }
    for (const ready of await Promise.all(rest)) threadIds.push(ready.type === 'ready' ? ready.threadId : 0);
  } catch (error) {
    await Promise.all(workers.map((worker) => worker.terminate()));
    await tier?.close();
    throw error;
  }

  const wakeLatency =
    settings.cpuWakeLatencyUs === null
      ? undefined
      : new WakeLatencyHolder({ latencyUs: settings.cpuWakeLatencyUs, log, device: options.cpuLatencyDevice, idleDriverFile: options.cpuIdleDriverFile });
  wakeLatency?.start();

  let nextStatsId = 1;
  const exited = new Set<Worker>();
  for (const [index, worker] of workers.entries()) {
    worker.once('exit', (code) => {
      exited.add(worker);
      // Outside stop(), a worker that ends has left its sessions and its share of the accepts.
      if (!stopping) failed(new InternalError(`worker ${index + 1} ended unexpectedly (exit code ${code})`));
    });
  }
  // A worker that died or does not answer within a second counts as empty rather than stalling stop().
  const ask = (worker: Worker): Promise<StatsSnapshot> =>
    new Promise((resolve) => {
      if (exited.has(worker)) {
        resolve(mergeStats([]));
        return;
      }
      const id = nextStatsId++;
      const timer = setTimeout(() => {
        worker.off('message', onMessage);
        resolve(mergeStats([]));
      }, 1000);
      const onMessage = (message: WorkerToMain): void => {
        if (message.type === 'stats' && message.id === id) {
          clearTimeout(timer);
          worker.off('message', onMessage);
          resolve(message.stats);
        }
      };
      worker.on('message', onMessage);
      worker.postMessage({ type: 'stats', id } satisfies MainToWorker);
    });

  const drain = (): void => {
    // First the engine's drain word, which workers see at their next request; the message then
    // ends idle sessions and closes the listeners.
    engine.startDraining();
    for (const worker of workers) worker.postMessage({ type: 'drain' } satisfies MainToWorker);
  };
  const stats = async (): Promise<StatsSnapshot> => {
    const total = mergeStats(await Promise.all(workers.map(ask)));
    if (tier !== undefined) total.durable = tier.stats(total.demotions);
    return total;
  };
  return {
    host: listening.host,
    port: listening.port,
    engine,
    recovery: tier?.tier.recovery,
    tier,
    stats,
    workerStats: () => Promise.all(workers.map(ask)),
    audit: () => auditPool(engine),
    drain,
    failure,
    slotsInUse: () => slots.inUse,
    threadIds,
    wakeLatency: () => wakeLatency?.report(),
    updateTenants: (tenants) => {
      settings.tenants = tenants;
      for (const worker of workers) worker.postMessage({ type: 'tenants', tenants } satisfies MainToWorker);
      // The tier's store ranges and Durable Quotas follow at once (dropping what is now over a quota).
      void tier?.updateTenants(tenants).then(
        ({ dropped, overQuota }) =>
          log(
            `durable tier: tenant ranges and Durable Quotas updated; ${dropped} blocks dropped to fit them` +
              (overQuota > 0 ? `, ${overQuota} still over (resident in the pool: they go when demoted and the tenant seals again)` : ''),
          ),
        (error: unknown) => log(`durable tier: tenants changed, but the tier could not follow: ${error instanceof Error ? error.message : String(error)}`),
      );
    },
    stop: async (graceMs = 2000) => {
      drain();
      const deadline = Date.now() + graceMs;
      let stats = mergeStats(await Promise.all(workers.map(ask)));
      while (stats.sessionsOpen > 0 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        stats = mergeStats(await Promise.all(workers.map(ask)));
      }
      stopping = true;
      await Promise.all(workers.map((worker) => worker.terminate()));
      wakeLatency?.stop();
      // A clean stop leaves a checkpoint, so the next start replays no journal. Acknowledged
      // requests are durable either way: a failure here costs the next start time, not data.
      const checkpointed = await tier?.checkpoint().then(
        () => true,
        (error: unknown) => {
          log(`durable tier: checkpoint at stop failed (${error instanceof Error ? error.message : String(error)}); the journal has everything`);
          return false;
        },
      );
      // Waits for a group in flight and closes the files.
      await tier?.close();
      if (tier !== undefined) {
        stats.durable = tier.stats(stats.demotions);
        log(`durable tier: ${checkpointed === true ? 'checkpoint written, ' : ''}files closed; ${stats.durable.blocksDurable} blocks durable`);
      }
      return stats;
    },
  };
}
