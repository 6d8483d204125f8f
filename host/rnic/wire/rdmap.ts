// RDMAP (RFC 5040, opcodes 0x8-0xB from RFC 7306): the control octet, the Read Request and
// Terminate headers, the Terminate error vocabulary, and a whole-segment decoder used by the
// capture tests and tools. The receive path parses the same layouts incrementally.

import {
  DDP_TAGGED_HEADER_LENGTH,
  DDP_UNTAGGED_HEADER_LENGTH,
  QN_ATOMIC_RESPONSE,
  QN_READ_REQUEST,
  QN_SEND,
  QN_TERMINATE,
  decodeDdpHeader,
  readUint32,
  readUint64,
  writeUint32,
  writeUint64,
  type DdpHeader,
} from './ddp.ts';
import {
  ATOMIC_REQUEST_HEADER_LENGTH,
  ATOMIC_RESPONSE_HEADER_LENGTH,
  decodeAtomicRequest,
  decodeAtomicResponse,
  decodeImmediateData,
  IMMEDIATE_DATA_HEADER_LENGTH,
  type AtomicRequestHeader,
  type AtomicResponseHeader,
} from './atomics.ts';
import { ProtocolError, UsageError } from '../../errors.ts';

export const RDMAP_VERSION = 1;
export const RDMAP_VERSION_SHIFT = 6;
export const RDMAP_OPCODE_MASK = 0x0f;

export const RdmapOpcode = {
  RdmaWrite: 0x0,
  RdmaReadRequest: 0x1,
  RdmaReadResponse: 0x2,
  Send: 0x3,
  SendWithInvalidate: 0x4,
  SendWithSolicitedEvent: 0x5,
  SendWithSolicitedEventAndInvalidate: 0x6,
  Terminate: 0x7,
  ImmediateData: 0x8,
  ImmediateDataWithSolicitedEvent: 0x9,
  AtomicRequest: 0xa,
  AtomicResponse: 0xb,
} as const;
export type RdmapOpcode = (typeof RdmapOpcode)[keyof typeof RdmapOpcode];

const OPCODE_NAMES: Record<number, string> = {
  0x0: 'RDMA Write',
  0x1: 'RDMA Read Request',
  0x2: 'RDMA Read Response',
  0x3: 'Send',
  0x4: 'Send with Invalidate',
  0x5: 'Send with Solicited Event',
  0x6: 'Send with Solicited Event and Invalidate',
  0x7: 'Terminate',
  0x8: 'Immediate Data',
  0x9: 'Immediate Data with Solicited Event',
  0xa: 'Atomic Request',
  0xb: 'Atomic Response',
};

export function rdmapOpcodeName(opcode: number): string {
  return OPCODE_NAMES[opcode] ?? `unassigned opcode 0x${opcode.toString(16)}`;
}

export function rdmapControl(opcode: number, version = RDMAP_VERSION): number {
  return ((version & 3) << RDMAP_VERSION_SHIFT) | (opcode & RDMAP_OPCODE_MASK);
}

export function rdmapVersionOf(control: number): number {
  return control >> RDMAP_VERSION_SHIFT;
}

export function rdmapOpcodeOf(control: number): number {
  return control & RDMAP_OPCODE_MASK;
}

export function isSendOpcode(opcode: number): boolean {
  return opcode >= RdmapOpcode.Send && opcode <= RdmapOpcode.SendWithSolicitedEventAndInvalidate;
}

export function carriesInvalidateStag(opcode: number): boolean {
  return opcode === RdmapOpcode.SendWithInvalidate || opcode === RdmapOpcode.SendWithSolicitedEventAndInvalidate;
}

export function isSolicitedEvent(opcode: number): boolean {
  return (
    opcode === RdmapOpcode.SendWithSolicitedEvent ||
    opcode === RdmapOpcode.SendWithSolicitedEventAndInvalidate ||
    opcode === RdmapOpcode.ImmediateDataWithSolicitedEvent
  );
}

/** Whether a message with this opcode travels in tagged DDP segments. */
export function isTaggedOpcode(opcode: number): boolean {
  return opcode === RdmapOpcode.RdmaWrite || opcode === RdmapOpcode.RdmaReadResponse;
}

