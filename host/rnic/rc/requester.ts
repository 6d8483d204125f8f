// The requester half of an RC queue pair (roce.md §6.1, §6.4): turns send work requests into
// packets (one PSN each, path-MTU segments, a Read reserving one PSN per response packet),
// keeps at most `maxUnackedPackets` PSNs unacknowledged, completes work from ACKs (one ACK may
// cover many messages), Read Responses and Atomic Acknowledges, and recovers from loss by
// going back to the first unacknowledged PSN: on a NAK sequence error, on a gap in a Read
// Response, on an ACK past an unanswered Read, and when the local ACK timer expires.

import { Access, AccessStatus, type MemoryRegion } from '../memory.ts';
import { localAccessText } from '../qp-checks.ts';
import { psnAdd, psnCompare, RNR_TIMER_MICROS, Syndrome, type IbHeaders } from '../wire/ib-headers.ts';
import { IbOpcode } from '../wire/ib-opcodes.ts';
import { wcOpcodeFor, WcStatus, type SendWorkRequest, type Sge } from '../work.ts';
import { Deadline } from './deadline.ts';
import { RoundTripEstimate } from './round-trip.ts';
import { copyInto, moveAt, sharedAddress } from './shared-copy.ts';
import type { RcPathParameters, RcQueuePair } from './queue-pair.ts';

const Kind = { Send: 0, Write: 1, Read: 2, Atomic: 3, Local: 4 } as const;
type Kind = (typeof Kind)[keyof typeof Kind];

/** Packets sent per event-loop turn before yielding, so ACKs and other QPs get a turn. */
const PACKETS_PER_TURN = 64;
/** AckReq at least this often inside a long message (rxe: RXE_MAX_PKT_PER_ACK). */
const PACKETS_PER_ACK_REQUEST = 64;
const UNLIMITED_RETRIES = 7;
/**
 * Early retransmission: without acknowledgement progress for the round trip's retransmission
 * wait (round-trip.ts: srtt + 4 rttvar, at least 0.5 ms), go back N before the ACK timer,
 * doubling the wait each time it brings nothing. The configured timer still decides failure
 * (retry count, 'retry exceeded'); an early retransmission costs no retry. A lost NAK or a lost
 * retransmission of the NAK'd packet is otherwise only recovered by the ACK timer (the responder
 * NAKs a gap once), which at 1 % loss was most of the benchmark's lossy time. Production RNICs
 * adapt their retransmission timeout to the measured round trip the same way; the wire sees
 * only retransmissions, which RC allows.
 */
const EARLY_MAX_BACKOFF = 64;
/**
 * A Read is asked for in requests of at most this many response packets, each one responder
 * resource (so at most ORD of them are outstanding): a lost response packet then costs one
 * chunk again, not the rest of a 1 MiB Read, and the burst a responder sends stays small.
 */
const READ_CHUNK_PACKETS = 16;
/**
 * PSNs a Read chunk may reach past the oldest unacknowledged one (by default; an explicit
 * `maxUnackedPackets` bounds every operation). The PSN window exists because a loss costs
 * everything sent after it under go-back-N; a lost Read Response costs only the rest of its
 * chunk (asked for again alone), so Reads are bounded by ORD (the responder's resources) and
 * this, not by the Send/Write window: 256 is 16 chunks, ORD's default, so 1 MiB is in flight at
 * path MTU 4096 where the 128-PSN window held 512 KiB.
 */
const READ_WINDOW_PACKETS = 256;
const EMPTY: Uint8Array = new Uint8Array(0);
const NO_SGES: readonly Sge[] = [];

interface Wqe {
  readonly wr: SendWorkRequest;
  readonly signaled: boolean;
  readonly kind: Kind;
  readonly length: number;
  /** PSNs the message uses (a Read: one per response packet). */
  readonly packets: number;
  /** Send/Write: the data; Read: the sink; Atomic: the 8-octet result (or empty). */
  readonly local: Uint8Array;
  /** Where `local` lies when it is one SGE's range of a region: its segments are the region's cached views. */
  readonly region: MemoryRegion | undefined;
  readonly regionOffset: number;
  /** The remote address (RETH) as a BigInt, made once per WR. */
  readonly remoteAddress: bigint;
  /** Read: the address of `local` in shared memory for the lean path; -2 until asked, -1 none. */
  localAddress: number;
  /** A local check failed at post time: the WR completes with this status. */
  readonly localError: { status: WcStatus; text: string } | undefined;
  firstPsn: number;
  started: boolean;
  /** Read: response packets received in order; Send/Write: packets acknowledged. */
  received: number;
  /** Read: response packets asked for so far (the first transmission of each chunk counts). */
  requested: number;
  /** Read: response packets that arrived past a missing one (allocated at the first such packet). */
  arrived?: Uint8Array;
  /** Read: per chunk, the missing packet it was last asked again from (one retry per gap). */
  retried?: Int32Array;
  done: boolean;
  status: WcStatus;
  error?: string;
  atomicResult?: bigint;
}

