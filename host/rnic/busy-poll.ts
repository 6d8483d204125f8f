// A bounded busy poll of this thread's TCP channels (issue 16): where the kernel cannot keep an idle
// CPU awake (no cpuidle driver, below) a thread that would go to sleep waiting for its peer's next
// message asks instead, for up to a budget of microseconds, whether one has come, so that the
// answer to a request just written is found by a look and not by a wake-up of a halted CPU (as
// RDMA stacks poll their completion queues). On the PVM guest of sessions 16-17 a halted vCPU's
// wake-up cost a 16 KiB LOAD at 1 in flight 41-42 us at the median where the poll answered in
// 27-34 (docs/BENCH.md).
//
// How (session 17): the poll spins synchronously, at the end of an event-loop turn (host/rnic/turn.ts
// calls turnEnded() once the turn's notifications and writes are settled, so the answer is on
// the wire before it spins), on an epoll set of this thread's channel descriptors (ready-set.ts),
// one zero-timeout epoll_wait per round until a descriptor has bytes or the budget is spent.
// What it finds inside that channel's own libuv read callback, the channel reads there (session
// 18: ReadyReader, one read(2) into the buffer the consumer picks; SocketChannel.readReady says
// why only there), so the bytes do not wait for the rest of libuv's loop iteration and its two
// epoll calls (the zero-timeout one of its idle-time metrics, then the one that finds the
// descriptor); anything else libuv reads as before. That read's turn may end with a spin of its
// own: the poll loops (turnEnded inside a read it made only marks the loop to go on), up to
// DIRECT_READS_IN_ROW reads before one of libuv's must come between, so timers, worker messages
// and listeners, which only libuv's loop serves, wait for at most that many requests.
// Nothing is allocated per round, per spin or per read it makes (koffi calls with numbers and
// preallocated arrays, times as small integers); the spin it replaces, one setImmediate per
// round, allocated ~330 octets each.
// A turn spins when it wrote (a request or an answer went out, so something is expected back), or
// when it was a delivery that raised no completion (a large message still arriving in parts: a
// 1 MiB LOAD's payload at the initiator). Not after a turn that raised completions and wrote
// nothing: their handlers may be promise reactions that run after this turn and post the next
// request, which must go out first. Not while a write waits in libuv for the socket to drain
// either: the spin would hold the loop that completes it.
//
// Whatever else this thread has to do waits behind a spin: promise reactions queued after the
// turn, timers, worker messages, new connections on a listener (only channels are watched). The
// budget bounds that delay; every round is one system call, and a thread that spins holds its CPU.
// When the peer needs that CPU (both on one CPU), the peer's message comes just after each spin
// gives up: received() sees that and backs off (below).
//
// Set with KBTP_BUSY_POLL_US (every thread of the process that reads sockets, workers included:
// they inherit the environment); configure() sets a thread's (kbtp target --busy-poll-us).
// Unset, the budget follows the kernel's idle states: with a cpuidle driver (haltpoll,
// intel_idle, acpi_idle, ...) the CPU wake-latency request a busy target holds
// (host/util/cpu-latency.ts) keeps idle CPUs polling in the kernel, which is cheaper, and a busy
// poll on top of it made 16 KiB requests slower (session 15): off. Without one (current_driver
// "none", as on a Firecracker PVM guest) that request is a no-op and an idle vCPU halts:
// NO_IDLE_DRIVER_BUDGET_US.

import { cpuIdleDriver } from '../util/cpu-latency.ts';
import { FOUND, GAVE_UP, READY, ReadySet } from './ready-set.ts';

/** The environment variable that sets the budget, in microseconds (0: off). */
export const BUSY_POLL_ENV = 'KBTP_BUSY_POLL_US';
/** The largest budget accepted: a poll that never sleeps is a spinning thread, not a poll. */
export const MAX_BUSY_POLL_US = 10_000;
/** The budget where KBTP_BUSY_POLL_US is unset and the kernel has no cpuidle driver (above). */
export const NO_IDLE_DRIVER_BUDGET_US = 200;

/**
 * The budget when none is set: NO_IDLE_DRIVER_BUDGET_US where the kernel has no cpuidle driver, so
 * that idle CPUs halt whatever wake latency is asked; 0 (off) with a driver, or where none is known.
 */
