// A bounded busy poll of this thread's event loop (issue 16), off unless the operator asks for it.
// After a read or write of an iWARP TCP channel (SocketChannel; RoCE's UDP link is not covered)
// the loop keeps polling (libuv's epoll with a zero timeout, driven
// by setImmediate) instead of sleeping, for up to a budget of microseconds since the last such
// activity: the answer to a request just written, or the next request of a busy session, is then
// found by a poll instead of by a wake-up of a sleeping thread (as RDMA stacks poll their
// completion queues). It trades CPU and system calls for latency: every spin is one more
// `epoll_pwait` and a thread that spins holds its CPU for the whole budget, so the default is 0
// (off); docs/BENCH.md has both figures. Set with KBTP_BUSY_POLL_US (every thread of the process
// that reads sockets, workers included: they inherit the environment); configure() sets a thread's.

import { monotonicMsInto } from '../util/clock.ts';

/** The environment variable that sets the budget, in microseconds (0 or unset: off). */
export const BUSY_POLL_ENV = 'KBTP_BUSY_POLL_US';
/** The largest budget accepted: a poll that never sleeps is a spinning thread, not a poll. */
export const MAX_BUSY_POLL_US = 10_000;

/** A budget from text (the environment variable, a command-line option); undefined if it is not one. */
export function parseBusyPollUs(text: string | undefined): number | undefined {
  if (text === undefined || text.trim() === '') return 0;
  if (!/^\d+$/.test(text.trim())) return undefined;
  const value = Number(text.trim());
  return value <= MAX_BUSY_POLL_US ? value : undefined;
}

/** Reads judged before the poll decides whether it is in its peer's way. */
const JUDGED_READS = 32;
/** A read this soon after a poll gave up was probably waiting for the poller's CPU. */
const LATE_READ_MS = 0.5;
/**
 * How long the poll stays off once it found itself in the way, before it tries again (each try
 * costs up to JUDGED_READS x the budget of latency): doubled after every judgement lost in a row.
 */
const FIRST_BACK_OFF_MS = 1000;
const LAST_BACK_OFF_MS = 64_000;

// Slots of the clock array (monotonic ms, written in place: no boxed numbers on the hot path).
const LAST_ACTIVITY = 0;
const NOW = 1;
const SPIN_ENDED = 2;
const SUSPENDED_UNTIL = 3;

class BusyPoll {
  private budgetMs = 0;
  private readonly clock = new Float64Array(4);
  private spinning = false;
  /** Of the reads since the last judgement: found while polling, and arrived just after it gave up. */
  private caught = 0;
  private late = 0;
  private backOffMs = FIRST_BACK_OFF_MS;
  /** Wall-clock milliseconds this thread has spent polling instead of sleeping (for stats and tests). */
  private polledMs = 0;
  private spinStartedMs = 0;
  private readonly spinBound = (): void => this.spin();

  constructor() {
    const value = parseBusyPollUs(process.env[BUSY_POLL_ENV]);
    // A bad value must not stop a node from serving: it is reported and the poll stays off.
    if (value === undefined)
      process.emitWarning(`${BUSY_POLL_ENV}=${process.env[BUSY_POLL_ENV]}: not a number of microseconds from 0 to ${MAX_BUSY_POLL_US}; busy polling stays off`);
    else this.budgetMs = value / 1000;
  }

  /** The loop is polling instead of sleeping now. */
  get polling(): boolean {
    return this.spinning;
  }

  /** The poll found itself in its peer's way and is off for a while. */
  get suspended(): boolean {
    return this.suspendedForMs > 0;
  }

  /** How much longer the poll stays off, in milliseconds (0: it is not backing off). */
  get suspendedForMs(): number {
    monotonicMsInto(this.clock, NOW);
    return Math.max(0, (this.clock[SUSPENDED_UNTIL] as number) - (this.clock[NOW] as number));
  }

  /** Wall-clock milliseconds spent polling so far, spins still running not counted. */
  get polledMilliseconds(): number {
    return this.polledMs;
  }

  /** The budget of this thread in microseconds (0: off). */
  get budgetUs(): number {
    return this.budgetMs * 1000;
  }

  /** Sets this thread's budget (microseconds, 0 turns it off) and forgets any back-off. */
  configure(budgetUs: number): void {
    if (!Number.isInteger(budgetUs) || budgetUs < 0 || budgetUs > MAX_BUSY_POLL_US)
      throw new RangeError(`busy poll budget ${budgetUs} us: from 0 to ${MAX_BUSY_POLL_US}`);
    this.budgetMs = budgetUs / 1000;
    this.clock[SUSPENDED_UNTIL] = 0;
    this.backOffMs = FIRST_BACK_OFF_MS;
    this.caught = 0;
    this.late = 0;
  }

  /**
   * A socket read: judged, then activity. When the peer runs on this thread's CPU, the poll holds
   * that CPU while the peer waits to run, so the peer's next message comes just after the poll gives
   * up, every time (make compare's unpinned setting: p50 124-2,113 us instead of 33-43). Reads that
   * mostly arrive so are taken as that case, and the poll backs off for a while (docs/BENCH.md).
   */
  received(): void {
    if (this.budgetMs === 0) return;
    monotonicMsInto(this.clock, NOW);
    if (this.spinning) this.caught++;
    else if ((this.clock[NOW] as number) - (this.clock[SPIN_ENDED] as number) < LATE_READ_MS) this.late++;
    if (this.caught + this.late >= JUDGED_READS) {
      if (this.late > this.caught) {
        this.clock[SUSPENDED_UNTIL] = (this.clock[NOW] as number) + this.backOffMs;
        this.backOffMs = Math.min(LAST_BACK_OFF_MS, this.backOffMs * 2);
      } else {
        this.backOffMs = FIRST_BACK_OFF_MS;
      }
      this.caught = 0;
      this.late = 0;
    }
    this.activity();
  }

  /** A socket was read or written: keep polling for the budget from now. */
  activity(): void {
    if (this.budgetMs === 0) return;
    monotonicMsInto(this.clock, LAST_ACTIVITY);
    if (this.spinning || (this.clock[LAST_ACTIVITY] as number) < (this.clock[SUSPENDED_UNTIL] as number)) return;
    this.spinning = true;
    this.spinStartedMs = this.clock[LAST_ACTIVITY] as number;
    setImmediate(this.spinBound);
  }

  private spin(): void {
    monotonicMsInto(this.clock, NOW);
    if ((this.clock[NOW] as number) - (this.clock[LAST_ACTIVITY] as number) < this.budgetMs) {
      setImmediate(this.spinBound);
      return;
    }
    this.spinning = false;
    this.clock[SPIN_ENDED] = this.clock[NOW] as number;
    this.polledMs += (this.clock[NOW] as number) - this.spinStartedMs;
  }
}

/** This thread's busy poll (module state is per worker thread). */
export const busyPoll = new BusyPoll();
