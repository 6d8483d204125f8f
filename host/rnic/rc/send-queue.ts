// The requester's send queue (requester.ts): the work requests posted and not yet completed,
// as WQEs with their PSNs and progress; where transmission stands (the next WQE, packet and PSN,
// the highest PSN sent, the highest acknowledged); the responder resources Read chunks and
// atomics hold (ORD); completion in order and the failures that end the QP. The transmitter
// (requester-transmit.ts), the retransmission (requester-retransmit.ts) and the response handling
// (requester-responses.ts) share it.

import { Access, AccessStatus, type MemoryRegion } from '../memory.ts';
import { localAccessText } from '../qp-checks.ts';
import { psnAdd, psnCompare } from '../wire/ib-headers.ts';
import { wcOpcodeFor, WcStatus, type SendWorkRequest, type Sge } from '../work.ts';
import type { RcPathParameters, RcQueuePair } from './queue-pair.ts';

export const Kind = { Send: 0, Write: 1, Read: 2, Atomic: 3, Local: 4 } as const;
export type Kind = (typeof Kind)[keyof typeof Kind];
/**
 * A Read is asked for in requests of at most this many response packets, each one responder
 * resource (so at most ORD of them are outstanding): 16 chunks (ORD's default) of 64 packets are
 * 4 MiB in flight at path MTU 4096, as iWARP keeps with 16 Reads of 256 KiB. Fewer chunks are
 * fewer Read Requests and fewer FIRST and LAST responses (their AETH makes them longer than a
 * MIDDLE, so each cuts the responder's GSO run): two-thread 256 KiB and 1 MiB Reads ran 8-13 %
 * faster at 12-15 % less CPU per GiB on both threads than with 16-packet chunks (session 15). A
 * loss costs only the missing run however long its chunk (retryRead asks for no more), so a path
 * that lost a packet lately keeps the size too, its smaller Read window (READ_WINDOW_PACKETS)
 * bounding the burst instead: 16-packet chunks there made 1 % lossy Reads 10-20 % slower
 * (four requests and four FIRST/LAST pairs per 64 packets; session 19).
 */
export const READ_CHUNK_PACKETS = 64;
/**
 * PSNs a Read chunk may reach past the oldest unacknowledged one (by default; an explicit
 * `maxUnackedPackets` bounds every operation). The PSN window exists because a loss costs
 * everything sent after it under go-back-N; a lost Read Response costs only the rest of its
 * missing run (asked for again alone), so Reads are bounded by ORD (the responder's resources)
 * and this, not by the Send/Write window: on a path that lost a packet lately 256, four chunks,
 * so 1 MiB is in flight at path MTU 4096 where the 128-PSN window held 512 KiB.
 */
const READ_WINDOW_PACKETS = 256;
/** READ_WINDOW_PACKETS on a path that has not lost a packet lately: ORD's 16 chunks. */
const CLEAN_READ_WINDOW_PACKETS = 1024;
/**
 * PSNs a Send, Write or atomic may reach past the oldest unacknowledged one (by default): 128,
 * rxe's RXE_MAX_UNACKED_PSNS, on a path that lost a packet lately (Retransmission.lossy: go-back-N
 * resends everything sent after a loss, so the window bounds what a loss costs); 512 on a path
 * that has not. 128 packets at path MTU 4096 are 512 KiB, two ACK requests (one every 64
 * packets): with the responder on a thread of its own (a deployed target), the requester sent
 * them faster than the ACK of the first came back and slept until it did, about twice per MiB,
 * each time paying a wake-up and leaving the responder a pipe that ran dry; a TCP connection's
 * window is megabytes. The IB limit on outstanding PSNs is 2^23; the number is the requester's choice.
 * 1024 on a clean path (session 23; 512 before): at 512 the two-thread 16 KiB Writes still filled
 * the window before an ACK came back, and the early timer, finding no progress for its 2 ms, probed
 * or went back N 17-36 times per row (going back N marks the path lossy: 128 packets for the next
 * 16 MiB); at 1024, 5-10 times, and 1.5-10 % more Gbit/s in six interleaved pairs (median 6 %). 1024 packets at
 * path MTU 4096 are the 4 MiB receive buffer the batched link asks for (the kernel grants twice that
 * for its bookkeeping); at 2048 the responder's socket overflowed (3.6-8.3 packets resent per MiB).
 */