export class Requester {
  private readonly queue: Wqe[] = [];
  private head = 0;
  /** Next WQE to transmit and the packet of it; nextPsn is that packet's PSN. */
  private txIndex = 0;
  private txPacket = 0;
  private nextPsn = 0;
  /** PSN after the highest one ever sent. */
  private sentEnd = 0;
  /** Every PSN up to and including this one is acknowledged. */
  private lastAcked = 0;
  /**
   * The responder resources this side's Read chunks and atomics hold, oldest first (a ring of
   * `ord` entries): the WQE and the packet count its answer is complete at. The responder keeps
   * its last `ird` requests and overwrites the oldest; a chunk answered out of order (past a
   * lost response of an older one) therefore frees nothing until every older one is answered,
   * or a new request would take the resource the older one's retry needs.
   */
  private resourceWqes: Array<Wqe | undefined> = [];
  private resourceEnds = new Int32Array(0);
  private resourceHead = 0;
  private readsOutstanding = 0;
  private mtu = 1024;
  private window = 128;
  /** The window Read chunks are admitted by (READ_WINDOW_PACKETS unless the path names one window for all). */
  private readWindow = READ_WINDOW_PACKETS;
  private ord = 1;
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
  private transmitScheduled = false;
  /** The last transmission turn ended at its packet budget (more to send: a stream). */
  private budgetSpent = false;
  private sinceAckRequest = 0;
  /** A gap in a Read Response already caused a rewind to this PSN (avoid one per late packet). */
  private readRewoundTo = -1;
  private running = false;
  /** Region and offset of the range the last `resolve` returned. */
  private resolvedRegion: MemoryRegion | undefined;
  private resolvedOffset = 0;

  constructor(private readonly qp: RcQueuePair) {}

  get outstanding(): number {
    return this.queue.length - this.head;
  }

  start(path: RcPathParameters): void {
    this.mtu = path.pathMtu;
    this.window = path.maxUnackedPackets ?? 128;
    this.readWindow = path.maxUnackedPackets ?? READ_WINDOW_PACKETS;
    this.ord = Math.max(1, path.ord);
    this.resourceWqes = new Array<Wqe | undefined>(this.ord).fill(undefined);
    this.resourceEnds = new Int32Array(this.ord);
    this.resourceHead = 0;
    this.readsOutstanding = 0;
    this.retryCount = path.retryCount ?? UNLIMITED_RETRIES;
    this.rnrRetry = path.rnrRetry ?? UNLIMITED_RETRIES;
    this.retriesLeft = this.retryCount;
    this.rnrRetriesLeft = this.rnrRetry;
    const timeout = path.timeout ?? 14;
    this.timeoutMs = path.timeoutMs ?? (timeout === 0 ? 0 : (4.096 * 2 ** timeout) / 1000);
    this.nextPsn = path.sendPsn & 0xffffff;
    this.sentEnd = this.nextPsn;
    this.lastAcked = psnAdd(this.nextPsn, -1);
    this.running = true;
    this.scheduleTransmit();
  }

  stop(): void {
    this.running = false;
    this.ackTimer.stop();
    this.earlyTimer.stop();
    if (this.rnrTimer !== undefined) clearTimeout(this.rnrTimer);
    if (this.expiry !== undefined) clearImmediate(this.expiry);
    this.rnrTimer = undefined;
    this.expiry = undefined;
  }

  post(wr: SendWorkRequest): void {
    const qp = this.qp;
    const sgList = wr.sgList ?? NO_SGES;
    let kind: Kind;
    switch (wr.opcode) {
      case 'RDMA_WRITE':
      case 'RDMA_WRITE_WITH_IMM':
        kind = Kind.Write;
        break;
      case 'RDMA_READ':
        kind = Kind.Read;
        break;
      case 'ATOMIC_FETCH_ADD':
      case 'ATOMIC_CMP_SWAP':
        kind = Kind.Atomic;
        break;
      case 'LOCAL_INV':
        kind = Kind.Local;
        break;
      default:
        kind = Kind.Send;
    }
    let local: Uint8Array = EMPTY;
    let region: MemoryRegion | undefined;
    let regionOffset = 0;
    let localError: Wqe['localError'];
    const required = kind === Kind.Read || kind === Kind.Atomic ? Access.LocalWrite : 0;
    if (sgList.length === 1) {
      // The common case: the region's own (cached) view, no array of views.
      const view = this.resolve(sgList[0]!, required);
      if (typeof view === 'string') localError = { status: WcStatus.LocalProtectionError, text: view };
      else {
        local = view;
        region = this.resolvedRegion;
        regionOffset = this.resolvedOffset;
      }
    } else if (sgList.length > 1) {
      const views: Uint8Array[] = [];
      for (const sge of sgList) {
        const view = this.resolve(sge, required);
        if (typeof view === 'string') {
          localError = { status: WcStatus.LocalProtectionError, text: view };
          break;
        }
        views.push(view);
      }
      if (localError === undefined) {
        // Several SGEs: gathered once, so every (re)transmission cuts the same MTU segments.
        local = new Uint8Array(views.reduce((sum, view) => sum + view.length, 0));
        let offset = 0;
        for (const view of views) {
          local.set(view, offset);
          offset += view.length;
        }
      }
    }
    const length = kind === Kind.Atomic ? 8 : local.length;
    if (localError === undefined && local.length > 0x80000000) {
      localError = { status: WcStatus.LocalLengthError, text: `message of ${local.length} octets exceeds 2^31` };
    }
    const packets = kind === Kind.Local ? 0 : kind === Kind.Atomic ? 1 : Math.max(1, Math.ceil(length / this.mtuFor()));
    this.queue.push({
      wr,
      signaled: wr.signaled ?? qp.signalAll,
      kind,
      length,
      packets,
      local,
      region,
      regionOffset,
      // Checked at post (qp-checks) for the operations that name one; a Send's is not looked at.
      remoteAddress: kind === Kind.Write || kind === Kind.Read || kind === Kind.Atomic ? BigInt(wr.remote!.taggedOffset) : 0n,
      localError,
      localAddress: -2,
      firstPsn: 0,
      started: false,
      received: 0,
      requested: 0,
      done: false,
      status: WcStatus.Success,
    });
    this.scheduleTransmit();
  }