/** The DDP queue an untagged opcode travels on (RFC 5040 section 5.1, RFC 7306), or -1 for tagged opcodes. */
export function untaggedQueueOf(opcode: number): number {
  switch (opcode) {
    case RdmapOpcode.Send:
    case RdmapOpcode.SendWithInvalidate:
    case RdmapOpcode.SendWithSolicitedEvent:
    case RdmapOpcode.SendWithSolicitedEventAndInvalidate:
    case RdmapOpcode.ImmediateData:
    case RdmapOpcode.ImmediateDataWithSolicitedEvent:
      return QN_SEND;
    case RdmapOpcode.RdmaReadRequest:
    case RdmapOpcode.AtomicRequest:
      return QN_READ_REQUEST;
    case RdmapOpcode.Terminate:
      return QN_TERMINATE;
    case RdmapOpcode.AtomicResponse:
      return QN_ATOMIC_RESPONSE;
    default:
      return -1;
  }
}

// --- RDMA Read Request header (28 octets after the untagged DDP header) ---------------------

export const READ_REQUEST_HEADER_LENGTH = 28;
/** Where the Read Request's RDMARDSZ field sits in its header. */
export const READ_REQUEST_SIZE_AT = 12;

export interface ReadRequestHeader {
  readonly sinkStag: number;
  readonly sinkTaggedOffset: bigint;
  readonly readSize: number;
  readonly sourceStag: number;
  readonly sourceTaggedOffset: bigint;
}

export function encodeReadRequest(target: Uint8Array, offset: number, header: ReadRequestHeader): void {
  writeUint32(target, offset, header.sinkStag);
  writeUint64(target, offset + 4, header.sinkTaggedOffset);
  writeUint32(target, offset + 12, header.readSize);
  writeUint32(target, offset + 16, header.sourceStag);
  writeUint64(target, offset + 20, header.sourceTaggedOffset);
}

/**
 * encodeReadRequest with the tagged offsets as 32-bit halves (high * 2^32 + low): the form the
 * send path uses, which allocates no BigInt.
 */
export function encodeReadRequestAt(
  target: Uint8Array,
  offset: number,
  sinkStag: number,
  sinkHigh: number,
  sinkLow: number,
  readSize: number,
  sourceStag: number,
  sourceHigh: number,
  sourceLow: number,
): void {
  writeUint32(target, offset, sinkStag);
  writeUint32(target, offset + 4, sinkHigh);
  writeUint32(target, offset + 8, sinkLow);
  writeUint32(target, offset + 12, readSize);
  writeUint32(target, offset + 16, sourceStag);
  writeUint32(target, offset + 20, sourceHigh);
  writeUint32(target, offset + 24, sourceLow);
}

export function decodeReadRequest(source: Uint8Array, offset = 0): ReadRequestHeader {
  if (source.length < offset + READ_REQUEST_HEADER_LENGTH) throw new ProtocolError('RDMA Read Request header shorter than 28 octets');
  return {
    sinkStag: readUint32(source, offset),
    sinkTaggedOffset: readUint64(source, offset + 4),
    readSize: readUint32(source, offset + 12),
    sourceStag: readUint32(source, offset + 16),
    sourceTaggedOffset: readUint64(source, offset + 20),
  };
}

// --- Terminate (RFC 5040 §4.8) ----------------------------------------------------------------

export const TerminateLayer = { Rdmap: 0x0, Ddp: 0x1, Llp: 0x2 } as const;
export type TerminateLayer = (typeof TerminateLayer)[keyof typeof TerminateLayer];

