// The checks an inbound FPDU's DDP and RDMAP headers must pass before anything is placed
// (RFC 5041 section 7, RFC 5040 section 7): pure functions of the header fields and the stream's
// expectations, apart from the receive state machine that collects them. Each returns undefined
// when the segment may go on, or the Terminate cause to report; a fault is an allocation, which
// only a failing stream pays.

import {
  DDP_ECODE_CATASTROPHIC,
  DDP_ECODE_TAGGED_BASE_BOUNDS,
  DDP_ECODE_TAGGED_INVALID_STAG,
  DDP_ECODE_TAGGED_VERSION,
  DDP_ECODE_UNTAGGED_INVALID_MO,
  DDP_ECODE_UNTAGGED_INVALID_QN,
  DDP_ECODE_UNTAGGED_MSN_RANGE,
  DDP_ECODE_UNTAGGED_TOO_LONG,
  DDP_ECODE_UNTAGGED_VERSION,
  DDP_ETYPE_CATASTROPHIC,
  DDP_ETYPE_TAGGED,
  DDP_ETYPE_UNTAGGED,
  DDP_UNTAGGED_HEADER_LENGTH,
  DDP_VERSION,
  DDP_VERSION_MASK,
  QN_SEND,
  taggedOffsetText,
} from './wire/ddp.ts';
import {
  RDMAP_ECODE_INVALID_VERSION,
  RDMAP_ECODE_UNEXPECTED_OPCODE,
  RDMAP_ETYPE_REMOTE_OPERATION,
  RDMAP_VERSION,
  RdmapOpcode,
  TERMINATE_CONTROL_LENGTH,
  TerminateLayer,
  isTaggedOpcode,
  untaggedQueueOf,
} from './wire/rdmap.ts';
import { rdmapHeaderLength, type TerminateCause } from './terminate.ts';

const TERMINATE_MIN_ULPDU = DDP_UNTAGGED_HEADER_LENGTH + TERMINATE_CONTROL_LENGTH;
/** A Terminate may carry the failed segment's DDP header and up to 28 octets of its RDMAP header. */
const TERMINATE_MAX_ULPDU = DDP_UNTAGGED_HEADER_LENGTH + TERMINATE_CONTROL_LENGTH + 2 + DDP_UNTAGGED_HEADER_LENGTH + 28;

function fault(layer: number, errorType: number, errorCode: number, reason: string): TerminateCause {
  return { layer, errorType, errorCode, reason };
}

/**
 * The ULPDU_Length alone: a length that cannot be right leaves the FPDU's extent unknown, so
 * such a fault is reported at once rather than after the FPDU's CRC.
 */
export function ulpduLengthFault(ulpduLength: number, ddpHeaderLength: number, maxUlpdu: number): TerminateCause | undefined {
  if (ulpduLength > maxUlpdu) {
    return fault(TerminateLayer.Ddp, DDP_ETYPE_CATASTROPHIC, DDP_ECODE_CATASTROPHIC, `ULPDU_Length ${ulpduLength} exceeds the ${maxUlpdu}-octet maximum`);
  }
  if (ulpduLength < ddpHeaderLength) {
    return fault(
      TerminateLayer.Ddp,
      DDP_ETYPE_CATASTROPHIC,
      DDP_ECODE_CATASTROPHIC,
      `ULPDU_Length ${ulpduLength} cannot hold the ${ddpHeaderLength}-octet DDP header`,
    );
  }
  return undefined;
}

/** Whether an untagged opcode's message is a single-FPDU control message (everything but a Send). */
export function isControlOpcode(opcode: number): boolean {
  const queue = untaggedQueueOf(opcode);
  return queue !== -1 && queue !== QN_SEND ? true : opcode === RdmapOpcode.ImmediateData || opcode === RdmapOpcode.ImmediateDataWithSolicitedEvent;
}

/**
 * The DDP and RDMAP control octets, and a control message's length, once the FPDU's extent is
 * known; `control` is isControlOpcode(opcode), which the receiver needs as well.
 */
export function controlOctetsFault(
  ulpduLength: number,
  ddpControl: number,
  rdmapControl: number,
  tagged: boolean,
  opcode: number,
  control: boolean,
): TerminateCause | undefined {
  if ((ddpControl & DDP_VERSION_MASK) !== DDP_VERSION) {
    return fault(
      TerminateLayer.Ddp,
      tagged ? DDP_ETYPE_TAGGED : DDP_ETYPE_UNTAGGED,
      tagged ? DDP_ECODE_TAGGED_VERSION : DDP_ECODE_UNTAGGED_VERSION,
      `DDP version ${ddpControl & DDP_VERSION_MASK} is not 1`,
    );
  }
  if (rdmapControl >> 6 !== RDMAP_VERSION) {
    return fault(TerminateLayer.Rdmap, RDMAP_ETYPE_REMOTE_OPERATION, RDMAP_ECODE_INVALID_VERSION, `RDMAP version ${rdmapControl >> 6} is not 1`);
  }
  if (opcode > RdmapOpcode.AtomicResponse || isTaggedOpcode(opcode) !== tagged) {
    return fault(
      TerminateLayer.Rdmap,
      RDMAP_ETYPE_REMOTE_OPERATION,
      RDMAP_ECODE_UNEXPECTED_OPCODE,
      `opcode 0x${opcode.toString(16)} in a ${tagged ? 'tagged' : 'untagged'} segment`,
    );
  }
  if (!control) return undefined;
  if (opcode === RdmapOpcode.Terminate) {
    if (ulpduLength < TERMINATE_MIN_ULPDU || ulpduLength > TERMINATE_MAX_ULPDU) {
      return fault(
        TerminateLayer.Ddp,
        DDP_ETYPE_UNTAGGED,
        DDP_ECODE_UNTAGGED_TOO_LONG,
        `Terminate ULPDU of ${ulpduLength} octets (allowed ${TERMINATE_MIN_ULPDU}..${TERMINATE_MAX_ULPDU})`,
      );
    }
    return undefined;
  }
  const expected = DDP_UNTAGGED_HEADER_LENGTH + rdmapHeaderLength(opcode);
  if (ulpduLength === expected) return undefined;
  const longer = ulpduLength > expected;
  return fault(
    TerminateLayer.Ddp,
    longer ? DDP_ETYPE_UNTAGGED : DDP_ETYPE_CATASTROPHIC,
    longer ? DDP_ECODE_UNTAGGED_TOO_LONG : DDP_ECODE_CATASTROPHIC,
    `a ${rdmapOpcodeLabel(opcode)} is a ${expected}-octet ULPDU, got ${ulpduLength}`,
  );
}

