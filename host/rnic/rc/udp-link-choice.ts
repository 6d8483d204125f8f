// Which kernel UDP link a RoCE port opens when the caller does not hand it one: the batched link
// (sendmmsg/recvmmsg with GSO/GRO through koffi, several packets per system call) where koffi
// loads, node:dgram's UdpLink otherwise. `udpLink` in the options, or $KBTP_ROCE_UDP, picks one
// explicitly: "batched" fails if it cannot load, "dgram" never tries it, "auto" is the default.

import { UsageError } from '../../errors.ts';
import { BatchedUdpLink } from './batched-udp-link.ts';
import { loadBatchedUdp } from './batched-udp-libc.ts';
import { UdpLink, type PacketLink, type UdpLinkOptions } from './link.ts';

export const UDP_LINK_KINDS = ['auto', 'batched', 'dgram'] as const;
export type UdpLinkKind = (typeof UDP_LINK_KINDS)[number];
export const UDP_LINK_ENV = 'KBTP_ROCE_UDP';

export interface UdpLinkChoice extends UdpLinkOptions {
  /** Default $KBTP_ROCE_UDP, else auto. */
  udpLink?: UdpLinkKind;
}

/** The kind asked for by the environment (auto when unset); a bad value is a usage error that names the variable. */
export function udpLinkKindFromEnvironment(value = process.env[UDP_LINK_ENV]): UdpLinkKind {
  if (value === undefined || value === '') return 'auto';
  if ((UDP_LINK_KINDS as readonly string[]).includes(value)) return value as UdpLinkKind;
  throw new UsageError(`${UDP_LINK_ENV}=${value}: use ${UDP_LINK_KINDS.join(', ')}`);
}

export async function openUdpLink(options: UdpLinkChoice = {}): Promise<PacketLink> {
  const kind = options.udpLink ?? udpLinkKindFromEnvironment();
  const bufferBytes = options.receiveBufferBytes;
  const socketOptions = { host: options.host, port: options.port, ...(bufferBytes === undefined ? {} : { bufferBytes }) };
  if (kind === 'dgram' || (kind === 'auto' && loadBatchedUdp() instanceof Error)) return UdpLink.open(options);
  if (kind === 'batched') return BatchedUdpLink.open(socketOptions);
  try {
    return await BatchedUdpLink.open(socketOptions);
  } catch {
    // koffi loaded but the batched socket could not start here (no koffi.node.poll, its send worker, a kernel
    // without some call): node:dgram still works, and a real problem (the address) repeats there.
    return UdpLink.open(options);
  }
}
