// A queue pair: the RDMAP layer of one stream. It turns send work requests into RDMAP messages
// (through the Transmitter), serves the peer's RDMA Read and Atomic Requests from registered
// memory, tells the receive path where each inbound segment belongs, and completes work
// requests in order (RFC 5040 §5.5, RFC 7306 §7). Connection setup (MPA) is ../connection.ts;
// this file starts once the stream is in full operation.

import { EventEmitter } from 'node:events';
import { executeAtomic, isAtomicAligned } from './atomic-executor.ts';
import type { StreamChannel } from './channel.ts';
import type { CompletionQueue } from './cq.ts';
import { RnicError, type TerminateInfo } from './errors.ts';
import { Access, AccessStatus, type MemoryRegion, type MemoryTable, type ProtectionDomain } from './memory.ts';
import type { NicObserver } from './nic-observer.ts';
import { FpduReceiver, type ReceiveSink } from './receive.ts';
import { encodeTerminateUlpdu, isWellFormedTerminateDdp, terminateHeaderFor, terminateInfo, type TerminateCause } from './terminate.ts';
import { Transmitter } from './transmit.ts';
import {
  ALL_ONES_64,
  ATOMIC_REQUEST_HEADER_LENGTH,
  ATOMIC_RESPONSE_HEADER_LENGTH,
  AtomicOpcode,
  decodeAtomicRequest,
  decodeAtomicResponse,
  decodeImmediateData,
  encodeAtomicRequest,
  encodeAtomicResponse,
  encodeImmediateData,
  IMMEDIATE_DATA_HEADER_LENGTH,
  type AtomicRequestHeader,
} from './wire/atomics.ts';
import {
  DDP_ECODE_CATASTROPHIC,
  DDP_ECODE_TAGGED_BASE_BOUNDS,
  DDP_ECODE_TAGGED_INVALID_STAG,
  DDP_ECODE_TAGGED_STAG_NOT_ASSOCIATED,
  DDP_ECODE_TAGGED_TO_WRAP,
  DDP_ECODE_UNTAGGED_NO_BUFFER,
  DDP_ECODE_UNTAGGED_TOO_LONG,
  DDP_ETYPE_CATASTROPHIC,
  DDP_ETYPE_TAGGED,
  DDP_ETYPE_UNTAGGED,
  DDP_UNTAGGED_HEADER_LENGTH,
  QN_ATOMIC_RESPONSE,
  QN_READ_REQUEST,
  QN_SEND,
  readUint32,
} from './wire/ddp.ts';
import { MPA_ERROR_NO_MATCHING_RTR, MPA_LENGTH_FIELD } from './wire/mpa.ts';
import {
  decodeReadRequest,
  decodeTerminate,
  describeTerminate,
  encodeReadRequest,
  isSolicitedEvent,
  LLP_ETYPE_MPA,
  RDMAP_ECODE_ACCESS_RIGHTS,
  RDMAP_ECODE_BASE_BOUNDS,
  RDMAP_ECODE_CANNOT_INVALIDATE,
  RDMAP_ECODE_CATASTROPHIC_STREAM,
  RDMAP_ECODE_INVALID_STAG,
  RDMAP_ECODE_STAG_NOT_ASSOCIATED,
  RDMAP_ECODE_TO_WRAP,
  RDMAP_ECODE_UNEXPECTED_OPCODE,
  RDMAP_ETYPE_LOCAL_CATASTROPHIC,
  RDMAP_ETYPE_REMOTE_OPERATION,
  RDMAP_ETYPE_REMOTE_PROTECTION,
  RdmapOpcode,
  READ_REQUEST_HEADER_LENGTH,
  TerminateLayer,
  type ReadRequestHeader,
} from './wire/rdmap.ts';
import {
  wcOpcodeFor,
  WcStatus,
  type ReceiveWorkRequest,
  type SendWorkRequest,
  type Sge,
  type WcOpcode,
  type WorkCompletion,
} from './work.ts';

export type QpState = 'idle' | 'connecting' | 'rts' | 'error';

export interface QueuePairOptions {
  pd: ProtectionDomain;
  sendCq: CompletionQueue;
  recvCq: CompletionQueue;
  /** Most send work requests outstanding (posted, not yet completed); default 1024. */
  maxSendWr?: number;
  /** Most receive work requests posted; default 1024. */
  maxRecvWr?: number;
  /** Most scatter/gather elements per work request; default 16. */
  maxSge?: number;
  /** Complete every send WR, not only those posted with `signaled: true` (default true). */
  signalAll?: boolean;
  /** Inbound RDMA Read / Atomic Requests this side accepts at once (IRD, default 16). */
  ird?: number;
  /** RDMA Reads / atomics this side issues at once (ORD, default 16). */
  ord?: number;
}

/** Which ready-to-receive message the stream starts with (RFC 6581). */
export type RtrType = 'write' | 'read' | 'send';

/** What the connection layer negotiated, handed to the QP when the stream enters full operation. */
export interface StreamParameters {
  role: 'initiator' | 'responder';
  crc: boolean;
  /** We insert markers (the peer asked). */
  markersOut: boolean;
  /** The peer inserts markers (we asked). */
  markersIn: boolean;
  mulpdu: number;
  /** Negotiated inbound read/atomic limit. */
  ird: number;
  /** Negotiated outbound read/atomic limit. */
  ord: number;
  /** Initiator: the RTR it sends first. */
  sendRtr?: RtrType;
  /** Responder: RTR types it accepts as the first message (peer-to-peer model). */
  acceptRtr?: ReadonlySet<RtrType>;
}

export interface DisconnectInfo {
  reason: 'local-close' | 'peer-closed' | 'terminate-sent' | 'terminate-received' | 'connection-lost';
  message: string;
  terminate?: TerminateInfo;
}

interface QueuePairEvents {
  established: [];
  disconnected: [DisconnectInfo];
}

const SEND_QUEUE_HIGH_WATER = 8 * 1024 * 1024;
const EMPTY = new Uint8Array(0);
const HOST_LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
const MAX_MESSAGE = 0xffffffff;

const SendWqeState = { Queued: 0, InFlight: 1, Done: 2 } as const;
type SendWqeState = (typeof SendWqeState)[keyof typeof SendWqeState];

interface SendWqe {
  readonly wr: SendWorkRequest;
  readonly signaled: boolean;
  state: SendWqeState;
  status: WcStatus;
  error?: string;
  byteLength: number;
  atomicResult?: bigint;
  /** MSN of the request message on queue 1 (reads and atomics), for Terminate attribution. */
  requestMsn?: number;
}

interface RecvWqe {
  readonly wr: ReceiveWorkRequest;
  readonly capacity: number;
  status: WcStatus;
  error?: string;
}

interface OutstandingRequest {
  readonly kind: 'read' | 'atomic' | 'rtr';
  readonly wqe?: SendWqe;
  readonly msn: number;
  // Reads: where the response lands.
  readonly sinkStag: number;
  readonly sinkTaggedOffset: bigint;
  readonly sinkOffset: number;
  readonly length: number;
  received: number;
  // Atomics.
  readonly requestId: number;
  readonly resultSge?: Sge;
}

interface InboundRequest {
  readonly kind: 'read' | 'atomic';
  /** Copy of the request FPDU (length field + ULPDU) for a Terminate that must echo it. */
  readonly fpdu: Uint8Array;
  readonly read?: ReadRequestHeader;
  readonly atomic?: AtomicRequestHeader;
}

export interface QueuePairStatistics {
  messagesSent: number;
  messagesReceived: number;
  payloadBytesSent: number;
  payloadBytesReceived: number;
}