  /** Completes every WR still queued: failed ones with their status, the rest flushed. */
  flush(): void {
    const qp = this.qp;
    while (this.head < this.queue.length) {
      const wqe = this.queue[this.head++]!;
      const failed = wqe.done && wqe.status !== WcStatus.Success;
      if (wqe.done && !failed && !wqe.signaled) continue;
      qp.pushCompletion(qp.sendCq, {
        wrId: wqe.wr.wrId,
        status: wqe.done ? wqe.status : WcStatus.WrFlushError,
        opcode: wcOpcodeFor(wqe.wr.opcode),
        qpNumber: qp.qpNumber,
        byteLength: wqe.done ? wqe.length : 0,
        ...(wqe.done ? (wqe.error === undefined ? {} : { error: wqe.error }) : { error: 'flushed: QP entered the error state' }),
      });
    }
    this.queue.length = 0;
    this.head = 0;
    this.txIndex = 0;
  }

  // --- Transmission -------------------------------------------------------------------------

  private mtuFor(): number {
    return this.qp.path?.pathMtu ?? this.mtu;
  }

  private scheduleTransmit(): void {
    if (this.transmitScheduled || !this.running) return;
    this.transmitScheduled = true;
    setImmediate(this.transmitLater);
  }

  private readonly transmitLater = (): void => {
    // A turn that used its whole packet budget continues here. A NAK may already wait in the
    // socket: the responder sent it while this thread took the packets the last turn sent. Read
    // it before sending more, or this turn's packets (up to PACKETS_PER_TURN past the gap, which
    // the responder drops) are sent only to be sent again: at 1 % loss that was most of what a
    // Write retransmitted. Only then: a turn started by a post or an ACK pays no extra read.
    // Still marked scheduled meanwhile: what the read brings schedules nothing.
    if (this.budgetSpent) {
      this.budgetSpent = false;
      if (psnCompare(this.sentEnd, psnAdd(this.lastAcked, 1)) > 0) this.qp.receiveNow();
    }
    this.transmitScheduled = false;
    this.transmitQueued();
  };

  /** Sends what the send queue holds, within the PSN window, ORD and fences, and a per-turn packet budget (the rest next turn). */
  private transmitQueued(): void {
    const qp = this.qp;
    if (!this.running || qp.state !== 'rts' || this.rnrTimer !== undefined) return;
    let budget = PACKETS_PER_TURN;
    while (budget > 0 && this.txIndex < this.queue.length) {
      const wqe = this.queue[this.txIndex]!;
      if (wqe.localError !== undefined) break; // completes (and fails the QP) once it is the oldest
      if (wqe.kind === Kind.Local) {
        if (!wqe.started) {
          wqe.started = true;
          wqe.firstPsn = this.nextPsn; // uses no PSN; keeps the PSN bookkeeping of completion simple
          wqe.done = true;
          const status = qp.memory.invalidate(wqe.wr.invalidateStag ?? 0, qp.pd);
          if (status !== AccessStatus.Ok) {
            wqe.status = WcStatus.LocalProtectionError;
            wqe.error = `LOCAL_INV of STag 0x${(wqe.wr.invalidateStag ?? 0).toString(16)}: cannot invalidate`;
          }
        }
        this.txIndex++;
        this.completeInOrder();
        continue;
      }
      const firstTime = !wqe.started;
      if (firstTime && wqe.wr.fence === true && this.readsOutstanding > 0) break;
      const newChunk = wqe.kind === Kind.Read ? this.txPacket >= wqe.requested : firstTime && wqe.kind === Kind.Atomic;
      if (newChunk && this.readsOutstanding >= this.ord) break;
      const chunkEnd = Math.min(wqe.packets, (Math.floor(this.txPacket / READ_CHUNK_PACKETS) + 1) * READ_CHUNK_PACKETS);
      // The window: a Read chunk needs its whole response range unless nothing else is unacknowledged.
      const needed = wqe.kind === Kind.Read ? chunkEnd - this.txPacket : 1;
      const unacked = psnCompare(this.nextPsn, this.lastAcked) - 1;
      if (unacked > 0 && unacked + needed > (wqe.kind === Kind.Read ? this.readWindow : this.window)) break;
      if (firstTime) {
        wqe.started = true;
        wqe.firstPsn = this.nextPsn;
        qp.stats.messagesSent++;
      }
      if (newChunk) this.holdResource(wqe, wqe.kind === Kind.Read ? chunkEnd : 1);
      if (psnCompare(this.nextPsn, this.sentEnd) < 0) qp.stats.retransmittedPackets++;
      else if (this.rttPsn < 0) {
        this.rttPsn = this.nextPsn;
        this.rttSentAt = performance.now();
      }
      if (wqe.kind === Kind.Read) {
        this.sendReadRequest(wqe, this.txPacket, chunkEnd);
        if (chunkEnd > wqe.requested) wqe.requested = chunkEnd;
        this.nextPsn = psnAdd(wqe.firstPsn, chunkEnd);
        this.txPacket = chunkEnd;
        if (chunkEnd === wqe.packets) {
          this.txIndex++;
          this.txPacket = 0;
        }
      } else if (wqe.kind === Kind.Atomic) {
        this.sendAtomic(wqe);
        this.nextPsn = psnAdd(this.nextPsn, 1);
        this.txIndex++;
        this.txPacket = 0;
      } else if (this.txPacket > 0 && this.txPacket < wqe.packets - 2 && budget > 1 && this.qp.runLimit > 1) {
        // Middle packets, two or more of them: one run to the link (the same packets, not a call
        // chain per packet). `budget` counts this one; the run takes what it sends of the rest.
        const sent = this.sendMiddleRun(wqe, unacked, budget);
        this.nextPsn = psnAdd(this.nextPsn, sent);
        this.txPacket += sent;
        budget -= sent - 1;
      } else {
        // The packet that fills the PSN window asks for an ACK: nothing can follow it until one
        // comes, and the responder acknowledges only packets that ask (without it a window
        // smaller than PACKETS_PER_ACK_REQUEST, or one whose AckReq packets were dropped after
        // a loss, waits for the ACK timer).
        this.sendSegment(wqe, this.txPacket, unacked + 2 > this.window);
        this.nextPsn = psnAdd(this.nextPsn, 1);
        if (++this.txPacket === wqe.packets) {
          this.txIndex++;
          this.txPacket = 0;
        }
      }
      if (psnCompare(this.nextPsn, this.sentEnd) > 0) this.sentEnd = this.nextPsn;
      budget--;
      this.armTimer();
    }
    if (budget === 0) {
      this.budgetSpent = true;
      this.scheduleTransmit();
    }
  }

