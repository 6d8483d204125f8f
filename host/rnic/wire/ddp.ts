// DDP (RFC 5041) segment headers. Offsets are ULPDU offsets (the first octet after the MPA
// length field). The RDMAP control octet lives in DDP's RsvdULP field; ./rdmap.ts owns its
// meaning, this module only carries it.
import { ProtocolError } from '../../errors.ts';

export const DDP_FLAG_TAGGED = 0x80;
export const DDP_FLAG_LAST = 0x40;
export const DDP_VERSION_MASK = 0x03;
export const DDP_VERSION = 1;

export const DDP_TAGGED_HEADER_LENGTH = 14;
export const DDP_UNTAGGED_HEADER_LENGTH = 18;

// Untagged queue numbers used by RDMAP (RFC 5040 §5.1) and RFC 7306 §7.1.
export const QN_SEND = 0;
export const QN_READ_REQUEST = 1;
export const QN_TERMINATE = 2;
export const QN_ATOMIC_RESPONSE = 3;
export const QUEUE_COUNT = 4;

// Terminate Layer 1 (DDP) error types and codes, RFC 5041 §7.2.
export const DDP_ETYPE_CATASTROPHIC = 0x0;
export const DDP_ETYPE_TAGGED = 0x1;
export const DDP_ETYPE_UNTAGGED = 0x2;
export const DDP_ECODE_CATASTROPHIC = 0x00;
export const DDP_ECODE_TAGGED_INVALID_STAG = 0x00;
export const DDP_ECODE_TAGGED_BASE_BOUNDS = 0x01;
export const DDP_ECODE_TAGGED_STAG_NOT_ASSOCIATED = 0x02;
export const DDP_ECODE_TAGGED_TO_WRAP = 0x03;
export const DDP_ECODE_TAGGED_VERSION = 0x04;
export const DDP_ECODE_UNTAGGED_INVALID_QN = 0x01;
export const DDP_ECODE_UNTAGGED_NO_BUFFER = 0x02;
export const DDP_ECODE_UNTAGGED_MSN_RANGE = 0x03;
export const DDP_ECODE_UNTAGGED_INVALID_MO = 0x04;
export const DDP_ECODE_UNTAGGED_TOO_LONG = 0x05;
export const DDP_ECODE_UNTAGGED_VERSION = 0x06;

export interface DdpTaggedHeader {
  readonly tagged: true;
  readonly last: boolean;
  readonly ddpVersion: number;
  /** RsvdULP octet: the RDMAP control octet. */
  readonly rdmapControl: number;
  readonly stag: number;
  readonly taggedOffset: bigint;
}

export interface DdpUntaggedHeader {
  readonly tagged: false;
  readonly last: boolean;
  readonly ddpVersion: number;
  readonly rdmapControl: number;
  /** RsvdULP[8:39]: RDMAP puts the Invalidate STag here, zero otherwise. */
  readonly reserved: number;
  readonly queueNumber: number;
  readonly messageSequenceNumber: number;
  readonly messageOffset: number;
}

export type DdpHeader = DdpTaggedHeader | DdpUntaggedHeader;

export function isTagged(ddpControl: number): boolean {
  return (ddpControl & DDP_FLAG_TAGGED) !== 0;
}

export function ddpHeaderLength(ddpControl: number): number {
  return isTagged(ddpControl) ? DDP_TAGGED_HEADER_LENGTH : DDP_UNTAGGED_HEADER_LENGTH;
}

export function ddpControl(tagged: boolean, last: boolean, version = DDP_VERSION): number {
  return (tagged ? DDP_FLAG_TAGGED : 0) | (last ? DDP_FLAG_LAST : 0) | (version & DDP_VERSION_MASK);
}

/** A tagged offset given as 32-bit halves, in decimal (for messages; no BigInt on the data path). */
export function taggedOffsetText(high: number, low: number): string {
  return ((BigInt(high) << 32n) | BigInt(low)).toString();
}

export function writeUint32(target: Uint8Array, offset: number, value: number): void {
  target[offset] = value >>> 24;
  target[offset + 1] = (value >>> 16) & 0xff;
  target[offset + 2] = (value >>> 8) & 0xff;
  target[offset + 3] = value & 0xff;
}

export function readUint32(source: Uint8Array, offset: number): number {
  return ((source[offset]! << 24) | (source[offset + 1]! << 16) | (source[offset + 2]! << 8) | source[offset + 3]!) >>> 0;
}

export function writeUint64(target: Uint8Array, offset: number, value: bigint): void {
  const masked = BigInt.asUintN(64, value);
  writeUint32(target, offset, Number(masked >> 32n));
  writeUint32(target, offset + 4, Number(masked & 0xffffffffn));
}

export function readUint64(source: Uint8Array, offset: number): bigint {
  return (BigInt(readUint32(source, offset)) << 32n) | BigInt(readUint32(source, offset + 4));
}

export function encodeTaggedHeader(target: Uint8Array, offset: number, header: Omit<DdpTaggedHeader, 'tagged'>): void {
  target[offset] = ddpControl(true, header.last, header.ddpVersion);
  target[offset + 1] = header.rdmapControl;
  writeUint32(target, offset + 2, header.stag);
  writeUint64(target, offset + 6, header.taggedOffset);
}

export function encodeUntaggedHeader(target: Uint8Array, offset: number, header: Omit<DdpUntaggedHeader, 'tagged'>): void {
  target[offset] = ddpControl(false, header.last, header.ddpVersion);
  target[offset + 1] = header.rdmapControl;
  writeUint32(target, offset + 2, header.reserved);
  writeUint32(target, offset + 6, header.queueNumber);
  writeUint32(target, offset + 10, header.messageSequenceNumber);
  writeUint32(target, offset + 14, header.messageOffset);
}

/** Decodes the DDP header at the start of `ulpdu`; throws ProtocolError when it is too short. */
export function decodeDdpHeader(ulpdu: Uint8Array, offset = 0): DdpHeader {
  if (ulpdu.length < offset + 2) throw new ProtocolError('DDP segment shorter than its control octets');
  const control = ulpdu[offset]!;
  const last = (control & DDP_FLAG_LAST) !== 0;
  const ddpVersion = control & DDP_VERSION_MASK;
  const rdmapControl = ulpdu[offset + 1]!;
  if (isTagged(control)) {
    if (ulpdu.length < offset + DDP_TAGGED_HEADER_LENGTH) throw new ProtocolError('tagged DDP segment shorter than 14 octets');
    return {
      tagged: true,
      last,
      ddpVersion,
      rdmapControl,
      stag: readUint32(ulpdu, offset + 2),
      taggedOffset: readUint64(ulpdu, offset + 6),
    };
  }
  if (ulpdu.length < offset + DDP_UNTAGGED_HEADER_LENGTH) throw new ProtocolError('untagged DDP segment shorter than 18 octets');
  return {
    tagged: false,
    last,
    ddpVersion,
    rdmapControl,
    reserved: readUint32(ulpdu, offset + 2),
    queueNumber: readUint32(ulpdu, offset + 6),
    messageSequenceNumber: readUint32(ulpdu, offset + 10),
    messageOffset: readUint32(ulpdu, offset + 14),
  };
}
