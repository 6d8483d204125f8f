// The IPv4 and UDP headers a RoCEv2 packet travels in (roce.md §1), as Linux rxe builds them:
// DF set, UDP checksum 0 (the ICRC protects the packet), destination port 4791 and a source port
// derived from the sending QP number so one QP's packets stay on one path.
import { UsageError } from '../../errors.ts';

export const ROCE_UDP_PORT = 4791;
export const IPV4_HEADER_LENGTH = 20;
export const UDP_HEADER_LENGTH = 8;
export const IP_PROTOCOL_UDP = 17;
const IPV4_DONT_FRAGMENT = 0x4000;

export interface Ipv4HeaderFields {
  readonly source: Uint8Array; // 4 octets
  readonly destination: Uint8Array; // 4 octets
  /** Octets after the IP header (UDP header included). */
  readonly payloadLength: number;
  readonly identification?: number;
  readonly tos?: number;
  readonly ttl?: number;
  readonly protocol?: number;
  readonly dontFragment?: boolean;
}

/** Writes a 20-octet IPv4 header with a valid checksum. */
export function encodeIpv4Header(target: Uint8Array, offset: number, fields: Ipv4HeaderFields): void {
  const total = IPV4_HEADER_LENGTH + fields.payloadLength;
  const id = fields.identification ?? 0;
  const flags = (fields.dontFragment ?? true) ? IPV4_DONT_FRAGMENT : 0;
  target[offset] = 0x45;
  target[offset + 1] = fields.tos ?? 0;
  target[offset + 2] = total >>> 8;
  target[offset + 3] = total & 0xff;
  target[offset + 4] = (id >>> 8) & 0xff;
  target[offset + 5] = id & 0xff;
  target[offset + 6] = flags >>> 8;
  target[offset + 7] = flags & 0xff;
  target[offset + 8] = fields.ttl ?? 64;
  target[offset + 9] = fields.protocol ?? IP_PROTOCOL_UDP;
  target[offset + 10] = 0;
  target[offset + 11] = 0;
  target.set(fields.source.subarray(0, 4), offset + 12);
  target.set(fields.destination.subarray(0, 4), offset + 16);
  const checksum = internetChecksum(target.subarray(offset, offset + IPV4_HEADER_LENGTH));
  target[offset + 10] = checksum >>> 8;
  target[offset + 11] = checksum & 0xff;
}

/** Writes an 8-octet UDP header; `length` counts the UDP header. Checksum 0 as rxe sends. */
export function encodeUdpHeader(target: Uint8Array, offset: number, sourcePort: number, destinationPort: number, length: number, checksum = 0): void {
  target[offset] = sourcePort >>> 8;
  target[offset + 1] = sourcePort & 0xff;
  target[offset + 2] = destinationPort >>> 8;
  target[offset + 3] = destinationPort & 0xff;
  target[offset + 4] = length >>> 8;
  target[offset + 5] = length & 0xff;
  target[offset + 6] = checksum >>> 8;
  target[offset + 7] = checksum & 0xff;
}

/** RFC 1071 one's-complement checksum of `bytes` (IPv4 header, ICMP). */
export function internetChecksum(bytes: Uint8Array): number {
  let sum = 0;
  for (let i = 0; i + 1 < bytes.length; i += 2) sum += (bytes[i]! << 8) | bytes[i + 1]!;
  if (bytes.length % 2 === 1) sum += bytes[bytes.length - 1]! << 8;
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return ~sum & 0xffff;
}

/**
 * The UDP source port Linux 6.1 rxe uses once a QP is connected: rdma_get_udp_sport() of the
 * flow label rdma_calc_flow_label(local QPN, remote QPN) (the AV's flow label being 0). The
 * captures show it (QPs 0x11 <-> 0x11 -> 0xC121); roce.md's older per-QP hash_32 formula is not
 * what 6.1 puts on the wire.
 */
export function rxeSourcePort(localQpNumber: number, remoteQpNumber: number): number {
  let v = BigInt(localQpNumber & 0xffffff) * BigInt(remoteQpNumber & 0xffffff);
  v ^= v >> 20n;
  v ^= v >> 40n;
  const flowLabel = Number(v & 0xfffffn);
  const low = (flowLabel & 0x3fff) ^ ((flowLabel & 0xfc000) >> 14);
  return 0xc000 | low;
}

/** Dotted IPv4 text to 4 octets; throws on anything else. */
export function parseIpv4(text: string): Uint8Array {
  const parts = text.split('.');
  const octets = parts.map((part) => (/^\d{1,3}$/.test(part) ? Number(part) : NaN));
  if (parts.length !== 4 || octets.some((octet) => !(octet >= 0 && octet <= 255))) throw new UsageError(`"${text}" is not an IPv4 address`);
  return new Uint8Array(octets);
}

/** The IPv4-mapped RoCEv2 GID ::ffff:a.b.c.d of an address. */
export function ipv4MappedGid(address: Uint8Array): Uint8Array {
  const gid = new Uint8Array(16);
  gid[10] = 0xff;
  gid[11] = 0xff;
  gid.set(address.subarray(0, 4), 12);
  return gid;
}
