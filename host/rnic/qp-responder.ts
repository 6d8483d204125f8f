// The responder side of a queue pair: the peer's RDMA Read and Atomic Requests, queued within
// IRD and answered in arrival order from registered memory (RFC 5040 §5.3, RFC 7306 §7-8), as
// siw's inbound read queue does.
import { executeAtomic, isAtomicAligned } from './atomic-executor.ts';
import { Access, AccessStatus } from './memory.ts';
import type { QueuePair } from './qp.ts';
import { accessStatusText, hex, rdmapProtectionCode } from './qp-checks.ts';
import { ATOMIC_RESPONSE_HEADER_LENGTH, AtomicOpcode, encodeAtomicResponse, type AtomicRequestHeader } from './wire/atomics.ts';
import { DDP_ECODE_UNTAGGED_NO_BUFFER, DDP_ETYPE_UNTAGGED, QN_ATOMIC_RESPONSE } from './wire/ddp.ts';
import {
  RDMAP_ECODE_CATASTROPHIC_STREAM,
  RDMAP_ECODE_UNEXPECTED_OPCODE,
  RDMAP_ETYPE_REMOTE_OPERATION,
  RDMAP_ETYPE_REMOTE_PROTECTION,
  RdmapOpcode,
  TerminateLayer,
  type ReadRequestHeader,
} from './wire/rdmap.ts';

const EMPTY = new Uint8Array(0);

interface InboundRequest {
  readonly kind: 'read' | 'atomic';
  /** Copy of the request FPDU (length field + ULPDU) for a Terminate that must echo it. */
  readonly fpdu: Uint8Array;
  readonly read?: ReadRequestHeader;
  readonly atomic?: AtomicRequestHeader;
}

export class Responder {
  private readonly irq: InboundRequest[] = [];
  private pendingReadResponses = 0;
  private atomicWaitsForReads = false;

  /** The one-element gather list of a Read Response (the transmitter reads it during the call only). */
  private readonly source: Uint8Array[] = [EMPTY];

  constructor(private readonly qp: QueuePair) {}

  private gatherOne(view: Uint8Array): readonly Uint8Array[] {
    this.source[0] = view;
    return this.source;
  }

  /** Queues an inbound RDMA Read Request (already admitted, or the RTR read). */
  queueRead(fpdu: Uint8Array, read: ReadRequestHeader): void {
    this.irq.push({ kind: 'read', fpdu: fpdu.slice(), read });
  }

  queueAtomic(fpdu: Uint8Array, atomic: AtomicRequestHeader): void {
    this.irq.push({ kind: 'atomic', fpdu: fpdu.slice(), atomic });
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
      const read = request.read!;
      qp.observer?.queuePairContext(qp.qpNumber, true);
      if (read.readSize === 0) {
        // No source checks for a zero-length read (RFC 5040 §5.3); answer with an empty response.
        this.irq.shift();
        this.pendingReadResponses++;
        transmitter.sendTagged(RdmapOpcode.RdmaReadResponse, read.sinkStag, read.sinkTaggedOffset, [], 0, this.readResponseWritten);
        return true;
      }
      const status = qp.memory.checkRemote(read.sourceStag, qp.pd, Access.RemoteRead, read.sourceTaggedOffset, read.readSize);
      if (status !== AccessStatus.Ok) {
        qp.fail({
          layer: TerminateLayer.Rdmap,
          errorType: RDMAP_ETYPE_REMOTE_PROTECTION,
          errorCode: rdmapProtectionCode(status),
          reason: `RDMA Read source STag 0x${hex(read.sourceStag)} TO ${read.sourceTaggedOffset} size ${read.readSize}: ${accessStatusText(status)}`,
          failedFpdu: request.fpdu,
        });
        return false;
      }
      const region = qp.memory.resolvedRegion!;
      const offset = qp.memory.resolvedOffset;
      this.irq.shift();
      this.pendingReadResponses++;
      transmitter.sendTagged(
        RdmapOpcode.RdmaReadResponse,
        read.sinkStag,
        read.sinkTaggedOffset,
        this.gatherOne(region.view(offset, read.readSize)),
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
