// An InfiniBand Reliable Connected queue pair carried by RoCEv2 (roce.md §6): the same verbs
// surface as the iWARP QueuePair (postSend/postRecv, CQs, MRs addressed by rkey and virtual
// address = the region's tagged offset), over a PacketLink instead of a TCP stream. This file
// holds the QP's state, posting, completion and the move to the error state with its flush;
// the requester (send queue, segmentation, ACK/NAK handling, retransmission) and the responder
// (inbound requests, responder resources, duplicates, ACK generation) are their own files.

import type { CompletionQueue } from '../cq.ts';
import { RnicError } from '../errors.ts';
import type { MemoryTable } from '../memory.ts';
import type { NicObserver } from '../nic-observer.ts';
import type { DisconnectInfo, QpState, QueuePairStatistics } from '../qp.ts';
import { checkSendRequest } from '../qp-checks.ts';
import { QueuePairAttributes, type QueuePairOptions } from '../qp-attributes.ts';
import { ViewCache } from '../view-cache.ts';
import { encodeHeaders, IbHeaders, padFor } from '../wire/ib-headers.ts';
import { AETH_LENGTH, BTH_LENGTH, headerLength, IbOpcode, ICRC_LENGTH, OPCODES, RETH_LENGTH } from '../wire/ib-opcodes.ts';
import type { ReceiveWorkRequest, SendWorkRequest, WorkCompletion } from '../work.ts';
import { wcOpcodeFor, type WcOpcode, WcStatus } from '../work.ts';
import type { PacketLink, PacketRun, PeerAddress } from './link.ts';
import { Requester } from './requester.ts';
import { Responder } from './responder.ts';

export const PATH_MTUS = [256, 512, 1024, 2048, 4096] as const;
/**
 * Packets one `sendRun` carries at most: the middle packets of a message go to the link in runs
 * (a Write's between its AckReq packets, every 64th: requester.ts).
 */
export const RUN_PACKETS = 64;
const EMPTY_PAYLOAD = new Uint8Array(0);
/** Offsets of a receive ring whose payload views a QP keeps (a 64-slot ring of GRO runs uses a few hundred). */
const RING_VIEW_OFFSETS = 4096;
export type PathMtu = (typeof PATH_MTUS)[number];

/** The same queue sizes and limits as an iWARP QP; `ird` is max_dest_rd_atomic (responder
 * resources), `ord` max_rd_atomic. */
export type RcQueuePairOptions = QueuePairOptions;

/** What connection setup agreed on (ibv_modify_qp to RTR and RTS). */
export interface RcPathParameters {
  peer: PeerAddress;
  /** The peer's QP number. */
  destQpNumber: number;
  /** First PSN this side sends (sq_psn). */
  sendPsn: number;
  /** First PSN the peer sends (rq_psn). */
  receivePsn: number;
  pathMtu: PathMtu;
  /** Negotiated responder resources and initiator depth. */
  ird: number;
  ord: number;
  /** Local ACK timeout as the IB exponent: 4.096 µs * 2^timeout; 0 = none (default 14, ~67 ms). */
  timeout?: number;
  /** Or directly in milliseconds (overrides `timeout`). */
  timeoutMs?: number;
  /** Retransmissions after a timeout before the WQE fails; 7 = unlimited (default 7, as rc_pingpong). */
  retryCount?: number;
  /** RNR retries; 7 = unlimited (default 7). */
  rnrRetry?: number;
  /** RNR timer code this side's RNR NAKs carry (default 12, 0.64 ms). */
  minRnrTimer?: number;
  /**
   * PSNs sent and not yet acknowledged at most (default for Sends, Writes and atomics 512, or 128,
   * rxe's RXE_MAX_UNACKED_PSNS, on a path that lost a packet lately: send-queue.ts; Read chunks by
   * default up to 256, as ORD allows). Given, it bounds every operation.
   */
  maxUnackedPackets?: number;
  pkey?: number;
  /**
   * Both ends are kbtp RNICs that said so at setup (setup.ts): the responder places Write packets
   * past a lost one, and the requester resends the lost packet alone (responder.ts, Transmitter.resendAlone).
   */
  selectiveRepeat?: boolean;
  /**
   * The longest plain RDMA Write, in packets, this side sends as one RDMA WRITE ONLY per packet
   * (requester-transmit.ts; default 16, 1 never).
   */
  onlyPacketWritesUpTo?: number;
  /**
   * Both ends are kbtp RNICs that said so at setup (setup.ts): the responder answers a short Read
   * with one READ RESPONSE ONLY per packet (responder.ts), which the requester takes as any
   * response (its PSN says where the data goes).
   */
  onlyReadResponses?: boolean;
}

