// Placement: the queue pair's ReceiveSink. The receive path (./receive.ts) asks it where each
// inbound segment belongs: RDMA Writes into registered memory, Read Responses into the sink of
// the oldest outstanding read, Sends into the posted receive buffers; it also dispatches the
// single-FPDU control messages and checks the ready-to-receive message a responder waits for
// (RFC 5041 placement, RFC 6581), as siw's siw_qp_rx.c does.
import { Access, AccessStatus, type MemoryRegion } from './memory.ts';
import type { QueuePair } from './qp.ts';
import { accessStatusText, checkSge, hex, localAccessText, taggedErrorFor } from './qp-checks.ts';
import { RnicError } from './errors.ts';
import type { FpduReceiver, ReceiveSink } from './receive.ts';
import type { TerminateCause } from './terminate.ts';
import { decodeAtomicRequest, decodeAtomicResponse, decodeImmediateData } from './wire/atomics.ts';
import {
  DDP_ECODE_CATASTROPHIC,
  DDP_ECODE_TAGGED_BASE_BOUNDS,
  DDP_ECODE_TAGGED_INVALID_STAG,
  DDP_ECODE_UNTAGGED_NO_BUFFER,
  DDP_ECODE_UNTAGGED_TOO_LONG,
  DDP_ETYPE_CATASTROPHIC,
  DDP_ETYPE_TAGGED,
  DDP_ETYPE_UNTAGGED,
  DDP_UNTAGGED_HEADER_LENGTH,
  readUint32,
  taggedOffsetText,
} from './wire/ddp.ts';
import { MPA_ERROR_NO_MATCHING_RTR, MPA_LENGTH_FIELD } from './wire/mpa.ts';
import {
  READ_REQUEST_SIZE_AT,
  isSolicitedEvent,
  LLP_ETYPE_MPA,
  RDMAP_ECODE_CANNOT_INVALIDATE,
  RDMAP_ECODE_UNEXPECTED_OPCODE,
  RDMAP_ETYPE_REMOTE_OPERATION,
  RDMAP_ETYPE_REMOTE_PROTECTION,
  RdmapOpcode,
  TerminateLayer,
} from './wire/rdmap.ts';
import { WcStatus, type ReceiveWorkRequest, type WcOpcode } from './work.ts';

const EMPTY = new Uint8Array(0);

interface ReceiveExtra {
  solicited?: boolean;
  invalidatedStag?: number;
  immediate?: bigint;
  opcode?: WcOpcode;
}

const SOLICITED: ReceiveExtra = { solicited: true };

/** A posted receive; reused once it completed (a steady stream of receives allocates none). */
interface RecvWqe {
  wr: ReceiveWorkRequest;
  capacity: number;
  status: WcStatus;
  error: string | undefined;
  /** wr.steer is still to be called (at the message's second segment). */
  steerPending: boolean;
  /** wr.steer gave the receive a new scatter list (which then ends exactly with the message). */
  steered: boolean;
}

export class Placement implements ReceiveSink {
  /** Entries [rqHead, rqTail) are posted; the array never shrinks (see Requester.sq). */
  private readonly rq: RecvWqe[] = [];
  private rqTail = 0;
  /** Completed receive entries, for reuse. */
  private readonly pool: RecvWqe[] = [];
  private rqHead = 0;
  // The inbound Send being placed.
  private currentRecv: RecvWqe | undefined;
  private currentSolicited = false;
  private scatterIndex = 0;
  private scatterOffset = 0;
  /** The view last handed out runs exactly to its message's end (see viewHoldsMessageEnd). */
  private viewEndsMessage = false;
  /** The region of the RDMA Write being placed when it knows a Write's extent (MemoryRegion.remoteWriteExtent), and where the Write ends in it. */
  private writeRegion: MemoryRegion | undefined;
  private writeEnd = 0;
  /** The message offset at which the Send being placed is steered early (work.ts steerAt), or 0. */
  private steerEarly = 0;
  /** Where the first segment of a Send steered early ends (message offset). */
  private segmentEnd = 0;

