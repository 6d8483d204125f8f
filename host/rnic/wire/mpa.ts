// MPA (RFC 5044) Request/Reply frames with the RFC 6581 enhanced-setup word, and the FPDU
// framing arithmetic (length field, PAD, CRC trailer, MULPDU). Pure encode/decode; the
// negotiation that uses these lives in ../connection.ts.

import { CRC_LENGTH, crc32cUpdate, writeCrc } from './crc.ts';
import { ProtocolError } from '../../errors.ts';

const ascii = (text: string): Uint8Array => new Uint8Array(Array.from(text, (c) => c.charCodeAt(0)));

export const MPA_KEY_REQUEST = ascii('MPA ID Req Frame');
export const MPA_KEY_REPLY = ascii('MPA ID Rep Frame');
export const MPA_KEY_LENGTH = 16;
/** Key, flags, revision and PD_Length. */
export const MPA_FRAME_HEADER_LENGTH = 20;
/** RFC 5044 §7.1: private data is at most 512 octets. */
export const MPA_MAX_PRIVATE_DATA = 512;
export const MPA_ENHANCED_DATA_LENGTH = 4;

export const MPA_FLAG_MARKERS = 0x80;
export const MPA_FLAG_CRC = 0x40;
export const MPA_FLAG_REJECT = 0x20;
/** RFC 6581 "S": the first four private-data octets are the IRD/ORD word. */
export const MPA_FLAG_ENHANCED = 0x10;
export const MPA_FLAG_RESERVED = 0x0f;

export const MPA_REVISION_RDMAC = 0;
export const MPA_REVISION_1 = 1;
export const MPA_REVISION_2 = 2;

// RFC 6581 IRD/ORD word flags.
export const MPA_V2_PEER_TO_PEER = 0x8000; // "A", in the IRD half
export const MPA_V2_SEND_RTR = 0x4000; // "B", in the IRD half: zero-length Send
export const MPA_V2_WRITE_RTR = 0x8000; // "C", in the ORD half: zero-length RDMA Write
export const MPA_V2_READ_RTR = 0x4000; // "D", in the ORD half: zero-length RDMA Read
export const MPA_V2_IRD_ORD_MASK = 0x3fff;
/** An IRD or ORD of 0x3FFF means "no automatic negotiation; the ULP handles it". */
export const MPA_V2_IRD_ORD_UNNEGOTIATED = 0x3fff;

// MPA error codes (Terminate Layer 2 = LLP, EType 0 = MPA), RFC 5044 §8 and RFC 6581 §8.
export const MPA_ERROR_CONNECTION_LOST = 0x01;
export const MPA_ERROR_CRC = 0x02;
export const MPA_ERROR_MARKER = 0x03;
export const MPA_ERROR_INVALID_FRAME = 0x04;
export const MPA_ERROR_LOCAL_CATASTROPHIC = 0x05;
export const MPA_ERROR_INSUFFICIENT_IRD = 0x06;
export const MPA_ERROR_NO_MATCHING_RTR = 0x07;

// FPDU framing.
export const MPA_LENGTH_FIELD = 2;
/** RFC 5044 §4: DDP must never hand MPA a ULPDU larger than this. */
export const MPA_MAX_ULPDU = 64768;
export const MPA_MIN_MULPDU = 128;

export type MpaFrameKind = 'request' | 'reply';

export interface MpaEnhancedData {
  /** A: peer-to-peer model (an RTR message follows the Reply). */
  readonly peerToPeer: boolean;
  /** B: zero-length Send RTR. */
  readonly sendRtr: boolean;
  /** C: zero-length RDMA Write RTR. */
  readonly writeRtr: boolean;
  /** D: zero-length RDMA Read RTR. */
  readonly readRtr: boolean;
  readonly ird: number;
  readonly ord: number;
}

export interface MpaFrame {
  readonly kind: MpaFrameKind;
  readonly markers: boolean;
  readonly crc: boolean;
  readonly reject: boolean;
  /** S flag. With revision 2 the enhanced data is the first four private-data octets. */
  readonly enhanced: boolean;
  readonly revision: number;
  /** Present when `enhanced` and revision 2 and private data has at least 4 octets. */
  readonly enhancedData?: MpaEnhancedData;
  /** Private data after the enhanced word (or all of it without enhanced setup). */
  readonly privateData: Uint8Array;
  /** Low four flag bits; sent as zero, ignored on receive, kept for byte-exact re-encoding. */
  readonly reservedFlags?: number;
}

/** A malformed MPA frame or handshake message (the peer broke MPA). */
export class MpaFrameError extends ProtocolError {}

export function encodeEnhancedData(data: MpaEnhancedData): Uint8Array {
  const out = new Uint8Array(MPA_ENHANCED_DATA_LENGTH);
  checkIrdOrd('IRD', data.ird);
  checkIrdOrd('ORD', data.ord);
  const irdWord = data.ird | (data.peerToPeer ? MPA_V2_PEER_TO_PEER : 0) | (data.sendRtr ? MPA_V2_SEND_RTR : 0);
  const ordWord = data.ord | (data.writeRtr ? MPA_V2_WRITE_RTR : 0) | (data.readRtr ? MPA_V2_READ_RTR : 0);
  out[0] = irdWord >> 8;
  out[1] = irdWord & 0xff;
  out[2] = ordWord >> 8;
  out[3] = ordWord & 0xff;
  return out;
}