export class QueuePair extends EventEmitter<QueuePairEvents> implements ReceiveSink {
  readonly pd: ProtectionDomain;
  readonly sendCq: CompletionQueue;
  readonly recvCq: CompletionQueue;
  readonly maxSendWr: number;
  readonly maxRecvWr: number;
  readonly maxSge: number;
  readonly signalAll: boolean;
  /** Requested limits; the negotiated ones are in `ird` / `ord` once connected. */
  readonly requestedIrd: number;
  readonly requestedOrd: number;
  ird = 0;
  ord = 0;
  state: QpState = 'idle';
  /** Why the QP left RTS, once it has. */
  disconnectInfo: DisconnectInfo | undefined;
  /** The Terminate this side sent or received, if any. */
  terminate: TerminateInfo | undefined;
  /** Private data the peer sent in its MPA Request/Reply (set by the connection layer). */
  peerPrivateData: Uint8Array = EMPTY;
  parameters: StreamParameters | undefined;

  private channel: StreamChannel | undefined;
  private transmitter: Transmitter | undefined;
  private receiver: FpduReceiver | undefined;
  private readonly sq: SendWqe[] = [];
  private sqHead = 0; // oldest WQE not yet completed
  private sqNext = 0; // next WQE to transmit
  private readonly rq: RecvWqe[] = [];
  private rqHead = 0;
  private readonly orq: OutstandingRequest[] = [];
  /** Reads and atomics in `orq` (the RTR read does not count against ORD). */
  private outstandingRequests = 0;
  private readonly irq: InboundRequest[] = [];
  private nextRequestId = 1;
  private pumping = false;
  private pumpAgain = false;
  private stalled = false;
  /** Responder: nothing may be sent before the peer's first FPDU (RFC 5044 §7.1.2). */
  private transmitBlocked = false;
  private awaitingRtr: ReadonlySet<RtrType> | undefined;
  private pendingReadResponses = 0;
  private atomicWaitsForReads = false;
  // The inbound Send being placed.
  private currentRecv: RecvWqe | undefined;
  private currentSolicited = false;
  private scatterIndex = 0;
  private scatterOffset = 0;
  private establishedEmitted = false;

  constructor(
    readonly qpNumber: number,
    private readonly memory: MemoryTable,
    private readonly observer: NicObserver | undefined,
    options: QueuePairOptions,
    private readonly onDestroyed: (qp: QueuePair) => void,
  ) {
    super();
    this.pd = options.pd;
    this.sendCq = options.sendCq;
    this.recvCq = options.recvCq;
    this.maxSendWr = positive('maxSendWr', options.maxSendWr ?? 1024);
    this.maxRecvWr = positive('maxRecvWr', options.maxRecvWr ?? 1024);
    this.maxSge = positive('maxSge', options.maxSge ?? 16);
    this.signalAll = options.signalAll ?? true;
    this.requestedIrd = limit('ird', options.ird ?? 16);
    this.requestedOrd = limit('ord', options.ord ?? 16);
  }

  get statistics(): QueuePairStatistics {
    return {
      messagesSent: this.transmitter?.messagesSent ?? 0,
      messagesReceived: this.receiver?.messagesReceived ?? 0,
      payloadBytesSent: this.transmitter?.bytesSent ?? 0,
      payloadBytesReceived: this.receiver?.payloadBytesReceived ?? 0,
    };
  }

  /** The peer's address once connecting started (undefined for in-memory channels). */
  get remoteAddress(): string | undefined {
    return this.channel?.remoteAddress;
  }

  get remotePort(): number | undefined {
    return this.channel?.remotePort;
  }

  /** Receive WRs posted and not yet consumed. */
  get postedReceives(): number {
    return this.rq.length - this.rqHead;
  }

  /** Send WRs posted and not yet completed. */
  get outstandingSends(): number {
    return this.sq.length - this.sqHead;
  }

  // --- Posting -------------------------------------------------------------------------------

  /** Posts a send work request (ibv_post_send). Throws RnicError for requests that are invalid as such. */
  postSend(wr: SendWorkRequest): void {
    checkSendRequest(wr, this.maxSge);
    if (this.state === 'idle' || this.state === 'connecting') {
      throw new RnicError('ENOTCONN', `QP ${this.qpNumber} is not connected (state ${this.state}); post sends once connect/accept resolved`);
    }
    if (this.sq.length - this.sqHead >= this.maxSendWr) {
      throw new RnicError('ENOMEM', `send queue of QP ${this.qpNumber} is full (${this.maxSendWr} outstanding)`);
    }
    const wqe: SendWqe = {
      wr,
      signaled: wr.signaled ?? this.signalAll,
      state: SendWqeState.Queued,
      status: WcStatus.Success,
      byteLength: 0,
    };
    this.sq.push(wqe);
    if (this.state === 'error') {
      this.finishWqe(wqe, WcStatus.WrFlushError, 'QP is in the error state');
      this.sqNext = this.sq.length;
      this.completeInOrder();
      return;
    }
    this.pump();
  }

  /** Posts a receive work request (ibv_post_recv); allowed before the connection exists. */
  postRecv(wr: ReceiveWorkRequest): void {
    if (!Array.isArray(wr.sgList)) throw new RnicError('EINVAL', 'receive work request needs an sgList array');
    if (wr.sgList.length > this.maxSge) throw new RnicError('EINVAL', `${wr.sgList.length} SGEs exceed maxSge ${this.maxSge}`);
    let capacity = 0;
    for (const sge of wr.sgList) {
      checkSge(sge);
      capacity += sge.length;
    }
    if (this.rq.length - this.rqHead >= this.maxRecvWr) {
      throw new RnicError('ENOMEM', `receive queue of QP ${this.qpNumber} is full (${this.maxRecvWr} posted)`);
    }
    const wqe: RecvWqe = { wr, capacity, status: WcStatus.Success };
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
    this.rq.push(wqe);
  }

  // --- Lifecycle -----------------------------------------------------------------------------

  /** Called by the connection layer when setup starts. */
  beginConnecting(): void {
    if (this.state !== 'idle') {
      throw new RnicError('EISCONN', `QP ${this.qpNumber} is ${this.state}; a QP connects once`);
    }
    this.state = 'connecting';
  }

  /** Called by the connection layer when setup failed before full operation. */
  connectFailed(info: DisconnectInfo): void {
    if (this.state !== 'connecting') return;
    this.enterError(info);
  }

  /** Enters full operation on `channel` with the negotiated parameters. */
  enterRdmaMode(channel: StreamChannel, parameters: StreamParameters): void {
    if (this.state !== 'connecting') throw new RnicError('EINVAL', `QP ${this.qpNumber} is ${this.state}, not connecting`);
    this.parameters = parameters;
    this.channel = channel;
    this.ird = parameters.ird;
    this.ord = parameters.ord;
    this.transmitter = new Transmitter(channel, { crc: parameters.crc, markers: parameters.markersOut, mulpdu: parameters.mulpdu });
    this.receiver = new FpduReceiver(this, { crc: parameters.crc, markers: parameters.markersIn });
    channel.setEvents({ onEnd: () => this.peerEnded(), onClose: (error) => this.channelClosed(error) });
    this.state = 'rts';
    const receiver = this.receiver;
    channel.setConsumer(receiver);
    if (parameters.role === 'responder') {
      this.transmitBlocked = true;
      if (parameters.acceptRtr !== undefined && parameters.acceptRtr.size > 0) this.awaitingRtr = parameters.acceptRtr;
      else this.emitEstablished();
    } else {
      this.sendReadyToReceive(parameters.sendRtr);
      this.emitEstablished();
    }
    this.pump();
  }

  /** Resolves when the stream is established (responder: once the RTR arrived). */
  whenEstablished(): Promise<void> {
    if (this.establishedEmitted) return Promise.resolve();
    if (this.state === 'error') return Promise.reject(this.disconnectError());
    return new Promise((resolve, reject) => {
      const onEstablished = (): void => {
        this.off('disconnected', onDisconnected);
        resolve();
      };
      const onDisconnected = (): void => {
        this.off('established', onEstablished);
        reject(this.disconnectError());
      };
      this.once('established', onEstablished);
      this.once('disconnected', onDisconnected);
    });
  }

