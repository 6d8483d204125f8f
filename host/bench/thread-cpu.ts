// CPU time of this process's threads over a benchmark phase, from /proc/self/task/TID/schedstat
// (run time in nanoseconds, exact where /proc/PID/stat counts 10 ms ticks): the main thread (the
// benchmark's sessions, i.e. the client), a spawned target's worker threads, and everything else
// (V8's compiler and GC helpers, libuv's pool). Divided by the requests of the phase it says where
// a request's CPU goes; divided by the phase's length, how busy each side was (a thread near 1.0
// is the bottleneck). Linux only: elsewhere the sampler gives nothing and the figures are absent.
import { readdirSync, readFileSync } from 'node:fs';

export interface ThreadCpuSample {
  /** performance.now() when taken, milliseconds. */
  at: number;
  clientNs: number;
  targetNs: number;
  otherNs: number;
}

/** CPU per request by thread over a phase, microseconds; busy = CPU time / wall time (1.0 = one core). */
export interface PhaseCpu {
  requests: number;
  clientUsPerOp: number;
  /** Absent unless the target ran in this process (kbtp bench --spawn). */
  targetUsPerOp?: number;
  otherUsPerOp: number;
  clientBusy: number;
  targetBusy?: number;
}

const runNs = (tid: string): number => {
  try {
    return Number(readFileSync(`/proc/self/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
  } catch {
    return 0; // the thread ended between the listing and the read
  }
};

/** Samples this process's threads; `targetThreads` are a spawned target's worker thread ids. */
export class ThreadCpu {
  private readonly main = String(process.pid);
  private readonly target: ReadonlySet<string>;

  private constructor(targetThreads: readonly number[]) {
    this.target = new Set(targetThreads.filter((tid) => tid > 0).map(String));
  }

  /** A sampler, or undefined where /proc/self/task/TID/schedstat is not there. */
  static open(targetThreads: readonly number[] = []): ThreadCpu | undefined {
    try {
      readFileSync(`/proc/self/task/${process.pid}/schedstat`, 'utf8');
    } catch {
      return undefined;
    }
    return new ThreadCpu(targetThreads);
  }

  get hasTarget(): boolean {
    return this.target.size > 0;
  }

  sample(): ThreadCpuSample {
    let clientNs = 0;
    let targetNs = 0;
    let otherNs = 0;
    for (const tid of readdirSync('/proc/self/task')) {
      const ns = runNs(tid);
      if (tid === this.main) clientNs += ns;
      else if (this.target.has(tid)) targetNs += ns;
      else otherNs += ns;
    }
    return { at: performance.now(), clientNs, targetNs, otherNs };
  }

  /** The figures between two samples over `requests` requests (threads that ended drop out of "other"). */
  between(first: ThreadCpuSample, last: ThreadCpuSample, requests: number): PhaseCpu | undefined {
    const wallNs = (last.at - first.at) * 1e6;
    if (requests <= 0 || wallNs <= 0) return undefined;
    const us = (ns: number): number => +(ns / 1e3 / requests).toFixed(2);
    const busy = (ns: number): number => +(ns / wallNs).toFixed(3);
    const client = last.clientNs - first.clientNs;
    const target = last.targetNs - first.targetNs;
    const other = Math.max(0, last.otherNs - first.otherNs);
    const figures: PhaseCpu = { requests, clientUsPerOp: us(client), otherUsPerOp: us(other), clientBusy: busy(client) };
    if (this.hasTarget) {
      figures.targetUsPerOp = us(target);
      figures.targetBusy = busy(target);
    }
    return figures;
  }
}
