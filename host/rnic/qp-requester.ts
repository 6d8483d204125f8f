// The requester side of a queue pair: the send queue. It turns send work requests into RDMAP
// messages, keeps the outbound RDMA Reads and Atomics in flight within ORD, and completes work
// requests in posting order (RFC 5040 §5.5, RFC 7306 §7), as siw's siw_qp_tx.c does.
import { RnicError, type TerminateInfo } from './errors.ts';
import { Access, AccessStatus } from './memory.ts';
import type { QueuePair } from './qp.ts';
import type { Transmitter, WriteDone } from './transmit.ts';
import { accessStatusText, checkSendRequest, hex, localAccessText } from './qp-checks.ts';
import {
  ALL_ONES_64,
  ATOMIC_REQUEST_HEADER_LENGTH,
  AtomicOpcode,
  encodeAtomicRequest,
  encodeImmediateData,
  IMMEDIATE_DATA_HEADER_LENGTH,
  type AtomicResponseHeader,
} from './wire/atomics.ts';
import { DDP_UNTAGGED_HEADER_LENGTH, QN_READ_REQUEST, QN_SEND, readUint32 } from './wire/ddp.ts';
import {
  encodeReadRequestAt,
  RDMAP_ECODE_UNEXPECTED_OPCODE,
  RDMAP_ETYPE_LOCAL_CATASTROPHIC,
  RDMAP_ETYPE_REMOTE_OPERATION,
  RDMAP_ETYPE_REMOTE_PROTECTION,
  RdmapOpcode,
  READ_REQUEST_HEADER_LENGTH,
  TerminateLayer,
} from './wire/rdmap.ts';
import { wcOpcodeFor, WcStatus, type SendWorkRequest, type Sge } from './work.ts';

const HOST_LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
const MAX_MESSAGE = 0xffffffff;
/** The longest Send postWriteThenSend frames (the transmitter copies it behind its header). */
const INLINE_SEND = 4096;

const SendWqeState = { Queued: 0, InFlight: 1, Done: 2 } as const;
type SendWqeState = (typeof SendWqeState)[keyof typeof SendWqeState];

const NO_WR: SendWorkRequest = { wrId: 0, opcode: 'SEND' };
const NO_BYTES = new Uint8Array(0);

/**
 * A send queue entry. Entries are pooled and reused: one is retired when it has completed in
 * order and the transport has reported every write it was handed (a late write callback must
 * never reach the entry's next work request), so a steady stream of requests allocates none.
 */
class SendWqe {
  wr: SendWorkRequest = NO_WR;
  signaled = true;
  state: SendWqeState = SendWqeState.Queued;
  status: WcStatus = WcStatus.Success;
  error: string | undefined = undefined;
  byteLength = 0;
  atomicResult: bigint | undefined = undefined;
  /** MSN of the request message on queue 1 (reads and atomics), for Terminate attribution. */
  requestMsn: number | undefined = undefined;
  /** Writes handed to the transmitter whose done callback has not run yet. */
  writesPending = 0;
  /** Left the send queue; back to the pool once `writesPending` is 0. */
  dequeued = false;
  /**
   * An unsignaled RDMA Write posted with this entry's Send as one (Requester.postWriteThenSend):
   * it completes with the Send, and reports a completion of its own only when it fails.
   */
  lead: SendWorkRequest | undefined = undefined;
  leadLength = 0;
  /** The done callback of this entry's writes, bound once. */
  readonly sentBound: WriteDone;

  constructor(requester: Requester) {
    this.sentBound = (error) => requester.sent(this, error);
  }

  /** Made ready for `wr`: queued, or (`byteLength` >= 0) framed already, its write to the sink pending. */
  reuse(wr: SendWorkRequest, signaled: boolean, byteLength: number): void {
    this.wr = wr;
    this.signaled = signaled;
    this.state = byteLength < 0 ? SendWqeState.Queued : SendWqeState.InFlight;
    this.status = WcStatus.Success;
    this.error = undefined;
    this.byteLength = Math.max(byteLength, 0);
    this.atomicResult = undefined;
    this.requestMsn = undefined;
    this.writesPending = byteLength < 0 ? 0 : 1;
    this.dequeued = false;
    this.lead = undefined;
  }
}