  constructor(private readonly qp: QueuePair) {}

  /** Receive WRs posted and not yet consumed. */
  get posted(): number {
    return this.rqTail - this.rqHead;
  }

  post(wr: ReceiveWorkRequest): void {
    const qp = this.qp;
    if (!Array.isArray(wr.sgList)) throw new RnicError('EINVAL', 'receive work request needs an sgList array');
    if (wr.sgList.length > qp.maxSge) throw new RnicError('EINVAL', `${wr.sgList.length} SGEs exceed maxSge ${qp.maxSge}`);
    let capacity = 0;
    for (const sge of wr.sgList) {
      checkSge(sge);
      capacity += sge.length;
    }
    if (this.rqTail - this.rqHead >= qp.maxRecvWr) {
      throw new RnicError('ENOMEM', `receive queue of QP ${qp.qpNumber} is full (${qp.maxRecvWr} posted)`);
    }
    if (qp.state === 'error') {
      qp.pushCompletion(qp.recvCq, {
        wrId: wr.wrId,
        status: WcStatus.WrFlushError,
        opcode: 'RECV',
        qpNumber: qp.qpNumber,
        byteLength: 0,
        error: 'QP is in the error state',
      });
      return;
    }
    const wqe = this.pool.pop() ?? { wr, capacity, status: WcStatus.Success, error: undefined, steerPending: false, steered: false };
    wqe.wr = wr;
    wqe.capacity = capacity;
    wqe.status = WcStatus.Success;
    wqe.error = undefined;
    wqe.steerPending = wr.steer !== undefined;
    wqe.steered = false;
    this.rq[this.rqTail++] = wqe;
  }

