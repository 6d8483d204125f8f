// Decodes every RoCEv2 packet (UDP destination port 4791) of a capture with the RNIC's IB
// transport codecs: BTH and extended headers, payload, pad and ICRC (checked against the
// packet's own IP and UDP headers). Other traffic (the tools' TCP side channel, ARP, ICMP,
// IPv6 neighbour discovery) is counted and skipped.

import { decodeUdpDatagram, type UdpDatagram } from './packet.ts';
import { parsePcap, type PcapFile } from './pcap.ts';
import { IbHeaders } from '../rnic/wire/ib-headers.ts';
import { decodeIbPacket } from '../rnic/wire/ib-packet.ts';
import { ROCE_UDP_PORT } from '../rnic/wire/roce-frame.ts';

export interface RocePacket {
  readonly recordIndex: number;
  readonly udp: UdpDatagram;
  /** BTH .. ICRC. */
  readonly bytes: Uint8Array;
  readonly headers: IbHeaders;
  readonly payload: Uint8Array;
  /** Undefined when the packet decoded completely and its ICRC verified. */
  readonly problem: string | undefined;
}

export interface RoceCapture {
  readonly packets: RocePacket[];
  /** Records that were not RoCEv2 (TCP, ARP, ICMP, ...). */
  readonly otherRecords: number;
}

export function decodeRoceCapture(capture: PcapFile | Uint8Array): RoceCapture {
  const file = capture instanceof Uint8Array ? parsePcap(capture) : capture;
  const packets: RocePacket[] = [];
  let otherRecords = 0;
  for (const record of file.records) {
    const udp = decodeUdpDatagram(file.linkType, record.data);
    if (udp === undefined || udp.destinationPort !== ROCE_UDP_PORT) {
      otherRecords++;
      continue;
    }
    const headers = new IbHeaders();
    const problem = decodeIbPacket(udp.payload, headers, udp.ip.header, udp.header);
    const payload = problem === undefined ? udp.payload.subarray(headers.payloadOffset, headers.payloadOffset + headers.payloadLength) : new Uint8Array(0);
    packets.push({ recordIndex: record.index, udp, bytes: udp.payload, headers, payload, problem });
  }
  return { packets, otherRecords };
}