/** An outbound RDMA Read or Atomic (or the RTR read) waiting for its response; pooled. */
export class OutstandingRequest {
  kind: 'read' | 'atomic' | 'rtr' = 'read';
  wqe: SendWqe | undefined = undefined;
  msn = 0;
  // Reads: where the response lands.
  sinkStag = 0;
  /** The sink's tagged offset as 32-bit halves (the receive path compares without BigInts). */
  sinkToHigh = 0;
  sinkToLow = 0;
  sinkOffset = 0;
  length = 0;
  received = 0;
  // Atomics.
  requestId = 0;
  resultSge: Sge | undefined = undefined;

  set(
    kind: 'read' | 'atomic' | 'rtr',
    wqe: SendWqe | undefined,
    msn: number,
    sinkStag: number,
    sinkToHigh: number,
    sinkToLow: number,
    sinkOffset: number,
    length: number,
    requestId: number,
    resultSge: Sge | undefined,
  ): void {
    this.kind = kind;
    this.wqe = wqe;
    this.msn = msn;
    this.sinkStag = sinkStag;
    this.sinkToHigh = sinkToHigh;
    this.sinkToLow = sinkToLow;
    this.sinkOffset = sinkOffset;
    this.length = length;
    this.received = 0;
    this.requestId = requestId;
    this.resultSge = resultSge;
  }
}

export class Requester {
  /**
   * Entries [sqHead, sqTail) are live; the array never shrinks (entries past sqTail are stale):
   * truncating it would free its storage and the next posts would allocate it again.
   */
  private readonly sq: SendWqe[] = [];
  private sqHead = 0; // oldest WQE not yet completed
  private sqNext = 0; // next WQE to transmit
  private sqTail = 0; // one past the newest WQE
  /** Outbound reads and atomics in request order; their responses arrive in the same order. */
  readonly orq: OutstandingRequest[] = [];
  /** Reads and atomics in `orq` (the RTR read does not count against ORD). */
  private outstandingRequests = 0;
  private nextRequestId = 1;
  /** The gather list of the WR being started, as views (see gather()). */
  private readonly gathered: Uint8Array[] = [];
  /** Retired entries, for reuse. */
  private readonly pool: SendWqe[] = [];
  /** Answered RDMA Read entries of `orq`, for reuse. */
  private readonly requestPool: OutstandingRequest[] = [];
  /** The Read Request header being sent (the transmitter copies it while framing). */
  private readonly readRequestHeader = new Uint8Array(READ_REQUEST_HEADER_LENGTH);

  constructor(private readonly qp: QueuePair) {}

  /** Send WRs posted and not yet completed. */
  get outstanding(): number {
    return this.sqTail - this.sqHead;
  }

  post(wr: SendWorkRequest): void {
    const qp = this.qp;
    checkSendRequest(wr, qp.maxSge);
    if (qp.state === 'idle' || qp.state === 'connecting') {
      throw new RnicError('ENOTCONN', `QP ${qp.qpNumber} is not connected (state ${qp.state}); post sends once connect/accept resolved`);
    }
    if (this.sqTail - this.sqHead >= qp.maxSendWr) {
      throw new RnicError('ENOMEM', `send queue of QP ${qp.qpNumber} is full (${qp.maxSendWr} outstanding)`);
    }
    const wqe = this.pool.pop() ?? new SendWqe(this);
    wqe.reuse(wr, wr.signaled ?? qp.signalAll, -1);
    this.sq[this.sqTail++] = wqe;
    if (qp.state === 'error') {
      this.finishWqe(wqe, WcStatus.WrFlushError, 'QP is in the error state');
      this.sqNext = this.sqTail;
      this.completeInOrder();
      return;
    }
    qp.transmitQueued();
  }