  /** Resolves once the QP left RTS (error, Terminate, close). */
  whenDisconnected(): Promise<DisconnectInfo> {
    if (this.disconnectInfo !== undefined) return Promise.resolve(this.disconnectInfo);
    return new Promise((resolve) => this.once('disconnected', resolve));
  }

  /**
   * Ends the connection (rdma_disconnect): outstanding work requests complete as flushed, the
   * socket is closed gracefully. Safe to call in any state.
   */
  disconnect(): void {
    if (this.state === 'error') {
      this.channel?.end();
      return;
    }
    this.enterError({ reason: 'local-close', message: 'disconnected locally' });
  }

  /** Disconnects and releases the QP number. */
  destroy(): void {
    this.disconnect();
    this.channel?.destroy();
    this.onDestroyed(this);
  }

  private disconnectError(): RnicError {
    const info = this.disconnectInfo;
    return new RnicError('ECONNRESET', info?.message ?? `QP ${this.qpNumber} is in the error state`, info?.terminate);
  }

  private emitEstablished(): void {
    if (this.establishedEmitted) return;
    this.establishedEmitted = true;
    this.emit('established');
  }

  private sendReadyToReceive(rtr: RtrType | undefined): void {
    const transmitter = this.transmitter!;
    this.observer?.queuePairContext(this.qpNumber, true);
    switch (rtr) {
      case 'write':
        // Zero-length RDMA Write, STag 0 / TO 0 (the receiver must not check them).
        transmitter.sendTagged(RdmapOpcode.RdmaWrite, 0, 0n, [], 0);
        break;
      case 'send':
        transmitter.sendUntagged(RdmapOpcode.Send, QN_SEND, 0, undefined);
        break;
      case 'read': {
        const header = new Uint8Array(READ_REQUEST_HEADER_LENGTH);
        const msn = transmitter.sendUntagged(RdmapOpcode.RdmaReadRequest, QN_READ_REQUEST, 0, header);
        // Its zero-length Read Response completes nothing the ULP posted.
        this.orq.push({ kind: 'rtr', msn, sinkStag: 0, sinkTaggedOffset: 0n, sinkOffset: 0, length: 0, received: 0, requestId: 0 });
        break;
      }
      default:
        break;
    }
  }

  // --- Transmit scheduling -------------------------------------------------------------------

  private pump(): void {
    if (this.state !== 'rts' || this.transmitBlocked) return;
    if (this.pumping) {
      this.pumpAgain = true;
      return;
    }
    this.pumping = true;
    try {
      do {
        this.pumpAgain = false;
        this.stalled = false;
        // Responses first: they free the peer's ORD credit and never wait on our own work.
        while (this.irq.length > 0 && this.state === 'rts') {
          if (this.transmitter!.pendingBytes > SEND_QUEUE_HIGH_WATER) {
            this.stalled = true;
            break;
          }
          if (!this.serveInboundRequest()) break;
        }
        while (this.sqNext < this.sq.length && this.state === 'rts') {
          if (this.transmitter!.pendingBytes > SEND_QUEUE_HIGH_WATER) {
            this.stalled = true;
            break;
          }
          const wqe = this.sq[this.sqNext]!;
          if (wqe.state === SendWqeState.Done) {
            this.sqNext++;
            continue;
          }
          const opcode = wqe.wr.opcode;
          const usesOrd = opcode === 'RDMA_READ' || opcode === 'ATOMIC_FETCH_ADD' || opcode === 'ATOMIC_CMP_SWAP';
          if (usesOrd && this.outstandingRequests >= Math.max(1, this.ord)) break;
          if (wqe.wr.fence === true && this.outstandingRequests > 0) break;
          this.sqNext++;
          this.startWqe(wqe);
        }
      } while (this.pumpAgain && this.state === 'rts');
    } catch (error) {
      this.internalError(error);
    } finally {
      this.pumping = false;
    }
  }

  private writeDone = (): void => {
    if (this.stalled) this.pump();
  };

  private startWqe(wqe: SendWqe): void {
    const wr = wqe.wr;
    const transmitter = this.transmitter!;
    this.observer?.queuePairContext(this.qpNumber, true);
    wqe.state = SendWqeState.InFlight;
    switch (wr.opcode) {
      case 'SEND':
      case 'SEND_WITH_INV':
      case 'SEND_WITH_SE':
      case 'SEND_WITH_SE_INV': {
        const gathered = this.gather(wqe);
        if (gathered === undefined) return;
        const invalidate = wr.opcode === 'SEND_WITH_INV' || wr.opcode === 'SEND_WITH_SE_INV';
        const solicited = wr.opcode === 'SEND_WITH_SE' || wr.opcode === 'SEND_WITH_SE_INV' || wr.solicited === true;
        const opcode = invalidate
          ? solicited
            ? RdmapOpcode.SendWithSolicitedEventAndInvalidate
            : RdmapOpcode.SendWithInvalidate
          : solicited
            ? RdmapOpcode.SendWithSolicitedEvent
            : RdmapOpcode.Send;
        wqe.byteLength = gathered.length;
        transmitter.sendUntagged(opcode, QN_SEND, invalidate ? wr.invalidateStag! >>> 0 : 0, undefined, gathered.views, gathered.length, (error) =>
          this.sent(wqe, error),
        );
        return;
      }
      case 'RDMA_WRITE':
      case 'RDMA_WRITE_WITH_IMM': {
        const gathered = this.gather(wqe);
        if (gathered === undefined) return;
        wqe.byteLength = gathered.length;
        const remote = wr.remote!;
        const withImmediate = wr.opcode === 'RDMA_WRITE_WITH_IMM';
        transmitter.sendTagged(
          RdmapOpcode.RdmaWrite,
          remote.stag >>> 0,
          BigInt(remote.taggedOffset),
          gathered.views,
          gathered.length,
          withImmediate ? undefined : (error) => this.sent(wqe, error),
        );
        if (withImmediate) {
          // RFC 7306: Write with Immediate is an RDMA Write followed by an Immediate Data message.
          const immediate = new Uint8Array(IMMEDIATE_DATA_HEADER_LENGTH);
          encodeImmediateData(immediate, 0, wr.immediate ?? 0n);
          const opcode = wr.solicited === true ? RdmapOpcode.ImmediateDataWithSolicitedEvent : RdmapOpcode.ImmediateData;
          transmitter.sendUntagged(opcode, QN_SEND, 0, immediate, undefined, 0, (error) => this.sent(wqe, error));
        }
        return;
      }
      case 'RDMA_READ': {
        const sge = wr.sgList?.[0];
        const length = sge?.length ?? 0;
        let sinkStag = 0;
        let sinkTaggedOffset = 0n;
        let sinkOffset = 0;
        if (sge !== undefined && length > 0) {
          const status = this.memory.checkLocal(sge.lkey >>> 0, this.pd, Access.LocalWrite, sge.offset, length);
          if (status !== AccessStatus.Ok) {
            this.localFailure(wqe, WcStatus.LocalProtectionError, `RDMA Read sink: ${localAccessText(status, sge)}`);
            return;
          }
          const region = this.memory.resolvedRegion!;
          sinkStag = region.stag;
          sinkOffset = sge.offset;
          sinkTaggedOffset = region.taggedOffsetAt(sge.offset);
        }
        const remote = wr.remote!;
        const header = new Uint8Array(READ_REQUEST_HEADER_LENGTH);
        encodeReadRequest(header, 0, {
          sinkStag,
          sinkTaggedOffset,
          readSize: length,
          sourceStag: remote.stag >>> 0,
          sourceTaggedOffset: BigInt(remote.taggedOffset),
        });
        const msn = transmitter.peekMsn(QN_READ_REQUEST);
        wqe.requestMsn = msn;
        wqe.byteLength = length;
        this.orq.push({ kind: 'read', wqe, msn, sinkStag, sinkTaggedOffset, sinkOffset, length, received: 0, requestId: 0 });
        this.outstandingRequests++;
        transmitter.sendUntagged(RdmapOpcode.RdmaReadRequest, QN_READ_REQUEST, 0, header);
        return;
      }
      case 'ATOMIC_FETCH_ADD':
      case 'ATOMIC_CMP_SWAP': {
        const sge = wr.sgList?.[0];
        if (sge !== undefined) {
          const status = this.memory.checkLocal(sge.lkey >>> 0, this.pd, Access.LocalWrite, sge.offset, 8);
          if (status !== AccessStatus.Ok) {
            this.localFailure(wqe, WcStatus.LocalProtectionError, `atomic result buffer: ${localAccessText(status, sge)}`);
            return;
          }
        }
        const atomic = wr.atomic ?? {};
        const fetchAdd = wr.opcode === 'ATOMIC_FETCH_ADD';
        const requestId = this.nextRequestId;
        this.nextRequestId = (this.nextRequestId + 1) >>> 0 || 1;
        const header = new Uint8Array(ATOMIC_REQUEST_HEADER_LENGTH);
        encodeAtomicRequest(header, 0, {
          atomicOpcode: fetchAdd ? AtomicOpcode.FetchAdd : AtomicOpcode.CompareSwap,
          requestId,
          remoteStag: wr.remote!.stag >>> 0,
          remoteTaggedOffset: BigInt(wr.remote!.taggedOffset),
          addOrSwapData: BigInt.asUintN(64, (fetchAdd ? atomic.add : atomic.swap) ?? 0n),
          addOrSwapMask: BigInt.asUintN(64, fetchAdd ? (atomic.addMask ?? 0n) : (atomic.swapMask ?? ALL_ONES_64)),
          compareData: BigInt.asUintN(64, fetchAdd ? 0n : (atomic.compare ?? 0n)),
          compareMask: fetchAdd ? ALL_ONES_64 : BigInt.asUintN(64, atomic.compareMask ?? ALL_ONES_64),
        });
        const msn = transmitter.peekMsn(QN_READ_REQUEST);
        wqe.requestMsn = msn;
        wqe.byteLength = 8;
        this.orq.push({
          kind: 'atomic',
          wqe,
          msn,
          sinkStag: 0,
          sinkTaggedOffset: 0n,
          sinkOffset: 0,
          length: 8,
          received: 0,
          requestId,
          ...(sge !== undefined ? { resultSge: sge } : {}),
        });
        this.outstandingRequests++;
        transmitter.sendUntagged(RdmapOpcode.AtomicRequest, QN_READ_REQUEST, 0, header);
        return;
      }
      case 'LOCAL_INV': {
        const status = this.memory.invalidate(wr.invalidateStag! >>> 0, this.pd);
        if (status !== AccessStatus.Ok) {
          this.localFailure(wqe, WcStatus.LocalProtectionError, `cannot invalidate STag 0x${hex(wr.invalidateStag!)}: ${accessStatusText(status)}`);
          return;
        }
        this.finishWqe(wqe, WcStatus.Success);
        this.completeInOrder();
        return;
      }
    }
  }

