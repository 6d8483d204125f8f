// A queue pair: the RDMAP layer of one stream, as Linux siw splits it. This file holds the QP's
// state, its lifecycle and its teardown, and schedules what goes out; the requester
// (./qp-requester.ts) runs the send queue, the responder (./qp-responder.ts) answers the peer's
// RDMA Reads and Atomics, placement (./qp-placement.ts) tells the receive path where each
// inbound segment belongs, and ./qp-checks.ts checks work requests and maps access failures to
// Terminate codes. Connection setup (MPA) is ./connection.ts; this starts once the stream is in
// full operation.

import type { StreamChannel } from './channel.ts';
import type { CompletionQueue } from './cq.ts';
import { RnicError, type TerminateInfo } from './errors.ts';
import type { MemoryRegion, MemoryTable } from './memory.ts';
import type { NicObserver } from './nic-observer.ts';
import { QueuePairAttributes, type QueuePairOptions } from './qp-attributes.ts';
import { Placement } from './qp-placement.ts';
import { Requester } from './qp-requester.ts';
import { Responder } from './qp-responder.ts';
import { FpduReceiver } from './receive.ts';
import { encodeTerminateUlpdu, isWellFormedTerminateDdp, terminateHeaderFor, terminateInfo, type TerminateCause } from './terminate.ts';
import { Transmitter } from './transmit.ts';
import { DDP_UNTAGGED_HEADER_LENGTH, QN_READ_REQUEST, QN_SEND } from './wire/ddp.ts';
import { MPA_LENGTH_FIELD } from './wire/mpa.ts';
import { decodeTerminate, describeTerminate, RDMAP_ETYPE_LOCAL_CATASTROPHIC, RdmapOpcode, READ_REQUEST_HEADER_LENGTH, TerminateLayer } from './wire/rdmap.ts';
import type { ReceiveWorkRequest, SendWorkRequest, WcOpcode, WcStatus, WorkCompletion } from './work.ts';

export type QpState = 'idle' | 'connecting' | 'rts' | 'error';

export type { QueuePairOptions };

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

export interface QueuePairStatistics {
  messagesSent: number;
  messagesReceived: number;
  payloadBytesSent: number;
  payloadBytesReceived: number;
}

export class QueuePair extends QueuePairAttributes<QueuePairEvents> {
  /** Negotiated limits (requestedIrd / requestedOrd until connected). */
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

  // The QP's parts (./qp-*.ts) share what follows; the ULP uses the verbs above and below.
  /** @internal */ readonly requester: Requester;
  /** @internal */ readonly responder: Responder;
  /** @internal */ readonly placement: Placement;
  /** @internal */ transmitter: Transmitter | undefined;
  /** @internal */ receiver: FpduReceiver | undefined;
  /** @internal Responder side: the ready-to-receive messages accepted until the first one arrives. */
  awaitingRtr: ReadonlySet<RtrType> | undefined;

  private channel: StreamChannel | undefined;
  private transmitting = false;
  private transmitAgain = false;
  private stalled = false;
  /** Responder: nothing may be sent before the peer's first FPDU (RFC 5044 §7.1.2). */
  private transmitBlocked = false;
  private establishedEmitted = false;

  constructor(
    readonly qpNumber: number,
    /** @internal */ readonly memory: MemoryTable,
    /** @internal */ readonly observer: NicObserver | undefined,
    options: QueuePairOptions,
    private readonly onDestroyed: (qp: QueuePair) => void,
  ) {
    super(options);
    this.requester = new Requester(this);
    this.responder = new Responder(this);
    this.placement = new Placement(this);
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
    return this.placement.posted;
  }

  /** Send WRs posted and not yet completed. */
  get outstandingSends(): number {
    return this.requester.outstanding;
  }

  // --- Posting -------------------------------------------------------------------------------

  /** Posts a send work request (ibv_post_send). Throws RnicError for requests that are invalid as such. */
  postSend(wr: SendWorkRequest): void {
    // A short Send that can leave at once is framed at once (issue 16: a KBTP request or COMPLETION).
    if (this.state === 'rts' && !this.transmitBlocked && !this.transmitting && this.responder.idle && this.framedAtOnce(wr, undefined)) return;
    this.requester.post(wr);
  }

  /**
   * postSend(write) then postSend(send), for an unsignaled RDMA Write and the Send that follows
   * it (a KBTP LOAD's data and COMPLETION): when both can leave at once they are framed together
   * as one send queue entry (Requester.postWriteThenSend), which costs a fraction of two posts;
   * the bytes, the completions and the failures are the same either way.
   */
  postWriteThenSend(write: SendWorkRequest, send: SendWorkRequest): void {
    if (this.state === 'rts' && !this.transmitBlocked && !this.transmitting && this.responder.idle && this.framedAtOnce(send, write)) return;
    this.requester.post(write);
    this.requester.post(send);
  }

