// Decodes the layers a capture record carries down to a TCP segment or a UDP datagram: Ethernet
// (with 802.1Q tags) or raw IP, IPv4 or IPv6, then TCP or UDP. Anything else is reported as
// `undefined` so a caller walking a capture can skip ARP, ICMP and neighbour discovery without
// special cases.

import { LINKTYPE_ETHERNET, LINKTYPE_RAW } from './pcap.ts';

export const TCP_FIN = 0x01;
export const TCP_SYN = 0x02;
export const TCP_RST = 0x04;
export const TCP_PSH = 0x08;
export const TCP_ACK = 0x10;

export interface TcpSegment {
  readonly sourceAddress: string;
  readonly destinationAddress: string;
  readonly sourcePort: number;
  readonly destinationPort: number;
  readonly sequence: number;
  readonly acknowledgement: number;
  readonly flags: number;
  readonly payload: Uint8Array;
}

const ETHERTYPE_IPV4 = 0x0800;
const ETHERTYPE_IPV6 = 0x86dd;
const ETHERTYPE_VLAN = 0x8100;
const ETHERTYPE_QINQ = 0x88a8;
const IP_PROTOCOL_TCP = 6;
const IPV6_EXTENSION_HEADERS = new Set([0, 43, 60]); // hop-by-hop, routing, destination options

export interface IpDatagram {
  readonly version: 4 | 6;
  readonly sourceAddress: string;
  readonly destinationAddress: string;
  /** Upper-layer protocol (after any IPv6 extension headers). */
  readonly protocol: number;
  /** The IP header as sent (IPv4 with options; IPv6 fixed header only). */
  readonly header: Uint8Array;
  /** Upper-layer bytes, bounded by the IP length (Ethernet padding removed). */
  readonly payload: Uint8Array;
}

export interface UdpDatagram {
  readonly ip: IpDatagram;
  readonly sourcePort: number;
  readonly destinationPort: number;
  /** The 8-octet UDP header. */
  readonly header: Uint8Array;
  readonly payload: Uint8Array;
}

const IP_PROTOCOL_UDP = 17;

export function decodeTcpSegment(linkType: number, frame: Uint8Array): TcpSegment | undefined {
  const ip = decodeIpDatagram(linkType, frame);
  if (ip === undefined || ip.protocol !== IP_PROTOCOL_TCP) return undefined;
  return decodeTcp(ip.payload, ip.sourceAddress, ip.destinationAddress);
}

/** A UDP datagram (unfragmented) in a capture record, or undefined. */
export function decodeUdpDatagram(linkType: number, frame: Uint8Array): UdpDatagram | undefined {
  const ip = decodeIpDatagram(linkType, frame);
  if (ip === undefined || ip.protocol !== IP_PROTOCOL_UDP || ip.payload.length < 8) return undefined;
  const length = (ip.payload[4]! << 8) | ip.payload[5]!;
  if (length < 8 || length > ip.payload.length) return undefined;
  return {
    ip,
    sourcePort: (ip.payload[0]! << 8) | ip.payload[1]!,
    destinationPort: (ip.payload[2]! << 8) | ip.payload[3]!,
    header: ip.payload.subarray(0, 8),
    payload: ip.payload.subarray(8, length),
  };
}

/** The unfragmented IPv4 or IPv6 datagram in a capture record, or undefined. */
export function decodeIpDatagram(linkType: number, frame: Uint8Array): IpDatagram | undefined {
  let offset = 0;
  let etherType: number;
  if (linkType === LINKTYPE_ETHERNET) {
    if (frame.length < 14) return undefined;
    etherType = (frame[12]! << 8) | frame[13]!;
    offset = 14;
    while (etherType === ETHERTYPE_VLAN || etherType === ETHERTYPE_QINQ) {
      if (frame.length < offset + 4) return undefined;
      etherType = (frame[offset + 2]! << 8) | frame[offset + 3]!;
      offset += 4;
    }
  } else if (linkType === LINKTYPE_RAW) {
    if (frame.length < 1) return undefined;
    etherType = frame[0]! >> 4 === 6 ? ETHERTYPE_IPV6 : ETHERTYPE_IPV4;
  } else {
    return undefined;
  }
  if (etherType === ETHERTYPE_IPV4) return decodeIpv4(frame, offset);
  if (etherType === ETHERTYPE_IPV6) return decodeIpv6(frame, offset);
  return undefined;
}

function decodeIpv4(frame: Uint8Array, offset: number): IpDatagram | undefined {
  if (frame.length < offset + 20) return undefined;
  const headerLength = (frame[offset]! & 0x0f) * 4;
  const totalLength = (frame[offset + 2]! << 8) | frame[offset + 3]!;
  const fragment = ((frame[offset + 6]! << 8) | frame[offset + 7]!) & 0x3fff; // MF flag + offset
  if (fragment !== 0 || headerLength < 20 || frame.length < offset + headerLength) return undefined;
  // The frame may carry Ethernet padding past the IP datagram; the IP total length is authoritative.
  const end = Math.min(frame.length, offset + totalLength);
  return {
    version: 4,
    sourceAddress: Array.from(frame.subarray(offset + 12, offset + 16)).join('.'),
    destinationAddress: Array.from(frame.subarray(offset + 16, offset + 20)).join('.'),
    protocol: frame[offset + 9]!,
    header: frame.subarray(offset, offset + headerLength),
    payload: frame.subarray(offset + headerLength, Math.max(end, offset + headerLength)),
  };
}

function decodeIpv6(frame: Uint8Array, offset: number): IpDatagram | undefined {
  if (frame.length < offset + 40) return undefined;
  const payloadLength = (frame[offset + 4]! << 8) | frame[offset + 5]!;
  let nextHeader = frame[offset + 6]!;
  const source = formatIpv6(frame.subarray(offset + 8, offset + 24));
  const destination = formatIpv6(frame.subarray(offset + 24, offset + 40));
  const end = Math.min(frame.length, offset + 40 + payloadLength);
  let cursor = offset + 40;
  while (IPV6_EXTENSION_HEADERS.has(nextHeader)) {
    if (cursor + 2 > end) return undefined;
    nextHeader = frame[cursor]!;
    cursor += (frame[cursor + 1]! + 1) * 8;
  }
  if (cursor > end) return undefined;
  return {
    version: 6,
    sourceAddress: source,
    destinationAddress: destination,
    protocol: nextHeader,
    header: frame.subarray(offset, offset + 40),
    payload: frame.subarray(cursor, end),
  };
}

function decodeTcp(segment: Uint8Array, source: string, destination: string): TcpSegment | undefined {
  if (segment.length < 20) return undefined;
  const view = new DataView(segment.buffer, segment.byteOffset, segment.byteLength);
  const dataOffset = (segment[12]! >> 4) * 4;
  if (dataOffset < 20 || dataOffset > segment.length) return undefined;
  return {
    sourceAddress: source,
    destinationAddress: destination,
    sourcePort: view.getUint16(0),
    destinationPort: view.getUint16(2),
    sequence: view.getUint32(4),
    acknowledgement: view.getUint32(8),
    flags: segment[13]!,
    payload: segment.subarray(dataOffset),
  };
}

function formatIpv6(address: Uint8Array): string {
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((address[i]! << 8) | address[i + 1]!).toString(16));
  return groups.join(':');
}