/** A tagged segment after the first of its message continues it: same opcode and STag, the next TO. */
export function taggedContinuationFault(
  opcode: number,
  stag: number,
  toHigh: number,
  toLow: number,
  expectedOpcode: number,
  expectedStag: number,
  nextHigh: number,
  nextLow: number,
): TerminateCause | undefined {
  if (opcode !== expectedOpcode || stag !== expectedStag) {
    return fault(TerminateLayer.Ddp, DDP_ETYPE_TAGGED, DDP_ECODE_TAGGED_INVALID_STAG, 'tagged segment does not continue the message in progress');
  }
  if (toHigh !== nextHigh || toLow !== nextLow) {
    return fault(
      TerminateLayer.Ddp,
      DDP_ETYPE_TAGGED,
      DDP_ECODE_TAGGED_BASE_BOUNDS,
      `tagged offset ${taggedOffsetText(toHigh, toLow)} does not continue at ${taggedOffsetText(nextHigh, nextLow)}`,
    );
  }
  return undefined;
}

/** An untagged segment names the queue its opcode belongs to. */
export function queueFault(opcode: number, queue: number): TerminateCause | undefined {
  const wanted = untaggedQueueOf(opcode);
  if (queue === wanted) return undefined;
  return fault(TerminateLayer.Ddp, DDP_ETYPE_UNTAGGED, DDP_ECODE_UNTAGGED_INVALID_QN, `${rdmapOpcodeLabel(opcode)} on queue ${queue}, expected ${wanted}`);
}

/** A control message is one whole segment, next in its queue's MSN order, never inside a Send. */
export function controlSegmentFault(
  opcode: number,
  queue: number,
  msn: number,
  expectedMsn: number,
  messageOffset: number,
  last: boolean,
  sendInProgress: boolean,
): TerminateCause | undefined {
  if (msn !== expectedMsn) {
    return fault(TerminateLayer.Ddp, DDP_ETYPE_UNTAGGED, DDP_ECODE_UNTAGGED_MSN_RANGE, `MSN ${msn} on queue ${queue}, expected ${expectedMsn}`);
  }
  if (messageOffset !== 0) {
    return fault(TerminateLayer.Ddp, DDP_ETYPE_UNTAGGED, DDP_ECODE_UNTAGGED_INVALID_MO, `MO ${messageOffset} in a single-segment message`);
  }
  if (!last) {
    return fault(TerminateLayer.Ddp, DDP_ETYPE_UNTAGGED, DDP_ECODE_UNTAGGED_TOO_LONG, `${rdmapOpcodeLabel(opcode)} does not fit one segment`);
  }
  if (queue === QN_SEND && sendInProgress) {
    return fault(TerminateLayer.Ddp, DDP_ETYPE_UNTAGGED, DDP_ECODE_UNTAGGED_MSN_RANGE, 'Immediate Data inside an unfinished Send');
  }
  return undefined;
}

/** A Send's segment carries its message's MSN and continues it at the octets received so far. */
export function sendSegmentFault(
  opcode: number,
  msn: number,
  expectedMsn: number,
  messageOffset: number,
  expectedOffset: number,
  first: boolean,
  messageOpcode: number,
): TerminateCause | undefined {
  if (msn !== expectedMsn) {
    return fault(TerminateLayer.Ddp, DDP_ETYPE_UNTAGGED, DDP_ECODE_UNTAGGED_MSN_RANGE, `Send MSN ${msn}, expected ${expectedMsn}`);
  }
  if (messageOffset !== expectedOffset || (!first && opcode !== messageOpcode)) {
    return fault(TerminateLayer.Ddp, DDP_ETYPE_UNTAGGED, DDP_ECODE_UNTAGGED_INVALID_MO, `Send MO ${messageOffset}, expected ${expectedOffset}`);
  }
  return undefined;
}

function rdmapOpcodeLabel(opcode: number): string {
  switch (opcode) {
    case RdmapOpcode.RdmaReadRequest:
      return 'RDMA Read Request';
    case RdmapOpcode.AtomicRequest:
      return 'Atomic Request';
    case RdmapOpcode.AtomicResponse:
      return 'Atomic Response';
    case RdmapOpcode.ImmediateData:
    case RdmapOpcode.ImmediateDataWithSolicitedEvent:
      return 'Immediate Data message';
    case RdmapOpcode.Terminate:
      return 'Terminate';
    default:
      return `opcode 0x${opcode.toString(16)} message`;
  }
}