  placeTagged(opcode: number, stag: number, toHigh: number, toLow: number, length: number, first: boolean, last: boolean): Uint8Array | undefined {
    const qp = this.qp;
    const receiver = qp.receiver!;
    if (first) qp.observer?.queuePairContext(qp.qpNumber, opcode === RdmapOpcode.RdmaReadResponse);
    if (qp.awaitingRtr !== undefined) {
      if (opcode === RdmapOpcode.RdmaWrite && length === 0 && first && last && qp.awaitingRtr.has('write')) return EMPTY;
      this.rtrMismatch(receiver, `${opcode === RdmapOpcode.RdmaWrite ? 'RDMA Write' : 'Read Response'} of ${length} octets`);
      return undefined;
    }
    if (opcode === RdmapOpcode.RdmaWrite) {
      if (first) this.writeRegion = undefined;
      // RFC 5041: a zero-length tagged segment's STag and TO are not checked.
      if (length === 0) return EMPTY;
      const status = qp.memory.checkRemoteAt(stag, qp.pd, Access.RemoteWrite, toHigh, toLow, length);
      if (status !== AccessStatus.Ok) {
        const [layer, errorType, errorCode] = taggedErrorFor(status);
        receiver.fail(
          layer,
          errorType,
          errorCode,
          `RDMA Write to STag 0x${hex(stag)} TO ${taggedOffsetText(toHigh, toLow)} length ${length}: ${accessStatusText(status)}`,
        );
        return undefined;
      }
      const region = qp.memory.resolvedRegion!;
      const offset = qp.memory.resolvedOffset;
      if (first && region.remoteWriteExtent > 0) {
        this.writeRegion = region;
        this.writeEnd = Math.min(region.length, offset + region.remoteWriteExtent);
      }
      // Memory to the Write's known end is its own: the view runs there, and the receiver reads
      // the Write's later segments straight into it (MemoryRegion.remoteWriteExtent).
      this.viewEndsMessage = !last && region === this.writeRegion && this.writeEnd > offset + length;
      return region.view(offset, this.viewEndsMessage ? this.writeEnd - offset : length);
    }
    // Read Response: must continue the oldest outstanding RDMA Read exactly.
    const request = qp.requester.orq[0];
    if (request === undefined || request.kind === 'atomic') {
      receiver.fail(TerminateLayer.Ddp, DDP_ETYPE_CATASTROPHIC, DDP_ECODE_CATASTROPHIC, 'RDMA Read Response without an outstanding RDMA Read');
      return undefined;
    }
    if (length === 0 && request.length === 0) return EMPTY;
    if (stag !== request.sinkStag) {
      receiver.fail(
        TerminateLayer.Ddp,
        DDP_ETYPE_TAGGED,
        DDP_ECODE_TAGGED_INVALID_STAG,
        `Read Response STag 0x${hex(stag)}, expected 0x${hex(request.sinkStag)}`,
      );
      return undefined;
    }
    // The sink TO plus what arrived so far, in halves (the sink lies inside one region, < 2^53).
    const expectedLow = request.sinkToLow + request.received;
    const expectedHigh = request.sinkToHigh + Math.floor(expectedLow / 0x1_0000_0000);
    if (
      toHigh !== expectedHigh ||
      toLow !== expectedLow % 0x1_0000_0000 ||
      request.received + length > request.length ||
      (last && request.received + length !== request.length)
    ) {
      receiver.fail(
        TerminateLayer.Ddp,
        DDP_ETYPE_TAGGED,
        DDP_ECODE_TAGGED_BASE_BOUNDS,
        `Read Response at TO ${taggedOffsetText(toHigh, toLow)} for ${length} octets does not match the read (TO ${taggedOffsetText(expectedHigh, expectedLow % 0x1_0000_0000)}, ${request.length - request.received} left)`,
      );
      return undefined;
    }
    if (length === 0) return EMPTY;
    const status = qp.memory.checkLocal(request.sinkStag, qp.pd, Access.LocalWrite, request.sinkOffset + request.received, length);
    if (status !== AccessStatus.Ok) {
      if (request.wqe !== undefined) qp.requester.finishWqe(request.wqe, WcStatus.LocalProtectionError, `RDMA Read sink: ${accessStatusText(status)}`);
      const [layer, errorType, errorCode] = taggedErrorFor(status);
      receiver.fail(layer, errorType, errorCode, `RDMA Read sink STag 0x${hex(request.sinkStag)}: ${accessStatusText(status)}`);
      return undefined;
    }
    const offset = qp.memory.resolvedOffset;
    request.received += length;
    const region = qp.memory.resolvedRegion!;
    // The view runs on over the rest of this Read's sink (within the region): that memory is
    // this message's own destination, which the receiver may borrow for the segment's trailer and
    // the next segment's header, one read per segment instead of two (receive.ts overreadRoom;
    // issue 16: the RDMA Read of a 1 MiB STORE took 34 reads on the target).
    const rest = Math.min(request.length - request.received, region.length - offset - length);
    this.viewEndsMessage = rest === request.length - request.received;
    return region.view(offset, length + Math.max(0, rest));
  }

  placeSend(opcode: number, messageOffset: number, length: number, first: boolean, _invalidateStag: number, last: boolean): Uint8Array | undefined {
    const qp = this.qp;
    const receiver = qp.receiver!;
    if (first) {
      qp.observer?.queuePairContext(qp.qpNumber, true);
      if (qp.awaitingRtr !== undefined && !(opcode === RdmapOpcode.Send && length === 0 && qp.awaitingRtr.has('send'))) {
        this.rtrMismatch(receiver, `Send of ${length} octets`);
        return undefined;
      }
      this.steerEarly = 0;
      const wqe = this.takeReceive();
      if (wqe === undefined) {
        receiver.fail(TerminateLayer.Ddp, DDP_ETYPE_UNTAGGED, DDP_ECODE_UNTAGGED_NO_BUFFER, 'Send arrived with no receive posted');
        return undefined;
      }
      this.currentRecv = wqe;
      this.currentSolicited = isSolicitedEvent(opcode);
      if (!this.checkReceiveBuffer(wqe)) return undefined;
    }
    const wqe = this.currentRecv;
    if (wqe === undefined) {
      receiver.fail(TerminateLayer.Ddp, DDP_ETYPE_CATASTROPHIC, DDP_ECODE_CATASTROPHIC, 'Send segment with no receive in progress');
      return undefined;
    }
    // The first segment is placed and checked: the receiver may now say where the rest goes.
    if (!first && wqe.steerPending && !this.steer(wqe, messageOffset)) return undefined;
    if (this.tooLong(wqe, messageOffset, messageOffset + length)) return undefined;
    if (length === 0) return EMPTY;
    this.seek(wqe, messageOffset);
    const steerAt = wqe.wr.steerAt ?? 0;
    if (first && !last && wqe.steerPending && steerAt > 0 && steerAt < length && !qp.receiver!.crcChecked) {
      // Steer early (work.ts steerAt): the first `steerAt` octets go where posted, and once they
      // are placed nextSendView() asks steer() where the rest of the segment goes.
      const sge = wqe.wr.sgList[this.scatterIndex];
      if (sge !== undefined && this.scatterOffset === 0 && sge.length >= steerAt) {
        this.steerEarly = steerAt;
        this.segmentEnd = messageOffset + length;
        const region = qp.memory.lookup(sge.lkey >>> 0);
        this.viewEndsMessage = false;
        return region === undefined || !region.valid ? undefined : region.view(sge.offset, steerAt);
      }
    }
    return this.scatterView();
  }

