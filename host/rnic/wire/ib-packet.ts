// A whole IB transport packet as a RoCEv2 UDP payload: BTH, extended headers, payload, zero pad
// to a multiple of four, ICRC. The transmit path gathers the same pieces without this copy;
// this form serves the capture decoder, tests and control packets.

import { decodeHeaders, encodeHeaders, encodedHeaderLength, padFor, type IbHeaders } from './ib-headers.ts';
import { ICRC_LENGTH } from './ib-opcodes.ts';
import { computeIcrc, writeIcrc } from './icrc.ts';

/**
 * Encodes `h` (PadCnt taken from the payload length) with `payload` and the ICRC computed over
 * `ipHeader` and `udpHeader` (which must describe this packet's length).
 */
export function encodeIbPacket(h: IbHeaders, payload: Uint8Array, ipHeader: Uint8Array, udpHeader: Uint8Array): Uint8Array {
  const pad = padFor(payload.length);
  h.padCount = pad;
  const headerLength = encodedHeaderLength(h.opcode);
  const packet = new Uint8Array(headerLength + payload.length + pad + ICRC_LENGTH);
  encodeHeaders(packet, 0, h);
  packet.set(payload, headerLength);
  const end = packet.length - ICRC_LENGTH;
  writeIcrc(packet, end, computeIcrc(ipHeader, udpHeader, packet.subarray(0, end)));
  return packet;
}

/** Octets of the UDP payload for `opcode` with `payloadLength` octets of payload. */
export function ibPacketLength(opcode: number, payloadLength: number): number {
  return encodedHeaderLength(opcode) + payloadLength + padFor(payloadLength) + ICRC_LENGTH;
}

/**
 * Decodes `packet` into `out` and checks its ICRC. Returns undefined, or what is wrong
 * (a malformed header or "ICRC mismatch").
 */
export function decodeIbPacket(packet: Uint8Array, out: IbHeaders, ipHeader: Uint8Array, udpHeader: Uint8Array): string | undefined {
  const problem = decodeHeaders(packet, out);
  if (problem !== undefined) return problem;
  const end = packet.length - ICRC_LENGTH;
  const expected = computeIcrc(ipHeader, udpHeader, packet.subarray(0, end));
  if (expected !== out.icrc) {
    return `ICRC mismatch: packet carries 0x${out.icrc.toString(16).padStart(8, '0')}, computed 0x${expected.toString(16).padStart(8, '0')}`;
  }
  return undefined;
}