  private sendSegment(wqe: Wqe, index: number, windowFull: boolean): void {
    const qp = this.qp;
    const mtu = this.mtuFor();
    const last = index === wqe.packets - 1;
    const first = index === 0;
    const opcode = wqe.wr.opcode;
    let code: number;
    if (wqe.kind === Kind.Write) {
      const immediate = opcode === 'RDMA_WRITE_WITH_IMM';
      if (wqe.packets === 1) code = immediate ? IbOpcode.RdmaWriteOnlyWithImmediate : IbOpcode.RdmaWriteOnly;
      else if (first) code = IbOpcode.RdmaWriteFirst;
      else if (last) code = immediate ? IbOpcode.RdmaWriteLastWithImmediate : IbOpcode.RdmaWriteLast;
      else code = IbOpcode.RdmaWriteMiddle;
    } else {
      const invalidate = opcode === 'SEND_WITH_INV' || opcode === 'SEND_WITH_SE_INV';
      if (wqe.packets === 1) code = invalidate ? IbOpcode.SendOnlyWithInvalidate : IbOpcode.SendOnly;
      else if (first) code = IbOpcode.SendFirst;
      else if (last) code = invalidate ? IbOpcode.SendLastWithInvalidate : IbOpcode.SendLast;
      else code = IbOpcode.SendMiddle;
    }
    const h = qp.headers(code, this.nextPsn);
    if (last) {
      h.solicited = wqe.wr.solicited === true || opcode === 'SEND_WITH_SE' || opcode === 'SEND_WITH_SE_INV';
      h.immediate = wqe.wr.immediate === undefined ? 0 : Number(wqe.wr.immediate & 0xffffffffn); // no BigInt made per message without one
      h.invalidateRkey = wqe.wr.invalidateStag ?? 0;
    }
    if (first && wqe.kind === Kind.Write) {
      h.virtualAddress = wqe.remoteAddress;
      h.rkey = wqe.wr.remote!.stag;
      h.dmaLength = wqe.length;
    }
    h.ackRequest = this.ackRequest(last || windowFull);
    const start = index * mtu;
    const length = Math.min(wqe.length, start + mtu) - start;
    const payload = wqe.region === undefined ? wqe.local.subarray(start, start + length) : wqe.region.view(wqe.regionOffset + start, length);
    qp.stats.payloadBytesSent += payload.length;
    qp.sendPacket(h, payload);
  }

  /**
   * Sends MIDDLE packets of a Send or Write from `txPacket` on (at least one, which the caller
   * admitted) as one run, as sendSegment would one by one: up to the message's last packet
   * (not included), the PSN window (`unacked` before the first), the turn's `budget`, the link's
   * run limit, and the next AckReq, which ends the run (every PACKETS_PER_ACK_REQUEST-th packet,
   * or the one that fills the window); a run stays all new or all retransmitted, so the
   * retransmission count and the round-trip timing see each packet as sendSegment does. Returns
   * how many packets it sent.
   */
  private sendMiddleRun(wqe: Wqe, unacked: number, budget: number): number {
    const qp = this.qp;
    const mtu = this.mtuFor();
    const index = this.txPacket;
    let count = Math.min(wqe.packets - 1 - index, budget, qp.runLimit, PACKETS_PER_ACK_REQUEST - this.sinceAckRequest);
    // Packet j of the run has unacked + j unacknowledged before it: it fits while that stays below the window.
    count = Math.min(count, this.window - unacked);
    const resent = psnCompare(this.sentEnd, this.nextPsn);
    if (resent > 0) count = Math.min(count, resent);
    count = Math.max(1, count);
    // Only the last can ask for an ACK: the counter's 64th, or the one that fills the window.
    const ackRequest = this.sinceAckRequest + count >= PACKETS_PER_ACK_REQUEST || unacked + count + 1 > this.window;
    this.sinceAckRequest = ackRequest ? 0 : this.sinceAckRequest + count;
    // The caller counted the first packet (a retransmission, or the one timed).
    if (resent > 0) qp.stats.retransmittedPackets += count - 1;
    const start = index * mtu;
    const length = count * mtu;
    const payload = wqe.region === undefined ? wqe.local.subarray(start, start + length) : wqe.region.view(wqe.regionOffset + start, length);
    qp.stats.payloadBytesSent += length;
    qp.sendRun(wqe.kind === Kind.Write ? IbOpcode.RdmaWriteMiddle : IbOpcode.SendMiddle, this.nextPsn, count, payload, mtu, ackRequest);
    return count;
  }

