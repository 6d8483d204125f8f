// Builds Terminate messages (RFC 5040 §4.8) from a detected error, choosing which headers of
// the failed segment to echo the way RFC 5040 Fig. 10 and Linux siw do: DDP errors and RDMAP
// remote-operation errors carry the DDP header and segment length, remote-protection errors on a
// Read Request also carry its RDMA header, catastrophic and LLP errors carry nothing.

import {
  DDP_ECODE_TAGGED_VERSION,
  DDP_ECODE_UNTAGGED_VERSION,
  DDP_ETYPE_TAGGED,
  DDP_ETYPE_UNTAGGED,
  DDP_FLAG_LAST,
  DDP_UNTAGGED_HEADER_LENGTH,
  DDP_VERSION,
  ddpHeaderLength,
  encodeUntaggedHeader,
  QN_TERMINATE,
} from './wire/ddp.ts';
import {
  describeTerminate,
  encodeTerminate,
  RDMAP_ECODE_INVALID_VERSION,
  RDMAP_ETYPE_LOCAL_CATASTROPHIC,
  RDMAP_ETYPE_REMOTE_PROTECTION,
  rdmapControl,
  RdmapOpcode,
  rdmapOpcodeOf,
  READ_REQUEST_HEADER_LENGTH,
  terminateHeaderLength,
  TerminateLayer,
  type TerminateHeader,
} from './wire/rdmap.ts';
import type { TerminateInfo } from './errors.ts';

export interface TerminateCause {
  readonly layer: number;
  readonly errorType: number;
  readonly errorCode: number;
  /** What went wrong, for the local error report. */
  readonly reason: string;
  /**
   * Leading octets of the failed FPDU as received: the 2-octet ULPDU_Length, the DDP header and,
   * for a Read Request, its 28-octet RDMA header. Absent for errors not tied to a segment.
   */
  readonly failedFpdu?: Uint8Array;
}

/** Length of the RDMAP header that follows the DDP header for this opcode (RFC 5040/7306). */
export function rdmapHeaderLength(opcode: number): number {
  switch (opcode) {
    case RdmapOpcode.RdmaReadRequest:
      return READ_REQUEST_HEADER_LENGTH;
    case RdmapOpcode.AtomicRequest:
      return 52;
    case RdmapOpcode.AtomicResponse:
      return 12;
    case RdmapOpcode.ImmediateData:
    case RdmapOpcode.ImmediateDataWithSolicitedEvent:
      return 8;
    default:
      return 0;
  }
}

/** Chooses the echoed headers for `cause` and returns the Terminate header to send. */
export function terminateHeaderFor(cause: TerminateCause): TerminateHeader {
  const base = { layer: cause.layer, errorType: cause.errorType, errorCode: cause.errorCode };
  const fpdu = cause.failedFpdu;
  if (fpdu === undefined || fpdu.length < 4) return { ...base, segmentLengthValid: false };
  const control = fpdu[2]!;
  const ddpLength = ddpHeaderLength(control);
  if (fpdu.length < 2 + ddpLength) return { ...base, segmentLengthValid: false };
  const opcode = rdmapOpcodeOf(fpdu[3]!);
  const ulpduLength = (fpdu[0]! << 8) | fpdu[1]!;
  // Linux siw reports the failed segment's payload length (ULPDU minus its headers).
  const segmentLength = Math.max(0, ulpduLength - ddpLength - rdmapHeaderLength(opcode));
  const ddpHeader = fpdu.slice(2, 2 + ddpLength);
  const withDdp: TerminateHeader = { ...base, segmentLengthValid: true, ddpSegmentLength: segmentLength, ddpHeader };
  switch (cause.layer) {
    case TerminateLayer.Llp:
      return { ...base, segmentLengthValid: false };
    case TerminateLayer.Ddp: {
      const versionError =
        (cause.errorType === DDP_ETYPE_TAGGED && cause.errorCode === DDP_ECODE_TAGGED_VERSION) ||
        (cause.errorType === DDP_ETYPE_UNTAGGED && cause.errorCode === DDP_ECODE_UNTAGGED_VERSION);
      // With an unknown DDP version the header layout itself is unknown.
      return versionError ? { ...base, segmentLengthValid: false } : withDdp;
    }
    default: {
      if (cause.errorType === RDMAP_ETYPE_LOCAL_CATASTROPHIC) return { ...base, segmentLengthValid: false };
      if (cause.errorType === RDMAP_ETYPE_REMOTE_PROTECTION && opcode === RdmapOpcode.RdmaReadRequest) {
        const start = 2 + DDP_UNTAGGED_HEADER_LENGTH;
        if (fpdu.length >= start + READ_REQUEST_HEADER_LENGTH) {
          return { ...withDdp, rdmaHeader: fpdu.slice(start, start + READ_REQUEST_HEADER_LENGTH) };
        }
      }
      if (cause.errorCode === RDMAP_ECODE_INVALID_VERSION) return { ...base, segmentLengthValid: false };
      return withDdp;
    }
  }
}

/** The ULPDU of the Terminate message: untagged DDP header on QN 2, MSN 1, then the header. */
export function encodeTerminateUlpdu(header: TerminateHeader): Uint8Array {
  const out = new Uint8Array(DDP_UNTAGGED_HEADER_LENGTH + terminateHeaderLength(header));
  encodeUntaggedHeader(out, 0, {
    last: true,
    ddpVersion: DDP_VERSION,
    rdmapControl: rdmapControl(RdmapOpcode.Terminate),
    reserved: 0,
    queueNumber: QN_TERMINATE,
    messageSequenceNumber: 1,
    messageOffset: 0,
  });
  encodeTerminate(out, DDP_UNTAGGED_HEADER_LENGTH, header);
  return out;
}

export function terminateInfo(header: TerminateHeader, reason?: string): TerminateInfo {
  return {
    layer: header.layer,
    errorType: header.errorType,
    errorCode: header.errorCode,
    description: describeTerminate(header.layer, header.errorType, header.errorCode),
    ...(reason !== undefined ? { reason } : {}),
    ...(header.ddpHeader !== undefined ? { ddpHeader: header.ddpHeader } : {}),
    ...(header.ddpSegmentLength !== undefined ? { ddpSegmentLength: header.ddpSegmentLength } : {}),
    ...(header.rdmaHeader !== undefined ? { rdmaHeader: header.rdmaHeader } : {}),
  };
}

/** Checks a received Terminate's DDP fields (QN 2, MSN 1, MO 0, last) as siw does. */
export function isWellFormedTerminateDdp(ulpdu: Uint8Array): boolean {
  if (ulpdu.length < DDP_UNTAGGED_HEADER_LENGTH) return false;
  const view = new DataView(ulpdu.buffer, ulpdu.byteOffset, ulpdu.byteLength);
  return (ulpdu[0]! & DDP_FLAG_LAST) !== 0 && view.getUint32(6) === QN_TERMINATE && view.getUint32(10) === 1 && view.getUint32(14) === 0;
}