  /** Points the scatter position at the element holding message offset `messageOffset`. */
  private seek(wqe: RecvWqe, messageOffset: number): void {
    let index = 0;
    let remaining = messageOffset;
    const sgList = wqe.wr.sgList;
    while (index < sgList.length && remaining >= sgList[index]!.length) {
      remaining -= sgList[index]!.length;
      index++;
    }
    this.scatterIndex = index;
    this.scatterOffset = remaining;
  }

  /** The early steer point's octets are placed: steer() says where the rest of the segment goes. */
  private steerNow(wqe: RecvWqe, received: number): Uint8Array | undefined {
    this.steerEarly = 0;
    if (!this.steer(wqe, received) || this.tooLong(wqe, received, this.segmentEnd)) return undefined;
    this.seek(wqe, received);
    return this.scatterView();
  }

  /** Calls the receive's steer() after its first `received` octets; its new list is checked like a posted one. */
  private steer(wqe: RecvWqe, received: number): boolean {
    wqe.steerPending = false;
    const posted = wqe.wr.sgList;
    wqe.wr.steer!(received);
    wqe.steered = wqe.wr.sgList !== posted;
    let capacity = 0;
    for (const sge of wqe.wr.sgList) capacity += sge.length;
    wqe.capacity = capacity;
    return this.checkReceiveBuffer(wqe);
  }

  /** A Send reaching message offset `end` overflows the receive: it completes LOC_LEN_ERR (with `placed` octets) and the stream fails. */
  private tooLong(wqe: RecvWqe, placed: number, end: number): boolean {
    if (end <= wqe.capacity) return false;
    wqe.status = WcStatus.LocalLengthError;
    wqe.error = `Send of at least ${end} octets exceeds the ${wqe.capacity}-octet receive buffer`;
    this.completeReceive(wqe, placed);
    this.currentRecv = undefined;
    this.qp.receiver!.fail(TerminateLayer.Ddp, DDP_ETYPE_UNTAGGED, DDP_ECODE_UNTAGGED_TOO_LONG, wqe.error);
    return true;
  }

  /** The receive's scatter elements are local memory of this QP's PD it may write; else the receive and the stream fail. */
  private checkReceiveBuffer(wqe: RecvWqe): boolean {
    const qp = this.qp;
    for (const sge of wqe.wr.sgList) {
      if (sge.length === 0) continue;
      const status = qp.memory.checkLocal(sge.lkey >>> 0, qp.pd, Access.LocalWrite, sge.offset, sge.length);
      if (status !== AccessStatus.Ok) {
        wqe.status = WcStatus.LocalProtectionError;
        wqe.error = `receive buffer: ${localAccessText(status, sge)}`;
        this.completeReceive(wqe, 0);
        this.currentRecv = undefined;
        qp.receiver!.fail(TerminateLayer.Ddp, DDP_ETYPE_CATASTROPHIC, DDP_ECODE_CATASTROPHIC, wqe.error);
        return false;
      }
    }
    return true;
  }