interface RcQueuePairEvents {
  established: [];
  disconnected: [DisconnectInfo];
}

/** Receive WQE as the responder fills it. */
export interface RcRecvWqe {
  readonly wr: ReceiveWorkRequest;
  readonly capacity: number;
}

export interface RcStatistics extends QueuePairStatistics {
  packetsSent: number;
  packetsReceived: number;
  retransmittedPackets: number;
  timeouts: number;
  duplicatesReceived: number;
  sequenceNaksSent: number;
  rnrNaksSent: number;
  rnrNaksReceived: number;
  acksSent: number;
  /** Positive ACKs (Acknowledge packets with an ACK syndrome) the requester took, and NAK sequence errors. */
  acksReceived: number;
  sequenceNaksReceived: number;
  /** Go-back-N retransmissions started by the early timer (before the ACK timeout; no retry spent). */
  earlyRetransmissions: number;
  /** Tail-loss probes the early timer sent instead, on a path that had not lost a packet lately (one packet each). */
  tailProbes: number;
  /**
   * Early expiries on such a path whose last packet could not be probed (a Read request, an
   * atomic) that waited one doubled expiry more instead of going back N.
   */
  earlyWaits: number;
  /** Expiries of the early-retransmission timer and of the ACK timer, whether or not the check after them went back N. */
  earlyTimerFires: number;
  ackTimerFires: number;
  /** Times the requester settled the Read Responses the lean path placed (once per turn, or per completed Read). */
  leanSettles: number;
  /** Selective repeat: packets the requester resent alone for a NAK, and Write packets the responder placed past a lost one. */
  resentAlone: number;
  placedPastGap: number;
}

export class RcQueuePair extends QueuePairAttributes<RcQueuePairEvents> {
  readonly transport = 'roce' as const;
  state: QpState = 'idle';
  disconnectInfo: DisconnectInfo | undefined;
  /** Private data the peer sent during connection setup. */
  peerPrivateData: Uint8Array = new Uint8Array(0);
  path: RcPathParameters | undefined;
  readonly stats: RcStatistics = {
    messagesSent: 0,
    messagesReceived: 0,
    payloadBytesSent: 0,
    payloadBytesReceived: 0,
    packetsSent: 0,
    packetsReceived: 0,
    retransmittedPackets: 0,
    timeouts: 0,
    duplicatesReceived: 0,
    sequenceNaksSent: 0,
    rnrNaksSent: 0,
    rnrNaksReceived: 0,
    acksSent: 0,
    acksReceived: 0,
    sequenceNaksReceived: 0,
    earlyRetransmissions: 0,
    tailProbes: 0,
    earlyWaits: 0,
    earlyTimerFires: 0,
    ackTimerFires: 0,
    leanSettles: 0,
    resentAlone: 0,
    placedPastGap: 0,
  };

  readonly requester: Requester;
  readonly responder: Responder;
  private link: PacketLink | undefined;
  private readonly recvQueue: RcRecvWqe[] = [];
  private recvHead = 0;
  private readonly encodeScratch = new IbHeaders();
  /** Header and trailer of the packet being sent (the longest IB header is far below 64 octets). */
  private readonly packetScratch = new Uint8Array(64 + 8);
  /** By header length: the header's view of packetScratch, then the trailer's by pad (1 + pad). */
  private readonly packetViews: Uint8Array[][] = [];
  /** The run of packets `sendRun` fills and hands to the link (its headers and trailers room for RUN_PACKETS). */
  private readonly run: PacketRun = packetRun(BTH_LENGTH, new Uint8Array(RUN_PACKETS * ICRC_LENGTH));
  /** The runs `sendReadResponseOnlyRun` (a BTH and an AETH each) and `sendWriteOnlyRun` (a BTH and a RETH each) fill; the trailers are the first run's. */
  private readonly readResponseOnlyRun: PacketRun = packetRun(BTH_LENGTH + AETH_LENGTH, this.run.trailers);
  private readonly writeOnlyRun: PacketRun = packetRun(BTH_LENGTH + RETH_LENGTH, this.run.trailers);
  private readonly disconnectWaiters: Array<(info: DisconnectInfo) => void> = [];
  /** The receive ring whose payload views are kept, and the views (payloadView). */
  private ringViewsOf: ArrayBufferLike | undefined;
  private ringViews: ViewCache | undefined;
  private readonly establishedWaiters: Array<{ resolve: () => void; reject: (error: Error) => void }> = [];
  /** Called once when the QP leaves RTS (the connection layer closes its side channel). */
  onLeaveRts: ((info: DisconnectInfo) => void) | undefined;