  /** Resolves a WR's gather list to views of registered memory. */
  private gather(wqe: SendWqe): { views: Uint8Array[]; length: number } | undefined {
    const views: Uint8Array[] = [];
    let length = 0;
    for (const sge of wqe.wr.sgList ?? []) {
      if (sge.length === 0) continue;
      const status = this.memory.checkLocal(sge.lkey >>> 0, this.pd, 0, sge.offset, sge.length);
      if (status !== AccessStatus.Ok) {
        this.localFailure(wqe, WcStatus.LocalProtectionError, `gather element: ${localAccessText(status, sge)}`);
        return undefined;
      }
      views.push(this.memory.resolvedRegion!.bytes.subarray(sge.offset, sge.offset + sge.length));
      length += sge.length;
    }
    if (length > MAX_MESSAGE) {
      this.localFailure(wqe, WcStatus.LocalLengthError, `message of ${length} octets exceeds 2^32-1`);
      return undefined;
    }
    return { views, length };
  }

  /** A Send or Write was taken by TCP: it completes locally (RFC 5040 §5.5 rule 14). */
  private sent(wqe: SendWqe, error: Error | null | undefined): void {
    if (wqe.state !== SendWqeState.Done) {
      if (error !== undefined && error !== null) this.finishWqe(wqe, WcStatus.WrFlushError, `not sent: ${error.message}`);
      else this.finishWqe(wqe, WcStatus.Success);
      this.completeInOrder();
    }
    this.writeDone();
  }

  /**
   * A local error while building an outbound message: the WR fails, and RFC 5040 §7.1 ends
   * the stream with a Terminate carrying no headers.
   */
  private localFailure(wqe: SendWqe, status: WcStatus, reason: string): void {
    this.finishWqe(wqe, status, reason);
    this.fail({ layer: TerminateLayer.Rdmap, errorType: RDMAP_ETYPE_LOCAL_CATASTROPHIC, errorCode: 0, reason });
  }

  private finishWqe(wqe: SendWqe, status: WcStatus, error?: string): void {
    if (wqe.state === SendWqeState.Done) return;
    wqe.state = SendWqeState.Done;
    wqe.status = status;
    if (error !== undefined) wqe.error = error;
  }

  /** Emits completions for finished WQEs at the head of the send queue, in posting order. */
  private completeInOrder(): void {
    while (this.sqHead < this.sq.length) {
      const wqe = this.sq[this.sqHead]!;
      if (wqe.state !== SendWqeState.Done) break;
      this.sqHead++;
      if (wqe.signaled || wqe.status !== WcStatus.Success) {
        this.pushCompletion(this.sendCq, {
          wrId: wqe.wr.wrId,
          status: wqe.status,
          opcode: wcOpcodeFor(wqe.wr.opcode),
          qpNumber: this.qpNumber,
          byteLength: wqe.byteLength,
          ...(wqe.atomicResult !== undefined ? { atomicResult: wqe.atomicResult } : {}),
          ...(wqe.error !== undefined ? { error: wqe.error } : {}),
        });
      }
    }
    if (this.sqHead > 1024 && this.sqHead * 2 > this.sq.length) {
      this.sq.splice(0, this.sqHead);
      this.sqNext -= this.sqHead;
      this.sqHead = 0;
    }
  }

  private pushCompletion(cq: CompletionQueue, completion: WorkCompletion): void {
    if (!cq.push(completion) && this.state === 'rts') {
      this.fail({
        layer: TerminateLayer.Rdmap,
        errorType: RDMAP_ETYPE_LOCAL_CATASTROPHIC,
        errorCode: 0,
        reason: `completion queue ${cq.number} overran its depth of ${cq.depth}`,
      });
    }
  }

  // --- Serving the peer's RDMA Read and Atomic Requests ----------------------------------------

