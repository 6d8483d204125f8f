// The responder side of a queue pair: the peer's RDMA Read and Atomic Requests, queued within
// IRD and answered in arrival order from registered memory (RFC 5040 §5.3, RFC 7306 §7-8), as
// siw's inbound read queue does.
import { executeAtomic, isAtomicAligned } from './atomic-executor.ts';
import { Access, AccessStatus } from './memory.ts';
import type { QueuePair } from './qp.ts';
import { accessStatusText, hex, rdmapProtectionCode } from './qp-checks.ts';
import { ATOMIC_RESPONSE_HEADER_LENGTH, AtomicOpcode, encodeAtomicResponse, type AtomicRequestHeader } from './wire/atomics.ts';
import { DDP_ECODE_UNTAGGED_NO_BUFFER, DDP_ETYPE_UNTAGGED, QN_ATOMIC_RESPONSE, readUint32, taggedOffsetText } from './wire/ddp.ts';
import {
  RDMAP_ECODE_CATASTROPHIC_STREAM,
  RDMAP_ECODE_UNEXPECTED_OPCODE,
  RDMAP_ETYPE_REMOTE_OPERATION,
  RDMAP_ETYPE_REMOTE_PROTECTION,
  RdmapOpcode,
  TerminateLayer,
} from './wire/rdmap.ts';

const EMPTY = new Uint8Array(0);
const NO_SOURCE: readonly Uint8Array[] = [];

/** Longest request FPDU kept (length field + an Atomic Request's ULPDU, the longest). */
const REQUEST_FPDU_MAX = 2 + 18 + 52;

/** An inbound Read or Atomic Request waiting for its response; pooled (reads allocate nothing). */
class InboundRequest {
  kind: 'read' | 'atomic' = 'read';
  /** Copy of the request FPDU (length field + ULPDU) for a Terminate that must echo it. */
  private readonly bytes = new Uint8Array(REQUEST_FPDU_MAX);
  private fpduLength = 0;
  // A Read Request's fields, the tagged offsets as 32-bit halves.
  sinkStag = 0;
  sinkHigh = 0;
  sinkLow = 0;
  readSize = 0;
  sourceStag = 0;
  sourceHigh = 0;
  sourceLow = 0;
  atomic: AtomicRequestHeader | undefined = undefined;

  keep(fpdu: Uint8Array): void {
    this.bytes.set(fpdu.length <= REQUEST_FPDU_MAX ? fpdu : fpdu.subarray(0, REQUEST_FPDU_MAX));
    this.fpduLength = Math.min(fpdu.length, REQUEST_FPDU_MAX);
  }

  /** The request's FPDU, for a Terminate (a copy: the entry is reused). */
  get fpdu(): Uint8Array {
    return this.bytes.slice(0, this.fpduLength);
  }
}

export class Responder {
  private readonly irq: InboundRequest[] = [];
  private readonly pool: InboundRequest[] = [];
  private pendingReadResponses = 0;
  private atomicWaitsForReads = false;

  /** The one-element gather list of a Read Response (the transmitter reads it during the call only). */
  private readonly source: Uint8Array[] = [EMPTY];

  constructor(private readonly qp: QueuePair) {}

  private gatherOne(view: Uint8Array): readonly Uint8Array[] {
    this.source[0] = view;
    return this.source;
  }

  /**
   * Queues an inbound RDMA Read Request (already admitted, or the RTR read) whose 28-octet
   * header starts at `header` in `fpdu`: its fields are read straight into a pooled entry.
   */
  queueRead(fpdu: Uint8Array, header: number): void {
    const request = this.entry(fpdu);
    request.kind = 'read';
    request.sinkStag = readUint32(fpdu, header);
    request.sinkHigh = readUint32(fpdu, header + 4);
    request.sinkLow = readUint32(fpdu, header + 8);
    request.readSize = readUint32(fpdu, header + 12);
    request.sourceStag = readUint32(fpdu, header + 16);
    request.sourceHigh = readUint32(fpdu, header + 20);
    request.sourceLow = readUint32(fpdu, header + 24);
    request.atomic = undefined;
    this.irq.push(request);
  }

  queueAtomic(fpdu: Uint8Array, atomic: AtomicRequestHeader): void {
    const request = this.entry(fpdu);
    request.kind = 'atomic';
    request.atomic = atomic;
    this.irq.push(request);
  }

  private entry(fpdu: Uint8Array): InboundRequest {
    const request = this.pool.pop() ?? new InboundRequest();
    request.keep(fpdu);
    return request;
  }

  /** The oldest request was answered: its entry goes back to the pool. */
  private served(): void {
    const request = this.irq.shift();
    if (request === undefined) return;
    request.atomic = undefined;
    if (this.pool.length < 64) this.pool.push(request);
  }