const LOSSY_WINDOW_PACKETS = 128;
export const CLEAN_WINDOW_PACKETS = 1024;
/**
 * Every window is also bounded by what the link's receive buffer holds (PacketLink
 * .receiveBufferBytes, packetsFitting): a Write's packets wait in the peer's socket until its
 * thread reads them, a Read's responses in this one, and what overflows the buffer the kernel
 * drops, for go-back-N to send again. This side's own buffer stands for the peer's, which it
 * cannot see (two kbtp hosts are set up alike). A host whose net.core.rmem_max is Linux's default
 * (212,992: a socket is granted 425,984) holds ~96 packets of 4 KiB: there windows of 128 to 1024
 * resent 17-131 packets per MiB of loss-free two-thread Writes (session 23, rmem_max set to the
 * default for the runs); sized to the buffer, none, at the same Gbit/s within this VM's noise
 * (loopback drops are cheap to resend here; on a wire they cost a retransmission's round trip).
 * A packet is charged its path MTU and PACKET_CHARGE_OVER_MTU: 96 of 4 KiB fit 425,984 octets,
 * 2048 overflowed 8 MiB.
 */
const PACKET_CHARGE_OVER_MTU = 512;
/** The smallest window a small buffer leaves: below it a stream would stop at every ACK request. */
const SMALLEST_WINDOW_PACKETS = 16;

/** Packets of `pathMtu` octets a receive buffer of `bufferBytes` holds (PacketLink.receiveBufferBytes); unbounded where unknown. */
export function packetsFitting(bufferBytes: number | undefined, pathMtu: number): number {
  if (bufferBytes === undefined || !(bufferBytes > 0)) return Number.POSITIVE_INFINITY;
  return Math.max(SMALLEST_WINDOW_PACKETS, Math.floor(bufferBytes / (pathMtu + PACKET_CHARGE_OVER_MTU)));
}
/**
 * Plain RDMA Writes of up to this many packets go as one RDMA WRITE ONLY per packet
 * (requester-transmit.ts, sendsAsOnlyPackets): 16 KiB and 64 KiB Writes at path MTU 4096.
 * Each packet's RETH costs the responder a range check; past about 16 packets a Write's one
 * FIRST is cheaper than that (session 20: 256 KiB Writes as ONLY packets ran no faster).
 */
export const ONLY_PACKET_WRITES_UP_TO = 16;
export const EMPTY: Uint8Array = new Uint8Array(0);
/**
 * Spanning-packet buffers a send queue keeps for reuse at most (1 MiB at path MTU 4096): enough
 * for 256 gathered messages in flight, where a burst of thousands would otherwise stay held.
 */
const SPARE_COPIES_KEPT = 256;
const NO_SGES: readonly Sge[] = [];

