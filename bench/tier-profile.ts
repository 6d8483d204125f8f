// Where a STORE's CPU goes, from a perf profile of the target's process over the measured pass of
// a bench/tier row (bench/tier-row.ts --perf FILE): `perf record -g` attached to this process when
// the clients start their measured pass, stopped when they end, then every sample assigned to its
// thread and to the kinds of work named in its call chain, in microseconds of CPU per STORE.
// Sampling is by CPU clock, so a thread's samples are its CPU time; shares within one run hold up
// on a loaded machine better than two runs' totals do (docs/TIER.md, session 5). JavaScript frames
// have names only when node runs with --perf-basic-prof.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';

/** Sampling frequency (Hz): per STORE, one sample is 1e6 / FREQUENCY / stores microseconds. */
const FREQUENCY = 1999;

/** Kinds of work, each recognised by a frame anywhere in the sample's call chain. */
const KINDS: ReadonlyArray<readonly [string, RegExp]> = [
  ['CRC32C', /crc32\.linux|libisal|crc32_iscsi/],
  ['staging -> pool copy', /persisted/],
  ['socket read', /tcp_recvmsg/],
  ['socket send', /tcp_sendmsg/],
  ['data/journal writes', /__x64_sys_pwrite64|do_pwritev/],
  ['fdatasync', /__x64_sys_fdatasync/],
  ['messages received', /MessagePort::OnMessage/],
  ['messages sent', /MessagePort::PostMessage/],
  ['group commit (JS)', /group-commit\.js|tier\.js|tier-host\.js|records\.js|msgpackr/],
  ['fs promises', /FSReqPromise|internal\/fs\/promises/],
  ['thread wake-ups', /futex/],
  // A thread going to sleep or waking another: every cross-thread hand-off pays this on both sides
  // (on this VM much of it under pvm_irq_enable in finish_task_switch).
  ['scheduler (sleep, switch, wake)', /__schedule|finish_task_switch|try_to_wake_up/],
  ['garbage collection', /Scavenge|MarkCompact|CollectGarbage|ConcurrentMarking|Sweeper/],
  ['JIT compilation', /compiler::/],
  ['page faults', /asm_exc_page_fault/],
];

export class TargetProfile {
  private recorder: ChildProcess | undefined;

  constructor(private readonly file: string) {
    if (spawnSync('perf', ['--version']).status !== 0) throw new Error('--perf needs perf (Debian: linux-perf)');
  }

  start(): void {
    this.recorder = spawn('perf', ['record', '-g', '-F', String(FREQUENCY), '-p', String(process.pid), '-o', this.file], { stdio: 'ignore' });
  }

  async stop(): Promise<void> {
    const recorder = this.recorder;
    if (recorder === undefined) return;
    const ended = new Promise((resolve) => recorder.once('exit', resolve));
    recorder.kill('SIGINT');
    await ended;
  }

  /** Lines of the summary: per thread, its CPU per STORE and the kinds of work in it. */
  summary(stores: number, mainThread: number): string[] {
    const script = spawnSync('perf', ['script', '-i', this.file], { encoding: 'utf8', maxBuffer: 1 << 30 });
    if (script.status !== 0) return [`perf script failed: ${script.stderr.trim()}`];
    const threads = new Map<number, { samples: number; kinds: Map<string, number> }>();
    for (const sample of script.stdout.split('\n\n')) {
      const [header, ...frames] = sample.trim().split('\n');
      const tid = Number(header?.trim().split(/\s+/)[1]);
      if (!Number.isInteger(tid) || frames.length === 0) continue;
      const thread = threads.get(tid) ?? { samples: 0, kinds: new Map<string, number>() };
      threads.set(tid, thread);
      thread.samples += 1;
      const chain = frames.join('\n');
      for (const [kind, pattern] of KINDS) if (pattern.test(chain)) thread.kinds.set(kind, (thread.kinds.get(kind) ?? 0) + 1);
    }
    const perStore = (samples: number): number => (samples * 1e6) / FREQUENCY / stores;
    let total = 0;
    for (const thread of threads.values()) total += thread.samples;
    const lines = [`perf samples of the target over the measured pass: ${perStore(total).toFixed(0)} us of CPU per STORE`];
    for (const [tid, thread] of [...threads].sort((a, b) => b[1].samples - a[1].samples)) {
      if (perStore(thread.samples) < 2) continue;
      const kinds = [...thread.kinds]
        .sort((a, b) => b[1] - a[1])
        .filter(([, samples]) => perStore(samples) >= 2)
        .map(([kind, samples]) => `${kind} ${perStore(samples).toFixed(0)}`);
      lines.push(
        `  ${tid === mainThread ? 'main thread' : `thread ${tid}`}: ${perStore(thread.samples).toFixed(0)} us${kinds.length > 0 ? ` (${kinds.join(', ')})` : ''}`,
      );
    }
    return lines;
  }
}