  /**
   * IRD accounting shared by RDMA Read and Atomic Requests (RFC 7306 §7.1): IRD is the depth of
   * the queue of requests waiting to be served. A request leaves it when its response is handed
   * to the transport; while the peer does not read, responses stop being generated and further
   * requests wait here, so a peer that keeps more than IRD requests waiting breaks the protocol.
   */
  accept(fpdu: Uint8Array, what: string): boolean {
    const qp = this.qp;
    if (this.irq.length < Math.max(1, qp.ird)) return true;
    qp.receiver!.failMessage({
      layer: TerminateLayer.Ddp,
      errorType: DDP_ETYPE_UNTAGGED,
      errorCode: DDP_ECODE_UNTAGGED_NO_BUFFER,
      reason: `${what} beyond the ${qp.ird} outstanding reads and atomics allowed (IRD)`,
      failedFpdu: fpdu.slice(),
    });
    return false;
  }

  /** No inbound request waits for its response (nothing transmit() would send). */
  get idle(): boolean {
    return this.irq.length === 0;
  }

  /** Answers queued requests while the transmit high-water mark allows. */
  transmit(): void {
    const qp = this.qp;
    while (this.irq.length > 0 && qp.state === 'rts') {
      if (qp.transmitFull()) break;
      if (!this.serveOldest()) break;
    }
  }

  /** Serves the oldest inbound request; false when it has to wait. */
  private serveOldest(): boolean {
    const qp = this.qp;
    const request = this.irq[0]!;
    const transmitter = qp.transmitter!;
    if (request.kind === 'read') {
      qp.observer?.queuePairContext(qp.qpNumber, true);
      const { sinkStag, sinkHigh, sinkLow, readSize } = request;
      if (readSize === 0) {
        // No source checks for a zero-length read (RFC 5040 §5.3); answer with an empty response.
        this.served();
        this.pendingReadResponses++;
        transmitter.sendTaggedAt(RdmapOpcode.RdmaReadResponse, sinkStag, sinkHigh, sinkLow, NO_SOURCE, 0, this.readResponseWritten);
        return true;
      }
      const status = qp.memory.checkRemoteAt(request.sourceStag, qp.pd, Access.RemoteRead, request.sourceHigh, request.sourceLow, readSize);
      if (status !== AccessStatus.Ok) {
        qp.fail({
          layer: TerminateLayer.Rdmap,
          errorType: RDMAP_ETYPE_REMOTE_PROTECTION,
          errorCode: rdmapProtectionCode(status),
          reason: `RDMA Read source STag 0x${hex(request.sourceStag)} TO ${taggedOffsetText(request.sourceHigh, request.sourceLow)} size ${readSize}: ${accessStatusText(status)}`,
          failedFpdu: request.fpdu,
        });
        return false;
      }
      const region = qp.memory.resolvedRegion!;
      const offset = qp.memory.resolvedOffset;
      this.served();
      this.pendingReadResponses++;
      transmitter.sendTaggedAt(
        RdmapOpcode.RdmaReadResponse,
        sinkStag,
        sinkHigh,
        sinkLow,
        this.gatherOne(region.view(offset, readSize)),
        readSize,
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
    qp.observer?.queuePairContext(qp.qpNumber, true);
    if (atomic.atomicOpcode !== AtomicOpcode.FetchAdd && atomic.atomicOpcode !== AtomicOpcode.CompareSwap) {
      qp.fail({
        layer: TerminateLayer.Rdmap,
        errorType: RDMAP_ETYPE_REMOTE_OPERATION,
        errorCode: RDMAP_ECODE_UNEXPECTED_OPCODE,
        reason: `unsupported atomic operation code ${atomic.atomicOpcode}`,
        failedFpdu: request.fpdu,
      });
      return false;
    }
    const status = qp.memory.checkRemote(atomic.remoteStag, qp.pd, Access.RemoteAtomic, atomic.remoteTaggedOffset, 8);
    if (status !== AccessStatus.Ok) {
      qp.fail({
        layer: TerminateLayer.Rdmap,
        errorType: RDMAP_ETYPE_REMOTE_PROTECTION,
        errorCode: rdmapProtectionCode(status),
        reason: `atomic target STag 0x${hex(atomic.remoteStag)} TO ${atomic.remoteTaggedOffset}: ${accessStatusText(status)}`,
        failedFpdu: request.fpdu,
      });
      return false;
    }
    const region = qp.memory.resolvedRegion!;
    const offset = qp.memory.resolvedOffset;
    if (!isAtomicAligned(region, offset)) {
      // RFC 7306 §8.2: memory untouched, Terminate remote operation / catastrophic (0x07).
      qp.fail({
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
    this.served();
    const response = new Uint8Array(ATOMIC_RESPONSE_HEADER_LENGTH);
    encodeAtomicResponse(response, 0, { requestId: atomic.requestId, originalValue: original });
    transmitter.sendUntagged(RdmapOpcode.AtomicResponse, QN_ATOMIC_RESPONSE, 0, response);
    return true;
  }

  private readResponseWritten = (): void => {
    this.pendingReadResponses--;
    if (this.pendingReadResponses === 0 && this.atomicWaitsForReads) {
      this.atomicWaitsForReads = false;
      this.qp.transmitQueued();
    } else {
      this.qp.writeDone();
    }
  };

  /** The QP left RTS: queued requests are dropped unanswered. */
  flush(): void {
    this.irq.length = 0;
  }
}
