// The layer under the RC transport: something that carries one IB packet (BTH .. ICRC) per UDP
// datagram to a peer and back. The ICRC covers the IP and UDP headers the packet travels in,
// which only the link knows, so the link computes it on send and hands the headers up on
// receive. `UdpLink` is a kernel UDP socket (kbtp to kbtp, any peer reachable through UDP);
// impaired-link.ts wraps any link with loss, duplication and reordering for tests.

import dgram from 'node:dgram';
import dns from 'node:dns';
import { isIPv4 } from 'node:net';
import { loadIsal, type Isal } from '../../util/isal.ts';
import { icrcAfterUdp, icrcContinue, icrcContinueBth, icrcContinueBthHead, icrcContinueBthTail, icrcContinueRange, readIcrc, writeIcrc } from '../wire/icrc.ts';
import { BTH_LENGTH, ICRC_LENGTH } from '../wire/ib-opcodes.ts';
import { placementAddress, sharedAddress } from './shared-copy.ts';
import { encodeIpv4Header, encodeUdpHeader, IPV4_HEADER_LENGTH, parseIpv4, UDP_HEADER_LENGTH } from '../wire/roce-frame.ts';

export interface PeerAddress {
  /** Dotted IPv4 address. */
  readonly address: string;
  readonly port: number;
}

/**
 * Receives one datagram's IB packet and the IP/UDP headers it came in (for the ICRC check).
 * `icrcChecked` is true or false when the link already checked the ICRC (good or bad), absent
 * when the receiver must.
 */
export type PacketReceiver = (packet: Uint8Array, ipHeader: Uint8Array, udpHeader: Uint8Array, from: PeerAddress, icrcChecked?: boolean) => void;

/** What the lean receiver makes of a packet before its ICRC is computed (LeanPacketReceiver.wants). */
export const LeanVerdict = {
  /** Not the lean path's: the full path checks and handles it. */
  FullPath: 0,
  /** The lean path's: `take` gets it if its ICRC is good. */
  Take: 1,
  /** Dropped (and counted) unchecked: good ICRC or bad, the full path would drop it with no other effect. */
  Dropped: 2,
} as const;
export type LeanVerdict = (typeof LeanVerdict)[keyof typeof LeanVerdict];

/**
 * The lean receive path (PacketLink.setLeanReceiver): the middle packets of a message in
 * progress, placed without a view, a decode or a demultiplexing of each. The link asks `wants`
 * about each packet (`area[at, at + length)`, BTH .. ICRC), checks the ICRC of those it takes and
 * hands the good ones to `take`; a packet either declines goes through the PacketReceiver, one it
 * dropped goes nowhere.
 */
export interface LeanPacketReceiver {
  wants(area: Uint8Array, at: number, length: number, from: PeerAddress): LeanVerdict;
  /** Takes the packet `wants` just accepted, its ICRC good, at raw address `address`; false: the full path gets it. */
  take(area: Uint8Array, at: number, address: number, length: number): boolean;
}

export interface PacketLink {
  readonly local: PeerAddress;
  /**
   * Octets of packets that can wait in this link's socket to be read: what the kernel granted
   * (SO_RCVBUF as getsockopt reports it, twice what was asked, at most twice net.core.rmem_max),
   * less what its accounting adds per packet as this link receives them. RC keeps no more packets
   * in flight than fit it (send-queue.ts). Absent where no kernel socket receives (a guest's
   * Ethernet tunnel).
   */
  readonly receiveBufferBytes?: number | undefined;
  /**
   * Sends one IB packet made of `header` (BTH and extended headers), `payload` and `trailer`
   * (pad octets, then 4 octets the link fills with the ICRC). `header` and `trailer` belong to
   * the caller again once send returns (it reuses them for the next packet: a link that keeps
   * a packet copies them); `payload` stays unchanged until the datagram has left (the RC layer
   * only completes a WQE after its ACK).
   */
  send(to: PeerAddress, header: Uint8Array, payload: Uint8Array, trailer: Uint8Array): void;
  /**
   * Optional: sends the packets of `run` as as many calls of `send` would: the middle packets of
   * a message, equal in size, without a call per packet. The trailers' ICRC octets are the
   * link's to fill; the payload stays unchanged as for `send`, headers and trailers are the
   * caller's again once it returns. A link without it gets `send` per packet; so does one whose
   * `send` was replaced (the tests that drop packets do).
   */
  sendRun?(to: PeerAddress, run: PacketRun): void;
  setReceiver(receiver: PacketReceiver): void;
  /** Optional: a link that reads packets in place (the batched one) offers them to `receiver` first. */
  setLeanReceiver?(receiver: LeanPacketReceiver): void;
  /**
   * Optional: where the link reports a packet it can never send to `to` (an error other than a
   * full buffer). RC would otherwise only see the loss and retransmit until its retry count.
   */
  setSendErrorHandler?(handler: LinkSendErrorHandler): void;
  /**
   * Optional, for a link that reads on another thread: hands the receiver, before it returns,
   * every packet that has reached the link. RC calls it before it calls a peer silent or gone.
   */
  receiveNow?(): void;
  /**
   * Optional: receiveNow, after the same for the other links this thread reads that had packets
   * lately: a peer QP served by this thread answers now what was just sent to it. RC's lossy
   * turns call it between their parts (requester-transmit.ts).
   */
  receiveThreadNow?(): void;
  close(): Promise<void>;
}