  constructor(
    readonly qpNumber: number,
    readonly memory: MemoryTable,
    readonly observer: NicObserver | undefined,
    options: RcQueuePairOptions,
    private readonly onDestroyed: (qp: RcQueuePair) => void,
  ) {
    super(options);
    this.requester = new Requester(this);
    this.responder = new Responder(this);
  }

  get statistics(): RcStatistics {
    return { ...this.stats };
  }

  get remoteAddress(): string | undefined {
    return this.path?.peer.address;
  }

  get remotePort(): number | undefined {
    return this.path?.peer.port;
  }

  get postedReceives(): number {
    return this.recvQueue.length - this.recvHead;
  }

  get outstandingSends(): number {
    return this.requester.outstanding;
  }

  // --- Posting -------------------------------------------------------------------------------

  postSend(wr: SendWorkRequest): void {
    checkSendRequest(wr, this.maxSge);
    if (wr.opcode === 'RDMA_WRITE_WITH_IMM' && (wr.immediate ?? 0n) > 0xffffffffn) {
      throw new RnicError('EINVAL', 'RC Immediate Data is 32 bits (ImmDt); immediate must be below 2^32');
    }
    if (wr.atomic?.addMask !== undefined && wr.atomic.addMask !== 0n) {
      throw new RnicError('EINVAL', 'IB atomics are not masked: addMask is an iWARP (RFC 7306) extension');
    }
    if ((wr.atomic?.compareMask ?? ALL_ONES) !== ALL_ONES || (wr.atomic?.swapMask ?? ALL_ONES) !== ALL_ONES) {
      throw new RnicError('EINVAL', 'IB atomics are not masked: compareMask/swapMask are an iWARP (RFC 7306) extension');
    }
    if (this.state === 'idle' || this.state === 'connecting') {
      throw new RnicError('ENOTCONN', `QP ${this.qpNumber} is not connected (state ${this.state}); post sends once connect/accept resolved`);
    }
    if (this.state === 'error') {
      // Verbs semantics: work posted to a QP in the error state completes flushed.
      this.pushCompletion(this.sendCq, {
        wrId: wr.wrId,
        status: WcStatus.WrFlushError,
        opcode: wcOpcodeFor(wr.opcode),
        qpNumber: this.qpNumber,
        byteLength: 0,
        error: 'QP is in the error state',
      });
      return;
    }
    if (this.requester.outstanding >= this.maxSendWr) {
      throw new RnicError('ENOMEM', `send queue of QP ${this.qpNumber} is full (${this.maxSendWr} outstanding)`);
    }
    this.requester.post(wr);
  }

  postRecv(wr: ReceiveWorkRequest): void {
    if (typeof wr !== 'object' || wr === null || !Array.isArray(wr.sgList)) throw new RnicError('EINVAL', 'postRecv needs { wrId, sgList }');
    if (wr.sgList.length > this.maxSge) throw new RnicError('EINVAL', `${wr.sgList.length} SGEs exceed maxSge ${this.maxSge}`);
    if (this.postedReceives >= this.maxRecvWr) throw new RnicError('ENOMEM', `receive queue of QP ${this.qpNumber} is full (${this.maxRecvWr} posted)`);
    let capacity = 0;
    for (const sge of wr.sgList) {
      if (!Number.isInteger(sge.lkey) || !Number.isSafeInteger(sge.offset) || sge.offset < 0 || !Number.isSafeInteger(sge.length) || sge.length < 0) {
        throw new RnicError('EINVAL', `SGE ${JSON.stringify(sge)} needs integer lkey, offset >= 0 and length >= 0`);
      }
      capacity += sge.length;
    }
    if (this.state === 'error') {
      this.pushCompletion(this.recvCq, {
        wrId: wr.wrId,
        status: WcStatus.WrFlushError,
        opcode: 'RECV',
        qpNumber: this.qpNumber,
        byteLength: 0,
        error: 'QP is in the error state',
      });
      return;
    }
    this.recvQueue.push({ wr, capacity });
  }