export interface Wqe {
  readonly wr: SendWorkRequest;
  readonly signaled: boolean;
  readonly kind: Kind;
  readonly length: number;
  /** PSNs the message uses (a Read: one per response packet). */
  readonly packets: number;
  /** Send/Write of one SGE: the data; Read: the sink; Atomic: the 8-octet result (or empty); several SGEs: empty (see `elements`). */
  readonly local: Uint8Array;
  /**
   * A Send or Write of several SGEs: their views, in order. A packet that lies inside one is sent
   * from it, as the one-SGE case is (payloadOf); only a packet that spans two is copied, at post
   * (`spanningCopies`). Gathering the whole message into a new buffer per post made every 256 KiB
   * inline STORE of a KBTP session allocate and zero 256 KiB (session 21).
   */
  readonly elements: readonly Uint8Array[] | undefined;
  /** The message offsets of the packets that span two elements, ascending, and their copies (one path MTU of room each, from the queue's spares). */
  readonly spanningStarts: readonly number[] | undefined;
  readonly spanningCopies: readonly Uint8Array[] | undefined;
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
  /**
   * Read: response packets per request (READ_CHUNK_PACKETS), fixed when it is first sent: its
   * chunks, and the retries within them, keep one size.
   */
  chunkPackets: number;
  /** Write: sent as one RDMA WRITE ONLY per packet (requester-transmit.ts), fixed when it is first sent (a retransmission resends the same packets). */
  onlyPackets: boolean;
  /** Read: response packets that arrived past a missing one (allocated at the first such packet). */
  arrived: Uint8Array | undefined;
  /** Read: 1 where a retry asked again from this missing packet (one retry per gap; allocated at the first). */
  retried: Uint8Array | undefined;
  done: boolean;
  status: WcStatus;
  error: string | undefined;
  atomicResult: bigint | undefined;
}

/**
 * A WQE's record, reused: the queue keeps completed ones (recycle) and fills one per post, so a
 * post allocates no object of its own (about 260 octets per WR before, the RC path's largest
 * allocation). Every field is written by `post`.
 */
class WqeRecord implements Wqe {
  wr: SendWorkRequest = NO_WR;
  signaled = false;
  kind: Kind = Kind.Send;
  length = 0;
  packets = 0;
  local: Uint8Array = EMPTY;
  elements: readonly Uint8Array[] | undefined = undefined;
  spanningStarts: readonly number[] | undefined = undefined;
  spanningCopies: readonly Uint8Array[] | undefined = undefined;
  region: MemoryRegion | undefined = undefined;
  regionOffset = 0;
  remoteAddress = 0n;
  localAddress = -2;
  localError: { status: WcStatus; text: string } | undefined = undefined;
  firstPsn = 0;
  started = false;
  received = 0;
  requested = 0;
  chunkPackets = READ_CHUNK_PACKETS;
  onlyPackets = false;
  arrived: Uint8Array | undefined = undefined;
  retried: Uint8Array | undefined = undefined;
  done = false;
  status: WcStatus = WcStatus.Success;
  error: string | undefined = undefined;
  atomicResult: bigint | undefined = undefined;
  /** ORD slots that name this WQE (SendQueue.holdResource): it is not reused while any does. */
  resourceHolds = 0;
}

const NO_WR: SendWorkRequest = { wrId: 0, opcode: 'SEND' };
/** Completed WQE records a queue keeps for reuse at most. */
const SPARE_WQES_KEPT = 4096;

export class SendQueue {
  /** The WQEs from the oldest not yet reported (`head`) on; records before `head` are completed and leave in batches (completeInOrder). */
  readonly wqes: Wqe[] = [];
  head = 0;
  /** Next WQE to transmit and the packet of it; nextPsn is that packet's PSN. */
  txIndex = 0;
  txPacket = 0;
  nextPsn = 0;
  /** PSN after the highest one ever sent. */
  sentEnd = 0;
  /** Every PSN up to and including this one is acknowledged. */
  lastAcked = 0;
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
  readsOutstanding = 0;
  private mtu = 1024;
  /** The Send/Write/atomic window on a lossy path and on a clean one (LOSSY_WINDOW_PACKETS, CLEAN_WINDOW_PACKETS, or the path's one window for all). */
  window = LOSSY_WINDOW_PACKETS;
  cleanWindow = CLEAN_WINDOW_PACKETS;
  /** The windows Read chunks are admitted by, lossy and clean (READ_WINDOW_PACKETS, CLEAN_READ_WINDOW_PACKETS, or the path's one window for all). */
  readWindow = READ_WINDOW_PACKETS;
  cleanReadWindow = CLEAN_READ_WINDOW_PACKETS;
  /** Response packets a Read asks for per request: READ_CHUNK_PACKETS, or fewer where the receive buffer holds fewer (a chunk's responses come in one burst). */
  readChunkPackets = READ_CHUNK_PACKETS;
  ord = 1;
  /** RcPathParameters.onlyPacketWritesUpTo. */
  onlyPacketWritesUpTo = ONLY_PACKET_WRITES_UP_TO;
  running = false;
  /** Region and offset of the range the last `resolve` returned. */
  private resolvedRegion: MemoryRegion | undefined;
  private resolvedOffset = 0;
  /** Path-MTU buffers for the spanning packets of gathered Sends and Writes, returned when their WQE completes. */
  private readonly spareCopies: Uint8Array[] = [];
  /** Completed WQE records, for `post` to fill again (recycle). */
  private readonly spareWqes: WqeRecord[] = [];