/**
 * `count` packets of one length (PacketLink.sendRun): packet i is `headers[i * headerLength,
 * +headerLength)`, `payload[i * segment, +segment)` and `trailers[i * trailerLength,
 * +trailerLength)` (pad octets, then the 4 ICRC octets). The headers share their first 8
 * octets (opcode, flags, P_Key, destination QP: the middle packets of one message), but for the
 * last header's first two (a message's LAST may end the run: its opcode, its SE bit); they differ
 * from the 9th on (AckReq, PSN). The payload lies in memory that never moves (a registered
 * region). The sender keeps one and refills it run after run.
 */
export interface PacketRun {
  headers: Uint8Array;
  headerLength: number;
  payload: Uint8Array;
  segment: number;
  count: number;
  trailers: Uint8Array;
  trailerLength: number;
}

/** A packet to `to` could not be sent and will not be, whatever RC retransmits (`reason` says why). */
export type LinkSendErrorHandler = (to: PeerAddress, reason: string) => void;

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
  fillIcrcAfterUdp(icrcAfterUdp(ip, udp), header, payload, trailer);
}

/** A payload at least this long in shared memory has its ICRC run computed by ISA-L, where installed. */
const ISAL_FROM = 1024;
let isalCrc: Isal['crc32AtAddress'] | null | undefined;

/** ISA-L's CRC at an address, bound on first use; null where libisal2 (or koffi) does not load. */
function isalCrcAtAddress(): Isal['crc32AtAddress'] | null {
  if (isalCrc === undefined) {
    const isal = loadIsal();
    isalCrc = isal instanceof Error ? null : isal.crc32AtAddress;
  }
  return isalCrc;
}

/**
 * The ICRC continued over `payload`: through ISA-L's crc32_gzip_refl at the payload's address
 * when it lies in shared memory (a registered region; ~8x less time per 4 KiB packet than
 * @node-rs/crc32 here), else through icrcContinue.
 */
function continueOverPayload(running: number, payload: Uint8Array): number {
  if (payload.length >= ISAL_FROM) {
    const crcAt = isalCrcAtAddress();
    const address = crcAt === null ? -1 : placementAddress(payload);
    if (address >= 0) return crcAt!(running | 0, address, payload.length);
  }
  return icrcContinue(running, payload);
}

/**
 * Whether `packet` (BTH .. ICRC) carries the ICRC it should after the IP and UDP headers whose
 * running ICRC is `afterUdp` (`SocketHeaderCache.afterUdp`): the batched link's check of every
 * datagram. A packet in shared memory (the batched socket's receive area) is read in place by
 * ISA-L where installed.
 */
export function icrcMatchesAfterUdp(afterUdp: number, packet: Uint8Array): boolean {
  const long = packet.length - BTH_LENGTH - ICRC_LENGTH >= ISAL_FROM && isalCrcAtAddress() !== null;
  return icrcMatchesAt(afterUdp, packet, 0, long ? sharedAddress(packet) : -1, packet.length);
}

/**
 * `icrcMatchesAfterUdp` for the packet `bytes[at, at + length)`, whose first octet lies at raw
 * address `address` (-1: unknown; ISA-L then does not read it in place).
 */
export function icrcMatchesAt(afterUdp: number, bytes: Uint8Array, at: number, address: number, length: number): boolean {
  if (length < BTH_LENGTH + ICRC_LENGTH) return false;
  return icrcMatchesAfterHead(icrcContinueBthHead(afterUdp, bytes, at), bytes, at, address, length);
}

/** `icrcMatchesAt` from the running ICRC after the BTH's first 8 octets (`icrcContinueBthHead`). */
export function icrcMatchesAfterHead(head: number, bytes: Uint8Array, at: number, address: number, length: number): boolean {
  const end = at + length - ICRC_LENGTH;
  if (length < BTH_LENGTH + ICRC_LENGTH) return false;
  let crc = icrcContinueBthTail(head, bytes, at);
  const crcAt = length - BTH_LENGTH - ICRC_LENGTH >= ISAL_FROM && address >= 0 ? isalCrcAtAddress() : null;
  crc = crcAt !== null ? crcAt(crc | 0, address + BTH_LENGTH, length - BTH_LENGTH - ICRC_LENGTH) : icrcContinueRange(crc, bytes, at + BTH_LENGTH, end);
  // ISA-L's result is signed (isal.ts), readIcrc's unsigned: the same 32 bits or not.
  return (crc ^ readIcrc(bytes, end)) === 0;
}