  /** The responder takes the oldest posted receive, or undefined (RNR). */
  takeReceive(): RcRecvWqe | undefined {
    if (this.recvHead >= this.recvQueue.length) return undefined;
    const wqe = this.recvQueue[this.recvHead++]!;
    if (this.recvHead > 1024 && this.recvHead * 2 > this.recvQueue.length) {
      this.recvQueue.splice(0, this.recvHead);
      this.recvHead = 0;
    }
    return wqe;
  }

  // --- Connection ----------------------------------------------------------------------------

  beginConnecting(): void {
    if (this.state !== 'idle') throw new RnicError('EISCONN', `QP ${this.qpNumber} is already ${this.state}`);
    this.state = 'connecting';
  }

  /** Moves the QP to RTR and RTS with the agreed path; packets flow from now on. */
  activate(link: PacketLink, path: RcPathParameters): void {
    if (this.state !== 'connecting' && this.state !== 'idle') throw new RnicError('EISCONN', `QP ${this.qpNumber} is already ${this.state}`);
    if (!PATH_MTUS.includes(path.pathMtu)) throw new RnicError('EINVAL', `path MTU ${path.pathMtu} is not one of ${PATH_MTUS.join(', ')}`);
    this.link = link;
    this.path = path;
    this.requester.start(path, link.receiveBufferBytes);
    this.responder.start(path);
    this.state = 'rts';
    this.emit('established');
    for (const waiter of this.establishedWaiters.splice(0)) waiter.resolve();
  }

  connectFailed(info: DisconnectInfo): void {
    this.state = 'idle'; // so that enterError flushes whatever was posted and tells every waiter
    this.enterError(info);
  }

  whenEstablished(): Promise<void> {
    if (this.state === 'rts') return Promise.resolve();
    if (this.state === 'error') return Promise.reject(new RnicError('ECONNRESET', this.disconnectInfo?.message ?? 'QP is in the error state'));
    return new Promise((resolve, reject) => this.establishedWaiters.push({ resolve, reject }));
  }

  whenDisconnected(): Promise<DisconnectInfo> {
    if (this.disconnectInfo !== undefined && this.state === 'error') return Promise.resolve(this.disconnectInfo);
    return new Promise((resolve) => this.disconnectWaiters.push(resolve));
  }

  /** Ends the connection: outstanding work is flushed, the peer is told through the side channel. */
  disconnect(): void {
    this.enterError({ reason: 'local-close', message: 'disconnected locally' });
  }

  destroy(): void {
    if (this.state !== 'error') this.enterError({ reason: 'local-close', message: 'QP destroyed' });
    this.onDestroyed(this);
  }

  /** Moves the QP to the error state: every outstanding WR completes flushed (after `failing`). */
  enterError(info: DisconnectInfo): void {
    if (this.state === 'error') return;
    const wasConnected = this.state === 'rts';
    this.state = 'error';
    this.disconnectInfo = info;
    this.requester.stop();
    this.responder.stop();
    this.requester.flush();
    while (this.recvHead < this.recvQueue.length) {
      const wqe = this.recvQueue[this.recvHead++]!;
      this.pushCompletion(this.recvCq, {
        wrId: wqe.wr.wrId,
        status: WcStatus.WrFlushError,
        opcode: 'RECV',
        qpNumber: this.qpNumber,
        byteLength: 0,
        error: 'flushed: QP entered the error state',
      });
    }
    this.recvQueue.length = 0;
    this.recvHead = 0;
    for (const waiter of this.establishedWaiters.splice(0)) waiter.reject(new RnicError('ECONNRESET', info.message));
    if (wasConnected || this.onLeaveRts !== undefined) this.onLeaveRts?.(info);
    this.onLeaveRts = undefined;
    this.emit('disconnected', info);
    for (const waiter of this.disconnectWaiters.splice(0)) waiter(info);
  }

  // --- Shared by requester and responder -----------------------------------------------------

  /** Routes one decoded inbound packet (ICRC already verified) to the requester or responder. */
  receive(h: IbHeaders, packet: Uint8Array): void {
    if (this.state !== 'rts') return;
    this.stats.packetsReceived++;
    const payload = this.payloadView(packet, h.payloadOffset, h.payloadLength);
    try {
      if (h.opcode >= 0x0d && h.opcode <= 0x12) this.requester.response(h, payload);
      else this.responder.request(h, payload);
    } catch (error) {
      // A bug must end this QP, never the process or another QP.
      this.enterError({ reason: 'connection-lost', message: `internal error: ${error instanceof Error ? error.message : String(error)}` });
    }
  }