  constructor(readonly qp: RcQueuePair) {}

  /**
   * Takes the path's MTU, windows, ORD and first PSN (the QP reaches RTS); the default windows no
   * larger than what `receiveBufferBytes` (the link's) holds.
   */
  configure(path: RcPathParameters, receiveBufferBytes?: number): void {
    this.mtu = path.pathMtu;
    const fit = packetsFitting(receiveBufferBytes, path.pathMtu);
    this.window = path.maxUnackedPackets ?? Math.min(LOSSY_WINDOW_PACKETS, fit);
    this.cleanWindow = path.maxUnackedPackets ?? Math.min(CLEAN_WINDOW_PACKETS, fit);
    this.readWindow = path.maxUnackedPackets ?? Math.min(READ_WINDOW_PACKETS, fit);
    this.cleanReadWindow = path.maxUnackedPackets ?? Math.min(CLEAN_READ_WINDOW_PACKETS, fit);
    this.readChunkPackets = Math.min(READ_CHUNK_PACKETS, fit);
    this.ord = Math.max(1, path.ord);
    this.onlyPacketWritesUpTo = path.onlyPacketWritesUpTo ?? ONLY_PACKET_WRITES_UP_TO;
    this.resourceWqes = new Array<Wqe | undefined>(this.ord).fill(undefined);
    this.resourceEnds = new Int32Array(this.ord);
    this.resourceHead = 0;
    this.readsOutstanding = 0;
    this.nextPsn = path.sendPsn & 0xffffff;
    this.sentEnd = this.nextPsn;
    this.lastAcked = psnAdd(this.nextPsn, -1);
  }

