// RoCEv2 invariant CRC (roce.md §7): CRC-32 (IEEE 802.3, as zlib) over 8 octets of 0xFF standing
// in for the absent LRH, the IP header with its variant fields (IPv4 TOS, TTL, checksum; IPv6
// traffic class, flow label, hop limit) set to ones, the UDP header with its checksum set to
// ones, the BTH with its FECN/BECN/reserved octet set to ones, then every other octet up to the
// ICRC unmodified. The result goes on the wire least-significant octet first. The native
// @node-rs/crc32 continues a CRC from a previous result, so payload views are fed in place.

import { crc32 } from '@node-rs/crc32';
import { readCrc } from './crc.ts';
import { crc32Continue, crc32Range, CRC32_NATIVE_FROM, CRC32_TABLE } from '../../util/crc32.ts';
import { ProtocolError } from '../../errors.ts';

/** The ICRC is written LSB first, like the MPA CRC. */
export { writeCrc as writeIcrc, readCrc as readIcrc } from './crc.ts';

const LRH_STAND_IN = new Uint8Array(8).fill(0xff);
/** CRC after the eight 0xFF octets: every ICRC starts here (rxe's raw seed 0xDEBB20E3, inverted). */
const AFTER_LRH = crc32(LRH_STAND_IN);
// Masked copies of IP + UDP; 40 + 8 octets at most. Every call finishes with it before
// returning, so one buffer serves every caller of the thread.
const scratch = new Uint8Array(48);

/** Copies the IP and UDP headers into `target` at `at` with the fields the ICRC masks set to ones; returns the end. */
function maskIpUdp(ipHeader: Uint8Array, udpHeader: Uint8Array, target: Uint8Array, at: number): number {
  const ipLength = ipHeader.length;
  if (ipLength > 40 || ipLength < 20) throw new ProtocolError(`IP header of ${ipLength} octets`);
  target.set(ipHeader, at);
  if (ipHeader[0]! >> 4 === 6) {
    target[at] = 0x6f; // version kept, traffic class and flow label masked
    target[at + 1] = 0xff;
    target[at + 2] = 0xff;
    target[at + 3] = 0xff;
    target[at + 7] = 0xff; // hop limit
  } else {
    target[at + 1] = 0xff; // TOS
    target[at + 8] = 0xff; // TTL
    target[at + 10] = 0xff; // header checksum
    target[at + 11] = 0xff;
  }
  const udpAt = at + ipLength;
  for (let i = 0; i < 6; i++) target[udpAt + i] = udpHeader[i]!;
  target[udpAt + 6] = 0xff; // UDP checksum
  target[udpAt + 7] = 0xff;
  return udpAt + 8;
}

/**
 * What the ICRC covers before the BTH, as octets: the eight 0xFF octets of the LRH stand-in,
 * the masked IP header and the masked UDP header (36 octets over IPv4). A receive thread that
 * checks ICRCs itself patches addresses, ports and lengths into it.
 */
export function icrcMaskedPrefix(ipHeader: Uint8Array, udpHeader: Uint8Array): Uint8Array {
  const prefix = new Uint8Array(8 + ipHeader.length + 8);
  prefix.set(LRH_STAND_IN, 0);
  maskIpUdp(ipHeader, udpHeader, prefix, 8);
  return prefix;
}

/**
 * The running ICRC after the LRH stand-in and the masked IP and UDP headers: the same for every
 * packet of one length between the same two sockets, so a link can keep it.
 */
export function icrcAfterUdp(ipHeader: Uint8Array, udpHeader: Uint8Array): number {
  return crc32Range(AFTER_LRH, scratch, 0, maskIpUdp(ipHeader, udpHeader, scratch, 0));
}

/** Continues `running` (from `icrcAfterUdp`) over the 12 BTH octets at `at`, its FECN/BECN/resv6 octet masked. */
export function icrcContinueBth(running: number, bth: Uint8Array, at = 0): number {
  return icrcContinueBthTail(icrcContinueBthHead(running, bth, at), bth, at);
}

/**
 * `icrcContinueBth` in two steps, for packets that share their BTH's first 8 octets (the middle
 * packets of one message: opcode, flags, P_Key, destination QP): octets 0-7, the
 * FECN/BECN/resv6 octet masked, then (`icrcContinueBthTail`) octets 8-11 (AckReq, PSN).
 */
export function icrcContinueBthHead(running: number, bth: Uint8Array, at = 0): number {
  let c = ~crc32Range(running, bth, at, at + 4);
  c = CRC32_TABLE[(c ^ 0xff) & 0xff]! ^ (c >>> 8); // FECN, BECN, resv6
  return crc32Range(~c >>> 0, bth, at + 5, at + 8);
}

export function icrcContinueBthTail(running: number, bth: Uint8Array, at = 0): number {
  return crc32Range(running, bth, at + 8, at + 12);
}

/**
 * The running ICRC after the masked IP, UDP and BTH headers. `ipHeader` is the whole IPv4 (any
 * IHL) or IPv6 (40-octet) header, `udpHeader` 8 octets, `bth` at least its 12 octets (only those
 * are read). Continue with `icrcContinue` over the rest of the packet, pad included.
 */
export function icrcBegin(ipHeader: Uint8Array, udpHeader: Uint8Array, bth: Uint8Array): number {
  return icrcContinueBth(icrcAfterUdp(ipHeader, udpHeader), bth);
}

export function icrcContinue(running: number, bytes: Uint8Array): number {
  return crc32Continue(running, bytes);
}

/** `icrcContinue` over bytes[start, end) without a view: the short header and trailer runs of a packet. */
export function icrcContinueRange(running: number, bytes: Uint8Array, start: number, end: number): number {
  if (end - start < CRC32_NATIVE_FROM) return crc32Range(running, bytes, start, end);
  return crc32(bytes.subarray(start, end), running);
}

/** ICRC of a whole IB packet (`transport` = BTH .. last pad octet, without the ICRC). */
export function computeIcrc(ipHeader: Uint8Array, udpHeader: Uint8Array, transport: Uint8Array): number {
  return icrcContinueRange(icrcBegin(ipHeader, udpHeader, transport), transport, 12, transport.length);
}

/** Checks the ICRC at the end of `packet` (BTH .. ICRC). */
export function icrcMatches(ipHeader: Uint8Array, udpHeader: Uint8Array, packet: Uint8Array): boolean {
  if (packet.length < 16) return false;
  const end = packet.length - 4;
  return computeIcrc(ipHeader, udpHeader, packet.subarray(0, end)) === readCrc(packet, end);
}
