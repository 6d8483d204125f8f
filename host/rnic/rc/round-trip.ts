// The round-trip estimate behind RC's early retransmission (requester.ts): RFC 6298's smoothed
// round trip and round-trip variation (gains 1/8 and 1/4), and the wait derived from them,
// srtt + 4 * rttvar, as TCP derives its retransmission timeout. On loopback the round trip is a
// few hundred microseconds; a fixed multiple of it with a 2 ms floor kept a requester whose last
// packets or NAK were lost idle for 2-7 ms each time (at 1 % loss about 15 times per 256 MiB),
// most of the lossy benchmark's idle time. The variation term widens the wait by itself when the
// round trip jitters (a loaded machine), where a floor would have to be set for the worst case.

/** The shortest early wait: below it a descheduled thread would retransmit for nothing. */
export const EARLY_MIN_MS = 0.5;

export class RoundTripEstimate {
  /** Smoothed round trip (ms). */
  smoothed = 0;
  /** Smoothed deviation of the samples from it (ms). */
  variation = 0;
  private samples = 0;

  /** Whether a round trip has been measured (no early wait before one is). */
  get measured(): boolean {
    return this.samples > 0;
  }

  /** A measured round trip of `ms` (from sending a new packet to the acknowledgement covering it). */
  sample(ms: number): void {
    if (this.samples++ === 0) {
      this.smoothed = ms;
      this.variation = ms / 2;
      return;
    }
    this.variation += (Math.abs(this.smoothed - ms) - this.variation) / 4;
    this.smoothed += (ms - this.smoothed) / 8;
  }

  /** How long to wait for acknowledgement progress before going back N early (ms, before backoff). */
  get earlyWait(): number {
    return Math.max(EARLY_MIN_MS, this.smoothed + 4 * this.variation);
  }
}