  /** Serves the oldest inbound request; false when it has to wait. */
  private serveInboundRequest(): boolean {
    const request = this.irq[0]!;
    const transmitter = this.transmitter!;
    if (request.kind === 'read') {
      const read = request.read!;
      this.observer?.queuePairContext(this.qpNumber, true);
      if (read.readSize === 0) {
        // No source checks for a zero-length read (RFC 5040 §5.3); answer with an empty response.
        this.irq.shift();
        this.pendingReadResponses++;
        transmitter.sendTagged(RdmapOpcode.RdmaReadResponse, read.sinkStag, read.sinkTaggedOffset, [], 0, this.readResponseWritten);
        return true;
      }
      const status = this.memory.checkRemote(read.sourceStag, this.pd, Access.RemoteRead, read.sourceTaggedOffset, read.readSize);
      if (status !== AccessStatus.Ok) {
        this.fail({
          layer: TerminateLayer.Rdmap,
          errorType: RDMAP_ETYPE_REMOTE_PROTECTION,
          errorCode: rdmapProtectionCode(status),
          reason: `RDMA Read source STag 0x${hex(read.sourceStag)} TO ${read.sourceTaggedOffset} size ${read.readSize}: ${accessStatusText(status)}`,
          failedFpdu: request.fpdu,
        });
        return false;
      }
      const region = this.memory.resolvedRegion!;
      const offset = this.memory.resolvedOffset;
      this.irq.shift();
      this.pendingReadResponses++;
      transmitter.sendTagged(
        RdmapOpcode.RdmaReadResponse,
        read.sinkStag,
        read.sinkTaggedOffset,
        [region.bytes.subarray(offset, offset + read.readSize)],
        read.readSize,
        this.readResponseWritten,
      );
      return true;
    }
    // An atomic after a Read Response whose data the kernel has not copied yet would let the
    // response see the atomic's result; wait until those bytes have left.
    if (this.pendingReadResponses > 0) {
      this.atomicWaitsForReads = true;
      return false;
    }
    const atomic = request.atomic!;
    this.observer?.queuePairContext(this.qpNumber, true);
    if (atomic.atomicOpcode !== AtomicOpcode.FetchAdd && atomic.atomicOpcode !== AtomicOpcode.CompareSwap) {
      this.fail({
        layer: TerminateLayer.Rdmap,
        errorType: RDMAP_ETYPE_REMOTE_OPERATION,
        errorCode: RDMAP_ECODE_UNEXPECTED_OPCODE,
        reason: `unsupported atomic operation code ${atomic.atomicOpcode}`,
        failedFpdu: request.fpdu,
      });
      return false;
    }
    const status = this.memory.checkRemote(atomic.remoteStag, this.pd, Access.RemoteAtomic, atomic.remoteTaggedOffset, 8);
    if (status !== AccessStatus.Ok) {
      this.fail({
        layer: TerminateLayer.Rdmap,
        errorType: RDMAP_ETYPE_REMOTE_PROTECTION,
        errorCode: rdmapProtectionCode(status),
        reason: `atomic target STag 0x${hex(atomic.remoteStag)} TO ${atomic.remoteTaggedOffset}: ${accessStatusText(status)}`,
        failedFpdu: request.fpdu,
      });
      return false;
    }
    const region = this.memory.resolvedRegion!;
    const offset = this.memory.resolvedOffset;
    if (!isAtomicAligned(region, offset)) {
      // RFC 7306 §8.2: memory untouched, Terminate remote operation / catastrophic (0x07).
      this.fail({
        layer: TerminateLayer.Rdmap,
        errorType: RDMAP_ETYPE_REMOTE_OPERATION,
        errorCode: RDMAP_ECODE_CATASTROPHIC_STREAM,
        reason: `atomic target TO ${atomic.remoteTaggedOffset} is not 8-octet aligned`,
        failedFpdu: request.fpdu,
      });
      return false;
    }
    const original = executeAtomic(region, offset, atomic);
    region.onRemoteAtomic?.(offset, original);
    this.irq.shift();
    const response = new Uint8Array(ATOMIC_RESPONSE_HEADER_LENGTH);
    encodeAtomicResponse(response, 0, { requestId: atomic.requestId, originalValue: original });
    transmitter.sendUntagged(RdmapOpcode.AtomicResponse, QN_ATOMIC_RESPONSE, 0, response);
    return true;
  }

  private readResponseWritten = (): void => {
    this.pendingReadResponses--;
    if (this.pendingReadResponses === 0 && this.atomicWaitsForReads) {
      this.atomicWaitsForReads = false;
      this.pump();
    } else if (this.stalled) {
      this.pump();
    }
  };

  // --- ReceiveSink: where inbound segments go ------------------------------------------------

  placeTagged(opcode: number, stag: number, taggedOffset: bigint, length: number, first: boolean, last: boolean): Uint8Array | undefined {
    const receiver = this.receiver!;
    if (first) this.observer?.queuePairContext(this.qpNumber, opcode === RdmapOpcode.RdmaReadResponse);
    if (this.awaitingRtr !== undefined) {
      if (opcode === RdmapOpcode.RdmaWrite && length === 0 && first && last && this.awaitingRtr.has('write')) return EMPTY;
      this.rtrMismatch(receiver, `${opcode === RdmapOpcode.RdmaWrite ? 'RDMA Write' : 'Read Response'} of ${length} octets`);
      return undefined;
    }
    if (opcode === RdmapOpcode.RdmaWrite) {
      // RFC 5041: a zero-length tagged segment's STag and TO are not checked.
      if (length === 0) return EMPTY;
      const status = this.memory.checkRemote(stag, this.pd, Access.RemoteWrite, taggedOffset, length);
      if (status !== AccessStatus.Ok) {
        const [layer, errorType, errorCode] = taggedErrorFor(status);
        receiver.fail(layer, errorType, errorCode, `RDMA Write to STag 0x${hex(stag)} TO ${taggedOffset} length ${length}: ${accessStatusText(status)}`);
        return undefined;
      }
      const offset = this.memory.resolvedOffset;
      return this.memory.resolvedRegion!.bytes.subarray(offset, offset + length);
    }
    // Read Response: must continue the oldest outstanding RDMA Read exactly.
    const request = this.orq[0];
    if (request === undefined || request.kind === 'atomic') {
      receiver.fail(TerminateLayer.Ddp, DDP_ETYPE_CATASTROPHIC, DDP_ECODE_CATASTROPHIC, 'RDMA Read Response without an outstanding RDMA Read');
      return undefined;
    }
    if (length === 0 && request.length === 0) return EMPTY;
    if (stag !== request.sinkStag) {
      receiver.fail(TerminateLayer.Ddp, DDP_ETYPE_TAGGED, DDP_ECODE_TAGGED_INVALID_STAG, `Read Response STag 0x${hex(stag)}, expected 0x${hex(request.sinkStag)}`);
      return undefined;
    }
    const expectedOffset = request.sinkTaggedOffset + BigInt(request.received);
    if (taggedOffset !== expectedOffset || request.received + length > request.length || (last && request.received + length !== request.length)) {
      receiver.fail(
        TerminateLayer.Ddp,
        DDP_ETYPE_TAGGED,
        DDP_ECODE_TAGGED_BASE_BOUNDS,
        `Read Response at TO ${taggedOffset} for ${length} octets does not match the read (TO ${expectedOffset}, ${request.length - request.received} left)`,
      );
      return undefined;
    }
    if (length === 0) return EMPTY;
    const status = this.memory.checkLocal(request.sinkStag, this.pd, Access.LocalWrite, request.sinkOffset + request.received, length);
    if (status !== AccessStatus.Ok) {
      if (request.wqe !== undefined) this.finishWqe(request.wqe, WcStatus.LocalProtectionError, `RDMA Read sink: ${accessStatusText(status)}`);
      const [layer, errorType, errorCode] = taggedErrorFor(status);
      receiver.fail(layer, errorType, errorCode, `RDMA Read sink STag 0x${hex(request.sinkStag)}: ${accessStatusText(status)}`);
      return undefined;
    }
    const offset = this.memory.resolvedOffset;
    request.received += length;
    return this.memory.resolvedRegion!.bytes.subarray(offset, offset + length);
  }