/** `fillIcrc` from the running ICRC after the IP and UDP headers (`SocketHeaderCache.afterUdp`). */
export function fillIcrcAfterUdp(afterUdp: number, header: Uint8Array, payload: Uint8Array, trailer: Uint8Array): void {
  let crc = icrcContinueBth(afterUdp, header);
  crc = icrcContinueRange(crc, header, 12, header.length);
  crc = continueOverPayload(crc, payload);
  crc = icrcContinueRange(crc, trailer, 0, trailer.length - 4);
  writeIcrc(trailer, trailer.length - 4, crc);
}

/** `fillIcrcAfterUdp` for each packet of `run`, all of one length (so of one `afterUdp`). */
export function fillRunIcrcs(afterUdp: number, run: PacketRun): void {
  const { headers, headerLength, payload, segment, count, trailers, trailerLength } = run;
  const crcAt = segment >= ISAL_FROM ? isalCrcAtAddress() : null;
  const address = crcAt === null ? -1 : placementAddress(payload);
  // The headers' first 8 octets are the same in every packet of a run but a LAST that ends it: their ICRC part once (twice).
  const head = icrcContinueBthHead(afterUdp, headers, 0);
  const lastAt = (count - 1) * headerLength;
  const lastHead = headers[lastAt] === headers[0] && headers[lastAt + 1] === headers[1] ? head : icrcContinueBthHead(afterUdp, headers, lastAt);
  for (let i = 0; i < count; i++) {
    const headerAt = i * headerLength;
    let crc = icrcContinueBthTail(headerAt === lastAt ? lastHead : head, headers, headerAt);
    crc = icrcContinueRange(crc, headers, headerAt + BTH_LENGTH, headerAt + headerLength);
    crc = address >= 0 ? crcAt!(crc | 0, address + i * segment, segment) : icrcContinueRange(crc, payload, i * segment, (i + 1) * segment);
    const trailerEnd = (i + 1) * trailerLength;
    crc = icrcContinueRange(crc, trailers, i * trailerLength, trailerEnd - ICRC_LENGTH);
    writeIcrc(trailers, trailerEnd - ICRC_LENGTH, crc);
  }
}

/**
 * The IPv4 and UDP headers of one socket direction, as the ICRC sees them, kept for the last
 * peer: between packets to or from the same peer only the two length fields change. The IPv4
 * checksum is left stale on purpose: the ICRC masks it. The ICRC's running value after them
 * depends on nothing else, so it is kept per packet length too (a flow has a few lengths).
 */
export class SocketHeaderCache {
  readonly ip = new Uint8Array(IPV4_HEADER_LENGTH);
  readonly udp = new Uint8Array(UDP_HEADER_LENGTH);
  private peerAddress = '';
  private peerPort = -1;
  private packetLength = -1;
  private readonly afterUdpByLength = new Map<number, number>();
  /** The last length asked about and its running ICRC (a flow's packets mostly repeat one length). */
  private lastLength = -1;
  private lastAfterUdp = 0;

  constructor(
    private readonly local: PeerAddress,
    private readonly outbound: boolean,
  ) {}

  /** Fills `ip` and `udp` for a packet of `packetLength` octets to (outbound) or from `peer`. */
  update(peer: PeerAddress, packetLength: number): void {
    this.packetLength = packetLength;
    if (peer.address !== this.peerAddress || peer.port !== this.peerPort) {
      if (this.outbound) socketIcrcHeaders(this.ip, this.udp, this.local, peer, packetLength);
      else socketIcrcHeaders(this.ip, this.udp, peer, this.local, packetLength);
      this.peerAddress = peer.address;
      this.peerPort = peer.port;
      this.afterUdpByLength.clear();
      this.lastLength = -1;
      return;
    }
    const udpLength = UDP_HEADER_LENGTH + packetLength;
    const total = IPV4_HEADER_LENGTH + udpLength;
    this.ip[2] = total >>> 8;
    this.ip[3] = total & 0xff;
    this.udp[4] = udpLength >>> 8;
    this.udp[5] = udpLength & 0xff;
  }