export function defaultBusyPollUs(driver: string | undefined): number {
  return driver === 'none' ? NO_IDLE_DRIVER_BUDGET_US : 0;
}

/** A budget from text (the environment variable, a command-line option); undefined if it is not one. */
export function parseBusyPollUs(text: string | undefined): number | undefined {
  if (text === undefined || text.trim() === '') return 0;
  if (!/^\d+$/.test(text.trim())) return undefined;
  const value = Number(text.trim());
  return value <= MAX_BUSY_POLL_US ? value : undefined;
}

/** Reads judged before the poll decides whether it is in its peer's way. */
const JUDGED_READS = 32;
/** A read this soon after a poll gave up (microseconds) was probably waiting for the poller's CPU. */
const LATE_READ_US = 500;
/**
 * How long the poll stays off once it found itself in the way, before it tries again (each try
 * costs up to JUDGED_READS x the budget of latency): doubled after every judgement lost in a row.
 * Short at first because a judgement is also lost without a peer in the way: while code is still
 * cold (the first requests of a connection, at every start) and when the scheduler puts both
 * peers on one CPU for a moment. Session 18 saw a back-off in every kbtp bench start and, in some
 * runs, another within the measured seconds; at 1 s each cost a second of the run's latency.
 */
export const FIRST_BACK_OFF_MS = 100;
const LAST_BACK_OFF_MS = 64_000;
/**
 * A spin that found a descriptor ready at its first look waited for nothing: the
 * thread has messages queued (many sessions, several requests in flight) and its loop does not go
 * to sleep, so the look was a system call for nothing (16 sessions x 1 in flight, session 17: 2-4
 * us of CPU per request and 15 % of the Gbit/s). The spins of the turns after it are skipped, 1
 * then 3, 7, ... up to this many while such looks keep coming; a spin that has to wait ends it.
 */
const MOST_SKIPPED = 31;
/**
 * Reads the poll makes itself in a row, before it leaves a ready descriptor to libuv's read: the
 * bound on how long the rest of the thread's loop (timers, worker messages, new connections)
 * waits behind a session that keeps its channel busy.
 */
export const DIRECT_READS_IN_ROW = 16;

/** A watched channel: reads its descriptor now if it can (the poll found it ready); false leaves it to libuv. */
export interface ReadyReader {
  readReady(): boolean;
}

/**
 * How a spin ended: nothing yet; a descriptor was ready at the first look (the spin waited for
 * nothing); one became ready while it waited; the budget ran out; epoll_wait failed (a signal).
 */
export type SpinOutcome = 'none' | 'ready' | 'found' | 'gave-up' | 'failed';
const NONE = 0;
const OUTCOMES: readonly SpinOutcome[] = ['none', 'ready', 'found', 'gave-up', 'failed'];

/** What this thread's spins came to, for stats and tests. */
export interface SpinCounts {
  spins: number;
  ready: number;
  found: number;
  gaveUp: number;
  /** Armed turns that did not spin, a look just before having found the loop busy (MOST_SKIPPED). */
  skipped: number;
  /** Reads the poll made itself of what it found (ReadyReader). */
  directReads: number;
}

class BusyPoll {
  // Small integers only on the paths every request takes (times in microseconds of ReadySet.nowUs,
  // a clock that wraps at 2^31, compared by differences): V8's unoptimized code boxes every
  // double it loads, a double field included, and a test or a cold start can leave these methods
  // unoptimized for a while.
  private budget = 0;
  private budgetNs = 0;
  private backingOff = false;
  private suspendedUntilUs = 0;
  private spinEndedUs = 0;
  private lastSpinUs = 0;
  private polledUs = 0;
  private polledCarryMs = 0;
  private readonly set = new ReadySet<ReadyReader>();
  /** What this turn did: wrote to a channel, read from one. */
  private wrote = false;
  private read = false;
  /** Writes libuv still holds for this thread's channels (each socket must drain first). */
  private writesWaiting = 0;
  /** How the last spin ended, until the read after it is judged. */
  private outcome = NONE;
  private lastOutcome = NONE;
  /** Of the reads since the last judgement: found while polling, and arrived just after it gave up. */
  private caught = 0;
  private late = 0;
  private backOffMs = FIRST_BACK_OFF_MS;
  private spins = 0;
  private readyCount = 0;
  private foundCount = 0;
  private gaveUpCount = 0;
  private skippedCount = 0;
  private directReadCount = 0;
  /** Reads made by the poll since libuv's last one (DIRECT_READS_IN_ROW). */
  private directInRow = 0;
  /** A read the poll makes is running; its turn's end only says whether to spin again. */
  private reading = false;
  private spinAgain = false;
  /** Armed turns whose spin is skipped still, and how many the last READY look skipped. */
  private skipping = 0;
  private skipRun = 0;
  private warned = false;