export function decodeEnhancedData(bytes: Uint8Array, offset = 0): MpaEnhancedData {
  if (bytes.length < offset + MPA_ENHANCED_DATA_LENGTH) {
    throw new MpaFrameError(`enhanced MPA data needs 4 octets, got ${bytes.length - offset}`);
  }
  const irdWord = (bytes[offset]! << 8) | bytes[offset + 1]!;
  const ordWord = (bytes[offset + 2]! << 8) | bytes[offset + 3]!;
  return {
    peerToPeer: (irdWord & MPA_V2_PEER_TO_PEER) !== 0,
    sendRtr: (irdWord & MPA_V2_SEND_RTR) !== 0,
    writeRtr: (ordWord & MPA_V2_WRITE_RTR) !== 0,
    readRtr: (ordWord & MPA_V2_READ_RTR) !== 0,
    ird: irdWord & MPA_V2_IRD_ORD_MASK,
    ord: ordWord & MPA_V2_IRD_ORD_MASK,
  };
}

function checkIrdOrd(name: string, value: number): void {
  if (!Number.isInteger(value) || value < 0 || value > MPA_V2_IRD_ORD_MASK) {
    throw new MpaFrameError(`${name} ${value} does not fit the 14-bit MPA v2 field (0..16383)`);
  }
}

export function encodeMpaFrame(frame: MpaFrame): Uint8Array {
  const enhancedWord = frame.enhancedData !== undefined ? encodeEnhancedData(frame.enhancedData) : undefined;
  const pdLength = (enhancedWord?.length ?? 0) + frame.privateData.length;
  if (pdLength > MPA_MAX_PRIVATE_DATA) {
    throw new MpaFrameError(`MPA private data is ${pdLength} octets; at most ${MPA_MAX_PRIVATE_DATA} fit`);
  }
  if (!Number.isInteger(frame.revision) || frame.revision < 0 || frame.revision > 255) {
    throw new MpaFrameError(`MPA revision ${frame.revision} is not an octet`);
  }
  const out = new Uint8Array(MPA_FRAME_HEADER_LENGTH + pdLength);
  out.set(frame.kind === 'request' ? MPA_KEY_REQUEST : MPA_KEY_REPLY, 0);
  out[16] =
    (frame.markers ? MPA_FLAG_MARKERS : 0) |
    (frame.crc ? MPA_FLAG_CRC : 0) |
    (frame.reject ? MPA_FLAG_REJECT : 0) |
    (frame.enhanced ? MPA_FLAG_ENHANCED : 0) |
    ((frame.reservedFlags ?? 0) & MPA_FLAG_RESERVED);
  out[17] = frame.revision;
  out[18] = pdLength >> 8;
  out[19] = pdLength & 0xff;
  let offset = MPA_FRAME_HEADER_LENGTH;
  if (enhancedWord !== undefined) {
    out.set(enhancedWord, offset);
    offset += enhancedWord.length;
  }
  out.set(frame.privateData, offset);
  return out;
}

export interface MpaFrameHeader {
  readonly kind: MpaFrameKind;
  readonly flags: number;
  readonly revision: number;
  readonly privateDataLength: number;
}

/** Decodes the fixed 20 octets; throws MpaFrameError for a wrong key or an oversize PD_Length. */
export function decodeMpaFrameHeader(bytes: Uint8Array): MpaFrameHeader {
  if (bytes.length < MPA_FRAME_HEADER_LENGTH) {
    throw new MpaFrameError(`MPA frame header needs ${MPA_FRAME_HEADER_LENGTH} octets, got ${bytes.length}`);
  }
  let kind: MpaFrameKind;
  if (keyMatches(bytes, MPA_KEY_REQUEST)) kind = 'request';
  else if (keyMatches(bytes, MPA_KEY_REPLY)) kind = 'reply';
  else throw new MpaFrameError(`not an MPA Request/Reply key: ${describeKey(bytes.subarray(0, MPA_KEY_LENGTH))}`);
  const privateDataLength = (bytes[18]! << 8) | bytes[19]!;
  if (privateDataLength > MPA_MAX_PRIVATE_DATA) {
    throw new MpaFrameError(`MPA PD_Length ${privateDataLength} exceeds the ${MPA_MAX_PRIVATE_DATA}-octet limit`);
  }
  return { kind, flags: bytes[16]!, revision: bytes[17]!, privateDataLength };
}

/** Decodes a complete frame (header plus exactly PD_Length octets of private data). */
export function decodeMpaFrame(bytes: Uint8Array): MpaFrame {
  const header = decodeMpaFrameHeader(bytes);
  const total = MPA_FRAME_HEADER_LENGTH + header.privateDataLength;
  if (bytes.length !== total) {
    throw new MpaFrameError(`MPA frame with PD_Length ${header.privateDataLength} is ${total} octets, got ${bytes.length}`);
  }
  return completeMpaFrame(header, bytes.subarray(MPA_FRAME_HEADER_LENGTH, total));
}