  /**
   * Posts an unsignaled RDMA Write and the Send behind it as one send queue entry, framed at once
   * (Transmitter.sendWriteThenSend), when they would go out straight away anyway: the stream in
   * full operation, nothing queued ahead of them, room below the transmit high-water mark, their
   * memory accessible, the Send one FPDU. The wire, the order of completions and what a failure
   * reports are those of post(write) then post(send); false (nothing done) when they do not
   * qualify, and the caller posts them one by one. The QP calls this outside its transmit loop,
   * with the responder idle (QueuePair.postWriteThenSend).
   */
  postWriteThenSend(write: SendWorkRequest, send: SendWorkRequest): boolean {
    const qp = this.qp;
    const transmitter = qp.transmitter;
    if (transmitter === undefined || transmitter.markers || qp.state !== 'rts') return false;
    // Two entries' room, as posting them one by one needs.
    if (this.sqNext !== this.sqTail || this.sqTail - this.sqHead + 2 > qp.maxSendWr) return false;
    if (write.opcode !== 'RDMA_WRITE' || (write.signaled ?? qp.signalAll) || write.fence === true) return false;
    const invalidate = send.opcode === 'SEND_WITH_INV';
    if ((send.opcode !== 'SEND' && !invalidate) || send.solicited === true || send.fence === true) return false;
    const writeList = write.sgList;
    const sendList = send.sgList;
    if (writeList === undefined || writeList.length !== 1 || sendList === undefined || sendList.length !== 1 || qp.maxSge < 1) return false;
    const remote = write.remote;
    if (remote === undefined || !Number.isInteger(remote.stag)) return false;
    const to = remote.taggedOffset;
    if (typeof to !== 'number' || !Number.isSafeInteger(to) || to < 0) return false;
    if (invalidate && !Number.isInteger(send.invalidateStag)) return false;
    const writeSge = writeList[0]!;
    const sendSge = sendList[0]!;
    // What checkSendRequest would refuse goes the one-by-one way, to be refused there.
    if (!Number.isInteger(writeSge.lkey) || !Number.isInteger(sendSge.lkey)) return false;
    if (writeSge.length > MAX_MESSAGE || sendSge.length > Math.min(INLINE_SEND, transmitter.mulpdu - DDP_UNTAGGED_HEADER_LENGTH)) return false;
    if (qp.transmitFull()) return false;
    // The checks gather() makes; one that fails leaves the failure to the one-by-one path.
    const memory = qp.memory;
    let data: Uint8Array = NO_BYTES;
    if (writeSge.length !== 0) {
      if (memory.checkLocal(writeSge.lkey >>> 0, qp.pd, 0, writeSge.offset, writeSge.length) !== AccessStatus.Ok) return false;
      data = memory.resolvedRegion!.view(writeSge.offset, writeSge.length);
    }
    let sendData: Uint8Array = NO_BYTES;
    if (sendSge.length !== 0) {
      if (memory.checkLocal(sendSge.lkey >>> 0, qp.pd, 0, sendSge.offset, sendSge.length) !== AccessStatus.Ok) return false;
      sendData = memory.resolvedRegion!.view(sendSge.offset, sendSge.length);
    }
    const wqe = this.pool.pop() ?? new SendWqe(this);
    wqe.reuse(send, send.signaled ?? qp.signalAll, sendSge.length);
    wqe.lead = write;
    wqe.leadLength = writeSge.length;
    this.sq[this.sqTail++] = wqe;
    this.sqNext = this.sqTail;
    const observer = qp.observer;
    if (observer !== undefined) {
      // What starting the two entries would have told the SRAM model.
      observer.queuePairContext(qp.qpNumber, true);
      observer.queuePairContext(qp.qpNumber, true);
    }
    transmitter.sendWriteThenSend(
      remote.stag >>> 0,
      Math.floor(to / 0x1_0000_0000),
      to % 0x1_0000_0000,
      data,
      invalidate ? RdmapOpcode.SendWithInvalidate : RdmapOpcode.Send,
      invalidate ? send.invalidateStag! >>> 0 : 0,
      sendData,
      wqe.sentBound,
    );
    return true;
  }