  constructor() {
    const text = process.env[BUSY_POLL_ENV];
    if (text === undefined || text.trim() === '') {
      this.setBudget(defaultBusyPollUs(cpuIdleDriver()));
      return;
    }
    const value = parseBusyPollUs(text);
    // A bad value must not stop a node from serving: it is reported and the poll stays off.
    if (value === undefined)
      process.emitWarning(`${BUSY_POLL_ENV}=${text}: not a number of microseconds from 0 to ${MAX_BUSY_POLL_US}; busy polling stays off`);
    else this.setBudget(value);
  }

  private setBudget(budgetUs: number): void {
    this.budget = budgetUs;
    this.budgetNs = budgetUs * 1000;
  }

  /** The poll found itself in its peer's way and is off for a while. */
  get suspended(): boolean {
    return this.suspendedForMs > 0;
  }

  /** How much longer the poll stays off, in milliseconds (0: it is not backing off). */
  get suspendedForMs(): number {
    if (!this.backingOff) return 0;
    const left = (this.suspendedUntilUs - this.set.nowUs()) | 0;
    return left > 0 ? left / 1000 : 0;
  }

  /** Wall-clock milliseconds spent polling so far. */
  get polledMilliseconds(): number {
    return this.polledCarryMs + this.polledUs / 1000;
  }

  /** How the last spin ended, and how long it took (ms). */
  get lastSpin(): { outcome: SpinOutcome; ms: number } {
    return { outcome: OUTCOMES[this.lastOutcome]!, ms: this.lastSpinUs / 1000 };
  }

  get counts(): SpinCounts {
    return {
      spins: this.spins,
      ready: this.readyCount,
      found: this.foundCount,
      gaveUp: this.gaveUpCount,
      skipped: this.skippedCount,
      directReads: this.directReadCount,
    };
  }

  /** The budget of this thread in microseconds (0: off). */
  get budgetUs(): number {
    return this.budget;
  }

  /** Sets this thread's budget (microseconds, 0 turns it off) and forgets any back-off. */
  configure(budgetUs: number): void {
    if (!Number.isInteger(budgetUs) || budgetUs < 0 || budgetUs > MAX_BUSY_POLL_US)
      throw new RangeError(`busy poll budget ${budgetUs} us: from 0 to ${MAX_BUSY_POLL_US}`);
    this.setBudget(budgetUs);
    this.backingOff = false;
    this.backOffMs = FIRST_BACK_OFF_MS;
    this.caught = 0;
    this.late = 0;
    this.outcome = NONE;
    this.skipping = 0;
    this.skipRun = 0;
  }

  /** A channel's descriptor, watched while the channel is open (`owner`: the channel, which reads it when found ready). */
  watch(fd: number, owner: ReadyReader): void {
    this.set.watch(fd, owner);
  }

  unwatch(fd: number, owner: ReadyReader): void {
    this.set.unwatch(fd, owner);
  }

  /** A channel's write is held by libuv until the socket drains (HandleWriter's WRITE_QUEUED). */
  writeQueued(): void {
    this.writesWaiting++;
  }

  /** That write completed (or failed). */
  writeSettled(): void {
    if (this.writesWaiting > 0) this.writesWaiting--;
  }