  placeSend(opcode: number, messageOffset: number, length: number, first: boolean): Uint8Array | undefined {
    const receiver = this.receiver!;
    if (first) {
      this.observer?.queuePairContext(this.qpNumber, true);
      if (this.awaitingRtr !== undefined && !(opcode === RdmapOpcode.Send && length === 0 && this.awaitingRtr.has('send'))) {
        this.rtrMismatch(receiver, `Send of ${length} octets`);
        return undefined;
      }
      const wqe = this.takeReceive();
      if (wqe === undefined) {
        receiver.fail(TerminateLayer.Ddp, DDP_ETYPE_UNTAGGED, DDP_ECODE_UNTAGGED_NO_BUFFER, 'Send arrived with no receive posted');
        return undefined;
      }
      this.currentRecv = wqe;
      this.currentSolicited = isSolicitedEvent(opcode);
      for (const sge of wqe.wr.sgList) {
        if (sge.length === 0) continue;
        const status = this.memory.checkLocal(sge.lkey >>> 0, this.pd, Access.LocalWrite, sge.offset, sge.length);
        if (status !== AccessStatus.Ok) {
          wqe.status = WcStatus.LocalProtectionError;
          wqe.error = `receive buffer: ${localAccessText(status, sge)}`;
          this.completeReceive(wqe, 0, {});
          this.currentRecv = undefined;
          receiver.fail(TerminateLayer.Ddp, DDP_ETYPE_CATASTROPHIC, DDP_ECODE_CATASTROPHIC, wqe.error);
          return undefined;
        }
      }
    }
    const wqe = this.currentRecv;
    if (wqe === undefined) {
      receiver.fail(TerminateLayer.Ddp, DDP_ETYPE_CATASTROPHIC, DDP_ECODE_CATASTROPHIC, 'Send segment with no receive in progress');
      return undefined;
    }
    if (messageOffset + length > wqe.capacity) {
      wqe.status = WcStatus.LocalLengthError;
      wqe.error = `Send of at least ${messageOffset + length} octets exceeds the ${wqe.capacity}-octet receive buffer`;
      this.completeReceive(wqe, messageOffset, {});
      this.currentRecv = undefined;
      receiver.fail(TerminateLayer.Ddp, DDP_ETYPE_UNTAGGED, DDP_ECODE_UNTAGGED_TOO_LONG, wqe.error);
      return undefined;
    }
    if (length === 0) return EMPTY;
    // Find the scatter element holding message offset `messageOffset`.
    let index = 0;
    let remaining = messageOffset;
    const sgList = wqe.wr.sgList;
    while (index < sgList.length && remaining >= sgList[index]!.length) {
      remaining -= sgList[index]!.length;
      index++;
    }
    this.scatterIndex = index;
    this.scatterOffset = remaining;
    return this.scatterView();
  }

  nextSendView(): Uint8Array | undefined {
    this.scatterIndex++;
    this.scatterOffset = 0;
    return this.scatterView();
  }

  private scatterView(): Uint8Array | undefined {
    const sgList = this.currentRecv?.wr.sgList;
    if (sgList === undefined) return undefined;
    while (this.scatterIndex < sgList.length && sgList[this.scatterIndex]!.length === 0) this.scatterIndex++;
    const sge = sgList[this.scatterIndex];
    if (sge === undefined) return undefined;
    const region = this.memory.lookup(sge.lkey >>> 0);
    if (region === undefined || !region.valid) return undefined;
    return region.bytes.subarray(sge.offset + this.scatterOffset, sge.offset + sge.length);
  }

  taggedMessageDone(opcode: number): void {
    if (opcode === RdmapOpcode.RdmaWrite) {
      if (this.awaitingRtr !== undefined) this.readyToReceiveArrived();
      else this.peerSpoke();
      return;
    }
    const request = this.orq.shift();
    if (request !== undefined && request.kind !== 'rtr') this.outstandingRequests--;
    if (request?.wqe !== undefined) {
      this.finishWqe(request.wqe, WcStatus.Success);
      this.completeInOrder();
    }
    this.peerSpoke();
    this.pump();
  }

  sendMessageDone(opcode: number, messageLength: number, invalidateStag: number): void {
    const wqe = this.currentRecv;
    this.currentRecv = undefined;
    if (wqe === undefined) return;
    if (this.awaitingRtr !== undefined) {
      this.completeReceive(wqe, 0, {});
      this.readyToReceiveArrived();
      return;
    }
    this.peerSpoke();
    if (opcode === RdmapOpcode.SendWithInvalidate || opcode === RdmapOpcode.SendWithSolicitedEventAndInvalidate) {
      const status = this.memory.invalidate(invalidateStag, this.pd);
      if (status !== AccessStatus.Ok) {
        wqe.status = WcStatus.RemoteInvalidRequestError;
        wqe.error = `cannot invalidate STag 0x${hex(invalidateStag)}: ${accessStatusText(status)}`;
        this.completeReceive(wqe, messageLength, { solicited: this.currentSolicited });
        this.receiver!.failMessage({
          layer: TerminateLayer.Rdmap,
          // siw: an STag of another PD is a protection error, an unknown one an operation error.
          errorType: status === AccessStatus.PdMismatch ? RDMAP_ETYPE_REMOTE_PROTECTION : RDMAP_ETYPE_REMOTE_OPERATION,
          errorCode: RDMAP_ECODE_CANNOT_INVALIDATE,
          reason: wqe.error,
        });
        return;
      }
      this.completeReceive(wqe, messageLength, { solicited: this.currentSolicited, invalidatedStag: invalidateStag });
      return;
    }
    this.completeReceive(wqe, messageLength, { solicited: this.currentSolicited });
  }

  controlMessage(opcode: number, fpdu: Uint8Array): void {
    const receiver = this.receiver!;
    const body = DDP_UNTAGGED_HEADER_LENGTH + MPA_LENGTH_FIELD;
    this.observer?.queuePairContext(this.qpNumber, true);
    switch (opcode) {
      case RdmapOpcode.RdmaReadRequest: {
        const read = decodeReadRequest(fpdu, body);
        if (this.awaitingRtr !== undefined) {
          if (read.readSize === 0 && this.awaitingRtr.has('read')) {
            this.irq.push({ kind: 'read', fpdu: fpdu.slice(), read });
            this.readyToReceiveArrived();
            return;
          }
          this.rtrMismatch(receiver, `RDMA Read Request of ${read.readSize} octets`, fpdu);
          return;
        }
        if (!this.acceptInbound(fpdu, 'RDMA Read Request')) return;
        this.irq.push({ kind: 'read', fpdu: fpdu.slice(), read });
        this.peerSpoke();
        this.pump();
        return;
      }
      case RdmapOpcode.AtomicRequest: {
        if (this.awaitingRtr !== undefined) {
          this.rtrMismatch(receiver, 'Atomic Request', fpdu);
          return;
        }
        if (!this.acceptInbound(fpdu, 'Atomic Request')) return;
        this.irq.push({ kind: 'atomic', fpdu: fpdu.slice(), atomic: decodeAtomicRequest(fpdu, body) });
        this.peerSpoke();
        this.pump();
        return;
      }
      case RdmapOpcode.AtomicResponse: {
        const response = decodeAtomicResponse(fpdu, body);
        const request = this.orq[0];
        if (request === undefined || request.kind !== 'atomic' || request.requestId !== response.requestId) {
          receiver.failMessage({
            layer: TerminateLayer.Rdmap,
            errorType: RDMAP_ETYPE_REMOTE_OPERATION,
            errorCode: RDMAP_ECODE_UNEXPECTED_OPCODE,
            reason:
              request?.kind === 'atomic'
                ? `Atomic Response for request ${response.requestId}, expected ${request.requestId}`
                : 'Atomic Response without an outstanding atomic',
            failedFpdu: fpdu.slice(),
          });
          return;
        }
        this.orq.shift();
        this.outstandingRequests--;
        const wqe = request.wqe!;
        wqe.atomicResult = response.originalValue;
        const sge = request.resultSge;
        if (sge !== undefined) {
          const status = this.memory.checkLocal(sge.lkey >>> 0, this.pd, Access.LocalWrite, sge.offset, 8);
          if (status !== AccessStatus.Ok) {
            this.finishWqe(wqe, WcStatus.LocalProtectionError, `atomic result buffer: ${localAccessText(status, sge)}`);
            this.completeInOrder();
            this.fail({ layer: TerminateLayer.Rdmap, errorType: RDMAP_ETYPE_LOCAL_CATASTROPHIC, errorCode: 0, reason: wqe.error! });
            return;
          }
          const region = this.memory.resolvedRegion!;
          new DataView(region.buffer, region.byteOffset + sge.offset, 8).setBigUint64(0, response.originalValue, HOST_LITTLE_ENDIAN);
        }
        this.finishWqe(wqe, WcStatus.Success);
        this.completeInOrder();
        this.peerSpoke();
        this.pump();
        return;
      }
      case RdmapOpcode.ImmediateData:
      case RdmapOpcode.ImmediateDataWithSolicitedEvent: {
        if (this.awaitingRtr !== undefined) {
          this.rtrMismatch(receiver, 'Immediate Data', fpdu);
          return;
        }
        const wqe = this.takeReceive();
        if (wqe === undefined) {
          receiver.failMessage({
            layer: TerminateLayer.Ddp,
            errorType: DDP_ETYPE_UNTAGGED,
            errorCode: DDP_ECODE_UNTAGGED_NO_BUFFER,
            reason: 'Immediate Data arrived with no receive posted',
            failedFpdu: fpdu.slice(),
          });
          return;
        }
        this.peerSpoke();
        this.completeReceive(wqe, 0, {
          immediate: decodeImmediateData(fpdu, body),
          solicited: opcode === RdmapOpcode.ImmediateDataWithSolicitedEvent,
          opcode: 'RECV_RDMA_WITH_IMM',
        });
        return;
      }
      case RdmapOpcode.Terminate: {
        this.terminateReceived(fpdu);
        return;
      }
      default:
        receiver.failMessage({
          layer: TerminateLayer.Rdmap,
          errorType: RDMAP_ETYPE_REMOTE_OPERATION,
          errorCode: RDMAP_ECODE_UNEXPECTED_OPCODE,
          reason: `unexpected opcode 0x${opcode.toString(16)}`,
          failedFpdu: fpdu.slice(),
        });
    }
  }

