// The requester's recovery from loss (requester.ts): go-back-N (rewind), the local ACK timer and
// its retry count, the early retransmission timed from the measured round trip, the RNR NAK's
// wait and its retry count. Acknowledgement progress (`advanced`) resets them.

import { psnAdd, psnCompare, RNR_TIMER_MICROS } from '../wire/ib-headers.ts';
import { WcStatus } from '../work.ts';
import { Deadline } from './deadline.ts';
import type { RcPathParameters, RcQueuePair } from './queue-pair.ts';
import type { Responses } from './requester-responses.ts';
import type { Transmitter } from './requester-transmit.ts';
import { RoundTripEstimate } from './round-trip.ts';
import { Kind, type SendQueue } from './send-queue.ts';

const UNLIMITED_RETRIES = 7;
/**
 * Early retransmission: without acknowledgement progress for the round trip's retransmission
 * wait (round-trip.ts: the larger of 4 srtt and srtt + 4 rttvar, at least 2 ms, 0.5 ms on a lossy
 * path), go back N before the ACK timer, doubling the wait each time it brings nothing. The
 * configured timer still decides failure (retry count, 'retry exceeded'); an early retransmission
 * costs no retry. A lost NAK is otherwise only recovered by the ACK timer (the responder NAKs a
 * gap once; a lost retransmission of the NAK'd packet it NAKs again when the rest of the
 * go-back-N arrives), which at 1 % loss was most of the benchmark's lossy time. Production RNICs
 * adapt their retransmission timeout to the measured round trip the same way; the wire sees
 * only retransmissions, which RC allows.
 */
const EARLY_MAX_BACKOFF = 64;
/**
 * The path counts as lossy (`lossy`) until this many PSNs are acknowledged after its last loss
 * (a NAK sequence error, an early retransmission, a timeout, a Read Response asked for again):
 * ~16 MiB at path MTU 4096, and at 1 % loss a loss comes every ~100 packets, so a lossy path
 * stays lossy.
 */
export const LOSSY_SPAN = 4096;

export class Retransmission {
  private readonly qp: RcQueuePair;
  /** Wired by Requester: the parts refer to one another. */
  transmitter!: Transmitter;
  responses!: Responses;
  private timeoutMs = 0;
  private retryCount = UNLIMITED_RETRIES;
  private rnrRetry = UNLIMITED_RETRIES;
  private retriesLeft = UNLIMITED_RETRIES;
  private rnrRetriesLeft = UNLIMITED_RETRIES;
  /** The local ACK timer (restarted at every acknowledgement: a Deadline, not a setTimeout each time). */
  private readonly ackTimer = new Deadline(() => this.expire());
  private rnrTimer: NodeJS.Timeout | undefined;
  /** The ACK timer fired; the retransmission waits for the sockets to be read once more. */
  private expiry: NodeJS.Immediate | undefined;
  /** Early retransmission: its timer, its wait's multiplier, the round trip it derives the wait from. */
  private readonly earlyTimer = new Deadline(() => this.earlyExpire());
  private earlyBackoff = 1;
  /** Time from sending a new packet to the acknowledgement covering it. */
  private readonly roundTrip = new RoundTripEstimate();
  /** The new packet being timed (-1: none; a retransmission cancels it, Karn's rule) and when it left. */
  private rttPsn = -1;
  private rttSentAt = 0;
  /** The acknowledged PSN when the path last lost a packet (`lossy`); -1: never. */
  private lostAt = -1;
  /** A gap in a Read Response already caused a rewind to this PSN (avoid one per late packet). */
  private readRewoundTo = -1;
  /**
   * The early timer sent a tail-loss probe, or waited once more where no packet could be probed,
   * and no acknowledgement has moved since: the next expiry goes back N.
   */
  private probing = false;
  /** Selective repeat (RcPathParameters): a NAKed Write packet is resent alone where it can be. */
  private selectiveRepeat = false;

  constructor(private readonly queue: SendQueue) {
    this.qp = queue.qp;
  }

  /** Takes the path's timeout and retry counts (the QP reaches RTS). */
  configure(path: RcPathParameters): void {
    this.retryCount = path.retryCount ?? UNLIMITED_RETRIES;
    this.rnrRetry = path.rnrRetry ?? UNLIMITED_RETRIES;
    this.retriesLeft = this.retryCount;
    this.rnrRetriesLeft = this.rnrRetry;
    const timeout = path.timeout ?? 14;
    this.timeoutMs = path.timeoutMs ?? (timeout === 0 ? 0 : (4.096 * 2 ** timeout) / 1000);
    this.selectiveRepeat = path.selectiveRepeat === true;
  }

  /** Every timer off (the QP leaves RTS). */
  stop(): void {
    this.ackTimer.stop();
    this.earlyTimer.stop();
    if (this.rnrTimer !== undefined) clearTimeout(this.rnrTimer);
    if (this.expiry !== undefined) clearImmediate(this.expiry);
    this.rnrTimer = undefined;
    this.expiry = undefined;
  }