// RDMAP error types and codes (Layer 0).
export const RDMAP_ETYPE_LOCAL_CATASTROPHIC = 0x0;
export const RDMAP_ETYPE_REMOTE_PROTECTION = 0x1;
export const RDMAP_ETYPE_REMOTE_OPERATION = 0x2;
export const RDMAP_ECODE_INVALID_STAG = 0x00;
export const RDMAP_ECODE_BASE_BOUNDS = 0x01;
export const RDMAP_ECODE_ACCESS_RIGHTS = 0x02;
export const RDMAP_ECODE_STAG_NOT_ASSOCIATED = 0x03;
export const RDMAP_ECODE_TO_WRAP = 0x04;
export const RDMAP_ECODE_INVALID_VERSION = 0x05;
export const RDMAP_ECODE_UNEXPECTED_OPCODE = 0x06;
export const RDMAP_ECODE_CATASTROPHIC_STREAM = 0x07;
export const RDMAP_ECODE_CATASTROPHIC_GLOBAL = 0x08;
export const RDMAP_ECODE_CANNOT_INVALIDATE = 0x09;
export const RDMAP_ECODE_UNSPECIFIED = 0xff;
/** LLP error type for MPA (Layer 2). */
export const LLP_ETYPE_MPA = 0x0;

export const TERMINATE_FLAG_M = 0x80; // DDP Segment Length valid
export const TERMINATE_FLAG_D = 0x40; // terminated DDP header present
export const TERMINATE_FLAG_R = 0x20; // terminated RDMA (Read Request) header present
/** Control word plus, when D is set, the 2-octet DDP Segment Length. */
export const TERMINATE_CONTROL_LENGTH = 4;

export interface TerminateHeader {
  readonly layer: number;
  readonly errorType: number;
  readonly errorCode: number;
  /** M: the DDP Segment Length field is valid. */
  readonly segmentLengthValid: boolean;
  /** Present with D: the length reported for the failed segment. */
  readonly ddpSegmentLength?: number;
  /** Present with D: the failed segment's DDP header (14 or 18 octets). */
  readonly ddpHeader?: Uint8Array;
  /** Present with R: the failed Read Request header (28 octets). */
  readonly rdmaHeader?: Uint8Array;
}

export function terminateHeaderLength(header: TerminateHeader): number {
  let length = TERMINATE_CONTROL_LENGTH;
  if (header.ddpHeader !== undefined) length += 2 + header.ddpHeader.length;
  if (header.rdmaHeader !== undefined) length += header.rdmaHeader.length;
  return length;
}

export function encodeTerminate(target: Uint8Array, offset: number, header: TerminateHeader): number {
  if (header.ddpHeader !== undefined && header.ddpHeader.length !== DDP_TAGGED_HEADER_LENGTH && header.ddpHeader.length !== DDP_UNTAGGED_HEADER_LENGTH) {
    throw new UsageError(`terminated DDP header must be 14 or 18 octets, got ${header.ddpHeader.length}`);
  }
  if (header.rdmaHeader !== undefined && header.rdmaHeader.length !== READ_REQUEST_HEADER_LENGTH) {
    throw new UsageError(`terminated RDMA header must be 28 octets, got ${header.rdmaHeader.length}`);
  }
  target[offset] = ((header.layer & 0xf) << 4) | (header.errorType & 0xf);
  target[offset + 1] = header.errorCode & 0xff;
  target[offset + 2] =
    (header.segmentLengthValid ? TERMINATE_FLAG_M : 0) |
    (header.ddpHeader !== undefined ? TERMINATE_FLAG_D : 0) |
    (header.rdmaHeader !== undefined ? TERMINATE_FLAG_R : 0);
  target[offset + 3] = 0;
  let cursor = offset + TERMINATE_CONTROL_LENGTH;
  if (header.ddpHeader !== undefined) {
    const length = header.ddpSegmentLength ?? 0;
    target[cursor] = (length >> 8) & 0xff;
    target[cursor + 1] = length & 0xff;
    target.set(header.ddpHeader, cursor + 2);
    cursor += 2 + header.ddpHeader.length;
  }
  if (header.rdmaHeader !== undefined) {
    target.set(header.rdmaHeader, cursor);
    cursor += header.rdmaHeader.length;
  }
  return cursor - offset;
}

