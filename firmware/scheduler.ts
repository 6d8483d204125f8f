// Scheduled maintenance on node-cron. Each job runs on its own cron expression, never overlaps
// itself (a tick that finds the previous run still going is skipped and counted), and a run that
// throws is logged and counted without touching the daemon or the job's next run. Schedules can
// be replaced at run time (SIGHUP) without losing the jobs' history.
import cron, { type ScheduledTask } from 'node-cron';
import type { Logger } from './logger.ts';
import type { ApplianceMetrics } from './metrics.ts';

export interface JobDefinition {
  name: string;
  /** Cron expression; null: the job is off. */
  schedule: string | null;
  /** What the run found, for the log (undefined: logged as 'ok'). */
  run(): Promise<string | undefined> | string | undefined;
  /** Where a successful run's result is logged (default debug; the statistics snapshot logs at info). */
  resultLevel?: 'info' | 'debug';
}

export interface JobStatus {
  name: string;
  schedule: string | null;
  running: boolean;
  runs: number;
  failures: number;
  skipped: number;
  lastRun: { startedAt: string; durationSeconds: number; ok: boolean; result: string } | null;
  nextRun: string | null;
}

interface Job {
  definition: JobDefinition;
  task: ScheduledTask | undefined;
  running: Promise<void> | undefined;
  status: JobStatus;
}

export class Scheduler {
  private readonly jobs = new Map<string, Job>();
  private stopped = false;

  /** node-cron's own messages (e.g. a tick missed while the machine was busy) are debug detail here. */
  private readonly cronLogger;

  constructor(
    private readonly log: Logger,
    private readonly metrics: ApplianceMetrics,
  ) {
    const debug = (message: string | Error): void => log.debug(`node-cron: ${message instanceof Error ? message.message : message}`);
    this.cronLogger = { info: debug, warn: debug, error: debug, debug };
  }

  /** Installs or replaces the jobs' schedules; a job keeps its counters across replacements. */
  setJobs(definitions: readonly JobDefinition[]): void {
    for (const definition of definitions) {
      const existing = this.jobs.get(definition.name);
      const job: Job = existing ?? {
        definition,
        task: undefined,
        running: undefined,
        status: { name: definition.name, schedule: null, running: false, runs: 0, failures: 0, skipped: 0, lastRun: null, nextRun: null },
      };
      job.definition = definition;
      if (job.status.schedule !== definition.schedule || job.task === undefined) {
        void job.task?.destroy();
        job.task = undefined;
        job.status.schedule = definition.schedule;
        if (definition.schedule !== null && !this.stopped) {
          job.task = cron.schedule(definition.schedule, () => this.tick(job), { name: `kbtp-${definition.name}`, logger: this.cronLogger });
        }
      }
      this.jobs.set(definition.name, job);
    }
  }

  private tick(job: Job): void {
    if (this.stopped) return;
    if (job.running !== undefined) {
      job.status.skipped += 1;
      this.metrics.jobSkipped.inc({ job: job.definition.name });
      this.log.warn(`job ${job.definition.name}: the previous run is still going; this run is skipped`);
      return;
    }
    job.running = this.runOnce(job).finally(() => {
      job.running = undefined;
    });
  }

  /** Runs a job now (also what a scheduled tick does); resolves when it finished, never rejects. */
  async runOnce(job: Job): Promise<void> {
    const name = job.definition.name;
    const started = new Date();
    const timer = this.metrics.jobDuration.startTimer({ job: name });
    job.status.running = true;
    let ok = true;
    let result: string;
    try {
      result = (await job.definition.run()) ?? 'ok';
    } catch (error) {
      ok = false;
      result = error instanceof Error ? error.message : String(error);
    }
    const durationSeconds = timer();
    job.status.running = false;
    job.status.runs += 1;
    job.status.lastRun = { startedAt: started.toISOString(), durationSeconds, ok, result };
    this.metrics.jobRuns.inc({ job: name, result: ok ? 'success' : 'failure' });
    if (ok) {
      this.metrics.jobLastSuccess.set({ job: name }, Date.now() / 1000);
      this.log[job.definition.resultLevel ?? 'debug'](`job ${name}: ${result}`, { seconds: Number(durationSeconds.toFixed(3)) });
    } else {
      job.status.failures += 1;
      this.log.error(`job ${name} failed: ${result}`, { failures: job.status.failures });
    }
  }

  status(): JobStatus[] {
    return [...this.jobs.values()].map((job) => ({ ...job.status, nextRun: job.task?.getNextRun()?.toISOString() ?? null }));
  }

  /** Stops scheduling; waits (bounded) for runs in progress to finish. */
  async stop(graceMs: number): Promise<void> {
    this.stopped = true;
    for (const job of this.jobs.values()) {
      await job.task?.destroy();
      job.task = undefined;
    }
    const running = [...this.jobs.values()].map((job) => job.running).filter((run): run is Promise<void> => run !== undefined);
    if (running.length === 0) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(running),
      new Promise((resolve) => {
        timer = setTimeout(resolve, graceMs);
      }),
    ]);
    clearTimeout(timer);
  }
}
