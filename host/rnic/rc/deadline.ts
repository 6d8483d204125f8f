// A restartable one-shot timer for timers that restart far more often than they fire: RC's ACK
// timer and early-retransmission timer restart at every acknowledgement (thousands a second), and
// a fresh setTimeout per restart was a third of what a run of 16 KiB Reads allocated (a sampling
// heap profile: the Timeout object and its closure at every ACK). Arming only moves the deadline;
// the pending timeout, when it fires early, sleeps again for what remains. A new timeout is made
// only when the deadline moves earlier than the pending one fires, or once per expiry.

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
    const now = performance.now();
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
