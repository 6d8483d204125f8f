// The round-trip estimate behind RC's early retransmission (requester.ts): RFC 6298's smoothed
// round trip and round-trip variation (gains 1/8 and 1/4), and the wait derived from them: the
// larger of 4 * srtt (as before) and srtt + 4 * rttvar (TCP's retransmission timeout), so the wait
// widens by itself when the round trip jitters (a loaded machine) and is never shorter than it was.
//
// The floor stays 2 ms on a path that has not lost a packet lately. On loopback the round trip is a few hundred microseconds, and a floor of
// 0.5 ms halved the idle time of a one-thread pair at 1 % loss (a lost NAK or retransmission
// waits for this timer, ~15 times per 256 MiB); but with the responder on a thread of its own
// (the deployed shape) an ACK is late by a scheduler slice often enough that loss-free 256 KiB
// Writes went back N early 66-109 times per run instead of 5-7, resending 8-13 % of their
// packets (session 10).

/** The shortest early wait: below it a descheduled thread would retransmit for nothing. */
export const EARLY_MIN_MS = 2;
/**
 * The same on a path that lost a packet lately (Retransmission.lossy), where the wait is what a
 * lost NAK costs (the requester has filled its window and sends nothing until it goes back N):
 * at 1 % loss that is ~20 times per 384 MiB. There a late ACK costs at most the lossy window
 * resent, which a loss costs anyway, and the clean path (the two-thread rows' case above) keeps 2 ms.
 */
export const LOSSY_EARLY_MIN_MS = 0.5;

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
    return this.earlyWaitFrom(EARLY_MIN_MS);
  }

  /** earlyWait on a path that lost a packet lately (LOSSY_EARLY_MIN_MS). */
  get lossyEarlyWait(): number {
    return this.earlyWaitFrom(LOSSY_EARLY_MIN_MS);
  }

  private earlyWaitFrom(floor: number): number {
    return Math.max(floor, 4 * this.smoothed, this.smoothed + 4 * this.variation);
  }
}
