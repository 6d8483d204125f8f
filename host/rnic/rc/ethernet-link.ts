// A PacketLink that is a host's own Ethernet interface on a frame port, such as a QEMU guest's
// UDP tunnel (each datagram one raw Ethernet frame, qemu-peers.md): kbtp answers ARP for its
// IPv4 address (and ICMP echo, so the guest can ping it), resolves the peer's MAC with ARP, and
// carries RoCEv2 in real IPv4/UDP headers that it builds itself, so the ICRC covers exactly
// what a kernel RoCE stack (rxe) checks. Everything else on the wire is ignored.

import dgram from 'node:dgram';
import { encodeIpv4Header, encodeUdpHeader, internetChecksum, IPV4_HEADER_LENGTH, parseIpv4, ROCE_UDP_PORT, UDP_HEADER_LENGTH } from '../wire/roce-frame.ts';
import { fillIcrc, type PacketLink, type PacketReceiver, type PeerAddress } from './link.ts';
import { UsageError } from '../../errors.ts';

const ETHERTYPE_IPV4 = 0x0800;
const ETHERTYPE_ARP = 0x0806;
const ETHERNET_HEADER_LENGTH = 14;
const ARP_LENGTH = 28;
const IP_PROTOCOL_ICMP = 1;
const IP_PROTOCOL_UDP = 17;
/** Packets held per peer while its MAC address is being resolved. */
const MAX_QUEUED = 256;

/** Sends and receives whole Ethernet frames (without FCS). */
export interface FramePort {
  send(frame: Uint8Array): void;
  onFrame(handler: (frame: Uint8Array) => void): void;
  close(): Promise<void>;
}

/** A QEMU `-netdev dgram`/`socket,udp=` tunnel end on loopback: one datagram, one frame. */
export class UdpFrameTunnel implements FramePort {
  private constructor(
    private readonly socket: dgram.Socket,
    private readonly remote: { address: string; port: number },
  ) {}

  static async open(local: { address: string; port: number }, remote: { address: string; port: number }): Promise<UdpFrameTunnel> {
    const socket = dgram.createSocket('udp4');
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.bind(local.port, local.address, () => {
        socket.off('error', reject);
        resolve();
      });
    });
    socket.on('error', () => undefined); // a guest not yet up: frames are lost, RC retries
    return new UdpFrameTunnel(socket, remote);
  }

  get localPort(): number {
    return this.socket.address().port;
  }

  send(frame: Uint8Array): void {
    this.socket.send(frame, this.remote.port, this.remote.address);
  }

  onFrame(handler: (frame: Uint8Array) => void): void {
    this.socket.on('message', (message) => handler(message));
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.socket.close(() => resolve()));
  }
}

export interface EthernetLinkOptions {
  /** This host's MAC (6 octets) and IPv4 address on the link. */
  mac: Uint8Array;
  address: string;
  /** UDP source port of RoCE packets (default 0xC000; rxe derives one per QP pair). */
  sourcePort?: number;
}

export class EthernetLink implements PacketLink {
  readonly local: PeerAddress;
  private receiver: PacketReceiver | undefined;
  private readonly ownAddress: Uint8Array;
  private readonly arpCache = new Map<string, Uint8Array>();
  private readonly waitingForArp = new Map<string, Uint8Array[]>();
  private identification = 1;
  readonly stats = { framesIn: 0, framesOut: 0, arpRepliesSent: 0, arpRequestsSent: 0, echoRepliesSent: 0, ignored: 0 };

  constructor(
    private readonly port: FramePort,
    private readonly options: EthernetLinkOptions,
  ) {
    if (options.mac.length !== 6) throw new UsageError('the MAC address must be 6 octets');
    this.ownAddress = parseIpv4(options.address);
    this.local = { address: options.address, port: ROCE_UDP_PORT };
    port.onFrame((frame) => this.incoming(frame));
  }

  setReceiver(receiver: PacketReceiver): void {
    this.receiver = receiver;
  }

