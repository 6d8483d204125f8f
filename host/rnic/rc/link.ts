// The layer under the RC transport: something that carries one IB packet (BTH .. ICRC) per UDP
// datagram to a peer and back. The ICRC covers the IP and UDP headers the packet travels in,
// which only the link knows, so the link computes it on send and hands the headers up on
// receive. `UdpLink` is a kernel UDP socket (kbtp to kbtp, any peer reachable through UDP);
// impaired-link.ts wraps any link with loss, duplication and reordering for tests.

import dgram from 'node:dgram';
import { icrcBegin, icrcContinue, writeIcrc } from '../wire/icrc.ts';
import { encodeIpv4Header, encodeUdpHeader, IPV4_HEADER_LENGTH, parseIpv4, UDP_HEADER_LENGTH } from '../wire/roce-frame.ts';

export interface PeerAddress {
  /** Dotted IPv4 address. */
  readonly address: string;
  readonly port: number;
}

/** Receives one datagram's IB packet and the IP/UDP headers it came in (for the ICRC check). */
export type PacketReceiver = (packet: Uint8Array, ipHeader: Uint8Array, udpHeader: Uint8Array, from: PeerAddress) => void;

export interface PacketLink {
  readonly local: PeerAddress;
  /**
   * Sends one IB packet made of `header` (BTH and extended headers), `payload` and `trailer`
   * (pad octets, then 4 octets the link fills with the ICRC). The views must stay unchanged
   * until the datagram has left (the RC layer only completes a WQE after its ACK).
   */
  send(to: PeerAddress, header: Uint8Array, payload: Uint8Array, trailer: Uint8Array): void;
  setReceiver(receiver: PacketReceiver): void;
  close(): Promise<void>;
}

/**
 * Writes the IPv4 and UDP headers a kernel socket would put around a packet, as far as the ICRC
 * covers them: the kernel chooses the IP identification itself, so both ends of a UDP link
 * compute the ICRC with identification 0 (TOS, TTL and checksums are masked anyway).
 */
export function socketIcrcHeaders(ip: Uint8Array, udp: Uint8Array, from: PeerAddress, to: PeerAddress, packetLength: number): void {
  encodeIpv4Header(ip, 0, {
    source: parseIpv4(from.address),
    destination: parseIpv4(to.address),
    payloadLength: UDP_HEADER_LENGTH + packetLength,
  });
  encodeUdpHeader(udp, 0, from.port, to.port, UDP_HEADER_LENGTH + packetLength);
}

/** Computes and writes the ICRC of header + payload + trailer into the trailer's last 4 octets. */
export function fillIcrc(ip: Uint8Array, udp: Uint8Array, header: Uint8Array, payload: Uint8Array, trailer: Uint8Array): void {
  let crc = icrcBegin(ip, udp, header);
  crc = icrcContinue(crc, header.subarray(12));
  crc = icrcContinue(crc, payload);
  crc = icrcContinue(crc, trailer.subarray(0, trailer.length - 4));
  writeIcrc(trailer, trailer.length - 4, crc);
}

export interface UdpLinkOptions {
  /** Address to bind (default 127.0.0.1). */
  host?: string;
  /** Port (default 0: any free port; 4791 for a standard RoCEv2 peer). */
  port?: number;
  /** Socket receive buffer asked for (the kernel caps it at net.core.rmem_max). Default 4 MiB. */
  receiveBufferBytes?: number;
}

export class UdpLink implements PacketLink {
  private receiver: PacketReceiver | undefined;
  private readonly ipScratch = new Uint8Array(IPV4_HEADER_LENGTH);
  private readonly udpScratch = new Uint8Array(UDP_HEADER_LENGTH);
  private closed = false;
  /** Datagrams the socket reported errors for (the RC layer recovers by retransmission). */
  sendErrors = 0;

  private constructor(
    private readonly socket: dgram.Socket,
    readonly local: PeerAddress,
  ) {
    socket.on('message', (message, remote) => this.incoming(message, remote));
    // A send error (e.g. ECONNREFUSED from an ICMP port unreachable) is a lost packet to RC.
    socket.on('error', () => {
      this.sendErrors++;
    });
  }

  static async open(options: UdpLinkOptions = {}): Promise<UdpLink> {
    const socket = dgram.createSocket({ type: 'udp4' });
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.bind(options.port ?? 0, options.host ?? '127.0.0.1', () => {
        socket.off('error', reject);
        resolve();
      });
    });
    const wanted = options.receiveBufferBytes ?? 4 * 1024 * 1024;
    for (let size = wanted; size >= 256 * 1024; size >>= 1) {
      try {
        socket.setRecvBufferSize(size);
        socket.setSendBufferSize(size);
        break;
      } catch {
        // Some kernels refuse sizes above their maximum instead of capping: try smaller.
      }
    }
    const address = socket.address();
    return new UdpLink(socket, { address: address.address, port: address.port });
  }

  setReceiver(receiver: PacketReceiver): void {
    this.receiver = receiver;
  }

  send(to: PeerAddress, header: Uint8Array, payload: Uint8Array, trailer: Uint8Array): void {
    if (this.closed) return;
    socketIcrcHeaders(this.ipScratch, this.udpScratch, this.local, to, header.length + payload.length + trailer.length);
    fillIcrc(this.ipScratch, this.udpScratch, header, payload, trailer);
    const parts = payload.length === 0 ? [header, trailer] : [header, payload, trailer];
    this.socket.send(parts, to.port, to.address);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await new Promise<void>((resolve) => this.socket.close(() => resolve()));
  }

  private incoming(message: Buffer, remote: dgram.RemoteInfo): void {
    const receiver = this.receiver;
    if (receiver === undefined) return;
    const from = { address: remote.address, port: remote.port };
    socketIcrcHeaders(this.ipScratch, this.udpScratch, from, this.local, message.length);
    receiver(message, this.ipScratch, this.udpScratch, from);
  }
}