  /**
   * Whether `takeLean` would take such a packet now (no effect): asked before its ICRC is
   * computed, so that a packet the full path gets anyway (past a gap, a duplicate) has its ICRC
   * computed once.
   */
  acceptsLean(opcode: number, psn: number, length: number, dmaLength: number): boolean {
    if (this.state !== 'rts') return false;
    if (opcode === IbOpcode.RdmaWriteFirst || opcode === IbOpcode.RdmaWriteOnly)
      return this.responder.acceptsWriteStart(opcode === IbOpcode.RdmaWriteOnly, psn, length, dmaLength);
    if (opcode === IbOpcode.RdmaReadRequest) return this.responder.acceptsReadRequest(psn, length, dmaLength);
    if (opcode === IbOpcode.SendMiddle || opcode === IbOpcode.SendLast) return this.responder.acceptsSend(opcode === IbOpcode.SendLast, psn, length);
    return opcode === IbOpcode.RdmaWriteMiddle || opcode === IbOpcode.RdmaWriteLast
      ? this.responder.acceptsWrite(opcode === IbOpcode.RdmaWriteLast, psn, length)
      : this.requester.acceptsReadResponse(opcode, psn, length);
  }

  /**
   * The lean path's drop (endpoint.ts): a Send or Write request with `psn` past a gap the
   * responder NAK'd, which `receive` would drop with no other effect; counted as received, as
   * there.
   */
  dropPastGap(psn: number): boolean {
    if (this.state !== 'rts' || !this.responder.dropsPastGap(psn)) return false;
    this.stats.packetsReceived++;
    return true;
  }

  /**
   * The lean receive path (endpoint.ts): a Write packet (`opcode`) or Read Request for the
   * responder or a Read Response for the requester, its payload (none for a Read Request) at raw
   * address `payloadAddress` in the link's receive area, its RETH (a Write FIRST or ONLY, a Read
   * Request) at `rethAt` in `reth`, ICRC and every endpoint check passed. Taken (true) only when it
   * is exactly the packet the full path would take next with no other effect than placing or
   * answering it and what the full path does after (the next PSN of the Write in progress or the
   * next request; a Read Response of an outstanding Read); otherwise false, and the packet goes
   * through `receive`.
   */
  takeLean(opcode: number, psn: number, ackRequest: boolean, payloadAddress: number, length: number, reth: Uint8Array, rethAt: number): boolean {
    if (this.state !== 'rts') return false;
    let taken: boolean;
    try {
      if (opcode === IbOpcode.RdmaWriteFirst || opcode === IbOpcode.RdmaWriteOnly || opcode === IbOpcode.RdmaReadRequest) {
        // The RETH, read where it lies: the tagged offset's halves, the R_Key, the DMA length.
        const high = u32At(reth, rethAt);
        const low = u32At(reth, rethAt + 4);
        const rkey = u32At(reth, rethAt + 8);
        const dmaLength = u32At(reth, rethAt + 12);
        taken =
          opcode === IbOpcode.RdmaReadRequest
            ? this.responder.takeReadRequest(psn, length, high, low, rkey, dmaLength)
            : this.responder.takeWriteStart(opcode === IbOpcode.RdmaWriteOnly, psn, ackRequest, high, low, rkey, dmaLength, payloadAddress, length);
      } else {
        taken =
          opcode === IbOpcode.SendMiddle || opcode === IbOpcode.SendLast
            ? this.responder.takeSend(opcode === IbOpcode.SendLast, psn, ackRequest, payloadAddress, length)
            : opcode === IbOpcode.RdmaWriteMiddle || opcode === IbOpcode.RdmaWriteLast
              ? this.responder.takeWrite(opcode === IbOpcode.RdmaWriteLast, psn, ackRequest, payloadAddress, length)
              : this.requester.takeReadResponse(opcode, psn, payloadAddress, length);
      }
    } catch (error) {
      // As in receive: a bug ends this QP, never the process or another QP.
      this.enterError({ reason: 'connection-lost', message: `internal error: ${error instanceof Error ? error.message : String(error)}` });
      return true;
    }
    if (taken) this.stats.packetsReceived++;
    return taken;
  }