  send(to: PeerAddress, header: Uint8Array, payload: Uint8Array, trailer: Uint8Array): void {
    const transportLength = header.length + payload.length + trailer.length;
    const frame = new Uint8Array(ETHERNET_HEADER_LENGTH + IPV4_HEADER_LENGTH + UDP_HEADER_LENGTH + transportLength);
    const ip = frame.subarray(ETHERNET_HEADER_LENGTH, ETHERNET_HEADER_LENGTH + IPV4_HEADER_LENGTH);
    const udp = frame.subarray(ETHERNET_HEADER_LENGTH + IPV4_HEADER_LENGTH, ETHERNET_HEADER_LENGTH + IPV4_HEADER_LENGTH + UDP_HEADER_LENGTH);
    encodeIpv4Header(ip, 0, {
      source: this.ownAddress,
      destination: parseIpv4(to.address),
      payloadLength: UDP_HEADER_LENGTH + transportLength,
      identification: this.identification++ & 0xffff,
    });
    encodeUdpHeader(udp, 0, this.options.sourcePort ?? 0xc000, to.port, UDP_HEADER_LENGTH + transportLength);
    fillIcrc(ip, udp, header, payload, trailer);
    let offset = ETHERNET_HEADER_LENGTH + IPV4_HEADER_LENGTH + UDP_HEADER_LENGTH;
    for (const part of [header, payload, trailer]) {
      frame.set(part, offset);
      offset += part.length;
    }
    this.toAddress(to.address, frame, ETHERTYPE_IPV4);
  }

  close(): Promise<void> {
    return this.port.close();
  }

  /** Fills in the Ethernet header for `address` and sends, resolving its MAC with ARP first. */
  private toAddress(address: string, frame: Uint8Array, etherType: number): void {
    frame[12] = etherType >> 8;
    frame[13] = etherType & 0xff;
    frame.set(this.options.mac, 6);
    const mac = this.arpCache.get(address);
    if (mac !== undefined) {
      frame.set(mac, 0);
      this.stats.framesOut++;
      this.port.send(frame);
      return;
    }
    let queue = this.waitingForArp.get(address);
    if (queue === undefined) {
      queue = [];
      this.waitingForArp.set(address, queue);
    }
    if (queue.length < MAX_QUEUED) queue.push(frame);
    this.sendArp(1, new Uint8Array(6).fill(0xff), new Uint8Array(6), parseIpv4(address));
  }

  private sendArp(operation: 1 | 2, destinationMac: Uint8Array, targetMac: Uint8Array, targetAddress: Uint8Array): void {
    const frame = new Uint8Array(ETHERNET_HEADER_LENGTH + ARP_LENGTH);
    frame.set(destinationMac, 0);
    frame.set(this.options.mac, 6);
    frame[12] = ETHERTYPE_ARP >> 8;
    frame[13] = ETHERTYPE_ARP & 0xff;
    const arp = frame.subarray(ETHERNET_HEADER_LENGTH);
    arp.set([0, 1, 0x08, 0x00, 6, 4, 0, operation]);
    arp.set(this.options.mac, 8);
    arp.set(this.ownAddress, 14);
    arp.set(targetMac, 18);
    arp.set(targetAddress, 24);
    if (operation === 1) this.stats.arpRequestsSent++;
    else this.stats.arpRepliesSent++;
    this.stats.framesOut++;
    this.port.send(frame);
  }

