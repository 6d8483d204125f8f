// A bounded busy poll of this thread's event loop (issue 16), off unless the operator asks for it.
// After a socket read or write the loop keeps polling (libuv's epoll with a zero timeout, driven
// by setImmediate) instead of sleeping, for up to a budget of microseconds since the last such
// activity: the answer to a request just written, or the next request of a busy session, is then
// found by a poll instead of by a wake-up of a sleeping thread (as RDMA stacks poll their
// completion queues). It trades CPU and system calls for latency: every spin is one more
// `epoll_pwait` and a thread that spins holds its CPU for the whole budget, so the default is 0
// (off); docs/BENCH.md has both figures. Set with KBTP_BUSY_POLL_US (every thread of the process
// that reads sockets, workers included: they inherit the environment) or `kbtp bench --busy-poll`.

import { monotonicMsInto } from '../util/clock.ts';

/** The environment variable that sets the budget, in microseconds (0 or unset: off). */
export const BUSY_POLL_ENV = 'KBTP_BUSY_POLL_US';
/** The largest budget accepted: a poll that never sleeps is a spinning thread, not a poll. */
export const MAX_BUSY_POLL_US = 100_000;

/** A budget from text (the environment variable, a command-line option); undefined if it is not one. */
export function parseBusyPollUs(text: string | undefined): number | undefined {
  if (text === undefined || text.trim() === '') return 0;
  if (!/^\d+$/.test(text.trim())) return undefined;
  const value = Number(text.trim());
  return value <= MAX_BUSY_POLL_US ? value : undefined;
}

class BusyPoll {
  private budgetMs = 0;
  /** [0]: monotonic ms of the last activity, [1]: now (written in place: no boxed numbers). */
  private readonly clock = new Float64Array(2);
  private spinning = false;
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

  /** The budget of this thread in microseconds (0: off). */
  get budgetUs(): number {
    return this.budgetMs * 1000;
  }

  /** Sets this thread's budget (microseconds, 0 turns it off). */
  configure(budgetUs: number): void {
    if (!Number.isInteger(budgetUs) || budgetUs < 0 || budgetUs > MAX_BUSY_POLL_US)
      throw new RangeError(`busy poll budget ${budgetUs} us: from 0 to ${MAX_BUSY_POLL_US}`);
    this.budgetMs = budgetUs / 1000;
  }

  /** A socket was read or written: keep polling for the budget from now. */
  activity(): void {
    if (this.budgetMs === 0) return;
    monotonicMsInto(this.clock, 0);
    if (this.spinning) return;
    this.spinning = true;
    setImmediate(this.spinBound);
  }

  private spin(): void {
    monotonicMsInto(this.clock, 1);
    if ((this.clock[1] as number) - (this.clock[0] as number) < this.budgetMs) setImmediate(this.spinBound);
    else this.spinning = false;
  }
}

/** This thread's busy poll (module state is per worker thread). */
export const busyPoll = new BusyPoll();