  receiveFailed(cause: TerminateCause): void {
    this.fail(cause);
  }

  /**
   * IRD accounting shared by RDMA Read and Atomic Requests (RFC 7306 §7.1): IRD is the depth of
   * the queue of requests waiting to be served. A request leaves it when its response is handed
   * to the transport; while the peer does not read, responses stop being generated and further
   * requests wait here, so a peer that keeps more than IRD requests waiting breaks the protocol.
   */
  private acceptInbound(fpdu: Uint8Array, what: string): boolean {
    if (this.irq.length < Math.max(1, this.ird)) return true;
    this.receiver!.failMessage({
      layer: TerminateLayer.Ddp,
      errorType: DDP_ETYPE_UNTAGGED,
      errorCode: DDP_ECODE_UNTAGGED_NO_BUFFER,
      reason: `${what} beyond the ${this.ird} outstanding reads and atomics allowed (IRD)`,
      failedFpdu: fpdu.slice(),
    });
    return false;
  }

  private takeReceive(): RecvWqe | undefined {
    if (this.rqHead >= this.rq.length) return undefined;
    const wqe = this.rq[this.rqHead++]!;
    if (this.rqHead > 1024 && this.rqHead * 2 > this.rq.length) {
      this.rq.splice(0, this.rqHead);
      this.rqHead = 0;
    }
    return wqe;
  }

  private completeReceive(
    wqe: RecvWqe,
    byteLength: number,
    extra: { solicited?: boolean; invalidatedStag?: number; immediate?: bigint; opcode?: WcOpcode },
  ): void {
    this.pushCompletion(this.recvCq, {
      wrId: wqe.wr.wrId,
      status: wqe.status,
      opcode: extra.opcode ?? 'RECV',
      qpNumber: this.qpNumber,
      byteLength,
      ...(extra.solicited === true ? { solicited: true } : {}),
      ...(extra.invalidatedStag !== undefined ? { invalidatedStag: extra.invalidatedStag } : {}),
      ...(extra.immediate !== undefined ? { immediate: extra.immediate } : {}),
      ...(wqe.error !== undefined ? { error: wqe.error } : {}),
    });
  }

  private rtrMismatch(receiver: FpduReceiver, what: string, fpdu?: Uint8Array): void {
    const accepted = [...(this.awaitingRtr ?? [])].join('/');
    const cause = {
      layer: TerminateLayer.Llp,
      errorType: LLP_ETYPE_MPA,
      errorCode: MPA_ERROR_NO_MATCHING_RTR,
      reason: `first message is a ${what}, not a zero-length ${accepted} ready-to-receive message`,
    };
    if (fpdu !== undefined) receiver.failMessage(cause);
    else receiver.fail(cause.layer, cause.errorType, cause.errorCode, cause.reason);
  }

  private readyToReceiveArrived(): void {
    this.awaitingRtr = undefined;
    this.peerSpoke();
    this.emitEstablished();
  }

  /** The peer's first valid FPDU arrived, so the responder may transmit. */
  private peerSpoke(): void {
    if (!this.transmitBlocked) return;
    this.transmitBlocked = false;
    this.pump();
  }

  // --- Errors and teardown -------------------------------------------------------------------

  private terminateReceived(fpdu: Uint8Array): void {
    const ulpdu = fpdu.subarray(MPA_LENGTH_FIELD);
    let info: TerminateInfo;
    try {
      const header = decodeTerminate(ulpdu, DDP_UNTAGGED_HEADER_LENGTH);
      info = terminateInfo(header);
    } catch (error) {
      info = { layer: ulpdu[18]! >> 4, errorType: ulpdu[18]! & 0xf, errorCode: ulpdu[19]!, description: describeTerminate(ulpdu[18]! >> 4, ulpdu[18]! & 0xf, ulpdu[19]!) };
    }
    if (!isWellFormedTerminateDdp(ulpdu)) info = { ...info, reason: 'Terminate with unexpected DDP fields' };
    this.terminate = info;
    this.attributeRemoteError(info);
    this.receiver?.stop();
    this.enterError({ reason: 'terminate-received', message: `peer terminated the stream: ${info.description}`, terminate: info });
  }

  /** Gives the read or atomic a received Terminate names its remote error status. */
  private attributeRemoteError(info: TerminateInfo): void {
    const ddp = info.ddpHeader;
    if (ddp === undefined || ddp.length !== DDP_UNTAGGED_HEADER_LENGTH) return;
    // DDP header octets: control, RDMAP control, reserved (4), QN at 6, MSN at 10.
    if (readUint32(ddp, 6) !== QN_READ_REQUEST) return;
    const msn = readUint32(ddp, 10);
    const request = this.orq.find((entry) => entry.msn === msn);
    if (request?.wqe === undefined) return;
    const status =
      info.layer === TerminateLayer.Rdmap && info.errorType === RDMAP_ETYPE_REMOTE_PROTECTION ? WcStatus.RemoteAccessError : WcStatus.RemoteOperationError;
    this.finishWqe(request.wqe, status, `peer: ${info.description}`);
  }

  /** Ends the stream with a Terminate for `cause` (sent best effort), then closes. */
  fail(cause: TerminateCause): void {
    if (this.state !== 'rts') return;
    this.receiver?.stop();
    const header = terminateHeaderFor(cause);
    const info = terminateInfo(header, cause.reason);
    this.terminate = info;
    try {
      this.transmitter?.sendUlpdu(encodeTerminateUlpdu(header));
    } catch {
      // The Terminate is best effort; the close below still happens.
    }
    this.enterError({ reason: 'terminate-sent', message: `${info.description}: ${cause.reason}`, terminate: info });
  }

  private internalError(error: unknown): void {
    const message = error instanceof Error ? error.message : String(error);
    this.fail({ layer: TerminateLayer.Rdmap, errorType: RDMAP_ETYPE_LOCAL_CATASTROPHIC, errorCode: 0, reason: `internal error: ${message}` });
  }

  private peerEnded(): void {
    if (this.state !== 'rts') return;
    const receiver = this.receiver;
    if (receiver !== undefined && !receiver.atBoundary && !receiver.dead) {
      receiver.end(); // reports a truncated stream and sends the Terminate
      return;
    }
    receiver?.stop();
    this.enterError({ reason: 'peer-closed', message: 'peer closed the connection' });
  }

  private channelClosed(error: Error | undefined): void {
    if (this.state === 'rts' || this.state === 'connecting') {
      this.enterError({
        reason: error !== undefined ? 'connection-lost' : 'peer-closed',
        message: error !== undefined ? `connection lost: ${error.message}` : 'connection closed',
      });
    }
  }