  /**
   * `packet[offset, offset + length)`. A packet in shared memory lies in a link's receive ring,
   * whose slots carry the same ranges packet after packet: their views are kept (ViewCache)
   * instead of made per packet.
   */
  private payloadView(packet: Uint8Array, offset: number, length: number): Uint8Array {
    const buffer = packet.buffer;
    if (buffer !== this.ringViewsOf) {
      if (!(buffer instanceof SharedArrayBuffer)) return packet.subarray(offset, offset + length);
      this.ringViewsOf = buffer;
      this.ringViews = new ViewCache(new Uint8Array(buffer), RING_VIEW_OFFSETS);
    }
    return this.ringViews!.view(packet.byteOffset + offset, length);
  }

  /** Sends one packet with the fields in `h` (PSN, opcode, ...) and `payload`. */
  sendPacket(h: IbHeaders, payload: Uint8Array): void {
    const link = this.link;
    const path = this.path;
    if (link === undefined || path === undefined) return;
    h.destQp = path.destQpNumber;
    h.pkey = path.pkey ?? 0xffff;
    const pad = padFor(payload.length);
    h.padCount = pad;
    const length = headerLength(OPCODES[h.opcode]!.headers);
    // One buffer serves every packet: a link copies header and trailer if it keeps them. Their
    // views are made once per length (a few headers, four pads), not per packet.
    const buffer = this.packetScratch;
    encodeHeaders(buffer, 0, h);
    let views = this.packetViews[length];
    if (views === undefined) {
      views = [buffer.subarray(0, length)];
      this.packetViews[length] = views;
    }
    let trailer = views[1 + pad];
    if (trailer === undefined) {
      trailer = buffer.subarray(length, length + pad + ICRC_LENGTH);
      views[1 + pad] = trailer;
    }
    trailer.fill(0); // pad octets are zero; the link writes the ICRC
    this.stats.packetsSent++;
    link.send(path.peer, views[0]!, payload, trailer);
  }

  /**
   * How many packets one `sendRun` may carry now: RUN_PACKETS where the link takes runs, else 0
   * (send them one by one). A link whose `send` was replaced on the instance (a test dropping
   * packets) gets every packet through it.
   */
  get runLimit(): number {
    const link = this.link;
    return link?.sendRun !== undefined && !Object.hasOwn(link, 'send') ? RUN_PACKETS : 0;
  }

  /**
   * Sends `count` (at most `runLimit`) packets of `opcode`, which has no header but the BTH (a
   * Send, Write or Read Response MIDDLE), PSNs from `psn` on, packet i carrying
   * `payload[i * segment, +segment)`; `segment` is a multiple of 4 (a path MTU: no pad). Only
   * the last packet may ask for an ACK, and only it may carry another opcode, `lastOpcode` (a
   * message's LAST, also BTH only), with the SE bit where `solicitedLast`. The same packets as
   * `count` calls of sendPacket, in one call of the link's sendRun.
   */
  sendRun(
    opcode: number,
    psn: number,
    count: number,
    payload: Uint8Array,
    segment: number,
    ackRequestLast: boolean,
    lastOpcode = opcode,
    solicitedLast = false,
  ): void {
    const link = this.link;
    const path = this.path;
    if (link === undefined || path === undefined) return;
    if (
      count < 1 ||
      count > RUN_PACKETS ||
      (segment & 3) !== 0 ||
      headerLength(OPCODES[opcode]!.headers) !== BTH_LENGTH ||
      headerLength(OPCODES[lastOpcode]!.headers) !== BTH_LENGTH
    ) {
      throw new RangeError(`no run of ${count} packets of opcode 0x${opcode.toString(16)} (last 0x${lastOpcode.toString(16)}) with ${segment}-octet payloads`);
    }
    const run = this.run;
    const headers = run.headers;
    encodeHeaders(headers, 0, this.runHeaders(opcode, psn, path));
    // The packets differ in their PSN only (and the last in AckReq, its opcode and SE bit).
    repeatHeaders(headers, BTH_LENGTH, count, psn);
    const lastAt = (count - 1) * BTH_LENGTH;
    if (ackRequestLast) headers[lastAt + 8]! |= 0x80;
    headers[lastAt] = lastOpcode;
    if (solicitedLast) headers[lastAt + 1]! |= 0x80;
    this.handRun(link, path, run, payload, segment, count);
  }

