// One RoCEv2 port of an RNIC: a PacketLink and the RC QPs reachable through it. Every inbound
// datagram is decoded and checked here before any QP sees it, and anything wrong with it is
// dropped and counted, as an HCA does: malformed headers, a bad ICRC, TVer != 0, a P_Key that
// does not match, an unknown destination QP, or a source address other than the QP's peer. Malformed
// traffic therefore never reaches, let alone harms, a QP that did not make the connection.

import { decodeHeaders, IbHeaders, Syndrome } from '../wire/ib-headers.ts';
import { AETH_LENGTH, BTH_LENGTH, IbOpcode, ICRC_LENGTH, RETH_LENGTH } from '../wire/ib-opcodes.ts';
import { computeIcrc } from '../wire/icrc.ts';
import { LeanVerdict, type LeanPacketReceiver, type PacketLink, type PeerAddress } from './link.ts';
import type { RcQueuePair } from './queue-pair.ts';

export interface EndpointStatistics {
  packets: number;
  /** Of those, the packets the lean path placed (no decode, view or demultiplexing each). */
  lean: number;
  /** Of those, requests past a gap their QP NAK'd, dropped before their ICRC (the full path would drop them unanswered). */
  pastGap: number;
  malformed: number;
  icrcErrors: number;
  badVersionOrKey: number;
  unknownQp: number;
  wrongSource: number;
  /** Send errors the link reported (each ended the QPs connected to that peer). */
  sendFailures: number;
}

/** Receives the UD packets addressed to QP1 (the GSI: connection management MADs). */
export type GsiReceiver = (h: IbHeaders, payload: Uint8Array, from: PeerAddress) => void;

export class RoceEndpoint implements LeanPacketReceiver {
  private readonly queuePairs = new Map<number, RcQueuePair>();
  /**
   * Whoever serves QP1: a CM responder and each connection a CM initiator made (several at once,
   * e.g. perftest -R's two connections); each takes only the MADs of its own communication ids.
   * Without any, packets to QP1 count as unknown QP.
   */
  private readonly gsiReceivers = new Set<GsiReceiver>();
  private readonly scratch = new IbHeaders();
  readonly stats: EndpointStatistics = {
    packets: 0,
    lean: 0,
    pastGap: 0,
    malformed: 0,
    icrcErrors: 0,
    badVersionOrKey: 0,
    unknownQp: 0,
    wrongSource: 0,
    sendFailures: 0,
  };
  /** Last reason a packet was dropped (diagnostics, tests). */
  lastDrop = '';
  /**
   * The QP the last packet through every check went to, with the P_Key and source address it
   * passed with: the lean path takes the middle packets that follow it (`wants`) when they name
   * the same QP, P_Key and source.
   */
  private leanQp: RcQueuePair | undefined;
  private leanPkey = -1;
  private leanSource = '';

  constructor(readonly link: PacketLink) {
    link.setReceiver((packet, ip, udp, from, icrcChecked) => this.incoming(packet, ip, udp, from, icrcChecked));
    link.setLeanReceiver?.(this);
    link.setSendErrorHandler?.((to, reason) => this.unsendable(to, reason));
  }

  /** Adds a receiver of QP1's packets; the returned function removes it. */
  addGsiReceiver(receiver: GsiReceiver): () => void {
    this.gsiReceivers.add(receiver);
    return () => {
      this.gsiReceivers.delete(receiver);
    };
  }

  get local(): PeerAddress {
    return this.link.local;
  }

  attach(qp: RcQueuePair): void {
    this.queuePairs.set(qp.qpNumber, qp);
  }

  detach(qp: RcQueuePair): void {
    if (this.queuePairs.get(qp.qpNumber) === qp) this.queuePairs.delete(qp.qpNumber);
    if (this.leanQp === qp) this.leanQp = undefined;
  }