/** Decodes a Terminate header occupying exactly `source[offset..end)`. */
export function decodeTerminate(source: Uint8Array, offset = 0, end = source.length): TerminateHeader {
  if (end - offset < TERMINATE_CONTROL_LENGTH) throw new ProtocolError('Terminate header shorter than 4 octets');
  const flags = source[offset + 2]!;
  const hasDdp = (flags & TERMINATE_FLAG_D) !== 0;
  const hasRdma = (flags & TERMINATE_FLAG_R) !== 0;
  let cursor = offset + TERMINATE_CONTROL_LENGTH;
  const result: {
    layer: number;
    errorType: number;
    errorCode: number;
    segmentLengthValid: boolean;
    ddpSegmentLength?: number;
    ddpHeader?: Uint8Array;
    rdmaHeader?: Uint8Array;
  } = {
    layer: source[offset]! >> 4,
    errorType: source[offset]! & 0xf,
    errorCode: source[offset + 1]!,
    segmentLengthValid: (flags & TERMINATE_FLAG_M) !== 0,
  };
  if (hasDdp) {
    if (end - cursor < 2 + 2) throw new ProtocolError('Terminate announces a DDP header it does not carry');
    result.ddpSegmentLength = (source[cursor]! << 8) | source[cursor + 1]!;
    const ddpLength = (source[cursor + 2]! & 0x80) !== 0 ? DDP_TAGGED_HEADER_LENGTH : DDP_UNTAGGED_HEADER_LENGTH;
    if (end - cursor < 2 + ddpLength) throw new ProtocolError('Terminate DDP header truncated');
    result.ddpHeader = source.slice(cursor + 2, cursor + 2 + ddpLength);
    cursor += 2 + ddpLength;
  }
  if (hasRdma) {
    if (end - cursor < READ_REQUEST_HEADER_LENGTH) throw new ProtocolError('Terminate RDMA header truncated');
    result.rdmaHeader = source.slice(cursor, cursor + READ_REQUEST_HEADER_LENGTH);
    cursor += READ_REQUEST_HEADER_LENGTH;
  }
  return result;
}

const LAYER_NAMES = ['RDMAP', 'DDP', 'LLP (MPA)'];
const RDMAP_ETYPE_NAMES = ['local catastrophic', 'remote protection', 'remote operation'];
const DDP_ETYPE_NAMES = ['local catastrophic', 'tagged buffer', 'untagged buffer', 'reserved for LLP'];
const RDMAP_PROTECTION_CODES: Record<number, string> = {
  0x00: 'invalid STag',
  0x01: 'base or bounds violation',
  0x02: 'access rights violation',
  0x03: 'STag not associated with RDMAP stream',
  0x04: 'TO wrap',
  0x09: 'STag cannot be invalidated',
  0xff: 'unspecified',
};
const RDMAP_OPERATION_CODES: Record<number, string> = {
  0x05: 'invalid RDMAP version',
  0x06: 'unexpected opcode',
  0x07: 'catastrophic error, localized to RDMAP stream',
  0x08: 'catastrophic error, global',
  0x09: 'STag cannot be invalidated',
  0xff: 'unspecified',
};
const DDP_TAGGED_CODES: Record<number, string> = {
  0x00: 'invalid STag',
  0x01: 'base or bounds violation',
  0x02: 'STag not associated with DDP stream',
  0x03: 'TO wrap',
  0x04: 'invalid DDP version',
};
const DDP_UNTAGGED_CODES: Record<number, string> = {
  0x01: 'invalid QN',
  0x02: 'invalid MSN - no buffer available',
  0x03: 'invalid MSN - MSN range is not valid',
  0x04: 'invalid MO',
  0x05: 'DDP message too long for available buffer',
  0x06: 'invalid DDP version',
};
const MPA_CODES: Record<number, string> = {
  0x01: 'TCP connection closed, terminated or lost',
  0x02: 'MPA CRC error',
  0x03: 'MPA marker and ULPDU_Length field mismatch',
  0x04: 'invalid MPA Request/Reply frame',
  0x05: 'local catastrophic error',
  0x06: 'insufficient IRD resources',
  0x07: 'no matching RTR option',
};

