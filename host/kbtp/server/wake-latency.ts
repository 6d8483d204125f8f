// The target holds a CPU wake-latency request (host/util/cpu-latency.ts) while it serves traffic
// and drops it once it has been idle a while. A request answered at one in flight wakes a
// sleeping thread on each side; where idle CPUs halt (virtual machines, deep C-states) each wake
// costs tens of microseconds, more than kbtp's own work on a 16 KiB block. Holding the request
// only while busy keeps an idle node from spinning its CPUs for nothing. Busy is judged from the
// process's CPU time, sampled by a timer on the main thread: nothing on the request path pays for
// it, and the first requests after an idle spell are served before the request is placed.

import { CPU_IDLE_DRIVER_FILE, CpuLatencyRequest, cpuIdleDriver, noEffectReason } from '../../util/cpu-latency.ts';

/** How often the process's CPU time is sampled. */
export const WAKE_SAMPLE_MS = 100;
/** Idle this long (no busy sample), the request is dropped. */
export const WAKE_IDLE_MS = 2000;
/** A sample counts as busy when the process used at least this share of one CPU in it. */
const BUSY_SHARE = 0.01;

export interface WakeLatencyReport {
  /** The latency asked for while busy, in microseconds. */
  requestUs: number;
  /** The request is in force now. */
  held: boolean;
  /** Times it was placed (once per busy spell). */
  holds: number;
  /** Milliseconds it has been in force, the present spell included. */
  heldMs: number;
  /** Why it was not placed, when it could not be or would change nothing (then it is not tried again). */
  problem: string | undefined;
}

export interface WakeLatencyOptions {
  latencyUs: number;
  log: (line: string) => void;
  /** The PM QoS device (tests give a file of their own). */
  device?: string;
  /** Where the kernel names its cpuidle driver (tests give a file of their own). */
  idleDriverFile?: string;
  /** CPU time of the process so far, microseconds (tests give their own). */
  cpuMicroseconds?: () => number;
  /** A monotonic clock in milliseconds (tests give their own). */
  nowMs?: () => number;
}

export class WakeLatencyHolder {
  private readonly request: CpuLatencyRequest;
  private readonly cpuMicroseconds: () => number;
  private readonly nowMs: () => number;
  private timer: NodeJS.Timeout | undefined;
  private lastCpuUs = 0;
  private lastSampleMs = 0;
  private lastBusyMs = 0;
  private heldSinceMs = 0;
  private heldBeforeMs = 0;
  private holds = 0;
  private problem: string | undefined;

  constructor(private readonly options: WakeLatencyOptions) {
    this.request = new CpuLatencyRequest(options.latencyUs, options.device);
    this.cpuMicroseconds =
      options.cpuMicroseconds ??
      (() => {
        const usage = process.cpuUsage();
        return usage.user + usage.system;
      });
    this.nowMs = options.nowMs ?? (() => performance.now());
  }

  /** Starts sampling (the timer does not keep the process alive). */
  start(): void {
    if (this.timer !== undefined) return;
    this.lastCpuUs = this.cpuMicroseconds();
    this.lastSampleMs = this.nowMs();
    this.timer = setInterval(() => this.sample(), WAKE_SAMPLE_MS);
    this.timer.unref();
  }

  /** Stops sampling and drops the request. */
  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
    this.drop(this.nowMs());
  }

  /** One sample: busy since the last one places the request, idle for WAKE_IDLE_MS drops it. */
  sample(): void {
    const now = this.nowMs();
    const cpuUs = this.cpuMicroseconds();
    const elapsedMs = now - this.lastSampleMs;
    const busy = elapsedMs > 0 && (cpuUs - this.lastCpuUs) / 1000 >= BUSY_SHARE * elapsedMs;
    this.lastCpuUs = cpuUs;
    this.lastSampleMs = now;
    if (busy) {
      this.lastBusyMs = now;
      if (!this.request.held && this.problem === undefined) this.place(now);
    } else if (this.request.held && now - this.lastBusyMs >= WAKE_IDLE_MS) {
      this.drop(now);
    }
  }

  report(): WakeLatencyReport {
    const now = this.nowMs();
    return {
      requestUs: this.request.latencyUs,
      held: this.request.held,
      holds: this.holds,
      heldMs: this.heldBeforeMs + (this.request.held ? now - this.heldSinceMs : 0),
      problem: this.problem,
    };
  }

  private place(now: number): void {
    // Said once either way: the node serves as well as the machine's idle states allow.
    const idleDriverFile = this.options.idleDriverFile ?? CPU_IDLE_DRIVER_FILE;
    const noEffect = noEffectReason(cpuIdleDriver(idleDriverFile), idleDriverFile);
    if (noEffect !== undefined) {
      this.problem = `no CPU wake-latency request placed: ${noEffect}`;
      this.options.log(`kbtp target: ${this.problem} (--cpu-wake-latency-us off stops checking)`);
      return;
    }
    const refused = this.request.hold();
    if (refused !== undefined) {
      this.problem = refused.message;
      this.options.log(`kbtp target: ${refused.message}; idle CPUs may take tens of microseconds to wake (--cpu-wake-latency-us off stops trying)`);
      return;
    }
    this.holds++;
    this.heldSinceMs = now;
  }

  private drop(now: number): void {
    if (!this.request.held) return;
    this.request.release();
    this.heldBeforeMs += now - this.heldSinceMs;
  }
}