  /**
   * The lean path's first look (before the ICRC), at packets to the QP, with the P_Key and from
   * the source address, that the last fully checked packet went to:
   * - a Send or Write request past a gap that QP NAK'd is dropped unchecked: the responder drops
   *   whatever follows its NAK until the expected PSN arrives (IBA 9.7.5.1.2), so its ICRC, good
   *   or bad, would change nothing. At 1 % loss go-back-N makes these about a quarter of what a
   *   Write's responder receives;
   * - a Send MIDDLE or LAST (without Immediate Data or Invalidate), a Write (FIRST, MIDDLE, LAST
   *   or ONLY, without Immediate Data), a Read Request (no payload)
   *   or a Read Response (FIRST, MIDDLE, LAST or ONLY, its AETH an ACK) with no flags (no SE,
   *   MigReq or pad, TVer 0, reserved bits 0) that the QP would take now (`acceptsLean`) is taken
   *   once its ICRC is good;
   * anything else has its ICRC computed once, by the full path.
   */
  wants(area: Uint8Array, at: number, length: number, from: PeerAddress): LeanVerdict {
    const qp = this.leanQp;
    if (
      qp === undefined ||
      length <= BTH_LENGTH + ICRC_LENGTH ||
      ((area[at + 5]! << 16) | (area[at + 6]! << 8) | area[at + 7]!) !== qp.qpNumber ||
      ((area[at + 2]! << 8) | area[at + 3]!) !== this.leanPkey ||
      from.address !== this.leanSource
    ) {
      return LeanVerdict.FullPath;
    }
    const opcode = area[at]!;
    const psn = (area[at + 9]! << 16) | (area[at + 10]! << 8) | area[at + 11]!;
    if (opcode <= IbOpcode.RdmaWriteOnlyWithImmediate && qp.dropPastGap(psn)) {
      this.stats.packets++;
      this.stats.pastGap++;
      return LeanVerdict.Dropped;
    }
    const header = leanHeaderLength(opcode);
    // A payload: none in a Read Request, some in every other packet the lean path takes.
    const payloadLength = length - header - ICRC_LENGTH;
    if (
      header === 0 ||
      area[at + 1] !== 0 ||
      (area[at + 8]! & 0x7f) !== 0 ||
      (opcode === IbOpcode.RdmaReadRequest ? payloadLength !== 0 : payloadLength <= 0)
    ) {
      return LeanVerdict.FullPath;
    }
    // A Read Response that carries an AETH: only an ACK syndrome (readResponse fails the WQE on another).
    if (header === BTH_LENGTH + AETH_LENGTH && (area[at + BTH_LENGTH]! & Syndrome.TypeMask) !== Syndrome.TypeAck) return LeanVerdict.FullPath;
    // A Write FIRST or ONLY: its RETH's DMA length (octets 12-15 after the BTH).
    const rethDma = at + BTH_LENGTH + 12;
    const dmaLength =
      header === BTH_LENGTH + RETH_LENGTH ? ((area[rethDma]! << 24) | (area[rethDma + 1]! << 16) | (area[rethDma + 2]! << 8) | area[rethDma + 3]!) >>> 0 : 0;
    return qp.acceptsLean(opcode, psn, payloadLength, dmaLength) ? LeanVerdict.Take : LeanVerdict.FullPath;
  }

  /** The packet `wants` accepted, its ICRC good: placed by its QP, or false (the full path takes it). */
  take(area: Uint8Array, at: number, address: number, length: number): boolean {
    const opcode = area[at]!;
    const header = leanHeaderLength(opcode);
    const psn = (area[at + 9]! << 16) | (area[at + 10]! << 8) | area[at + 11]!;
    const taken = this.leanQp!.takeLean(opcode, psn, (area[at + 8]! & 0x80) !== 0, address + header, length - header - ICRC_LENGTH, area, at + BTH_LENGTH);
    if (taken) {
      this.stats.packets++;
      this.stats.lean++;
    }
    return taken;
  }

