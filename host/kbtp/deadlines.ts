// The deadlines of a session's calls, swept by one timer (issue 16): a call registers its deadline
// and is told when it passed, instead of owning a timer, an AbortController and a Promise.race of
// its own (about 4 KB and several listeners per call). The timer is armed for the earliest
// deadline it knows of and re-armed only when it fires or a call needs an earlier one; calls that
// end before their deadline just leave the list, so a busy session re-arms about once per timeout.

import { monotonicMs } from '../util/clock.ts';

/** A call with a deadline (intrusive list links, so registering allocates nothing). */
export interface DeadlineEntry {
  /** monotonicMs() value after which the call has failed. */
  deadline: number;
  /** The deadline passed: fail the call (it has already left the list). */
  expired(): void;
  previousDeadline: DeadlineEntry | undefined;
  nextDeadline: DeadlineEntry | undefined;
  /** True while registered. */
  inDeadlines: boolean;
}

export class Deadlines {
  private head: DeadlineEntry | undefined;
  private count = 0;
  private timer: NodeJS.Timeout | undefined;
  /** When the armed timer fires (Infinity: none armed). */
  private armedAt = Number.POSITIVE_INFINITY;
  private readonly sweepBound = (): void => this.sweep();
  private closed = false;

  /** A timer is armed (a ref'd one only while calls are registered). */
  get armed(): boolean {
    return this.timer !== undefined;
  }

  /** Calls registered now. */
  get size(): number {
    return this.count;
  }

  /** Registers `entry`, whose `deadline` is set; it leaves with remove() or when it expires. */
  add(entry: DeadlineEntry): void {
    if (this.closed) return;
    entry.previousDeadline = undefined;
    entry.nextDeadline = this.head;
    if (this.head !== undefined) this.head.previousDeadline = entry;
    this.head = entry;
    entry.inDeadlines = true;
    this.count += 1;
    if (entry.deadline < this.armedAt) this.arm(entry.deadline);
    // A pending call keeps the process alive, as its own timer used to; an idle session does not.
    else if (this.count === 1) this.timer?.ref();
  }

  remove(entry: DeadlineEntry): void {
    if (!entry.inDeadlines) return;
    const { previousDeadline: previous, nextDeadline: next } = entry;
    if (previous === undefined) this.head = next;
    else previous.nextDeadline = next;
    if (next !== undefined) next.previousDeadline = previous;
    entry.previousDeadline = undefined;
    entry.nextDeadline = undefined;
    entry.inDeadlines = false;
    this.count -= 1;
    if (this.count === 0) this.timer?.unref();
  }

  /** The session ended: no timer is left behind, and nothing registers any more. */
  close(): void {
    this.closed = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    this.armedAt = Number.POSITIVE_INFINITY;
    while (this.head !== undefined) this.remove(this.head);
  }

  private arm(at: number): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.armedAt = at;
    // setTimeout may fire a little early (it rounds to whole milliseconds); sweep() re-arms then.
    this.timer = setTimeout(this.sweepBound, Math.max(1, Math.ceil(at - monotonicMs())));
  }

  private sweep(): void {
    this.timer = undefined;
    this.armedAt = Number.POSITIVE_INFINITY;
    const now = monotonicMs();
    // expired() may end other listed calls (a call's inner request), so each expiry rescans from the head.
    for (let entry = this.head; entry !== undefined; ) {
      if (entry.deadline <= now) {
        this.remove(entry);
        entry.expired();
        entry = this.head;
      } else {
        entry = entry.nextDeadline;
      }
    }
    if (this.count === 0 || this.closed || this.timer !== undefined) return;
    let earliest = Number.POSITIVE_INFINITY;
    for (let entry = this.head; entry !== undefined; entry = entry.nextDeadline) earliest = Math.min(earliest, entry.deadline);
    this.arm(earliest);
  }
}