  /** The headers of a run's first packet: `opcode`, `psn`, the path's QP and P_Key, no pad (a run's payloads are multiples of 4). */
  private runHeaders(opcode: number, psn: number, path: RcPathParameters): IbHeaders {
    const h = this.headers(opcode, psn);
    h.destQp = path.destQpNumber;
    h.pkey = path.pkey ?? 0xffff;
    h.padCount = 0;
    return h;
  }

  /** Hands `run`, its headers written, to the link with `count` payloads of `segment` octets from `payload`. */
  private handRun(link: PacketLink, path: RcPathParameters, run: PacketRun, payload: Uint8Array, segment: number, count: number): void {
    this.stats.packetsSent += count;
    run.payload = payload;
    run.segment = segment;
    run.count = count;
    link.sendRun!(path.peer, run);
    run.payload = EMPTY_PAYLOAD; // not kept reachable by the QP
  }

  /**
   * Sends `count` (at most `runLimit`) RDMA READ RESPONSE ONLY packets, PSNs from `psn` on, packet
   * i carrying `payload[i * segment, +segment)` (a multiple of 4: no pad), each with the AETH
   * `syndrome` and `msn`: a Read's responses to a requester that takes them so (responder.ts). The
   * same packets as `count` calls of sendPacket, in one call of the link's sendRun.
   */
  sendReadResponseOnlyRun(psn: number, count: number, payload: Uint8Array, segment: number, syndrome: number, msn: number): void {
    const link = this.link;
    const path = this.path;
    if (link === undefined || path === undefined) return;
    if (count < 1 || count > RUN_PACKETS || (segment & 3) !== 0 || payload.length < count * segment) {
      throw new RangeError(`no run of ${count} READ RESPONSE ONLY packets with ${segment}-octet payloads in ${payload.length} octets`);
    }
    const h = this.runHeaders(IbOpcode.RdmaReadResponseOnly, psn, path);
    h.syndrome = syndrome;
    h.msn = msn;
    const run = this.readResponseOnlyRun;
    encodeHeaders(run.headers, 0, h);
    repeatHeaders(run.headers, BTH_LENGTH + AETH_LENGTH, count, psn);
    this.handRun(link, path, run, payload, segment, count);
  }

  /**
   * Sends `count` (at most `runLimit`) RDMA WRITE ONLY packets, PSNs from `psn` on, packet i
   * carrying `payload[i * segment, +segment)` to remote address `remoteAddress + remoteOffset +
   * i * segment` under `rkey` (its RETH's DMA length the segment, a multiple of 4: no pad); only
   * the last may ask for an ACK and carry the SE bit (`solicitedLast`). The same packets as
   * `count` calls of sendPacket, in one call of the link's sendRun: equal datagrams, which a GSO
   * link sends as few kernel messages (requester-transmit.ts: a short Write as ONLY packets).
   */
  sendWriteOnlyRun(
    psn: number,
    count: number,
    payload: Uint8Array,
    segment: number,
    remoteAddress: bigint,
    remoteOffset: number,
    rkey: number,
    ackRequestLast: boolean,
    solicitedLast = false,
  ): void {
    const link = this.link;
    const path = this.path;
    if (link === undefined || path === undefined) return;
    if (count < 1 || count > RUN_PACKETS || (segment & 3) !== 0 || payload.length < count * segment) {
      throw new RangeError(`no run of ${count} WRITE ONLY packets with ${segment}-octet payloads in ${payload.length} octets`);
    }
    const h = this.runHeaders(IbOpcode.RdmaWriteOnly, psn, path);
    h.virtualAddress = remoteAddress;
    h.rkey = rkey;
    h.dmaLength = segment;
    const run = this.writeOnlyRun;
    const headers = run.headers;
    const stride = BTH_LENGTH + RETH_LENGTH;
    encodeHeaders(headers, 0, h);
    repeatHeaders(headers, stride, count, psn);
    // The packets differ in their PSN and remote address only (and the last in AckReq); the
    // address's halves are read back as encoded, so no BigInt is made per run.
    let high = ((headers[BTH_LENGTH]! << 24) | (headers[BTH_LENGTH + 1]! << 16) | (headers[BTH_LENGTH + 2]! << 8) | headers[BTH_LENGTH + 3]!) >>> 0;
    let low = ((headers[BTH_LENGTH + 4]! << 24) | (headers[BTH_LENGTH + 5]! << 16) | (headers[BTH_LENGTH + 6]! << 8) | headers[BTH_LENGTH + 7]!) >>> 0;
    low += remoteOffset;
    for (let i = 0; i < count; i++) {
      const at = i * stride;
      if (i > 0) low += segment;
      while (low > 0xffffffff) {
        low -= 0x100000000;
        high = (high + 1) >>> 0;
      }
      const reth = at + BTH_LENGTH;
      headers[reth] = high >>> 24;
      headers[reth + 1] = (high >>> 16) & 0xff;
      headers[reth + 2] = (high >>> 8) & 0xff;
      headers[reth + 3] = high & 0xff;
      headers[reth + 4] = low >>> 24;
      headers[reth + 5] = (low >>> 16) & 0xff;
      headers[reth + 6] = (low >>> 8) & 0xff;
      headers[reth + 7] = low & 0xff;
    }
    if (ackRequestLast) headers[(count - 1) * stride + 8]! |= 0x80;
    if (solicitedLast) headers[(count - 1) * stride + 1]! |= 0x80;
    this.handRun(link, path, run, payload, segment, count);
  }