  /** The running ICRC after `ip` and `udp` as the last `update` left them. */
  get afterUdp(): number {
    if (this.packetLength === this.lastLength) return this.lastAfterUdp;
    let crc = this.afterUdpByLength.get(this.packetLength);
    if (crc === undefined) {
      crc = icrcAfterUdp(this.ip, this.udp);
      // A flow uses a handful of lengths; a bound keeps a peer that varies them from growing it.
      if (this.afterUdpByLength.size >= 64) this.afterUdpByLength.clear();
      this.afterUdpByLength.set(this.packetLength, crc);
    }
    this.lastLength = this.packetLength;
    this.lastAfterUdp = crc;
    return crc;
  }
}

/**
 * dgram's default lookup defers every send to the next tick, even for an IP literal (dns.lookup
 * answers those through process.nextTick): a per-packet closure and tick. Literals are answered
 * at once, so a send is handed to the kernel before send() returns; names still go to DNS.
 */
function lookupLiteral(
  hostname: string,
  options: dns.LookupOneOptions,
  callback: (error: NodeJS.ErrnoException | null, address: string, family: number) => void,
): void {
  if (isIPv4(hostname)) callback(null, hostname, 4);
  else dns.lookup(hostname, options, callback);
}

/** Room for the longest IB header (BTH + RETH + ImmDt, or BTH + AtomicETH) and the trailer. */
const HEADER_ROOM = 64;
const TRAILER_ROOM = 8;

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
  private readonly outbound: SocketHeaderCache;
  private readonly inbound: SocketHeaderCache;
  /**
   * The header and trailer of the packet being sent, copied out of the caller's buffers. A send
   * the kernel could not take at once waits in libuv's queue holding these octets; the buffer
   * is then left to it and a new one taken.
   */
  private out = new Uint8Array(HEADER_ROOM + TRAILER_ROOM);
  private closed = false;
  /** Datagrams the socket reported errors for (the RC layer recovers by retransmission). */
  sendErrors = 0;

  private constructor(
    private readonly socket: dgram.Socket,
    readonly local: PeerAddress,
  ) {
    this.outbound = new SocketHeaderCache(local, true);
    this.inbound = new SocketHeaderCache(local, false);
    socket.on('message', (message, remote) => this.incoming(message, remote));
    // A send error (e.g. ECONNREFUSED from an ICMP port unreachable) is a lost packet to RC.
    socket.on('error', () => {
      this.sendErrors++;
    });
  }

  static async open(options: UdpLinkOptions = {}): Promise<UdpLink> {
    const socket = dgram.createSocket({ type: 'udp4', lookup: lookupLiteral });
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

  /**
   * Half of what the kernel granted: without UDP GRO each datagram waits as an skb of its own,
   * whose data the kernel allocates in a power-of-two slab (a 4 KiB packet is charged ~8.5 KiB);
   * a window of half that many packets of 4 KiB lost the last one to a 512 KiB buffer (session 23).
   */
  get receiveBufferBytes(): number | undefined {
    try {
      return Math.floor(this.socket.getRecvBufferSize() / 2);
    } catch {
      return undefined; // closed
    }
  }

  setReceiver(receiver: PacketReceiver): void {
    this.receiver = receiver;
  }

  send(to: PeerAddress, header: Uint8Array, payload: Uint8Array, trailer: Uint8Array): void {
    if (this.closed) return;
    const headerLength = header.length;
    const trailerLength = trailer.length;
    let ownHeader: Uint8Array;
    let ownTrailer: Uint8Array;
    if (headerLength <= HEADER_ROOM && trailerLength <= TRAILER_ROOM) {
      const out = this.out;
      out.set(header, 0);
      out.set(trailer, HEADER_ROOM);
      ownHeader = out.subarray(0, headerLength);
      ownTrailer = out.subarray(HEADER_ROOM, HEADER_ROOM + trailerLength);
    } else {
      ownHeader = header.slice();
      ownTrailer = trailer.slice();
    }
    const headers = this.outbound;
    headers.update(to, headerLength + payload.length + trailerLength);
    fillIcrcAfterUdp(headers.afterUdp, ownHeader, payload, ownTrailer);
    this.socket.send(payload.length === 0 ? [ownHeader, ownTrailer] : [ownHeader, payload, ownTrailer], to.port, to.address);
    if (this.socket.getSendQueueCount() > 0) this.out = new Uint8Array(HEADER_ROOM + TRAILER_ROOM);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await new Promise<void>((resolve) => this.socket.close(() => resolve()));
  }

  private incoming(message: Buffer, remote: dgram.RemoteInfo): void {
    const receiver = this.receiver;
    if (receiver === undefined) return;
    // rinfo carries address and port: it serves as the PeerAddress without another object.
    const headers = this.inbound;
    headers.update(remote, message.length);
    receiver(message, headers.ip, headers.udp, remote);
  }
}