export function completeMpaFrame(header: MpaFrameHeader, privateData: Uint8Array): MpaFrame {
  const enhanced = (header.flags & MPA_FLAG_ENHANCED) !== 0;
  const base = {
    kind: header.kind,
    markers: (header.flags & MPA_FLAG_MARKERS) !== 0,
    crc: (header.flags & MPA_FLAG_CRC) !== 0,
    reject: (header.flags & MPA_FLAG_REJECT) !== 0,
    enhanced,
    revision: header.revision,
    reservedFlags: header.flags & MPA_FLAG_RESERVED,
  };
  if (enhanced && header.revision === MPA_REVISION_2 && privateData.length >= MPA_ENHANCED_DATA_LENGTH) {
    return {
      ...base,
      enhancedData: decodeEnhancedData(privateData),
      privateData: privateData.slice(MPA_ENHANCED_DATA_LENGTH),
    };
  }
  return { ...base, privateData: privateData.slice() };
}

function keyMatches(bytes: Uint8Array, key: Uint8Array): boolean {
  for (let i = 0; i < MPA_KEY_LENGTH; i++) if (bytes[i] !== key[i]) return false;
  return true;
}

function describeKey(key: Uint8Array): string {
  const printable = Array.from(key, (b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : '.')).join('');
  return `"${printable}" (${Buffer.from(key).toString('hex')})`;
}

/** PAD octets after a ULPDU of `ulpduLength` so that length field + ULPDU + PAD is 4-aligned. */
export function fpduPadding(ulpduLength: number): number {
  return -(MPA_LENGTH_FIELD + ulpduLength) & 3;
}

/** Octets of a marker-free FPDU carrying `ulpduLength` octets: length, ULPDU, PAD and CRC. */
export function fpduLength(ulpduLength: number): number {
  return MPA_LENGTH_FIELD + ulpduLength + fpduPadding(ulpduLength) + CRC_LENGTH;
}

/**
 * RFC 5044 MULPDU from the effective MSS (EMSS). Markers cost 4 octets per 512; the EMSS mod 4
 * term keeps FPDUs 4-aligned. Clamped to the 128..64768 range the RFC allows.
 */
export function computeMulpdu(emss: number, markers: boolean): number {
  const overhead = markers ? 6 + 4 * Math.ceil(emss / 512) + (emss % 4) : 6 + (emss % 4);
  return Math.max(MPA_MIN_MULPDU, Math.min(MPA_MAX_ULPDU, emss - overhead));
}

/**
 * Frames one ULPDU as a marker-free FPDU. `crc` false still writes a trailer (the field is
 * always present) but leaves it zero, as Linux siw does when CRC is off.
 */
export function encodeFpdu(ulpdu: Uint8Array, crc: boolean): Uint8Array {
  if (ulpdu.length > 0xffff) throw new MpaFrameError(`ULPDU of ${ulpdu.length} octets does not fit ULPDU_Length`);
  const padding = fpduPadding(ulpdu.length);
  const out = new Uint8Array(MPA_LENGTH_FIELD + ulpdu.length + padding + CRC_LENGTH);
  out[0] = ulpdu.length >> 8;
  out[1] = ulpdu.length & 0xff;
  out.set(ulpdu, MPA_LENGTH_FIELD);
  const crcOffset = out.length - CRC_LENGTH;
  if (crc) writeCrc(out, crcOffset, crc32cUpdate(0, out.subarray(0, crcOffset)));
  return out;
}

export interface DecodedFpdu {
  readonly ulpdu: Uint8Array;
  readonly padding: Uint8Array;
  /** CRC value as carried (LSB-first decoded). */
  readonly crc: number;
  /** CRC computed over length field, ULPDU and PAD. */
  readonly computedCrc: number;
  /** Octets the FPDU occupied. */
  readonly length: number;
}

/** Splits one marker-free FPDU off the front of `bytes`; undefined when `bytes` is too short. */
export function decodeFpdu(bytes: Uint8Array): DecodedFpdu | undefined {
  if (bytes.length < MPA_LENGTH_FIELD) return undefined;
  const ulpduLength = (bytes[0]! << 8) | bytes[1]!;
  const total = fpduLength(ulpduLength);
  if (bytes.length < total) return undefined;
  const crcOffset = total - CRC_LENGTH;
  const crc = (bytes[crcOffset]! | (bytes[crcOffset + 1]! << 8) | (bytes[crcOffset + 2]! << 16) | (bytes[crcOffset + 3]! << 24)) >>> 0;
  return {
    ulpdu: bytes.subarray(MPA_LENGTH_FIELD, MPA_LENGTH_FIELD + ulpduLength),
    padding: bytes.subarray(MPA_LENGTH_FIELD + ulpduLength, crcOffset),
    crc,
    computedCrc: crc32cUpdate(0, bytes.subarray(0, crcOffset)),
    length: total,
  };
}
