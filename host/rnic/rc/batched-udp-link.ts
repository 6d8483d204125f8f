// The RoCEv2 link over a BatchedUdpSocket: UdpLink's job (one IB packet per UDP datagram, the
// ICRC over the IPv4/UDP headers the kernel puts around it) with the system calls batched per
// event-loop turn (sendmmsg + GSO, recvmmsg + GRO). Packets still travel one per datagram, so a
// peer on node:dgram, rxe or a hardware RNIC sees the same wire.

import { RnicError } from '../errors.ts';
import { errnoName } from '../../util/libc.ts';
import { icrcContinueBthHead } from '../wire/icrc.ts';
import { IcrcRunChecker } from './icrc-runs.ts';
import { BatchedUdpSocket, type BatchedUdpSocketOptions, type BatchedUdpStatistics } from './batched-udp-socket.ts';
import {
  fillIcrcAfterUdp,
  fillRunIcrcs,
  icrcMatchesAfterUdp,
  icrcMatchesAfterHead,
  SocketHeaderCache,
  LeanVerdict,
  type LeanPacketReceiver,
  type LinkSendErrorHandler,
  type PacketRun,
  type PacketLink,
  type PacketReceiver,
  type PeerAddress,
} from './link.ts';

export type BatchedUdpLinkOptions = BatchedUdpSocketOptions;

export class BatchedUdpLink implements PacketLink {
  private receiver: PacketReceiver | undefined;
  private leanReceiver: LeanPacketReceiver | undefined;
  private readonly outbound: SocketHeaderCache;
  private readonly inbound: SocketHeaderCache;
  private closed = false;
  /** bthHead's last result and what it covered (octets 0-7 of the BTH, the running ICRC before them). */
  private readonly headKey = new Uint8Array(8);
  private headAfterUdp = -1;
  private headCrc = 0;
  private readonly runs = new IcrcRunChecker();

  private constructor(readonly socket: BatchedUdpSocket) {
    this.outbound = new SocketHeaderCache(socket.local, true);
    this.inbound = new SocketHeaderCache(socket.local, false);
    socket.setReceiver((data, from, checked) => this.incoming(data, from, checked));
    socket.setRunChecker((area, at, address, length, count, from) => this.runGood(area, at, address, length, count, from));
  }

  /** Throws RnicError (EINVAL) when batching is unavailable here (no koffi, not Linux x64/arm64). */
  static async open(options: BatchedUdpLinkOptions = {}): Promise<BatchedUdpLink> {
    return new BatchedUdpLink(await BatchedUdpSocket.open(options));
  }

  get local(): PeerAddress {
    return this.socket.local;
  }

  get receiveBufferBytes(): number | undefined {
    return this.socket.receiveBufferBytes;
  }

  get stats(): BatchedUdpStatistics {
    return this.socket.stats;
  }

  setReceiver(receiver: PacketReceiver): void {
    this.receiver = receiver;
  }

  setLeanReceiver(receiver: LeanPacketReceiver): void {
    this.leanReceiver = receiver;
    this.socket.setLeanReceiver((area, at, address, length, from, checked) => this.lean(area, at, address, length, from, checked));
  }

  setSendErrorHandler(handler: LinkSendErrorHandler): void {
    this.socket.setSendErrorHandler((to, errno) => handler(to, `UDP send to ${to.address}:${to.port} failed: ${errnoName(errno)}`));
  }

  send(to: PeerAddress, header: Uint8Array, payload: Uint8Array, trailer: Uint8Array): void {
    if (this.closed) return;
    if (trailer.length < 4) throw new RnicError('EINVAL', `a packet trailer holds at least the 4-octet ICRC (got ${trailer.length})`);
    const headers = this.outbound;
    headers.update(to, header.length + payload.length + trailer.length);
    // The trailer's ICRC octets are the link's to fill (PacketLink contract); the socket copies
    // header and trailer before send returns and points at the payload until the turn's flush.
    fillIcrcAfterUdp(headers.afterUdp, header, payload, trailer);
    this.socket.send(to, header, payload, trailer);
  }

  sendRun(to: PeerAddress, run: PacketRun): void {
    if (this.closed) return;
    if (run.trailerLength < 4) throw new RnicError('EINVAL', `a packet trailer holds at least the 4-octet ICRC (got ${run.trailerLength})`);
    const cache = this.outbound;
    cache.update(to, run.headerLength + run.segment + run.trailerLength);
    fillRunIcrcs(cache.afterUdp, run);
    this.socket.sendRun(to, run);
  }

  receiveNow(): void {
    this.socket.receiveNow();
  }

  receiveThreadNow(): void {
    this.socket.receiveThreadNow();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.socket.close();
  }

  /**
   * Whether every packet of a GRO run carries a good ICRC, by one CRC over the run
   * (icrc-runs.ts); false sends each through its own check.
   */
  private runGood(area: Uint8Array, at: number, address: number, length: number, count: number, from: PeerAddress): boolean {
    const headers = this.inbound;
    headers.update(from, length);
    return this.runs.allGood(headers.afterUdp, area, at, address, length, count);
  }

  /**
   * A packet the lean receiver takes, ICRC good (`icrcGood`: known from its run's check), goes
   * to it; one it dropped nowhere; anything else (a bad ICRC too) to the full path.
   */
  private lean(area: Uint8Array, at: number, address: number, length: number, from: PeerAddress, icrcGood: boolean): boolean {
    const receiver = this.leanReceiver!;
    const verdict = receiver.wants(area, at, length, from);
    if (verdict !== LeanVerdict.Take) return verdict === LeanVerdict.Dropped;
    if (icrcGood) return receiver.take(area, at, address, length);
    const headers = this.inbound;
    headers.update(from, length);
    return icrcMatchesAfterHead(this.bthHead(headers.afterUdp, area, at), area, at, address, length) && receiver.take(area, at, address, length);
  }

  /**
   * The running ICRC after the BTH's first 8 octets of the packet at `at`: the middle packets of
   * one message share them (octet 4 is masked), so the last result is kept with what it covers.
   */
  private bthHead(afterUdp: number, area: Uint8Array, at: number): number {
    const key = this.headKey;
    if (
      afterUdp === this.headAfterUdp &&
      area[at] === key[0] &&
      area[at + 1] === key[1] &&
      area[at + 2] === key[2] &&
      area[at + 3] === key[3] &&
      area[at + 5] === key[5] &&
      area[at + 6] === key[6] &&
      area[at + 7] === key[7]
    ) {
      return this.headCrc;
    }
    for (let i = 0; i < 8; i++) key[i] = area[at + i]!;
    this.headAfterUdp = afterUdp;
    this.headCrc = icrcContinueBthHead(afterUdp, area, at);
    return this.headCrc;
  }

  private incoming(data: Uint8Array, from: PeerAddress, icrcGood: boolean): void {
    const receiver = this.receiver;
    if (receiver === undefined) return;
    const headers = this.inbound;
    headers.update(from, data.length);
    // Known good from its run's check, or from the cached headers' running ICRC; the datagram is
    // read in place (ISA-L) where it can be.
    receiver(data, headers.ip, headers.udp, from, icrcGood || icrcMatchesAfterUdp(headers.afterUdp, data));
  }
}