  private sendReadRequest(wqe: Wqe, fromPacket: number, toPacket: number): void {
    // A retried Read asks only for what has not arrived, at that packet's PSN (roce.md §6.3).
    const mtu = this.mtuFor();
    const skipped = fromPacket * mtu;
    const h = this.qp.headers(IbOpcode.RdmaReadRequest, psnAdd(wqe.firstPsn, fromPacket));
    h.virtualAddress = skipped === 0 ? wqe.remoteAddress : wqe.remoteAddress + BigInt(skipped);
    h.rkey = wqe.wr.remote!.stag;
    h.dmaLength = Math.min(wqe.length, toPacket * mtu) - skipped;
    h.ackRequest = this.ackRequest(true);
    this.qp.sendPacket(h, EMPTY);
  }

  private sendAtomic(wqe: Wqe): void {
    const fetchAdd = wqe.wr.opcode === 'ATOMIC_FETCH_ADD';
    const h = this.qp.headers(fetchAdd ? IbOpcode.FetchAdd : IbOpcode.CompareSwap, wqe.firstPsn);
    h.virtualAddress = wqe.remoteAddress;
    h.rkey = wqe.wr.remote!.stag;
    h.swapOrAdd = BigInt.asUintN(64, fetchAdd ? wqe.wr.atomic!.add! : wqe.wr.atomic!.swap!);
    h.compare = fetchAdd ? 0n : BigInt.asUintN(64, wqe.wr.atomic!.compare!);
    h.ackRequest = this.ackRequest(true);
    this.qp.sendPacket(h, EMPTY);
  }

  private ackRequest(endOfMessage: boolean): boolean {
    if (endOfMessage || ++this.sinceAckRequest >= PACKETS_PER_ACK_REQUEST) {
      this.sinceAckRequest = 0;
      return true;
    }
    return false;
  }

  // --- Responses ----------------------------------------------------------------------------

  /** An ACK/NAK, Read Response or Atomic Acknowledge from the peer's responder. */
  response(h: IbHeaders, payload: Uint8Array): void {
    const psn = h.psn;
    // Only PSNs this side sent and that are not yet acknowledged can be answered.
    if (psnCompare(psn, this.lastAcked) <= 0 || psnCompare(psn, this.sentEnd) >= 0) return;
    if (h.opcode === IbOpcode.Acknowledge) {
      // ACKs and NAKs move the acknowledged PSN in ackThrough, before an RNR NAK turns the ACK
      // timer off for its own wait.
      this.acknowledge(h, psn);
    } else {
      if (h.opcode === IbOpcode.AtomicAcknowledge) this.atomicAcknowledge(h, psn);
      else this.readResponse(h, psn, payload);
      this.releaseResources();
      // A response may complete older Writes implicitly even when it answers nothing itself (a
      // Read Response overtaking a lost Atomic Acknowledge): the acknowledged PSN follows, or the
      // ACK timer would go back to a PSN no queued WQE holds and retransmit nothing.
      this.advanced();
    }
    this.completeInOrder();
    this.scheduleTransmit();
  }