  private incoming(frame: Uint8Array): void {
    this.stats.framesIn++;
    if (frame.length < ETHERNET_HEADER_LENGTH) {
      this.ignore();
      return;
    }
    const etherType = (frame[12]! << 8) | frame[13]!;
    if (etherType === ETHERTYPE_ARP) {
      this.arp(frame.subarray(ETHERNET_HEADER_LENGTH));
      return;
    }
    if (etherType !== ETHERTYPE_IPV4) {
      this.ignore();
      return;
    }
    const ip = frame.subarray(ETHERNET_HEADER_LENGTH);
    if (ip.length < IPV4_HEADER_LENGTH || ip[0]! >> 4 !== 4) {
      this.ignore();
      return;
    }
    const headerLength = (ip[0]! & 0x0f) * 4;
    const totalLength = (ip[2]! << 8) | ip[3]!;
    if (headerLength < IPV4_HEADER_LENGTH || totalLength > ip.length || totalLength < headerLength) {
      this.ignore();
      return;
    }
    if (!sameAddress(ip.subarray(16, 20), this.ownAddress)) {
      this.ignore();
      return;
    }
    if ((((ip[6]! << 8) | ip[7]!) & 0x3fff) !== 0) {
      // fragments: RoCE sets DF
      this.ignore();
      return;
    }
    const source = Array.from(ip.subarray(12, 16)).join('.');
    // Whoever talks to us from this address is reachable at this MAC.
    this.learn(source, frame.subarray(6, 12));
    const body = ip.subarray(headerLength, totalLength);
    if (ip[9] === IP_PROTOCOL_ICMP) {
      this.icmp(ip.subarray(0, headerLength), body, source);
      return;
    }
    if (ip[9] !== IP_PROTOCOL_UDP || body.length < UDP_HEADER_LENGTH) {
      this.ignore();
      return;
    }
    const destinationPort = (body[2]! << 8) | body[3]!;
    const udpLength = (body[4]! << 8) | body[5]!;
    if (destinationPort !== ROCE_UDP_PORT || udpLength < UDP_HEADER_LENGTH || udpLength > body.length) {
      this.ignore();
      return;
    }
    this.receiver?.(body.subarray(UDP_HEADER_LENGTH, udpLength), ip.subarray(0, headerLength), body.subarray(0, UDP_HEADER_LENGTH), {
      address: source,
      port: (body[0]! << 8) | body[1]!,
    });
  }

  private arp(arp: Uint8Array): void {
    if (arp.length < ARP_LENGTH || arp[0] !== 0 || arp[1] !== 1 || arp[2] !== 0x08 || arp[3] !== 0x00 || arp[4] !== 6 || arp[5] !== 4) {
      this.ignore();
      return;
    }
    const operation = (arp[6]! << 8) | arp[7]!;
    const senderMac = arp.subarray(8, 14);
    const senderAddress = arp.subarray(14, 18);
    this.learn(Array.from(senderAddress).join('.'), senderMac);
    if (operation === 1 && sameAddress(arp.subarray(24, 28), this.ownAddress)) {
      this.sendArp(2, senderMac.slice(), senderMac.slice(), senderAddress.slice());
    }
  }

  private icmp(ipHeader: Uint8Array, body: Uint8Array, source: string): void {
    if (body.length < 8 || body[0] !== 8 || internetChecksum(body) !== 0) {
      // echo request, intact
      this.ignore();
      return;
    }
    const reply = new Uint8Array(ETHERNET_HEADER_LENGTH + IPV4_HEADER_LENGTH + body.length);
    encodeIpv4Header(reply, ETHERNET_HEADER_LENGTH, {
      source: this.ownAddress,
      destination: ipHeader.subarray(12, 16),
      payloadLength: body.length,
      identification: this.identification++ & 0xffff,
      protocol: IP_PROTOCOL_ICMP,
      dontFragment: false,
    });
    const echo = reply.subarray(ETHERNET_HEADER_LENGTH + IPV4_HEADER_LENGTH);
    echo.set(body);
    echo[0] = 0; // echo reply
    echo[2] = 0;
    echo[3] = 0;
    const checksum = internetChecksum(echo);
    echo[2] = checksum >> 8;
    echo[3] = checksum & 0xff;
    this.stats.echoRepliesSent++;
    this.toAddress(source, reply, ETHERTYPE_IPV4);
  }

  private learn(address: string, mac: Uint8Array): void {
    if (mac.every((octet) => octet === 0) || (mac[0]! & 1) === 1) return; // no broadcast/multicast entries
    this.arpCache.set(address, mac.slice());
    const queued = this.waitingForArp.get(address);
    if (queued === undefined) return;
    this.waitingForArp.delete(address);
    for (const frame of queued) {
      frame.set(mac, 0);
      this.stats.framesOut++;
      this.port.send(frame);
    }
  }

  private ignore(): void {
    this.stats.ignored++;
  }
}

function sameAddress(a: Uint8Array, b: Uint8Array): boolean {
  return a[0] === b[0] && a[1] === b[1] && a[2] === b[2] && a[3] === b[3];
}
