// The InfiniBand transport headers carried by RoCEv2 (../../../../shared/reference/roce.md §2-5):
// BTH, RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, IETH, DETH, decoded into and encoded from one
// mutable record. The receive path decodes every packet into the same record, so a packet costs
// no allocation but its payload view; tests and the capture decoder use fresh ones.

import { readCrc } from './crc.ts';
import {
  AETH_LENGTH,
  ATOMIC_ACK_ETH_LENGTH,
  ATOMIC_ETH_LENGTH,
  BTH_LENGTH,
  CNP_RESERVED_LENGTH,
  DETH_LENGTH,
  H_AETH,
  H_ATOMIC_ACK_ETH,
  H_ATOMIC_ETH,
  H_CNP_RESERVED,
  H_DETH,
  H_IETH,
  H_IMM,
  H_PAYLOAD,
  H_RETH,
  ICRC_LENGTH,
  IETH_LENGTH,
  IMM_LENGTH,
  headerLength,
  OPCODES,
  RETH_LENGTH,
} from './ib-opcodes.ts';
import { UsageError } from '../../errors.ts';

export const PSN_MASK = 0xffffff;
export const DEFAULT_PKEY = 0xffff;

/** AETH syndrome types (byte & 0x60) and the NAK codes (full syndrome byte). */
export const Syndrome = {
  AckUnlimitedCredits: 0x1f,
  TypeMask: 0x60,
  TypeAck: 0x00,
  TypeRnrNak: 0x20,
  TypeNak: 0x60,
  NakPsnSequenceError: 0x60,
  NakInvalidRequest: 0x61,
  NakRemoteAccessError: 0x62,
  NakRemoteOperationalError: 0x63,
  NakInvalidRdRequest: 0x64,
} as const;

/** The RNR timer values of roce.md §5 in microseconds, by 5-bit code. */
export const RNR_TIMER_MICROS: readonly number[] = [
  655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920,
  122880, 163840, 245760, 327680, 491520,
];

