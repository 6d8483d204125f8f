// A restartable one-shot timer for timers that restart far more often than they fire: RC's ACK
// timer and early-retransmission timer restart at every acknowledgement (thousands a second), and
// a fresh setTimeout per restart was a third of what a run of 16 KiB Reads allocated (a sampling
// heap profile: the Timeout object and its closure at every ACK). Arming only moves the deadline;
// the pending timeout, when it fires early, sleeps again for what remains. A new timeout is made
// only when the deadline moves earlier than the pending one fires, or once per expiry.

/**
 * The clock deadlines are armed by. A clock read (performance.now(), a vDSO call) costs 60-100 ns
 * here, and the requester re-arms its two deadlines at every acknowledged Read Response packet:
 * perf put the reads at 5 % of the requester's thread in 1 MiB Reads with the responder on a
 * thread of its own. While a batch of received packets is handed over (`clockBatch`), one reading
 * serves up to READS_REUSED arms: a deadline armed later in the batch counts from a reading a few
 * packets old (microseconds), against the milliseconds the timers wait, so it may fire that much
 * early, never later.
 */
const READS_REUSED = 16;
let inBatch = false;
let reading = 0;
let reusesLeft = 0;

/** Deadlines armed until `end()` may share clock readings (see READS_REUSED); the socket brackets each batch it hands over. */
export const clockBatch = {
  begin(): void {
    inBatch = true;
    reusesLeft = 0;
  },
  end(): void {
    inBatch = false;
  },
};

function armingTime(): number {
  if (!inBatch) return performance.now();
  if (reusesLeft === 0) {
    reading = performance.now();
    reusesLeft = READS_REUSED;
  }
  reusesLeft--;
  return reading;
}

/** Fires `onExpire` once the armed deadline passes, unless disarmed or re-armed later first. */
export class Deadline {
  private handle: NodeJS.Timeout | undefined;
  /** When the pending timeout fires (performance.now() milliseconds). */
  private firesAt = 0;
  /** When the deadline passes; 0 when disarmed. */
  private due = 0;

  constructor(private readonly onExpire: () => void) {}

  get armed(): boolean {
    return this.due !== 0;
  }

  /** (Re)starts the deadline `delayMs` from now. */
  arm(delayMs: number): void {
    const now = armingTime();
    this.due = now + delayMs;
    if (this.handle !== undefined) {
      // The pending timeout fires no later than the new deadline: it looks again then.
      if (this.firesAt <= this.due + 1) return;
      clearTimeout(this.handle);
    }
    this.schedule(now, delayMs);
  }

  /** Stops the deadline; the pending timeout (if any) fires into nothing. */
  disarm(): void {
    this.due = 0;
  }

  /** Stops the deadline and drops the pending timeout (the owner stops for good). */
  stop(): void {
    this.due = 0;
    if (this.handle !== undefined) clearTimeout(this.handle);
    this.handle = undefined;
  }

  private schedule(now: number, delayMs: number): void {
    this.firesAt = now + delayMs;
    this.handle = setTimeout(this.fire, delayMs);
    this.handle.unref?.();
  }

  private readonly fire = (): void => {
    this.handle = undefined;
    if (this.due === 0) return;
    const now = performance.now();
    // Timers round to milliseconds: within half of one, the deadline has come.
    if (this.due - now > 0.5) {
      this.schedule(now, this.due - now);
      return;
    }
    this.due = 0;
    this.onExpire();
  };
}