  /**
   * post(send) for a Send or Send with Invalidate of one SGE that fits one FPDU, framed at once
   * (Transmitter.sendSmall) when it would leave at once anyway, under the conditions of
   * postWriteThenSend; false (nothing done) when it does not qualify (the caller posts it).
   */
  postSmallSend(send: SendWorkRequest): boolean {
    const qp = this.qp;
    const transmitter = qp.transmitter;
    if (transmitter === undefined || transmitter.markers || qp.state !== 'rts') return false;
    if (this.sqNext !== this.sqTail || this.sqTail - this.sqHead >= qp.maxSendWr || qp.maxSge < 1) return false;
    if (send.sgList !== undefined && send.sgList.length === 2) return this.postHeadAndData(send, transmitter);
    if (!this.smallSend(send, transmitter.mulpdu) || qp.transmitFull()) return false;
    const data = this.sendPayload(send);
    if (data === undefined) return false;
    const wqe = this.startedEntry(send, data.length, 1);
    const invalidate = send.opcode === 'SEND_WITH_INV';
    transmitter.sendSmall(invalidate ? RdmapOpcode.SendWithInvalidate : RdmapOpcode.Send, invalidate ? send.invalidateStag! >>> 0 : 0, data, wqe.sentBound);
    return true;
  }

  /**
   * postSmallSend's form for a Send (with Invalidate) of two SGEs in one FPDU whose first is short
   * (at most INLINE_SEND octets): a KBTP inline STORE's request, then the block from the caller's
   * registered buffer (issue 16: through post(), the initiator's 16 KiB STORE spent ~3,000
   * instructions in the generic send layers). Framed at once by Transmitter.sendHeadAndData, the
   * head copied behind the headers and the data handed to the sink as a view, as gather() and
   * sendUntagged would frame it.
   */
  private postHeadAndData(send: SendWorkRequest, transmitter: Transmitter): boolean {
    const qp = this.qp;
    const invalidate = send.opcode === 'SEND_WITH_INV';
    if ((send.opcode !== 'SEND' && !invalidate) || send.solicited === true || send.fence === true || qp.maxSge < 2) return false;
    if (invalidate && !Number.isInteger(send.invalidateStag)) return false;
    const headSge = send.sgList![0]!;
    const dataSge = send.sgList![1]!;
    if (!Number.isInteger(headSge.lkey) || !Number.isInteger(dataSge.lkey)) return false;
    if (headSge.length > INLINE_SEND || headSge.length + dataSge.length > transmitter.mulpdu - DDP_UNTAGGED_HEADER_LENGTH || qp.transmitFull()) return false;
    const head = this.gatheredView(headSge);
    if (head === undefined) return false;
    const data = this.gatheredView(dataSge);
    if (data === undefined) return false;
    const wqe = this.startedEntry(send, head.length + data.length, 1);
    transmitter.sendHeadAndData(
      invalidate ? RdmapOpcode.SendWithInvalidate : RdmapOpcode.Send,
      invalidate ? send.invalidateStag! >>> 0 : 0,
      head,
      data,
      wqe.sentBound,
    );
    return true;
  }

  /** The view of a gather element after gather()'s check (which resolves its region), or undefined when the check fails. */
  private gatheredView(sge: Sge): Uint8Array | undefined {
    if (sge.length === 0) return NO_BYTES;
    const qp = this.qp;
    if (qp.memory.checkLocal(sge.lkey >>> 0, qp.pd, 0, sge.offset, sge.length) !== AccessStatus.Ok) return undefined;
    return qp.memory.resolvedRegion!.view(sge.offset, sge.length);
  }

  /** A Send (with Invalidate) of one SGE, no solicited event or fence, that fits one FPDU: what checkSendRequest would pass of it, too. */
  private smallSend(send: SendWorkRequest, mulpdu: number): boolean {
    const invalidate = send.opcode === 'SEND_WITH_INV';
    if ((send.opcode !== 'SEND' && !invalidate) || send.solicited === true || send.fence === true) return false;
    if (invalidate && !Number.isInteger(send.invalidateStag)) return false;
    const list = send.sgList;
    if (list === undefined || list.length !== 1) return false;
    const sge = list[0]!;
    return Number.isInteger(sge.lkey) && sge.length <= Math.min(INLINE_SEND, mulpdu - DDP_UNTAGGED_HEADER_LENGTH);
  }