  private acknowledge(h: IbHeaders, psn: number): void {
    const type = h.syndrome & Syndrome.TypeMask;
    if (type === Syndrome.TypeAck) {
      this.ackThrough(psn, true);
      return;
    }
    this.ackThrough(psnAdd(psn, -1), false);
    if (type === Syndrome.TypeRnrNak) {
      this.qp.stats.rnrNaksReceived++;
      if (this.rnrRetry !== UNLIMITED_RETRIES && this.rnrRetriesLeft-- <= 0) {
        this.failAt(psn, WcStatus.RnrRetryExceededError, `the peer answered RNR NAK beyond the RNR retry count ${this.rnrRetry}`);
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
          this.transmitQueued();
        },
        RNR_TIMER_MICROS[h.syndrome & 0x1f]! / 1000,
      );
      return;
    }
    if (h.syndrome === Syndrome.NakPsnSequenceError) {
      this.rewind(psn);
      return;
    }
    const [status, text] =
      h.syndrome === Syndrome.NakInvalidRequest
        ? [WcStatus.RemoteInvalidRequestError, 'the peer answered NAK invalid request']
        : h.syndrome === Syndrome.NakRemoteAccessError
          ? [WcStatus.RemoteAccessError, 'the peer answered NAK remote access error']
          : h.syndrome === Syndrome.NakRemoteOperationalError
            ? [WcStatus.RemoteOperationError, 'the peer answered NAK remote operational error']
            : [WcStatus.BadResponseError, `the peer answered with reserved syndrome 0x${h.syndrome.toString(16)}`];
    this.failAt(psn, status, text);
  }

  /**
   * Everything through `psn` is acknowledged: Sends and Writes ending there complete. A Read or
   * atomic inside the range without its response means the response was lost: go back for it
   * (only for a real ACK; a NAK names its own PSN).
   */
  private ackThrough(psn: number, retryLostResponses: boolean): void {
    let progress = false;
    for (let index = this.head; index < this.queue.length; index++) {
      const wqe = this.queue[index]!;
      if (!wqe.started) break;
      if (wqe.done) continue;
      if (wqe.kind === Kind.Read || wqe.kind === Kind.Atomic) {
        if (retryLostResponses && psnCompare(wqe.firstPsn, psn) <= 0) this.rewind(psnAdd(wqe.firstPsn, wqe.received));
        break;
      }
      const acknowledged = psnCompare(psn, wqe.firstPsn) + 1;
      if (acknowledged < wqe.packets) {
        // An AckReq inside a long message: part of it is acknowledged.
        if (acknowledged > wqe.received) {
          wqe.received = acknowledged;
          progress = true;
        }
        break;
      }
      wqe.done = true;
      progress = true;
    }
    if (progress || psnCompare(psn, this.lastAcked) > 0) this.advanced();
  }

  /** Whether takeReadMiddle would place a Read Response MIDDLE with `psn` and `length` payload octets now (no effect but caching the sink's address). */
  acceptsReadMiddle(psn: number, length: number): boolean {
    const wqe = this.queue[this.head];
    if (!this.running || wqe === undefined || wqe.kind !== Kind.Read || wqe.done || !wqe.started) return false;
    const index = psnCompare(psn, wqe.firstPsn);
    if (index < wqe.received || index >= wqe.packets - 1 || index >= wqe.requested || length !== this.mtuFor() || wqe.arrived?.[index] === 1) return false;
    // Where the sink lies, looked up once per WQE (plain memory has none: the full path copies).
    if (wqe.localAddress === -2) wqe.localAddress = sharedAddress(wqe.local);
    return wqe.localAddress >= 0;
  }

  /**
   * The lean path's Read Response MIDDLE (RcQueuePair.takeMiddle): placed when it belongs to the
   * oldest outstanding WQE, a Read, has not arrived yet, is not its last packet and was asked
   * for, a full path MTU: then `response` would find the same WQE with no other effect (no older
   * Send or Write to complete, no older Read to retry), place it at the same offset and count it
   * the same way (`responseArrived`), in order or past a lost one. Past a lost one too: at 1 %
   * loss most 1 MiB Reads lose a packet, and while the lean path took only in-order packets of
   * Reads that had lost none, the full path took about 80 % of their responses. The bookkeeping
   * after it is response's own.
   */
  takeReadMiddle(psn: number, payloadAddress: number, length: number): boolean {
    if (!this.acceptsReadMiddle(psn, length)) return false;
    const wqe = this.queue[this.head]!;
    const index = psnCompare(psn, wqe.firstPsn);
    moveAt(wqe.localAddress + index * length, payloadAddress, length);
    this.qp.stats.payloadBytesReceived += length;
    this.responseArrived(wqe, index);
    this.releaseResources();
    this.advanced();
    this.completeInOrder();
    this.scheduleTransmit();
    return true;
  }

  private readResponse(h: IbHeaders, psn: number, payload: Uint8Array): void {
    // Completes the Sends and Writes before the oldest Read or atomic (implicitly acknowledged).
    if (this.oldestAwaitingResponse(psn) === undefined) return;
    const wqe = this.readAnswered(psn);
    if (wqe === undefined) return;
    const index = psnCompare(psn, wqe.firstPsn);
    if (index < wqe.received || wqe.arrived?.[index] === 1) return; // a duplicate of what already arrived
    const mtu = this.mtuFor();
    const final = index === wqe.packets - 1;
    // Each chunk (and each retried part of one) is its own response run, FIRST..LAST or ONLY;
    // the PSN fixes where the data goes, so the checks are the length and the run's end.
    const expectedLength = Math.min(mtu, wqe.length - index * mtu);
    const endsRun = h.opcode === IbOpcode.RdmaReadResponseLast || h.opcode === IbOpcode.RdmaReadResponseOnly;
    if (payload.length !== expectedLength || (final && !endsRun)) {
      this.failWqe(
        wqe,
        WcStatus.BadResponseError,
        `Read Response PSN 0x${psn.toString(16)}: opcode 0x${h.opcode.toString(16)} with ${payload.length} octets, expected ${expectedLength}${final ? ' ending the Read' : ''}`,
      );
      return;
    }
    if (h.opcode !== IbOpcode.RdmaReadResponseMiddle && (h.syndrome & Syndrome.TypeMask) !== Syndrome.TypeAck) {
      this.failWqe(wqe, WcStatus.BadResponseError, `Read Response carries syndrome 0x${h.syndrome.toString(16)}`);
      return;
    }
    copyInto(wqe.local, index * mtu, payload);
    this.qp.stats.payloadBytesReceived += payload.length;
    this.responseArrived(wqe, index);
  }

  /** Response packet `index` of the Read `wqe` (not arrived before) was placed: count it. */
  private responseArrived(wqe: Wqe, index: number): void {
    if (index > wqe.received) {
      // Past a packet that went missing: keep this one, ask for the missing ones again.
      wqe.arrived ??= new Uint8Array(wqe.packets);
      wqe.arrived[index] = 1;
      this.retryRead(wqe, index);
      return;
    }
    const arrived = wqe.arrived;
    do wqe.received++;
    while (arrived !== undefined && wqe.received < wqe.packets && arrived[wqe.received] === 1);
    if (wqe.received === wqe.packets) this.finishResponse(wqe);
  }

  /**
   * The Read a response with `psn` answers. Responses are taken in any order (the PSN fixes
   * where the data goes; Reads still complete in order), so a lost packet costs what its chunk
   * sent after it, asked for again alone, not every response sent after it (go-back-N). A
   * response past an older Read reveals what that one lost at its end: asked for at once, not
   * after the ACK timeout. An Atomic Acknowledge overtaken that way goes back N: the atomic's
   * PSN is asked again (the responder answers it from its resources, never executes it twice).
   */
  private readAnswered(psn: number): Wqe | undefined {
    for (let index = this.head; index < this.queue.length; index++) {
      const wqe = this.queue[index]!;
      if (!wqe.started) return undefined;
      if (wqe.done) continue;
      const end = psnAdd(wqe.firstPsn, wqe.packets);
      const holds = psnCompare(psn, wqe.firstPsn) >= 0 && psnCompare(psn, end) < 0;
      if (wqe.kind === Kind.Read) {
        if (holds) return wqe;
        this.retryRead(wqe, wqe.requested); // the response is past this Read: its own tail went missing
      } else if (wqe.kind === Kind.Atomic) {
        if (holds) return undefined; // a Read Response at an atomic's PSN: not ours to take
        const expected = wqe.firstPsn;
        if (this.readRewoundTo !== expected) {
          this.readRewoundTo = expected;
          this.rewind(expected);
        }
        return undefined;
      } else if (psnCompare(psnAdd(end, -1), psn) < 0) {
        // A Send or Write before the answered PSN: the responder executed it before answering.
        wqe.done = true;
      } else {
        return undefined;
      }
    }
    return undefined;
  }

  /**
   * Asks again for the packets of `wqe` before `upTo` that have not arrived and were asked for
   * already: per chunk (each is its own responder resource), from its first missing packet to
   * the chunk's end, once per missing packet.
   */
  private retryRead(wqe: Wqe, upTo: number): void {
    const limit = Math.min(upTo, wqe.requested);
    const arrived = wqe.arrived;
    let start = wqe.received;
    while (start < limit) {
      const chunk = Math.floor(start / READ_CHUNK_PACKETS);
      const chunkEnd = Math.min(wqe.requested, (chunk + 1) * READ_CHUNK_PACKETS);
      while (start < Math.min(chunkEnd, limit) && arrived !== undefined && arrived[start] === 1) start++;
      if (start >= Math.min(chunkEnd, limit)) {
        start = chunkEnd;
        continue;
      }
      wqe.retried ??= new Int32Array(Math.ceil(wqe.packets / READ_CHUNK_PACKETS)).fill(-1);
      if (wqe.retried[chunk] !== start) {
        wqe.retried[chunk] = start;
        this.qp.stats.retransmittedPackets++;
        this.sendReadRequest(wqe, start, chunkEnd);
      }
      start = chunkEnd;
    }
  }

  private atomicAcknowledge(h: IbHeaders, psn: number): void {
    const wqe = this.oldestAwaitingResponse(psn);
    if (wqe === undefined || wqe.kind !== Kind.Atomic || wqe.firstPsn !== psn) return;
    if ((h.syndrome & Syndrome.TypeMask) !== Syndrome.TypeAck) {
      this.failWqe(wqe, WcStatus.BadResponseError, `Atomic Acknowledge carries syndrome 0x${h.syndrome.toString(16)}`);
      return;
    }
    wqe.atomicResult = h.originalData;
    if (wqe.local.length === 8) {
      // The original value lands in the requester's buffer in host order, as the target held it.
      new DataView(wqe.local.buffer, wqe.local.byteOffset, 8).setBigUint64(0, h.originalData, true);
    }
    wqe.received = 1;
    this.finishResponse(wqe);
  }

  /** Completes the Sends/Writes a response implicitly acknowledges and returns the WQE it answers. */
  private oldestAwaitingResponse(psn: number): Wqe | undefined {
    for (let index = this.head; index < this.queue.length; index++) {
      const wqe = this.queue[index]!;
      if (!wqe.started) return undefined;
      if (wqe.done) continue;
      if (wqe.kind === Kind.Read || wqe.kind === Kind.Atomic) return wqe;
      if (psnCompare(psnAdd(wqe.firstPsn, wqe.packets - 1), psn) >= 0) return undefined;
      wqe.done = true;
    }
    return undefined;
  }

  private finishResponse(wqe: Wqe): void {
    wqe.done = true;
  }

  private holdResource(wqe: Wqe, answeredAt: number): void {
    const slot = (this.resourceHead + this.readsOutstanding) % this.ord;
    this.resourceWqes[slot] = wqe;
    this.resourceEnds[slot] = answeredAt;
    this.readsOutstanding++;
  }

  /** Frees the ORD slots of the oldest requests whose answers are complete, in issue order. */
  private releaseResources(): void {
    while (this.readsOutstanding > 0) {
      const slot = this.resourceHead;
      const wqe = this.resourceWqes[slot]!;
      if (!wqe.done && wqe.received < this.resourceEnds[slot]!) return;
      this.resourceWqes[slot] = undefined;
      this.resourceHead = (slot + 1) % this.ord;
      this.readsOutstanding--;
    }
  }

  /** Acknowledged PSNs moved forward: recompute lastAcked, reset the retry budget and timer. */
  private advanced(): void {
    let acked = psnAdd(this.sentEnd, -1);
    for (let index = this.head; index < this.queue.length; index++) {
      const wqe = this.queue[index]!;
      if (!wqe.started) break;
      if (!wqe.done) {
        acked = psnAdd(wqe.firstPsn, (wqe.kind === Kind.Atomic ? 0 : wqe.received) - 1);
        break;
      }
    }
    if (psnCompare(acked, this.lastAcked) > 0) {
      this.lastAcked = acked;
      this.retriesLeft = this.retryCount;
      this.rnrRetriesLeft = this.rnrRetry;
      this.readRewoundTo = -1;
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
  private rewind(psn: number): void {
    this.rttPsn = -1; // what follows is resent: its acknowledgement would time nothing
    for (let index = this.head; index < this.queue.length; index++) {
      const wqe = this.queue[index]!;
      if (!wqe.started) return;
      if (wqe.kind === Kind.Local) continue;
      const offset = psnCompare(psn, wqe.firstPsn);
      if (offset < 0 || offset >= wqe.packets) continue;
      if (wqe.done && wqe.kind !== Kind.Send && wqe.kind !== Kind.Write) return;
      this.txIndex = index;
      this.txPacket = wqe.kind === Kind.Atomic ? 0 : offset;
      // Later WQEs were sent already and keep their PSNs when resent.
      this.nextPsn = psn;
      this.scheduleTransmit();
      return;
    }
  }

  private armTimer(): void {
    if (this.expiry !== undefined || this.timeoutMs === 0 || !this.running || this.rnrTimer !== undefined) return;
    if (psnCompare(this.sentEnd, psnAdd(this.lastAcked, 1)) <= 0) return;
    if (!this.ackTimer.armed) this.ackTimer.arm(this.timeoutMs);
    if (!this.earlyTimer.armed && this.roundTrip.measured) {
      const wait = this.roundTrip.earlyWait * this.earlyBackoff;
      if (wait < this.timeoutMs) this.earlyTimer.arm(wait);
    }
  }

  /** The early timer: the same double check as expire(), then go back N without spending a retry. */
  private earlyExpire(): void {
    const acknowledged = this.lastAcked;
    setImmediate(() => {
      setImmediate(() => {
        this.qp.receiveNow();
        if (!this.running || this.expiry !== undefined || this.rnrTimer !== undefined) return;
        if (this.lastAcked !== acknowledged || psnCompare(this.sentEnd, psnAdd(this.lastAcked, 1)) <= 0) {
          this.armTimer();
          return;
        }
        this.qp.stats.earlyRetransmissions++;
        this.earlyBackoff = Math.min(this.earlyBackoff * 2, EARLY_MAX_BACKOFF);
        this.rewind(psnAdd(this.lastAcked, 1));
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
    const acknowledged = this.lastAcked;
    this.expiry = setImmediate(() => {
      this.expiry = setImmediate(() => {
        this.expiry = undefined;
        // A link that reads on another thread may hold the ACK a moment longer: take it first.
        this.qp.receiveNow();
        if (!this.running) return;
        if (this.lastAcked === acknowledged) this.timedOut();
        else this.armTimer();
      });
    });
  }

  private timedOut(): void {
    if (!this.running || psnCompare(this.sentEnd, psnAdd(this.lastAcked, 1)) <= 0) return;
    this.qp.stats.timeouts++;
    if (this.retryCount !== UNLIMITED_RETRIES && this.retriesLeft-- <= 0) {
      this.failAt(
        psnAdd(this.lastAcked, 1),
        WcStatus.RetryExceededError,
        `no acknowledgement from the peer after ${this.retryCount} retransmissions (${Math.round(this.timeoutMs)} ms timeout)`,
        'connection-lost',
      );
      return;
    }
    this.rewind(psnAdd(this.lastAcked, 1));
    this.armTimer();
  }

  /** The WQE holding `psn` (or the oldest one) fails and the QP enters the error state. */
  private failAt(psn: number, status: WcStatus, text: string, reason: 'connection-lost' | 'terminate-received' = 'terminate-received'): void {
    let target: Wqe | undefined;
    for (let index = this.head; index < this.queue.length; index++) {
      const wqe = this.queue[index]!;
      if (wqe.done) continue;
      target ??= wqe;
      if (wqe.started && psnCompare(psn, wqe.firstPsn) >= 0 && psnCompare(psn, psnAdd(wqe.firstPsn, Math.max(1, wqe.packets))) < 0) {
        target = wqe;
        break;
      }
    }
    if (target !== undefined) {
      target.done = true;
      target.status = status;
      target.error = text;
    }
    this.qp.enterError({ reason, message: text });
  }

  private failWqe(wqe: Wqe, status: WcStatus, text: string): void {
    wqe.done = true;
    wqe.status = status;
    wqe.error = text;
    this.qp.enterError({ reason: 'terminate-sent', message: text });
  }

  /** Reports finished WQEs oldest first; a locally failed one fails the QP when its turn comes. */
  completeInOrder(): void {
    const qp = this.qp;
    while (this.head < this.queue.length && qp.state === 'rts') {
      const wqe = this.queue[this.head]!;
      if (wqe.localError !== undefined && !wqe.done) {
        wqe.done = true;
        wqe.status = wqe.localError.status;
        wqe.error = wqe.localError.text;
        qp.enterError({ reason: 'connection-lost', message: `local error: ${wqe.localError.text}` });
        return;
      }
      if (!wqe.done) break;
      this.head++;
      if (this.txIndex < this.head) {
        // A rewound transmission point passed by an acknowledgement resumes after that WQE.
        this.txIndex = this.head;
        this.txPacket = 0;
        this.nextPsn = psnAdd(wqe.firstPsn, wqe.packets);
      }
      if (wqe.signaled || wqe.status !== WcStatus.Success) {
        // From its fields into the CQ's ring: no completion object per WR.
        const record = qp.addCompletion(qp.sendCq, wqe.wr.wrId, wqe.status, wcOpcodeFor(wqe.wr.opcode), wqe.length, wqe.error);
        if (record !== undefined && wqe.atomicResult !== undefined) record.atomicResult = wqe.atomicResult;
      }
    }
    if (this.head > 256 && this.head * 2 > this.queue.length) {
      this.queue.splice(0, this.head);
      this.txIndex -= this.head;
      this.head = 0;
    }
  }

  private resolve(sge: Sge, required: number): Uint8Array | string {
    const memory = this.qp.memory;
    const status = memory.checkLocal(sge.lkey, this.qp.pd, required, sge.offset, sge.length);
    if (status !== AccessStatus.Ok) return localAccessText(status, sge);
    const region = memory.resolvedRegion!;
    this.resolvedRegion = region;
    this.resolvedOffset = memory.resolvedOffset;
    return region.view(memory.resolvedOffset, sge.length);
  }
}