  nextSendView(): Uint8Array | undefined {
    const wqe = this.currentRecv;
    if (this.steerEarly > 0 && wqe !== undefined) return this.steerNow(wqe, this.steerEarly);
    this.scatterIndex++;
    this.scatterOffset = 0;
    return this.scatterView();
  }

  private scatterView(): Uint8Array | undefined {
    this.viewEndsMessage = false;
    const wqe = this.currentRecv;
    const sgList = wqe?.wr.sgList;
    if (sgList === undefined) return undefined;
    while (this.scatterIndex < sgList.length && sgList[this.scatterIndex]!.length === 0) this.scatterIndex++;
    const sge = sgList[this.scatterIndex];
    if (sge === undefined) return undefined;
    // A steered receive's list is exactly the message (steer() sized it; a longer Send fails, a
    // shorter one is the receiver's error to report): its last element ends with the message.
    this.viewEndsMessage = wqe!.steered && this.scatterIndex === sgList.length - 1;
    const region = this.qp.memory.lookup(sge.lkey >>> 0);
    if (region === undefined || !region.valid) return undefined;
    return region.view(sge.offset + this.scatterOffset, sge.length - this.scatterOffset);
  }

  viewHoldsMessageEnd(): boolean {
    return this.viewEndsMessage;
  }

  taggedMessageDone(opcode: number): void {
    const qp = this.qp;
    if (opcode === RdmapOpcode.RdmaWrite) {
      if (qp.awaitingRtr !== undefined) qp.readyToReceiveArrived();
      else qp.peerSpoke();
      return;
    }
    qp.requester.readResponseDone();
    qp.peerSpoke();
    qp.transmitQueued();
  }