  /** Acknowledged PSNs moved forward: recompute lastAcked, reset the retry budget and timer. */
  advanced(): void {
    const queue = this.queue;
    let acked = psnAdd(queue.sentEnd, -1);
    for (let index = queue.head; index < queue.wqes.length; index++) {
      const wqe = queue.wqes[index]!;
      if (!wqe.started) break;
      if (!wqe.done) {
        acked = psnAdd(wqe.firstPsn, (wqe.kind === Kind.Atomic ? 0 : wqe.received) - 1);
        break;
      }
    }
    if (psnCompare(acked, queue.lastAcked) > 0) {
      queue.lastAcked = acked;
      this.retriesLeft = this.retryCount;
      this.rnrRetriesLeft = this.rnrRetry;
      this.readRewoundTo = -1;
      this.probing = false;
      this.ackTimer.disarm();
      this.earlyTimer.disarm();
      this.earlyBackoff = 1;
      if (this.rttPsn >= 0 && psnCompare(acked, this.rttPsn) >= 0) {
        this.roundTrip.sample(performance.now() - this.rttSentAt);
        this.rttPsn = -1;
      }
    }
    this.armTimer();
  }

  /** Go-back-N: transmission restarts at `psn` (PSNs after it are resent with the same numbers). */
  rewind(psn: number): void {
    const queue = this.queue;
    this.rttPsn = -1; // what follows is resent: its acknowledgement would time nothing
    for (let index = queue.head; index < queue.wqes.length; index++) {
      const wqe = queue.wqes[index]!;
      if (!wqe.started) return;
      if (wqe.kind === Kind.Local) continue;
      const offset = psnCompare(psn, wqe.firstPsn);
      if (offset < 0 || offset >= wqe.packets) continue;
      if (wqe.done && wqe.kind !== Kind.Send && wqe.kind !== Kind.Write) return;
      queue.txIndex = index;
      queue.txPacket = wqe.kind === Kind.Atomic ? 0 : offset;
      // Later WQEs were sent already and keep their PSNs when resent.
      queue.nextPsn = psn;
      this.transmitter.scheduleTransmit();
      return;
    }
  }

  armTimer(): void {
    const queue = this.queue;
    if (this.expiry !== undefined || this.timeoutMs === 0 || !queue.running || this.rnrTimer !== undefined) return;
    if (psnCompare(queue.sentEnd, psnAdd(queue.lastAcked, 1)) <= 0) return;
    if (!this.ackTimer.armed) this.ackTimer.arm(this.timeoutMs);
    if (!this.earlyTimer.armed && this.roundTrip.measured) {
      const wait = (this.lossy ? this.roundTrip.lossyEarlyWait : this.roundTrip.earlyWait) * this.earlyBackoff;
      if (wait < this.timeoutMs) this.earlyTimer.arm(wait);
    }
  }

  /**
   * The early timer: the same double check as expire(), then, on a path that has not lost a
   * packet lately, a tail-loss probe (Transmitter.probe), or where the last packet cannot be
   * probed (a Read request, an atomic) one more, doubled, wait; on a lossy path, or when the
   * probe or the wait brought no acknowledgement by the next expiry, go back N. None spends a retry.
   */
  private earlyExpire(): void {
    this.qp.stats.earlyTimerFires++;
    const acknowledged = this.queue.lastAcked;
    setImmediate(() => {
      setImmediate(() => {
        this.qp.receiveNow();
        if (!this.queue.running || this.expiry !== undefined || this.rnrTimer !== undefined) return;
        if (this.queue.lastAcked !== acknowledged || psnCompare(this.queue.sentEnd, psnAdd(this.queue.lastAcked, 1)) <= 0) {
          this.armTimer();
          return;
        }
        this.earlyBackoff = Math.min(this.earlyBackoff * 2, EARLY_MAX_BACKOFF);
        // A path that has not lost a packet lately is probed first: with the responder on a thread
        // of its own, an ACK late by a scheduler slice fired this timer several times per 128 MiB
        // of loss-free Writes, and going back N resent a whole window the responder already held.
        if (!this.lossy && !this.probing) {
          this.probing = true;
          // Going back N over a Read has the responder answer its whole chunk again (up to 16
          // packets of responses) and an atomic replayed: on a clean path, where a late
          // response is likelier than a lost one (a responder on another thread, a loaded
          // machine: 5-7 per 256 MiB of two-thread Reads at load 11, session 11), the requester
          // first waits one doubled expiry more. A lost Read request or response tail then costs
          // that wait, once: the go-back-N after it marks the path lossy.
          if (this.transmitter.probe()) this.qp.stats.tailProbes++;
          else this.qp.stats.earlyWaits++;
        } else {
          this.qp.stats.earlyRetransmissions++;
          this.lostAt = this.queue.lastAcked;
          // Only Reads outstanding: ask again for what has not arrived of each, not for every
          // response from the oldest unacknowledged PSN on (going back N there had the responder
          // send every later chunk again: at 1 % loss most of a lossy Read row's duplicates).
          if (!this.responses.askAgainForMissingReads()) this.rewind(psnAdd(this.queue.lastAcked, 1));
        }
        // The ACK timer counts from this retransmission: it judges the peer silent only once the
        // early waits (doubling) have grown past it, i.e. failure comes at most ~2 timeouts late.
        this.ackTimer.disarm();
        this.armTimer();
      });
    });
  }