  /**
   * A socket read: judged. When the peer runs on this thread's CPU, the poll holds that CPU while
   * the peer waits to run, so the peer's next message comes just after the poll gives up, every
   * time (make compare's unpinned setting, session 15: p50 124-2,113 us instead of 33-43). Reads
   * that mostly arrive so are taken as that case, and the poll backs off for a while.
   * `byPoll`: the poll's own read (ReadyReader), not libuv's.
   */
  received(byPoll: boolean): void {
    if (this.budget === 0) return;
    this.read = true;
    if (!byPoll) this.directInRow = 0;
    const outcome = this.outcome;
    this.outcome = NONE;
    if (outcome === FOUND) this.caught++;
    else if (outcome === GAVE_UP) {
      if (((this.set.nowUs() - this.spinEndedUs) | 0) < LATE_READ_US) this.late++;
      else return;
    } else return;
    if (this.caught + this.late < JUDGED_READS) return;
    if (this.late > this.caught) {
      this.suspendedUntilUs = (this.set.nowUs() + this.backOffMs * 1000) | 0;
      this.backingOff = true;
      this.backOffMs = Math.min(LAST_BACK_OFF_MS, this.backOffMs * 2);
    } else {
      this.backOffMs = FIRST_BACK_OFF_MS;
    }
    this.caught = 0;
    this.late = 0;
  }

  /** A socket write the kernel took: the turn ends with a spin. */
  activity(): void {
    if (this.budget !== 0) this.wrote = true;
  }

  /**
   * The end of an event-loop turn (turn.ts, outermost finish): spins if the turn wrote, or read
   * without raising a completion (`notified`: it raised one), and nothing holds the poll back.
   */
  turnEnded(notified: boolean): void {
    const armed = this.wrote || (this.read && !notified);
    this.wrote = false;
    this.read = false;
    if (!armed || this.writesWaiting > 0 || this.budget === 0 || this.set.size === 0) return;
    if (this.reading) {
      this.spinAgain = true;
      return;
    }
    for (;;) {
      if (this.skipping > 0) {
        this.skipping--;
        this.skippedCount++;
        return;
      }
      const found = this.spin();
      if (found === undefined) return;
      if (this.directInRow >= DIRECT_READS_IN_ROW) return;
      this.spinAgain = false;
      this.reading = true;
      let read: boolean;
      try {
        read = found.readReady();
      } finally {
        this.reading = false;
      }
      if (!read) return;
      this.directInRow++;
      this.directReadCount++;
      if (!this.spinAgain) return;
      this.spinAgain = false;
    }
  }

  /**
   * Looks until a watched descriptor is ready or the budget is spent (above); a look that finds
   * one at once skips the next spins (MOST_SKIPPED). Returns the reader of the descriptor found.
   */
  private spin(): ReadyReader | undefined {
    if (!this.set.opened && !this.set.open()) {
      if (!this.warned) {
        this.warned = true;
        process.emitWarning(`busy polling is off in this thread: ${this.set.problem?.message ?? 'no epoll set'}`);
      }
      this.setBudget(0);
      return undefined;
    }
    const now = this.set.nowUs();
    if (this.backingOff) {
      if (((now - this.suspendedUntilUs) | 0) < 0) return undefined;
      this.backingOff = false;
    }
    this.spins++;
    const outcome = this.set.lookFor(this.budgetNs);
    const waitedNs = this.set.waitedNs;
    const waitedUs = (waitedNs - (waitedNs % 1000)) / 1000;
    this.lastSpinUs = waitedUs;
    this.spinEndedUs = (now + waitedUs) | 0;
    this.polledUs += waitedUs;
    if (this.polledUs > 1_000_000_000) {
      this.polledCarryMs += this.polledUs / 1000;
      this.polledUs = 0;
    }
    if (outcome === READY) {
      this.readyCount++;
      this.skipRun = Math.min(MOST_SKIPPED, this.skipRun * 2 + 1);
      this.skipping = this.skipRun;
    } else {
      if (outcome === FOUND) this.foundCount++;
      else if (outcome === GAVE_UP) this.gaveUpCount++;
      this.skipRun = 0;
    }
    this.outcome = outcome;
    this.lastOutcome = outcome;
    return outcome === READY || outcome === FOUND ? this.set.readyOwner() : undefined;
  }
}

/** This thread's busy poll (module state is per worker thread). */
export const busyPoll = new BusyPoll();