  sendMessageDone(opcode: number, messageLength: number, invalidateStag: number): void {
    const qp = this.qp;
    const wqe = this.currentRecv;
    this.currentRecv = undefined;
    this.steerEarly = 0;
    if (wqe === undefined) return;
    if (qp.awaitingRtr !== undefined) {
      this.completeReceive(wqe, 0);
      qp.readyToReceiveArrived();
      return;
    }
    qp.peerSpoke();
    if (opcode === RdmapOpcode.SendWithInvalidate || opcode === RdmapOpcode.SendWithSolicitedEventAndInvalidate) {
      const status = qp.memory.invalidate(invalidateStag, qp.pd);
      if (status !== AccessStatus.Ok) {
        wqe.status = WcStatus.RemoteInvalidRequestError;
        wqe.error = `cannot invalidate STag 0x${hex(invalidateStag)}: ${accessStatusText(status)}`;
        this.completeReceive(wqe, messageLength, this.currentSolicited ? SOLICITED : undefined);
        qp.receiver!.failMessage({
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
    this.completeReceive(wqe, messageLength, this.currentSolicited ? SOLICITED : undefined);
    // Nothing refers to a successfully completed entry any more (failed ones are left alone:
    // their error text is still read after the completion).
    if (this.pool.length < qp.maxRecvWr) this.pool.push(wqe);
  }

  controlMessage(opcode: number, fpdu: Uint8Array): void {
    const qp = this.qp;
    const receiver = qp.receiver!;
    const body = DDP_UNTAGGED_HEADER_LENGTH + MPA_LENGTH_FIELD;
    qp.observer?.queuePairContext(qp.qpNumber, true);
    switch (opcode) {
      case RdmapOpcode.RdmaReadRequest: {
        // The responder reads the header's fields itself (no decoded object per request).
        const readSize = readUint32(fpdu, body + READ_REQUEST_SIZE_AT);
        if (qp.awaitingRtr !== undefined) {
          if (readSize === 0 && qp.awaitingRtr.has('read')) {
            qp.responder.queueRead(fpdu, body);
            qp.readyToReceiveArrived();
            return;
          }
          this.rtrMismatch(receiver, `RDMA Read Request of ${readSize} octets`, fpdu);
          return;
        }
        if (!qp.responder.accept(fpdu, 'RDMA Read Request')) return;
        qp.responder.queueRead(fpdu, body);
        qp.peerSpoke();
        qp.transmitQueued();
        return;
      }
      case RdmapOpcode.AtomicRequest: {
        if (qp.awaitingRtr !== undefined) {
          this.rtrMismatch(receiver, 'Atomic Request', fpdu);
          return;
        }
        if (!qp.responder.accept(fpdu, 'Atomic Request')) return;
        qp.responder.queueAtomic(fpdu, decodeAtomicRequest(fpdu, body));
        qp.peerSpoke();
        qp.transmitQueued();
        return;
      }
      case RdmapOpcode.AtomicResponse: {
        if (!qp.requester.atomicResponseArrived(decodeAtomicResponse(fpdu, body), fpdu)) return;
        qp.peerSpoke();
        qp.transmitQueued();
        return;
      }
      case RdmapOpcode.ImmediateData:
      case RdmapOpcode.ImmediateDataWithSolicitedEvent: {
        if (qp.awaitingRtr !== undefined) {
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
        qp.peerSpoke();
        this.completeReceive(wqe, 0, {
          immediate: decodeImmediateData(fpdu, body),
          solicited: opcode === RdmapOpcode.ImmediateDataWithSolicitedEvent,
          opcode: 'RECV_RDMA_WITH_IMM',
        });
        return;
      }
      case RdmapOpcode.Terminate: {
        qp.terminateReceived(fpdu);
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
    this.qp.fail(cause);
  }

  private takeReceive(): RecvWqe | undefined {
    if (this.rqHead >= this.rqTail) return undefined;
    const wqe = this.rq[this.rqHead++]!;
    if (this.rqHead === this.rqTail) {
      this.rqHead = 0;
      this.rqTail = 0;
    } else if (this.rqHead > 1024 && this.rqHead * 2 > this.rqTail) {
      // Compacted in place: splice would allocate an array of the removed entries.
      const kept = this.rqTail - this.rqHead;
      for (let i = 0; i < kept; i++) this.rq[i] = this.rq[this.rqHead + i]!;
      this.rqTail = kept;
      this.rqHead = 0;
    }
    return wqe;
  }

  /** Written straight into the CQ's record: no object per completion. */
  private completeReceive(wqe: RecvWqe, byteLength: number, extra?: ReceiveExtra): void {
    const qp = this.qp;
    const solicited = extra?.solicited === true ? true : undefined;
    const record = qp.addCompletion(qp.recvCq, wqe.wr.wrId, wqe.status, extra?.opcode ?? 'RECV', byteLength, solicited, wqe.error);
    if (record === undefined || extra === undefined) return;
    record.invalidatedStag = extra.invalidatedStag;
    record.immediate = extra.immediate;
  }

  private rtrMismatch(receiver: FpduReceiver, what: string, fpdu?: Uint8Array): void {
    const accepted = [...(this.qp.awaitingRtr ?? [])].join('/');
    const cause = {
      layer: TerminateLayer.Llp,
      errorType: LLP_ETYPE_MPA,
      errorCode: MPA_ERROR_NO_MATCHING_RTR,
      reason: `first message is a ${what}, not a zero-length ${accepted} ready-to-receive message`,
    };
    if (fpdu !== undefined) receiver.failMessage(cause);
    else receiver.fail(cause.layer, cause.errorType, cause.errorCode, cause.reason);
  }

  /** The QP left RTS: the Send being placed and every posted receive complete as flushed. */
  flush(reason: string): void {
    const current = this.currentRecv;
    this.currentRecv = undefined;
    this.steerEarly = 0;
    if (current !== undefined) {
      current.status = WcStatus.WrFlushError;
      current.error = reason;
      this.completeReceive(current, 0);
    }
    while (this.rqHead < this.rqTail) {
      const wqe = this.rq[this.rqHead++]!;
      wqe.status = WcStatus.WrFlushError;
      wqe.error = reason;
      this.completeReceive(wqe, 0);
    }
    this.rqHead = 0;
    this.rqTail = 0;
  }
}