  get outstanding(): number {
    return this.wqes.length - this.head;
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
    let elements: Uint8Array[] | undefined;
    let dataLength = 0;
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
        elements = views;
        for (const view of views) dataLength += view.length;
      }
    }
    if (elements === undefined) dataLength = local.length;
    const length = kind === Kind.Atomic ? 8 : dataLength;
    if (localError === undefined && dataLength > 0x80000000) {
      localError = { status: WcStatus.LocalLengthError, text: `message of ${dataLength} octets exceeds 2^31` };
    }
    const mtu = this.mtuFor();
    let spanningStarts: number[] | undefined;
    let spanningCopies: Uint8Array[] | undefined;
    if (elements !== undefined && localError === undefined) {
      // Copied now, so every (re)transmission sends the same octets in the spanning packets.
      let at = 0;
      for (let e = 0; e + 1 < elements.length; e++) {
        at += elements[e]!.length;
        if (at % mtu === 0 || at >= length) continue;
        const start = at - (at % mtu);
        if (spanningStarts !== undefined && spanningStarts[spanningStarts.length - 1] === start) continue;
        const copy = this.spareCopy(mtu);
        gatherInto(copy, elements, start, Math.min(length, start + mtu));
        if (spanningStarts === undefined || spanningCopies === undefined) {
          spanningStarts = [];
          spanningCopies = [];
        }
        spanningStarts.push(start);
        spanningCopies.push(copy);
      }
    }
    const packets = kind === Kind.Local ? 0 : kind === Kind.Atomic ? 1 : Math.max(1, Math.ceil(length / mtu));
    const wqe = this.spareWqes.pop() ?? new WqeRecord();
    wqe.wr = wr;
    wqe.signaled = wr.signaled ?? qp.signalAll;
    wqe.kind = kind;
    wqe.length = length;
    wqe.packets = packets;
    wqe.local = local;
    wqe.elements = elements;
    wqe.spanningStarts = spanningStarts;
    wqe.spanningCopies = spanningCopies;
    wqe.region = region;
    wqe.regionOffset = regionOffset;
    // Checked at post (qp-checks) for the operations that name one; a Send's is not looked at.
    wqe.remoteAddress = kind === Kind.Write || kind === Kind.Read || kind === Kind.Atomic ? BigInt(wr.remote!.taggedOffset) : 0n;
    wqe.localError = localError;
    wqe.localAddress = -2;
    wqe.firstPsn = 0;
    wqe.started = false;
    wqe.received = 0;
    wqe.requested = 0;
    wqe.chunkPackets = READ_CHUNK_PACKETS;
    wqe.onlyPackets = false;
    wqe.arrived = undefined;
    wqe.retried = undefined;
    wqe.done = false;
    wqe.status = WcStatus.Success;
    wqe.error = undefined;
    wqe.atomicResult = undefined;
    wqe.resourceHolds = 0;
    this.wqes.push(wqe);
  }

  /**
   * Keeps completed WQEs (the first `count`, about to leave `wqes`) for reuse, but for one an ORD
   * slot still names (releaseResources frees it later; it is left to the collector). Drops what
   * each referred to, so a kept record holds no application buffer.
   */
  private recycle(count: number): void {
    const wqes = this.wqes as WqeRecord[];
    for (let index = 0; index < count; index++) {
      const wqe = wqes[index]!;
      if (wqe.resourceHolds !== 0 || this.spareWqes.length >= SPARE_WQES_KEPT) continue;
      wqe.wr = NO_WR;
      wqe.local = EMPTY;
      wqe.elements = undefined;
      wqe.spanningStarts = undefined;
      wqe.spanningCopies = undefined;
      wqe.region = undefined;
      wqe.localError = undefined;
      wqe.arrived = undefined;
      wqe.retried = undefined;
      wqe.error = undefined;
      wqe.atomicResult = undefined;
      this.spareWqes.push(wqe);
    }
  }

  /** Completes every WR still queued: failed ones with their status, the rest flushed. */
  flush(): void {
    const qp = this.qp;
    while (this.head < this.wqes.length) {
      const wqe = this.wqes[this.head++]!;
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
    this.wqes.length = 0;
    this.head = 0;
    this.txIndex = 0;
  }

  mtuFor(): number {
    return this.qp.path?.pathMtu ?? this.mtu;
  }

  holdResource(wqe: Wqe, answeredAt: number): void {
    const slot = (this.resourceHead + this.readsOutstanding) % this.ord;
    (wqe as WqeRecord).resourceHolds++;
    this.resourceWqes[slot] = wqe;
    this.resourceEnds[slot] = answeredAt;
    this.readsOutstanding++;
  }

  /** Frees the ORD slots of the oldest requests whose answers are complete, in issue order. */
  releaseResources(): void {
    while (this.readsOutstanding > 0) {
      const slot = this.resourceHead;
      const wqe = this.resourceWqes[slot]!;
      if (!wqe.done && wqe.received < this.resourceEnds[slot]!) return;
      (wqe as WqeRecord).resourceHolds--;
      this.resourceWqes[slot] = undefined;
      this.resourceHead = (slot + 1) % this.ord;
      this.readsOutstanding--;
    }
  }

  /** The WQE holding `psn` (or the oldest one) fails and the QP enters the error state. */
  failAt(psn: number, status: WcStatus, text: string, reason: 'connection-lost' | 'terminate-received' = 'terminate-received'): void {
    let target: Wqe | undefined;
    for (let index = this.head; index < this.wqes.length; index++) {
      const wqe = this.wqes[index]!;
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

  failWqe(wqe: Wqe, status: WcStatus, text: string): void {
    wqe.done = true;
    wqe.status = status;
    wqe.error = text;
    this.qp.enterError({ reason: 'terminate-sent', message: text });
  }

  /** Reports finished WQEs oldest first; a locally failed one fails the QP when its turn comes. */
  completeInOrder(): void {
    const qp = this.qp;
    while (this.head < this.wqes.length && qp.state === 'rts') {
      const wqe = this.wqes[this.head]!;
      if (wqe.localError !== undefined && !wqe.done) {
        wqe.done = true;
        wqe.status = wqe.localError.status;
        wqe.error = wqe.localError.text;
        qp.enterError({ reason: 'connection-lost', message: `local error: ${wqe.localError.text}` });
        return;
      }
      if (!wqe.done) break;
      this.head++;
      const copies = wqe.spanningCopies;
      // Acknowledged: no packet of it is sent again. (One resent before the ACK came may still
      // wait in the link's queue and go out with another WQE's octets; its ICRC, computed when it
      // was queued, no longer matches, and the responder drops a duplicate it would have ignored.)
      if (copies !== undefined) for (let c = 0; c < copies.length && this.spareCopies.length < SPARE_COPIES_KEPT; c++) this.spareCopies.push(copies[c]!);
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
    if (this.head > 256 && this.head * 2 > this.wqes.length) {
      this.recycle(this.head);
      this.wqes.splice(0, this.head);
      this.txIndex -= this.head;
      this.head = 0;
    }
  }

  private spareCopy(mtu: number): Uint8Array {
    const spare = this.spareCopies.pop();
    return spare !== undefined && spare.length >= mtu ? spare : new Uint8Array(mtu);
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

/** Copies octets `start` to `end` of the message made of `elements` to the front of `into`. */
function gatherInto(into: Uint8Array, elements: readonly Uint8Array[], start: number, end: number): void {
  let at = 0;
  for (let e = 0; e < elements.length && at < end; e++) {
    const view = elements[e]!;
    const from = Math.max(start, at);
    const to = Math.min(end, at + view.length);
    if (from < to) into.set(view.subarray(from - at, to - at), from - start);
    at += view.length;
  }
}

/**
 * Octets `start` to `start + length` of `wqe`'s message: a view of its region or of the one
 * element holding them, else (a packet spanning two elements) the copy made at post. Callers
 * ask for a spanning range only as that one packet (packetsInElement bounds runs).
 */
export function payloadOf(wqe: Wqe, start: number, length: number): Uint8Array {
  if (wqe.region !== undefined) return wqe.region.view(wqe.regionOffset + start, length);
  const elements = wqe.elements;
  if (elements === undefined) return wqe.local.subarray(start, start + length);
  let at = 0;
  for (let e = 0; e < elements.length; e++) {
    const view = elements[e]!;
    const end = at + view.length;
    if (start < end) {
      if (start + length <= end) return view.subarray(start - at, start - at + length);
      break;
    }
    at = end;
  }
  const starts = wqe.spanningStarts;
  if (starts !== undefined) {
    for (let s = 0; s < starts.length; s++) if (starts[s] === start) return wqe.spanningCopies![s]!.subarray(0, length);
  }
  throw new RangeError(`octets ${start}-${start + length} of a gathered message span two elements and are not a spanning packet`);
}

/**
 * How many packets from packet `from` on lie whole inside the element holding `from`'s first
 * octet (0 when that packet spans two): a run of them can be sent from that element's view.
 * Every packet, for a message of one SGE.
 */
export function packetsInElement(wqe: Wqe, from: number, mtu: number): number {
  const elements = wqe.elements;
  if (elements === undefined) return wqe.packets - from;
  const start = from * mtu;
  let end = 0;
  for (let e = 0; e < elements.length; e++) {
    end += elements[e]!.length;
    if (start < end) break;
  }
  if (end >= wqe.length) return wqe.packets - from;
  return Math.floor((end - start) / mtu);
}