  /** Frames `send` (after `write`) at once when the requester can (see Requester.postWriteThenSend); false when it did nothing. */
  private framedAtOnce(send: SendWorkRequest, write: SendWorkRequest | undefined): boolean {
    this.transmitting = true;
    let framed = false;
    try {
      framed = write === undefined ? this.requester.postSmallSend(send) : this.requester.postWriteThenSend(write, send);
    } catch (error) {
      // As transmitQueued(): a fault while framing ends the stream, not the caller.
      this.internalError(error);
      framed = true;
    } finally {
      this.transmitting = false;
    }
    // A write that completed while the entry was being framed found transmission locked out.
    if (framed && this.transmitAgain) this.transmitQueued();
    return framed;
  }

  /** Posts a receive work request (ibv_post_recv); allowed before the connection exists. */
  postRecv(wr: ReceiveWorkRequest): void {
    this.placement.post(wr);
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
    this.receiver = new FpduReceiver(this.placement, { crc: parameters.crc, markers: parameters.markersIn });
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
    this.transmitQueued();
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
        this.requester.rtrReadSent(transmitter.sendUntagged(RdmapOpcode.RdmaReadRequest, QN_READ_REQUEST, 0, header));
        break;
      }
      default:
        break;
    }
  }

  // --- Transmit scheduling -------------------------------------------------------------------

  /** @internal Transmits what the responder and the requester have queued, as far as allowed. */
  transmitQueued(): void {
    if (this.state !== 'rts' || this.transmitBlocked) return;
    if (this.transmitting) {
      this.transmitAgain = true;
      return;
    }
    this.transmitting = true;
    try {
      do {
        this.transmitAgain = false;
        this.stalled = false;
        // Responses first: they free the peer's ORD credit and never wait on our own work.
        this.responder.transmit();
        this.requester.transmit();
      } while (this.transmitAgain && this.state === 'rts');
    } catch (error) {
      this.internalError(error);
    } finally {
      this.transmitting = false;
    }
  }

  /** @internal True (and transmission stalls until a write drains) when TCP holds too much unsent data. */
  transmitFull(): boolean {
    if (this.transmitter!.pendingBytes <= SEND_QUEUE_HIGH_WATER) return false;
    this.stalled = true;
    return true;
  }

  /** @internal A message left for TCP: stalled transmission goes on. */
  writeDone(): void {
    if (this.stalled) this.transmitQueued();
  }

  /** @internal */
  pushCompletion(cq: CompletionQueue, completion: WorkCompletion): void {
    if (!cq.push(completion)) this.overran(cq);
  }

  /** @internal Adds a completion from its fields (no object per completion); returns its CQ record. */
  addCompletion(cq: CompletionQueue, wrId: bigint | number, status: WcStatus, opcode: WcOpcode, byteLength: number, solicited?: boolean, error?: string) {
    const record = cq.add(wrId, status, opcode, this.qpNumber, byteLength, solicited, error);
    if (record === undefined) this.overran(cq);
    return record;
  }

  private overran(cq: CompletionQueue): void {
    if (this.state === 'rts') {
      this.fail({
        layer: TerminateLayer.Rdmap,
        errorType: RDMAP_ETYPE_LOCAL_CATASTROPHIC,
        errorCode: 0,
        reason: `completion queue ${cq.number} overran its depth of ${cq.depth}`,
      });
    }
  }

  // --- The stream's first message ------------------------------------------------------------

  /** @internal */
  readyToReceiveArrived(): void {
    this.awaitingRtr = undefined;
    this.peerSpoke();
    this.emitEstablished();
  }

  /** @internal The peer's first valid FPDU arrived, so the responder may transmit. */
  peerSpoke(): void {
    if (!this.transmitBlocked) return;
    this.transmitBlocked = false;
    this.transmitQueued();
  }

  // --- Errors and teardown -------------------------------------------------------------------

  /** @internal */
  terminateReceived(fpdu: Uint8Array): void {
    const ulpdu = fpdu.subarray(MPA_LENGTH_FIELD);
    let info: TerminateInfo;
    try {
      const header = decodeTerminate(ulpdu, DDP_UNTAGGED_HEADER_LENGTH);
      info = terminateInfo(header);
    } catch {
      // Undecodable: name what its control octets say.
      info = {
        layer: ulpdu[18]! >> 4,
        errorType: ulpdu[18]! & 0xf,
        errorCode: ulpdu[19]!,
        description: describeTerminate(ulpdu[18]! >> 4, ulpdu[18]! & 0xf, ulpdu[19]!),
      };
    }
    if (!isWellFormedTerminateDdp(ulpdu)) info = { ...info, reason: 'Terminate with unexpected DDP fields' };
    this.terminate = info;
    this.requester.attributeRemoteError(info);
    this.receiver?.stop();
    this.enterError({ reason: 'terminate-received', message: `peer terminated the stream: ${info.description}`, terminate: info });
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
    this.requester.flush(reason);
    this.responder.flush();
    this.requester.completeInOrder();
    this.placement.flush(reason);
  }
}

export type { MemoryRegion };