  /** The view of a small Send's SGE after gather()'s checks, or undefined when they fail. */
  private sendPayload(send: SendWorkRequest): Uint8Array | undefined {
    const qp = this.qp;
    const sge = send.sgList![0]!;
    if (sge.length === 0) return NO_BYTES;
    if (qp.memory.checkLocal(sge.lkey >>> 0, qp.pd, 0, sge.offset, sge.length) !== AccessStatus.Ok) return undefined;
    return qp.memory.resolvedRegion!.view(sge.offset, sge.length);
  }

  /** A send queue entry for `send`, in flight already (framed at once), as `starts` entries started one by one would have told the SRAM model. */
  private startedEntry(send: SendWorkRequest, byteLength: number, starts: number): SendWqe {
    const qp = this.qp;
    const wqe = this.pool.pop() ?? new SendWqe(this);
    wqe.reuse(send, send.signaled ?? qp.signalAll, byteLength);
    this.sq[this.sqTail++] = wqe;
    this.sqNext = this.sqTail;
    const observer = qp.observer;
    if (observer !== undefined) for (let i = 0; i < starts; i++) observer.queuePairContext(qp.qpNumber, true);
    return wqe;
  }

  /** The RTR Read Request went out: its zero-length Read Response completes nothing the ULP posted. */
  rtrReadSent(msn: number): void {
    const request = new OutstandingRequest();
    request.set('rtr', undefined, msn, 0, 0, 0, 0, 0, 0, undefined);
    this.orq.push(request);
  }

  /** Starts queued work requests while ORD, fences and the transmit high-water mark allow. */
  transmit(): void {
    const qp = this.qp;
    while (this.sqNext < this.sqTail && qp.state === 'rts') {
      if (qp.transmitFull()) break;
      const wqe = this.sq[this.sqNext]!;
      if (wqe.state === SendWqeState.Done) {
        this.sqNext++;
        continue;
      }
      const opcode = wqe.wr.opcode;
      const usesOrd = opcode === 'RDMA_READ' || opcode === 'ATOMIC_FETCH_ADD' || opcode === 'ATOMIC_CMP_SWAP';
      if (usesOrd && this.outstandingRequests >= Math.max(1, qp.ord)) break;
      if (wqe.wr.fence === true && this.outstandingRequests > 0) break;
      this.sqNext++;
      this.startWqe(wqe);
    }
  }