  /**
   * Lets the link hand over every packet that already reached it (a link that reads on another
   * thread may hold some a moment longer). Called before judging the peer silent or gone: what
   * it sent before must count first.
   */
  receiveNow(): void {
    this.link?.receiveNow?.();
  }

  /** Whether the link can read this thread's sockets on demand (PacketLink.receiveThreadNow). */
  get receivesThreadNow(): boolean {
    return this.link?.receiveThreadNow !== undefined;
  }

  /** PacketLink.receiveThreadNow: the thread's other busy links, then this QP's. */
  receiveThreadNow(): void {
    this.link?.receiveThreadNow?.();
  }

  /** A cleared header record for building the next packet. */
  headers(opcode: number, psn: number): IbHeaders {
    const h = this.encodeScratch;
    h.opcode = opcode;
    h.psn = psn;
    h.solicited = false;
    h.ackRequest = false;
    h.migReq = false;
    h.fecn = false;
    h.becn = false;
    h.reserved6 = 0;
    h.reserved7 = 0;
    h.transportVersion = 0;
    return h;
  }

  /** Adds a completion from its fields (no object per completion); returns its CQ record, undefined on overrun. */
  addCompletion(cq: CompletionQueue, wrId: bigint | number, status: WcStatus, opcode: WcOpcode, byteLength: number, error: string | undefined) {
    const record = cq.add(wrId, status, opcode, this.qpNumber, byteLength, undefined, error);
    if (record === undefined) this.overran(cq);
    return record;
  }

  pushCompletion(cq: CompletionQueue, completion: WorkCompletion): void {
    if (!cq.push(completion)) this.overran(cq);
  }

  private overran(cq: CompletionQueue): void {
    // A CQ overrun is a catastrophic local error: the QP cannot report its work any more.
    if (this.state !== 'error') queueMicrotask(() => this.enterError({ reason: 'connection-lost', message: `completion queue ${cq.number} overran` }));
  }
}

const ALL_ONES = 0xffff_ffff_ffff_ffffn;

/** The big-endian 32-bit word at `at`. */
function u32At(bytes: Uint8Array, at: number): number {
  return ((bytes[at]! << 24) | (bytes[at + 1]! << 16) | (bytes[at + 2]! << 8) | bytes[at + 3]!) >>> 0;
}

/**
 * Copies the first of `count` headers of `stride` octets into the others, packet i's PSN `psn + i`
 * (octet by octet: a builtin call per header of 12-28 octets cost more than the copy).
 */
function repeatHeaders(headers: Uint8Array, stride: number, count: number, psn: number): void {
  for (let i = 1; i < count; i++) {
    const at = i * stride;
    for (let b = 0; b < 9; b++) headers[at + b] = headers[b]!;
    for (let b = BTH_LENGTH; b < stride; b++) headers[at + b] = headers[b]!;
    const next = (psn + i) & 0xffffff;
    headers[at + 9] = next >>> 16;
    headers[at + 10] = (next >>> 8) & 0xff;
    headers[at + 11] = next & 0xff;
  }
}

/** A run of RUN_PACKETS packets' room with headers of `headerLength` octets and the ICRC trailers in `trailers`. */
function packetRun(headerLength: number, trailers: Uint8Array): PacketRun {
  return {
    headers: new Uint8Array(RUN_PACKETS * headerLength),
    headerLength,
    payload: EMPTY_PAYLOAD,
    segment: 0,
    count: 0,
    trailers,
    trailerLength: ICRC_LENGTH,
  };
}