/** Human-readable "layer / type / code" for logs and error messages. */
export function describeTerminate(layer: number, errorType: number, errorCode: number): string {
  const hex = (value: number): string => `0x${value.toString(16).padStart(2, '0')}`;
  const layerName = LAYER_NAMES[layer] ?? `layer ${layer}`;
  let typeName: string;
  let codeName: string | undefined;
  if (layer === TerminateLayer.Rdmap) {
    typeName = RDMAP_ETYPE_NAMES[errorType] ?? `type ${errorType}`;
    if (errorType === RDMAP_ETYPE_REMOTE_PROTECTION) codeName = RDMAP_PROTECTION_CODES[errorCode];
    else if (errorType === RDMAP_ETYPE_REMOTE_OPERATION) codeName = RDMAP_OPERATION_CODES[errorCode];
  } else if (layer === TerminateLayer.Ddp) {
    typeName = DDP_ETYPE_NAMES[errorType] ?? `type ${errorType}`;
    if (errorType === 1) codeName = DDP_TAGGED_CODES[errorCode];
    else if (errorType === 2) codeName = DDP_UNTAGGED_CODES[errorCode];
  } else {
    typeName = errorType === LLP_ETYPE_MPA ? 'MPA' : `type ${errorType}`;
    if (errorType === LLP_ETYPE_MPA) codeName = MPA_CODES[errorCode];
  }
  return `${layerName} / ${typeName} / ${hex(errorCode)}${codeName !== undefined ? ` (${codeName})` : ''}`;
}

// --- Whole-segment decoding -------------------------------------------------------------------

export interface RdmapSegment {
  readonly ddp: DdpHeader;
  readonly rdmapVersion: number;
  readonly opcode: number;
  /** Octets after the DDP header and any RDMAP header: Write/Read Response/Send data. */
  readonly payload: Uint8Array;
  readonly readRequest?: ReadRequestHeader;
  readonly terminate?: TerminateHeader;
  readonly atomicRequest?: AtomicRequestHeader;
  readonly atomicResponse?: AtomicResponseHeader;
  readonly immediateData?: bigint;
}

/** Decodes one DDP segment (a ULPDU) into its DDP and RDMAP parts; throws ProtocolError if malformed. */
export function decodeRdmapSegment(ulpdu: Uint8Array): RdmapSegment {
  const ddp = decodeDdpHeader(ulpdu);
  const opcode = rdmapOpcodeOf(ddp.rdmapControl);
  const rdmapVersion = rdmapVersionOf(ddp.rdmapControl);
  if (ddp.tagged) {
    return { ddp, rdmapVersion, opcode, payload: ulpdu.subarray(DDP_TAGGED_HEADER_LENGTH) };
  }
  const body = ulpdu.subarray(DDP_UNTAGGED_HEADER_LENGTH);
  const exact = (length: number, what: string): void => {
    if (body.length !== length) throw new ProtocolError(`${what} carries ${body.length} octets after the DDP header, expected ${length}`);
  };
  switch (opcode) {
    case RdmapOpcode.RdmaReadRequest:
      exact(READ_REQUEST_HEADER_LENGTH, 'RDMA Read Request');
      return { ddp, rdmapVersion, opcode, payload: body.subarray(body.length), readRequest: decodeReadRequest(body) };
    case RdmapOpcode.Terminate:
      return { ddp, rdmapVersion, opcode, payload: body.subarray(body.length), terminate: decodeTerminate(body) };
    case RdmapOpcode.AtomicRequest:
      exact(ATOMIC_REQUEST_HEADER_LENGTH, 'Atomic Request');
      return { ddp, rdmapVersion, opcode, payload: body.subarray(body.length), atomicRequest: decodeAtomicRequest(body) };
    case RdmapOpcode.AtomicResponse:
      exact(ATOMIC_RESPONSE_HEADER_LENGTH, 'Atomic Response');
      return { ddp, rdmapVersion, opcode, payload: body.subarray(body.length), atomicResponse: decodeAtomicResponse(body) };
    case RdmapOpcode.ImmediateData:
    case RdmapOpcode.ImmediateDataWithSolicitedEvent:
      exact(IMMEDIATE_DATA_HEADER_LENGTH, 'Immediate Data');
      return { ddp, rdmapVersion, opcode, payload: body.subarray(body.length), immediateData: decodeImmediateData(body) };
    default:
      return { ddp, rdmapVersion, opcode, payload: body };
  }
}