  private enterError(info: DisconnectInfo): void {
    if (this.state === 'error') return;
    this.state = 'error';
    this.disconnectInfo = info;
    this.receiver?.stop();
    this.flush(info);
    this.channel?.end();
    this.emit('disconnected', info);
  }

  private flush(info: DisconnectInfo): void {
    const reason = `flushed: ${info.message}`;
    for (let i = this.sqHead; i < this.sq.length; i++) this.finishWqe(this.sq[i]!, WcStatus.WrFlushError, reason);
    this.sqNext = this.sq.length;
    this.orq.length = 0;
    this.outstandingRequests = 0;
    this.irq.length = 0;
    this.completeInOrder();
    const current = this.currentRecv;
    this.currentRecv = undefined;
    if (current !== undefined) {
      current.status = WcStatus.WrFlushError;
      current.error = reason;
      this.completeReceive(current, 0, {});
    }
    while (this.rqHead < this.rq.length) {
      const wqe = this.rq[this.rqHead++]!;
      wqe.status = WcStatus.WrFlushError;
      wqe.error = reason;
      this.completeReceive(wqe, 0, {});
    }
    this.rq.length = 0;
    this.rqHead = 0;
  }
}

// --- Validation helpers ------------------------------------------------------------------------

function positive(name: string, value: number): number {
  if (!Number.isInteger(value) || value < 1) throw new RnicError('EINVAL', `${name} ${value} must be a positive integer`);
  return value;
}

function limit(name: string, value: number): number {
  if (!Number.isInteger(value) || value < 0 || value > 0x3fff) throw new RnicError('EINVAL', `${name} ${value} must be an integer in 0..16383`);
  return value;
}

function checkSge(sge: Sge): void {
  if (
    typeof sge !== 'object' ||
    sge === null ||
    !Number.isInteger(sge.lkey) ||
    !Number.isSafeInteger(sge.offset) ||
    sge.offset < 0 ||
    !Number.isSafeInteger(sge.length) ||
    sge.length < 0
  ) {
    throw new RnicError('EINVAL', `SGE ${JSON.stringify(sge)} needs integer lkey, offset >= 0 and length >= 0`);
  }
}

const U64_LIMIT = 1n << 64n;

function checkSendRequest(wr: SendWorkRequest, maxSge: number): void {
  const sgList = wr.sgList ?? [];
  if (!Array.isArray(sgList)) throw new RnicError('EINVAL', 'sgList must be an array');
  if (sgList.length > maxSge) throw new RnicError('EINVAL', `${sgList.length} SGEs exceed maxSge ${maxSge}`);
  for (const sge of sgList) checkSge(sge);
  const needsRemote = (): void => {
    const remote = wr.remote;
    if (remote === undefined || !Number.isInteger(remote.stag)) throw new RnicError('EINVAL', `${wr.opcode} needs remote.stag and remote.taggedOffset`);
    const to = typeof remote.taggedOffset === 'bigint' ? remote.taggedOffset : Number.isSafeInteger(remote.taggedOffset) ? BigInt(remote.taggedOffset) : -1n;
    if (to < 0n || to >= U64_LIMIT) throw new RnicError('EINVAL', `remote.taggedOffset ${String(remote.taggedOffset)} is not a 64-bit unsigned integer`);
  };
  switch (wr.opcode) {
    case 'SEND':
    case 'SEND_WITH_SE':
      return;
    case 'SEND_WITH_INV':
    case 'SEND_WITH_SE_INV':
    case 'LOCAL_INV':
      if (!Number.isInteger(wr.invalidateStag)) throw new RnicError('EINVAL', `${wr.opcode} needs invalidateStag`);
      return;
    case 'RDMA_WRITE':
      needsRemote();
      return;
    case 'RDMA_WRITE_WITH_IMM':
      needsRemote();
      if (wr.immediate !== undefined && (typeof wr.immediate !== 'bigint' || wr.immediate < 0n || wr.immediate >= U64_LIMIT)) {
        throw new RnicError('EINVAL', 'immediate must be a bigint in 0..2^64-1');
      }
      return;
    case 'RDMA_READ':
      needsRemote();
      if (sgList.length > 1) throw new RnicError('EINVAL', 'RDMA_READ takes one sink SGE (iWARP names one sink STag)');
      return;
    case 'ATOMIC_FETCH_ADD':
    case 'ATOMIC_CMP_SWAP':
      needsRemote();
      if (sgList.length > 1 || (sgList.length === 1 && sgList[0]!.length !== 8)) {
        throw new RnicError('EINVAL', `${wr.opcode} takes at most one 8-octet SGE for the result`);
      }
      if (wr.opcode === 'ATOMIC_FETCH_ADD' && typeof wr.atomic?.add !== 'bigint') throw new RnicError('EINVAL', 'ATOMIC_FETCH_ADD needs atomic.add (bigint)');
      if (wr.opcode === 'ATOMIC_CMP_SWAP' && (typeof wr.atomic?.compare !== 'bigint' || typeof wr.atomic?.swap !== 'bigint')) {
        throw new RnicError('EINVAL', 'ATOMIC_CMP_SWAP needs atomic.compare and atomic.swap (bigint)');
      }
      return;
    default:
      throw new RnicError('EINVAL', `unknown send opcode ${String((wr as { opcode: unknown }).opcode)}`);
  }
}

/** DDP tagged-buffer error for a failed placement check; access rights are an RDMAP error. */
function taggedErrorFor(status: AccessStatus): [number, number, number] {
  switch (status) {
    case AccessStatus.AccessRights:
      // RFC 5041 has no access-rights code; RFC 5040's remote protection error names it exactly.
      return [TerminateLayer.Rdmap, RDMAP_ETYPE_REMOTE_PROTECTION, RDMAP_ECODE_ACCESS_RIGHTS];
    case AccessStatus.PdMismatch:
      return [TerminateLayer.Ddp, DDP_ETYPE_TAGGED, DDP_ECODE_TAGGED_STAG_NOT_ASSOCIATED];
    case AccessStatus.ToWrap:
      return [TerminateLayer.Ddp, DDP_ETYPE_TAGGED, DDP_ECODE_TAGGED_TO_WRAP];
    case AccessStatus.BaseBounds:
      return [TerminateLayer.Ddp, DDP_ETYPE_TAGGED, DDP_ECODE_TAGGED_BASE_BOUNDS];
    default:
      return [TerminateLayer.Ddp, DDP_ETYPE_TAGGED, DDP_ECODE_TAGGED_INVALID_STAG];
  }
}

function rdmapProtectionCode(status: AccessStatus): number {
  switch (status) {
    case AccessStatus.AccessRights:
      return RDMAP_ECODE_ACCESS_RIGHTS;
    case AccessStatus.PdMismatch:
      return RDMAP_ECODE_STAG_NOT_ASSOCIATED;
    case AccessStatus.ToWrap:
      return RDMAP_ECODE_TO_WRAP;
    case AccessStatus.BaseBounds:
      return RDMAP_ECODE_BASE_BOUNDS;
    default:
      return RDMAP_ECODE_INVALID_STAG;
  }
}

function accessStatusText(status: AccessStatus): string {
  switch (status) {
    case AccessStatus.InvalidStag:
      return 'unknown, invalidated or wrong-key STag';
    case AccessStatus.PdMismatch:
      return 'STag belongs to another protection domain';
    case AccessStatus.AccessRights:
      return 'region lacks the access right';
    case AccessStatus.ToWrap:
      return 'tagged offset plus length wraps 64 bits';
    case AccessStatus.BaseBounds:
      return 'outside the registered range';
    default:
      return 'ok';
  }
}

function localAccessText(status: AccessStatus, sge: Sge): string {
  return `lkey 0x${hex(sge.lkey)} offset ${sge.offset} length ${sge.length}: ${accessStatusText(status)}`;
}

function hex(value: number): string {
  return (value >>> 0).toString(16).padStart(8, '0');
}

export type { MemoryRegion };