  private startWqe(wqe: SendWqe): void {
    const qp = this.qp;
    const wr = wqe.wr;
    const transmitter = qp.transmitter!;
    qp.observer?.queuePairContext(qp.qpNumber, true);
    wqe.state = SendWqeState.InFlight;
    switch (wr.opcode) {
      case 'SEND':
      case 'SEND_WITH_INV':
      case 'SEND_WITH_SE':
      case 'SEND_WITH_SE_INV': {
        const length = this.gather(wqe);
        if (length < 0) return;
        const invalidate = wr.opcode === 'SEND_WITH_INV' || wr.opcode === 'SEND_WITH_SE_INV';
        const solicited = wr.opcode === 'SEND_WITH_SE' || wr.opcode === 'SEND_WITH_SE_INV' || wr.solicited === true;
        const opcode = invalidate
          ? solicited
            ? RdmapOpcode.SendWithSolicitedEventAndInvalidate
            : RdmapOpcode.SendWithInvalidate
          : solicited
            ? RdmapOpcode.SendWithSolicitedEvent
            : RdmapOpcode.Send;
        wqe.byteLength = length;
        wqe.writesPending++;
        transmitter.sendUntagged(opcode, QN_SEND, invalidate ? wr.invalidateStag! >>> 0 : 0, undefined, this.gathered, length, wqe.sentBound);
        return;
      }
      case 'RDMA_WRITE':
      case 'RDMA_WRITE_WITH_IMM': {
        const length = this.gather(wqe);
        if (length < 0) return;
        wqe.byteLength = length;
        const remote = wr.remote!;
        const withImmediate = wr.opcode === 'RDMA_WRITE_WITH_IMM';
        if (!withImmediate) wqe.writesPending++;
        transmitter.sendTagged(RdmapOpcode.RdmaWrite, remote.stag >>> 0, remote.taggedOffset, this.gathered, length, withImmediate ? undefined : wqe.sentBound);
        if (withImmediate) {
          // RFC 7306: Write with Immediate is an RDMA Write followed by an Immediate Data message.
          const immediate = new Uint8Array(IMMEDIATE_DATA_HEADER_LENGTH);
          encodeImmediateData(immediate, 0, wr.immediate ?? 0n);
          const opcode = wr.solicited === true ? RdmapOpcode.ImmediateDataWithSolicitedEvent : RdmapOpcode.ImmediateData;
          wqe.writesPending++;
          transmitter.sendUntagged(opcode, QN_SEND, 0, immediate, undefined, 0, wqe.sentBound);
        }
        return;
      }
      case 'RDMA_READ': {
        const sge = wr.sgList?.[0];
        const length = sge?.length ?? 0;
        let sinkStag = 0;
        let sinkToHigh = 0;
        let sinkToLow = 0;
        let sinkOffset = 0;
        if (sge !== undefined && length > 0) {
          const status = qp.memory.checkLocal(sge.lkey >>> 0, qp.pd, Access.LocalWrite, sge.offset, length);
          if (status !== AccessStatus.Ok) {
            this.localFailure(wqe, WcStatus.LocalProtectionError, `RDMA Read sink: ${localAccessText(status, sge)}`);
            return;
          }
          const region = qp.memory.resolvedRegion!;
          sinkStag = region.stag;
          sinkOffset = sge.offset;
          const low = region.baseLow + sge.offset;
          sinkToHigh = region.baseHigh + Math.floor(low / 0x1_0000_0000);
          sinkToLow = low % 0x1_0000_0000;
        }
        const remote = wr.remote!;
        const to = remote.taggedOffset;
        // A number TO (below 2^53, as checked at posting) is split without a BigInt.
        const sourceHigh = typeof to === 'number' ? Math.floor(to / 0x1_0000_0000) : Number(BigInt.asUintN(64, to) >> 32n);
        const sourceLow = typeof to === 'number' ? to % 0x1_0000_0000 : Number(BigInt.asUintN(64, to) & 0xffffffffn);
        // One header for every Read Request: the transmitter copies it while framing.
        const header = this.readRequestHeader;
        encodeReadRequestAt(header, 0, sinkStag, sinkToHigh, sinkToLow, length, remote.stag >>> 0, sourceHigh, sourceLow);
        const msn = transmitter.peekMsn(QN_READ_REQUEST);
        wqe.requestMsn = msn;
        wqe.byteLength = length;
        const request = this.requestPool.pop() ?? new OutstandingRequest();
        request.set('read', wqe, msn, sinkStag, sinkToHigh, sinkToLow, sinkOffset, length, 0, undefined);
        this.orq.push(request);
        this.outstandingRequests++;
        transmitter.sendUntagged(RdmapOpcode.RdmaReadRequest, QN_READ_REQUEST, 0, header);
        return;
      }
      case 'ATOMIC_FETCH_ADD':
      case 'ATOMIC_CMP_SWAP': {
        const sge = wr.sgList?.[0];
        if (sge !== undefined) {
          const status = qp.memory.checkLocal(sge.lkey >>> 0, qp.pd, Access.LocalWrite, sge.offset, 8);
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
        const request = new OutstandingRequest();
        request.set('atomic', wqe, msn, 0, 0, 0, 0, 8, requestId, sge);
        this.orq.push(request);
        this.outstandingRequests++;
        transmitter.sendUntagged(RdmapOpcode.AtomicRequest, QN_READ_REQUEST, 0, header);
        return;
      }
      case 'LOCAL_INV': {
        const status = qp.memory.invalidate(wr.invalidateStag! >>> 0, qp.pd);
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

  /**
   * Resolves a WR's gather list to views of registered memory, in `this.gathered` (one array,
   * reused: the transmitter reads it only while framing); returns the length, or -1 after a failure.
   */
  private gather(wqe: SendWqe): number {
    const qp = this.qp;
    const views = this.gathered;
    // Overwritten in place, never truncated (`length = 0` frees the array's storage, and the
    // next WR would allocate it again); entries past this WR's are emptied.
    let used = 0;
    let length = 0;
    const sgList = wqe.wr.sgList;
    const count = sgList === undefined ? 0 : sgList.length;
    for (let i = 0; i < count; i++) {
      const sge = sgList![i]!;
      if (sge.length === 0) continue;
      const status = qp.memory.checkLocal(sge.lkey >>> 0, qp.pd, 0, sge.offset, sge.length);
      if (status !== AccessStatus.Ok) {
        this.localFailure(wqe, WcStatus.LocalProtectionError, `gather element: ${localAccessText(status, sge)}`);
        return -1;
      }
      views[used++] = qp.memory.resolvedRegion!.view(sge.offset, sge.length);
      length += sge.length;
    }
    for (let i = used; i < views.length; i++) views[i] = NO_BYTES;
    if (length > MAX_MESSAGE) {
      this.localFailure(wqe, WcStatus.LocalLengthError, `message of ${length} octets exceeds 2^32-1`);
      return -1;
    }
    return length;
  }

  /** A Send or Write was taken by TCP: it completes locally (RFC 5040 §5.5 rule 14). */
  sent(wqe: SendWqe, error: Error | null | undefined): void {
    wqe.writesPending--;
    if (wqe.state !== SendWqeState.Done) {
      if (error !== undefined && error !== null) this.finishWqe(wqe, WcStatus.WrFlushError, `not sent: ${error.message}`);
      else this.finishWqe(wqe, WcStatus.Success);
      this.completeInOrder();
    }
    if (wqe.dequeued && wqe.writesPending === 0) this.retire(wqe);
    this.qp.writeDone();
  }

  private retire(wqe: SendWqe): void {
    wqe.wr = NO_WR;
    wqe.lead = undefined;
    wqe.error = undefined;
    wqe.dequeued = false;
    if (this.pool.length < this.qp.maxSendWr) this.pool.push(wqe);
  }

  /**
   * A local error while building an outbound message: the WR fails, and RFC 5040 §7.1 ends
   * the stream with a Terminate carrying no headers.
   */
  private localFailure(wqe: SendWqe, status: WcStatus, reason: string): void {
    this.finishWqe(wqe, status, reason);
    this.qp.fail({ layer: TerminateLayer.Rdmap, errorType: RDMAP_ETYPE_LOCAL_CATASTROPHIC, errorCode: 0, reason });
  }

  finishWqe(wqe: SendWqe, status: WcStatus, error?: string): void {
    if (wqe.state === SendWqeState.Done) return;
    wqe.state = SendWqeState.Done;
    wqe.status = status;
    if (error !== undefined) wqe.error = error;
  }

  /** Emits completions for finished WQEs at the head of the send queue, in posting order. */
  completeInOrder(): void {
    const qp = this.qp;
    while (this.sqHead < this.sqTail) {
      const wqe = this.sq[this.sqHead]!;
      if (wqe.state !== SendWqeState.Done) break;
      this.sqHead++;
      const lead = wqe.lead;
      if (lead !== undefined && wqe.status !== WcStatus.Success) {
        // The Write posted with this Send failed with it: its completion comes first, as its own entry's would have.
        qp.addCompletion(qp.sendCq, lead.wrId, wqe.status, wcOpcodeFor(lead.opcode), wqe.leadLength, undefined, wqe.error);
      }
      if (wqe.signaled || wqe.status !== WcStatus.Success) {
        // Written straight into the CQ's record: no object per completion.
        const record = qp.addCompletion(qp.sendCq, wqe.wr.wrId, wqe.status, wcOpcodeFor(wqe.wr.opcode), wqe.byteLength, undefined, wqe.error);
        if (record !== undefined) record.atomicResult = wqe.atomicResult;
      }
      wqe.dequeued = true;
      if (wqe.writesPending === 0) this.retire(wqe);
    }
    if (this.sqHead === this.sqTail) {
      // Empty: start over at the front, so the array stays as long as the most ever outstanding.
      this.sqNext -= this.sqHead;
      this.sqHead = 0;
      this.sqTail = 0;
    } else if (this.sqHead > 1024 && this.sqHead * 2 > this.sqTail) {
      // Compacted in place: splice would allocate an array of the removed entries.
      const kept = this.sqTail - this.sqHead;
      for (let i = 0; i < kept; i++) this.sq[i] = this.sq[this.sqHead + i]!;
      this.sqTail = kept;
      this.sqNext -= this.sqHead;
      this.sqHead = 0;
    }
  }

  /** The last Read Response segment of the oldest outstanding read arrived: it completes. */
  readResponseDone(): void {
    const request = this.orq.shift();
    if (request === undefined) return;
    if (request.kind !== 'rtr') this.outstandingRequests--;
    const wqe = request.wqe;
    if (request.kind === 'read') {
      request.wqe = undefined;
      if (this.requestPool.length < 64) this.requestPool.push(request);
    }
    if (wqe !== undefined) {
      this.finishWqe(wqe, WcStatus.Success);
      this.completeInOrder();
    }
  }

  /**
   * An Atomic Response arrived: it must answer the oldest outstanding request, an atomic with the
   * same request id. False when it does not (the receive path then terminates the stream) or
   * when writing the result failed the stream already.
   */
  atomicResponseArrived(response: AtomicResponseHeader, fpdu: Uint8Array): boolean {
    const qp = this.qp;
    const request = this.orq[0];
    if (request === undefined || request.kind !== 'atomic' || request.requestId !== response.requestId) {
      qp.receiver!.failMessage({
        layer: TerminateLayer.Rdmap,
        errorType: RDMAP_ETYPE_REMOTE_OPERATION,
        errorCode: RDMAP_ECODE_UNEXPECTED_OPCODE,
        reason:
          request?.kind === 'atomic'
            ? `Atomic Response for request ${response.requestId}, expected ${request.requestId}`
            : 'Atomic Response without an outstanding atomic',
        failedFpdu: fpdu.slice(),
      });
      return false;
    }
    this.orq.shift();
    this.outstandingRequests--;
    const wqe = request.wqe!;
    wqe.atomicResult = response.originalValue;
    const sge = request.resultSge;
    if (sge !== undefined) {
      const status = qp.memory.checkLocal(sge.lkey >>> 0, qp.pd, Access.LocalWrite, sge.offset, 8);
      if (status !== AccessStatus.Ok) {
        this.finishWqe(wqe, WcStatus.LocalProtectionError, `atomic result buffer: ${localAccessText(status, sge)}`);
        this.completeInOrder();
        qp.fail({ layer: TerminateLayer.Rdmap, errorType: RDMAP_ETYPE_LOCAL_CATASTROPHIC, errorCode: 0, reason: wqe.error! });
        return false;
      }
      const region = qp.memory.resolvedRegion!;
      new DataView(region.buffer, region.byteOffset + sge.offset, 8).setBigUint64(0, response.originalValue, HOST_LITTLE_ENDIAN);
    }
    this.finishWqe(wqe, WcStatus.Success);
    this.completeInOrder();
    return true;
  }

  /** Gives the read or atomic a received Terminate names its remote error status. */
  attributeRemoteError(info: TerminateInfo): void {
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

  /** The QP left RTS: every send WR not yet complete completes as flushed. */
  flush(reason: string): void {
    for (let i = this.sqHead; i < this.sqTail; i++) this.finishWqe(this.sq[i]!, WcStatus.WrFlushError, reason);
    this.sqNext = this.sqTail;
    this.orq.length = 0;
    this.outstandingRequests = 0;
  }
}