  close(): Promise<void> {
    return this.link.close();
  }

  private incoming(packet: Uint8Array, ip: Uint8Array, udp: Uint8Array, from: PeerAddress, icrcChecked: boolean | undefined): void {
    this.stats.packets++;
    const h = this.scratch;
    const problem = decodeHeaders(packet, h);
    if (problem !== undefined) {
      this.drop('malformed', problem);
      return;
    }
    const icrcGood = icrcChecked ?? computeIcrc(ip, udp, packet.subarray(0, packet.length - ICRC_LENGTH)) === h.icrc;
    if (!icrcGood) {
      this.drop('icrcErrors', 'ICRC mismatch');
      return;
    }
    if (h.transportVersion !== 0) {
      this.drop('badVersionOrKey', `TVer ${h.transportVersion}`);
      return;
    }
    if (h.destQp === 1 && this.gsiReceivers.size > 0) {
      const payload = packet.subarray(h.payloadOffset, h.payloadOffset + h.payloadLength);
      for (const receiver of this.gsiReceivers) receiver(h, payload, from);
      return;
    }
    const qp = this.queuePairs.get(h.destQp);
    if (qp === undefined) {
      this.drop('unknownQp', `no QP 0x${h.destQp.toString(16)}`);
      return;
    }
    const path = qp.path;
    // The source address must be the peer's; the source port is free (RoCEv2 uses it for ECMP
    // entropy: rxe derives it from the QP numbers, so it is not the port we send to).
    if (path === undefined || path.peer.address !== from.address) {
      this.drop('wrongSource', `QP 0x${h.destQp.toString(16)} is not connected to ${from.address}`);
      return;
    }
    // rxe pkey_match: the low 15 bits equal, and at least one side a full member.
    const own = path.pkey ?? 0xffff;
    if ((h.pkey & 0x7fff) !== (own & 0x7fff) || (h.pkey & 0x7fff) === 0 || ((h.pkey | own) & 0x8000) === 0) {
      this.drop('badVersionOrKey', `P_Key 0x${h.pkey.toString(16)}`);
      return;
    }
    this.leanQp = qp;
    this.leanPkey = h.pkey;
    this.leanSource = from.address;
    qp.receive(h, packet);
  }

  /** The link can never send to `to`: every QP connected there ends now rather than after its retries. */
  private unsendable(to: PeerAddress, reason: string): void {
    this.stats.sendFailures++;
    this.lastDrop = reason;
    for (const qp of [...this.queuePairs.values()]) {
      const peer = qp.path?.peer;
      if (peer !== undefined && peer.address === to.address && peer.port === to.port) qp.enterError({ reason: 'connection-lost', message: reason });
    }
  }

  private drop(counter: keyof EndpointStatistics, reason: string): void {
    this.stats[counter]++;
    this.lastDrop = reason;
  }
}

/**
 * The headers before the payload of an opcode the lean path takes (BTH; BTH and AETH for a Read
 * Response FIRST, LAST or ONLY; BTH and RETH for a Write FIRST or ONLY and a Read Request), or 0
 * for any other.
 */
function leanHeaderLength(opcode: number): number {
  switch (opcode) {
    case IbOpcode.SendMiddle:
    case IbOpcode.SendLast:
    case IbOpcode.RdmaWriteMiddle:
    case IbOpcode.RdmaWriteLast:
    case IbOpcode.RdmaReadResponseMiddle:
      return BTH_LENGTH;
    case IbOpcode.RdmaReadResponseFirst:
    case IbOpcode.RdmaReadResponseLast:
    case IbOpcode.RdmaReadResponseOnly:
      return BTH_LENGTH + AETH_LENGTH;
    case IbOpcode.RdmaWriteFirst:
    case IbOpcode.RdmaWriteOnly:
    case IbOpcode.RdmaReadRequest:
      return BTH_LENGTH + RETH_LENGTH;
    default:
      return 0;
  }
}