/** Receive credits by ACK credit code (0x1F = no end-to-end flow control). */
export const CREDIT_COUNT: readonly number[] = [
  0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

export class IbHeaders {
  opcode = 0;
  solicited = false;
  migReq = false;
  padCount = 0;
  transportVersion = 0;
  pkey = DEFAULT_PKEY;
  fecn = false;
  becn = false;
  /** The six reserved bits of BTH byte 4 (0 on the wire; kept so a decode re-encodes exactly). */
  reserved6 = 0;
  destQp = 0;
  ackRequest = false;
  reserved7 = 0;
  psn = 0;
  // RETH / AtomicETH
  virtualAddress = 0n;
  /** The virtual address's high and low 32 bits (decode only): memory checks without a BigInt. */
  virtualAddressHigh = 0;
  virtualAddressLow = 0;
  rkey = 0;
  dmaLength = 0;
  swapOrAdd = 0n;
  compare = 0n;
  // AETH
  syndrome = 0;
  msn = 0;
  // AtomicAckETH
  originalData = 0n;
  // ImmDt (opaque, kept in network order as a 32-bit number)
  immediate = 0;
  // IETH
  invalidateRkey = 0;
  // DETH
  qkey = 0;
  sourceQp = 0;
  /** Octets of payload (pad excluded) and where they start in the decoded packet. */
  payloadLength = 0;
  payloadOffset = 0;
  /** The ICRC read from the packet (decode only). */
  icrc = 0;
}

/** Field values for `encodeHeaders`; omitted ones are 0 / false, P_Key 0xFFFF. */
export type IbHeaderFields = Partial<Omit<IbHeaders, 'payloadOffset' | 'icrc'>> & { opcode: number };

export function headersFrom(fields: IbHeaderFields): IbHeaders {
  return Object.assign(new IbHeaders(), fields);
}

/** Pad octets that bring `payloadLength` to a multiple of four. */
export function padFor(payloadLength: number): number {
  return -payloadLength & 3;
}

/**
 * Decodes the IB transport packet `packet` (a UDP payload: BTH .. ICRC) into `out`. Returns
 * undefined, or what is wrong with the packet. The ICRC is read, not checked (see icrc.ts).
 */
export function decodeHeaders(packet: Uint8Array, out: IbHeaders): string | undefined {
  if (packet.length < BTH_LENGTH + ICRC_LENGTH) return `packet of ${packet.length} octets is shorter than BTH and ICRC`;
  const opcode = packet[0]!;
  const info = OPCODES[opcode];
  if (info === undefined) return `unknown opcode 0x${opcode.toString(16).padStart(2, '0')}`;
  out.opcode = opcode;
  const flags = packet[1]!;
  out.solicited = (flags & 0x80) !== 0;
  out.migReq = (flags & 0x40) !== 0;
  out.padCount = (flags >> 4) & 3;
  out.transportVersion = flags & 0x0f;
  out.pkey = (packet[2]! << 8) | packet[3]!;
  const congestion = packet[4]!;
  out.fecn = (congestion & 0x80) !== 0;
  out.becn = (congestion & 0x40) !== 0;
  out.reserved6 = congestion & 0x3f;
  out.destQp = (packet[5]! << 16) | (packet[6]! << 8) | packet[7]!;
  out.ackRequest = (packet[8]! & 0x80) !== 0;
  out.reserved7 = packet[8]! & 0x7f;
  out.psn = (packet[9]! << 16) | (packet[10]! << 8) | packet[11]!;
  const headers = info.headers;
  let offset = BTH_LENGTH;
  const end = packet.length - ICRC_LENGTH;
  if ((headers & H_DETH) !== 0) {
    if (offset + DETH_LENGTH > end) return `${info.name} too short for its DETH`;
    out.qkey = u32(packet, offset);
    out.sourceQp = u32(packet, offset + 4) & 0xffffff;
    offset += DETH_LENGTH;
  }
  if ((headers & H_RETH) !== 0) {
    if (offset + RETH_LENGTH > end) return `${info.name} too short for its RETH`;
    out.virtualAddress = u64(packet, offset);
    out.virtualAddressHigh = u32(packet, offset);
    out.virtualAddressLow = u32(packet, offset + 4);
    out.rkey = u32(packet, offset + 8);
    out.dmaLength = u32(packet, offset + 12);
    offset += RETH_LENGTH;
  }
  if ((headers & H_AETH) !== 0) {
    if (offset + AETH_LENGTH > end) return `${info.name} too short for its AETH`;
    out.syndrome = packet[offset]!;
    out.msn = u32(packet, offset) & 0xffffff;
    offset += AETH_LENGTH;
  }
  if ((headers & H_ATOMIC_ETH) !== 0) {
    if (offset + ATOMIC_ETH_LENGTH > end) return `${info.name} too short for its AtomicETH`;
    out.virtualAddress = u64(packet, offset);
    out.virtualAddressHigh = u32(packet, offset);
    out.virtualAddressLow = u32(packet, offset + 4);
    out.rkey = u32(packet, offset + 8);
    out.swapOrAdd = u64(packet, offset + 12);
    out.compare = u64(packet, offset + 20);
    offset += ATOMIC_ETH_LENGTH;
  }
  if ((headers & H_ATOMIC_ACK_ETH) !== 0) {
    if (offset + ATOMIC_ACK_ETH_LENGTH > end) return `${info.name} too short for its AtomicAckETH`;
    out.originalData = u64(packet, offset);
    offset += ATOMIC_ACK_ETH_LENGTH;
  }
  if ((headers & H_IMM) !== 0) {
    if (offset + IMM_LENGTH > end) return `${info.name} too short for its ImmDt`;
    out.immediate = u32(packet, offset);
    offset += IMM_LENGTH;
  }
  if ((headers & H_IETH) !== 0) {
    if (offset + IETH_LENGTH > end) return `${info.name} too short for its IETH`;
    out.invalidateRkey = u32(packet, offset);
    offset += IETH_LENGTH;
  }
  if ((headers & H_CNP_RESERVED) !== 0) {
    if (offset + CNP_RESERVED_LENGTH > end) return 'CNP too short for its 16 reserved octets';
    offset += CNP_RESERVED_LENGTH;
  }
  out.payloadOffset = offset;
  const carried = end - offset;
  if ((headers & H_PAYLOAD) === 0) {
    if (carried !== 0) return `${info.name} carries ${carried} octets after its headers (none allowed)`;
    if (out.padCount !== 0) return `${info.name} has PadCnt ${out.padCount} without payload`;
    out.payloadLength = 0;
  } else {
    if (carried % 4 !== 0) return `${info.name} payload and pad of ${carried} octets is not a multiple of 4`;
    if (out.padCount > carried) return `${info.name} PadCnt ${out.padCount} exceeds its ${carried} octets`;
    out.payloadLength = carried - out.padCount;
  }
  out.icrc = readCrc(packet, end);
  return undefined;
}

/** Octets of BTH and extended headers `encodeHeaders` writes for `opcode`. */
export function encodedHeaderLength(opcode: number): number {
  const info = OPCODES[opcode];
  if (info === undefined) throw new UsageError(`unknown opcode 0x${opcode.toString(16)}`);
  return headerLength(info.headers);
}

/**
 * Writes the BTH and the opcode's extended headers at `offset`; returns the octets written.
 * `h.padCount` goes into the BTH as given (the caller knows the payload length).
 */
export function encodeHeaders(target: Uint8Array, offset: number, h: IbHeaders): number {
  const info = OPCODES[h.opcode];
  if (info === undefined) throw new UsageError(`unknown opcode 0x${h.opcode.toString(16)}`);
  target[offset] = h.opcode;
  target[offset + 1] = (h.solicited ? 0x80 : 0) | (h.migReq ? 0x40 : 0) | ((h.padCount & 3) << 4) | (h.transportVersion & 0x0f);
  target[offset + 2] = h.pkey >>> 8;
  target[offset + 3] = h.pkey & 0xff;
  target[offset + 4] = (h.fecn ? 0x80 : 0) | (h.becn ? 0x40 : 0) | (h.reserved6 & 0x3f);
  putU24(target, offset + 5, h.destQp);
  target[offset + 8] = (h.ackRequest ? 0x80 : 0) | (h.reserved7 & 0x7f);
  putU24(target, offset + 9, h.psn);
  let cursor = offset + BTH_LENGTH;
  const headers = info.headers;
  if ((headers & H_DETH) !== 0) {
    putU32(target, cursor, h.qkey);
    putU32(target, cursor + 4, h.sourceQp & 0xffffff);
    cursor += DETH_LENGTH;
  }
  if ((headers & H_RETH) !== 0) {
    putU64(target, cursor, h.virtualAddress);
    putU32(target, cursor + 8, h.rkey);
    putU32(target, cursor + 12, h.dmaLength);
    cursor += RETH_LENGTH;
  }
  if ((headers & H_AETH) !== 0) {
    target[cursor] = h.syndrome;
    putU24(target, cursor + 1, h.msn);
    cursor += AETH_LENGTH;
  }
  if ((headers & H_ATOMIC_ETH) !== 0) {
    putU64(target, cursor, h.virtualAddress);
    putU32(target, cursor + 8, h.rkey);
    putU64(target, cursor + 12, h.swapOrAdd);
    putU64(target, cursor + 20, h.compare);
    cursor += ATOMIC_ETH_LENGTH;
  }
  if ((headers & H_ATOMIC_ACK_ETH) !== 0) {
    putU64(target, cursor, h.originalData);
    cursor += ATOMIC_ACK_ETH_LENGTH;
  }
  if ((headers & H_IMM) !== 0) {
    putU32(target, cursor, h.immediate);
    cursor += IMM_LENGTH;
  }
  if ((headers & H_IETH) !== 0) {
    putU32(target, cursor, h.invalidateRkey);
    cursor += IETH_LENGTH;
  }
  if ((headers & H_CNP_RESERVED) !== 0) {
    target.fill(0, cursor, cursor + CNP_RESERVED_LENGTH);
    cursor += CNP_RESERVED_LENGTH;
  }
  return cursor - offset;
}

/** rxe `psn_compare`: negative when a is before b, 0 when equal, positive when after (mod 2^24). */
export function psnCompare(a: number, b: number): number {
  return ((a - b) << 8) >> 8;
}

export function psnAdd(psn: number, count: number): number {
  return (psn + count) & PSN_MASK;
}

export function describeSyndrome(syndrome: number): string {
  switch (syndrome & Syndrome.TypeMask) {
    case Syndrome.TypeAck:
      return `ACK (credits ${syndrome & 0x1f})`;
    case Syndrome.TypeRnrNak:
      return `RNR NAK (timer ${RNR_TIMER_MICROS[syndrome & 0x1f]! / 1000} ms)`;
    case Syndrome.TypeNak:
      return (
        ['NAK PSN sequence error', 'NAK invalid request', 'NAK remote access error', 'NAK remote operational error', 'NAK invalid RD request'][
          syndrome & 0x1f
        ] ?? `NAK code ${syndrome & 0x1f}`
      );
    default:
      return `reserved syndrome 0x${syndrome.toString(16)}`;
  }
}

function u32(bytes: Uint8Array, offset: number): number {
  return ((bytes[offset]! << 24) | (bytes[offset + 1]! << 16) | (bytes[offset + 2]! << 8) | bytes[offset + 3]!) >>> 0;
}

function u64(bytes: Uint8Array, offset: number): bigint {
  return (BigInt(u32(bytes, offset)) << 32n) | BigInt(u32(bytes, offset + 4));
}

function putU24(target: Uint8Array, offset: number, value: number): void {
  target[offset] = (value >>> 16) & 0xff;
  target[offset + 1] = (value >>> 8) & 0xff;
  target[offset + 2] = value & 0xff;
}

function putU32(target: Uint8Array, offset: number, value: number): void {
  target[offset] = (value >>> 24) & 0xff;
  target[offset + 1] = (value >>> 16) & 0xff;
  target[offset + 2] = (value >>> 8) & 0xff;
  target[offset + 3] = value & 0xff;
}

function putU64(target: Uint8Array, offset: number, value: bigint): void {
  putU32(target, offset, Number((value >> 32n) & 0xffffffffn));
  putU32(target, offset + 4, Number(value & 0xffffffffn));
}