  /**
   * Timers run before the event loop reads its sockets: on a busy or starved process the ACK
   * that answers everything may already wait unread in the socket when the timer fires. Going
   * back N packets for it costs a window of retransmissions (and was most of the RoCE
   * benchmark's loss under load), so the timeout counts only if the next read of the sockets
   * (this turn's poll phase, then the ACKs the peer coalesces until its check phase) brought
   * no progress either.
   */
  private expire(): void {
    this.qp.stats.ackTimerFires++;
    const acknowledged = this.queue.lastAcked;
    this.expiry = setImmediate(() => {
      this.expiry = setImmediate(() => {
        this.expiry = undefined;
        // A link that reads on another thread may hold the ACK a moment longer: take it first.
        this.qp.receiveNow();
        if (!this.queue.running) return;
        if (this.queue.lastAcked === acknowledged) this.timedOut();
        else this.armTimer();
      });
    });
  }

  private timedOut(): void {
    const queue = this.queue;
    if (!queue.running || psnCompare(queue.sentEnd, psnAdd(queue.lastAcked, 1)) <= 0) return;
    this.qp.stats.timeouts++;
    this.lostAt = this.queue.lastAcked;
    if (this.retryCount !== UNLIMITED_RETRIES && this.retriesLeft-- <= 0) {
      queue.failAt(
        psnAdd(queue.lastAcked, 1),
        WcStatus.RetryExceededError,
        `no acknowledgement from the peer after ${this.retryCount} retransmissions (${Math.round(this.timeoutMs)} ms timeout)`,
        'connection-lost',
      );
      return;
    }
    this.rewind(psnAdd(queue.lastAcked, 1));
    this.armTimer();
  }

  /**
   * A Read Response was lost (requester-responses.ts asks for it again by itself): the path is
   * lossy, so later Reads keep the smaller Read window of a lossy path (send-queue.ts), whose
   * bursts a lossy path drops less of.
   */
  readResponseLost(): void {
    this.lostAt = this.queue.lastAcked;
  }

  /**
   * A NAK sequence error for `psn`: the packet there was lost; go back N to it, or with selective
   * repeat, where it is a MIDDLE or LAST of a Write already sent past, resend it alone and go back
   * only to the end of its Write (the responder placed the rest of that Write, but for a LAST with
   * Immediate Data, and dropped what followed it).
   */
  sequenceError(psn: number): void {
    this.lostAt = this.queue.lastAcked;
    if (this.selectiveRepeat) {
      const end = this.transmitter.resendAlone(psn);
      if (end !== undefined) {
        this.rttPsn = -1; // what follows is resent: its acknowledgement would time nothing
        if (psnCompare(end, this.queue.nextPsn) < 0) this.rewind(end);
        return;
      }
    }
    this.rewind(psn);
  }

  /** Whether the path lost a packet within the last LOSSY_SPAN acknowledged PSNs. */
  get lossy(): boolean {
    return this.lostAt >= 0 && psnCompare(this.queue.lastAcked, psnAdd(this.lostAt, LOSSY_SPAN)) < 0;
  }

  /** Whether an RNR NAK's wait is running (nothing is sent meanwhile). */
  get rnrWaiting(): boolean {
    return this.rnrTimer !== undefined;
  }

  /** A new packet with `psn` leaves: it is timed unless one is already (Karn: never a retransmission). */
  timeNew(psn: number): void {
    if (this.rttPsn >= 0) return;
    this.rttPsn = psn;
    this.rttSentAt = performance.now();
  }

  /**
   * The responder answered `psn` with RNR NAK (`syndrome` codes the wait): go back to it and
   * send again after the coded time, the ACK and early timers off meanwhile (nothing is lost),
   * or fail past the RNR retry count.
   */
  rnrNak(psn: number, syndrome: number): void {
    if (this.rnrRetry !== UNLIMITED_RETRIES && this.rnrRetriesLeft-- <= 0) {
      this.queue.failAt(psn, WcStatus.RnrRetryExceededError, `the peer answered RNR NAK beyond the RNR retry count ${this.rnrRetry}`);
      return;
    }
    this.rewind(psn);
    this.ackTimer.disarm();
    if (this.expiry !== undefined) clearImmediate(this.expiry);
    this.expiry = undefined;
    this.earlyTimer.disarm();
    if (this.rnrTimer !== undefined) clearTimeout(this.rnrTimer);
    this.rnrTimer = setTimeout(
      () => {
        this.rnrTimer = undefined;
        this.transmitter.transmitQueued();
      },
      RNR_TIMER_MICROS[syndrome & 0x1f]! / 1000,
    );
  }

  /** Go back N to `psn` once until acknowledgements move on (a response revealed a lost Atomic Acknowledge; avoid one rewind per late packet). */
  rewindOnceTo(psn: number): void {
    if (this.readRewoundTo === psn) return;
    this.readRewoundTo = psn;
    this.rewind(psn);
  }
}
