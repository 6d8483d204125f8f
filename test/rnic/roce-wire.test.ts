// Every worked example of ../shared/reference/roce.md (§7.2 CRC and ICRC vectors, the ConnectX
// CNP capture, the scapy UC packet, the three §7.3 RC frames), decoded field by field and
// rebuilt byte for byte; the header composition of every opcode (§3.1); AETH, PSN arithmetic.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { crc32 } from '@node-rs/crc32';
import { decodeUdpDatagram } from '../../host/capture/packet.ts';
import { LINKTYPE_ETHERNET } from '../../host/capture/pcap.ts';
import {
  CREDIT_COUNT,
  decodeHeaders,
  describeSyndrome,
  encodedHeaderLength,
  headersFrom,
  IbHeaders,
  psnAdd,
  psnCompare,
  RNR_TIMER_MICROS,
  Syndrome,
} from '../../host/rnic/wire/ib-headers.ts';
import { CNP_OPCODE, IbOpcode, OPCODES, opcodeName } from '../../host/rnic/wire/ib-opcodes.ts';
import { decodeIbPacket, encodeIbPacket } from '../../host/rnic/wire/ib-packet.ts';
import { computeIcrc, icrcMatches } from '../../host/rnic/wire/icrc.ts';
import { encodeIpv4Header, encodeUdpHeader, ipv4MappedGid, parseIpv4, rxeSourcePort } from '../../host/rnic/wire/roce-frame.ts';

const hex = (text: string): Uint8Array =>
  new Uint8Array(
    Buffer.from(
      text
        .replace(/^[0-9a-f]{4}:/gm, '')
        .replace(/\|/g, '')
        .replace(/[^0-9a-f]/gi, ''),
      'hex',
    ),
  );
const toHex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');

/** Decodes an Ethernet frame's RoCEv2 packet, checking the ICRC. */
function decodeFrame(frame: Uint8Array): { h: IbHeaders; ip: Uint8Array; udp: Uint8Array; payload: Uint8Array; packet: Uint8Array; sport: number } {
  const udp = decodeUdpDatagram(LINKTYPE_ETHERNET, frame);
  assert.ok(udp, 'frame holds a UDP datagram');
  assert.is(udp.destinationPort, 4791);
  const h = new IbHeaders();
  assert.is(decodeIbPacket(udp.payload, h, udp.ip.header, udp.header), undefined);
  return {
    h,
    ip: udp.ip.header,
    udp: udp.header,
    payload: udp.payload.subarray(h.payloadOffset, h.payloadOffset + h.payloadLength),
    packet: udp.payload,
    sport: udp.sourcePort,
  };
}

/** Rebuilds an Ethernet + IPv4 + UDP + IB frame from its fields. */
function buildFrame(
  macs: string,
  ip: { source: string; destination: string; id: number; tos?: number; ttl?: number },
  sport: number,
  h: IbHeaders,
  payload: Uint8Array,
): Uint8Array {
  const transportLength = encodedHeaderLength(h.opcode) + payload.length + (-payload.length & 3) + 4;
  const ipHeader = new Uint8Array(20);
  encodeIpv4Header(ipHeader, 0, {
    source: parseIpv4(ip.source),
    destination: parseIpv4(ip.destination),
    payloadLength: 8 + transportLength,
    identification: ip.id,
    tos: ip.tos ?? 0,
    ttl: ip.ttl ?? 64,
  });
  const udpHeader = new Uint8Array(8);
  encodeUdpHeader(udpHeader, 0, sport, 4791, 8 + transportLength);
  const packet = encodeIbPacket(h, payload, ipHeader, udpHeader);
  return new Uint8Array([...hex(macs), 0x08, 0x00, ...ipHeader, ...udpHeader, ...packet]);
}

test('CRC-32 check value and the ICRC seed (§7.2)', () => {
  assert.is(crc32(new TextEncoder().encode('123456789')), 0xcbf43926);
  // The raw register after eight 0xFF octets is the inverted CRC of those octets.
  assert.is(~crc32(new Uint8Array(8).fill(0xff)) >>> 0, 0xdebb20e3);
});

test('ConnectX-4 Lx CNP capture: decodes, ICRC 0x2A00FD82, re-encodes (§7.2)', () => {
  const frame = hex(`
0000: e4 1d 2d ab 2b c2 7c fe 90 64 3b 32 08 00 45 c2
0010: 00 3c 71 8c 40 00 40 11 91 61 0a 00 11 01 0a 00
0020: 12 01 00 00 12 b7 00 28 00 00 81 00 ff ff 40 00
0030: 01 18 00 00 00 00 00 00 00 00 00 00 00 00 00 00
0040: 00 00 00 00 00 00 82 fd 00 2a`);
  const { h, ip, udp, packet, sport } = decodeFrame(frame);
  assert.is(h.opcode, CNP_OPCODE);
  assert.is(opcodeName(h.opcode), 'CNP');
  assert.ok(h.becn);
  assert.not.ok(h.fecn);
  assert.is(h.destQp, 0x118);
  assert.is(h.psn, 0);
  assert.is(h.icrc, 0x2a00fd82);
  assert.is(sport, 0);
  // TOS 0xC2 and TTL 64 are masked: the same ICRC with other values there.
  const otherTos = ip.slice();
  otherTos[1] = 0;
  otherTos[8] = 1;
  otherTos[10] = 0x12;
  assert.ok(icrcMatches(otherTos, udp, packet));
  // FECN/BECN byte masked too, but not the DestQP next to it.
  const marked = packet.slice();
  marked[4] = 0x80;
  assert.ok(icrcMatches(ip, udp, marked));
  marked[7] = marked[7]! ^ 1;
  assert.not.ok(icrcMatches(ip, udp, marked));
  // The IP identification is covered.
  const otherId = ip.slice();
  otherId[5] = otherId[5]! ^ 1;
  assert.not.ok(icrcMatches(otherId, udp, packet));
  assert.is(toHex(encodeIbPacket(h, new Uint8Array(0), ip, udp)), toHex(packet));
});

test('scapy UC_SEND_ONLY vector: IP checksum 0xB4D5, ICRC 78 f3 53 f3 (§7.2)', () => {
  const ip = new Uint8Array(20);
  encodeIpv4Header(ip, 0, {
    source: parseIpv4('192.168.0.7'),
    destination: parseIpv4('192.168.0.7'),
    payloadLength: 44,
    identification: 1144,
    tos: 0x01,
    ttl: 64,
  });
  assert.is((ip[10]! << 8) | ip[11]!, 0xb4d5);
  assert.is((ip[2]! << 8) | ip[3]!, 64);
  const udp = new Uint8Array(8);
  encodeUdpHeader(udp, 0, 49152, 4791, 44);
  const payload = hex('46 30 81 8b e2 89 35 d9 0e 9a 95 50 54 01 be 88 5e 50');
  const h = headersFrom({ opcode: 0x24, migReq: true, destQp: 211, psn: 13571856 });
  const packet = encodeIbPacket(h, payload, ip, udp);
  assert.is(h.padCount, 2);
  assert.is(packet.length, 36);
  assert.is(toHex(packet.subarray(12, 32)), '4630818be28935d90e9a95505401be885e500000');
  assert.is(toHex(packet.subarray(32)), '78f353f3');
  assert.is(opcodeName(0x24), 'UC_SEND_ONLY');
  const back = new IbHeaders();
  assert.is(decodeIbPacket(packet, back, ip, udp), undefined);
  assert.ok(back.migReq);
  assert.is(back.payloadLength, 18);
});

const WRITE_ONLY = `
0000: 02 00 00 00 00 02 02 00 00 00 00 01 08 00 45 00
0010: 00 44 12 34 40 00 40 11 a4 71 c0 00 02 01 c0 00
0020: 02 02 c0 01 12 b7 00 30 00 00 | 0a 30 ff ff 00 00
0030: 00 12 80 00 01 00 | 00 00 00 00 00 00 10 00 12 34
0040: 56 78 00 00 00 05 | 68 65 6c 6c 6f | 00 00 00 | b6 a9
0050: 7d af`;
const ACKNOWLEDGE = `
0000: 02 00 00 00 00 01 02 00 00 00 00 02 08 00 45 00
0010: 00 30 56 78 40 00 40 11 60 41 c0 00 02 02 c0 00
0020: 02 01 c0 02 12 b7 00 1c 00 00 | 11 00 ff ff 00 00
0030: 00 34 00 00 01 00 | 1f 00 00 01 | b5 ce 9c 99`;
const SEND_ONLY = `
0000: 02 00 00 00 00 02 02 00 00 00 00 01 08 00 45 00
0010: 00 34 12 35 40 00 40 11 a4 80 c0 00 02 01 c0 00
0020: 02 02 c0 01 12 b7 00 20 00 00 | 04 00 ff ff 00 00
0030: 00 12 80 00 01 01 | 01 02 03 04 05 06 07 08 | da 63
0040: 63 36`;

test('RC RDMA_WRITE_ONLY worked frame (§7.3): fields, ICRC 0xAF7DA9B6, rebuilt byte for byte', () => {
  const frame = hex(WRITE_ONLY);
  const { h, payload } = decodeFrame(frame);
  assert.is(h.opcode, IbOpcode.RdmaWriteOnly);
  assert.is(h.destQp, 0x12);
  assert.is(h.psn, 0x100);
  assert.ok(h.ackRequest);
  assert.is(h.padCount, 3);
  assert.is(h.virtualAddress, 0x1000n);
  assert.is(h.rkey, 0x12345678);
  assert.is(h.dmaLength, 5);
  assert.is(new TextDecoder().decode(payload), 'hello');
  assert.is(h.icrc, 0xaf7da9b6);
  const rebuilt = buildFrame(
    '02 00 00 00 00 02 02 00 00 00 00 01',
    { source: '192.0.2.1', destination: '192.0.2.2', id: 0x1234 },
    0xc001,
    headersFrom({ opcode: IbOpcode.RdmaWriteOnly, destQp: 0x12, psn: 0x100, ackRequest: true, virtualAddress: 0x1000n, rkey: 0x12345678, dmaLength: 5 }),
    new TextEncoder().encode('hello'),
  );
  assert.is(toHex(rebuilt), toHex(frame));
});

test('RC ACKNOWLEDGE worked frame (§7.3): syndrome 0x1F, MSN 1, ICRC 0x999CCEB5', () => {
  const frame = hex(ACKNOWLEDGE);
  const { h } = decodeFrame(frame);
  assert.is(h.opcode, IbOpcode.Acknowledge);
  assert.is(h.destQp, 0x34);
  assert.is(h.psn, 0x100);
  assert.not.ok(h.ackRequest);
  assert.is(h.syndrome, Syndrome.AckUnlimitedCredits);
  assert.is(h.msn, 1);
  assert.is(h.icrc, 0x999cceb5);
  const rebuilt = buildFrame(
    '02 00 00 00 00 01 02 00 00 00 00 02',
    { source: '192.0.2.2', destination: '192.0.2.1', id: 0x5678 },
    0xc002,
    headersFrom({ opcode: IbOpcode.Acknowledge, destQp: 0x34, psn: 0x100, syndrome: 0x1f, msn: 1 }),
    new Uint8Array(0),
  );
  assert.is(toHex(rebuilt), toHex(frame));
});

test('RC SEND_ONLY worked frame (§7.3): no pad, ICRC 0x366363DA', () => {
  const frame = hex(SEND_ONLY);
  const { h, payload } = decodeFrame(frame);
  assert.is(h.opcode, IbOpcode.SendOnly);
  assert.is(h.psn, 0x101);
  assert.is(h.padCount, 0);
  assert.is(toHex(payload), '0102030405060708');
  assert.is(h.icrc, 0x366363da);
  const rebuilt = buildFrame(
    '02 00 00 00 00 02 02 00 00 00 00 01',
    { source: '192.0.2.1', destination: '192.0.2.2', id: 0x1235 },
    0xc001,
    headersFrom({ opcode: IbOpcode.SendOnly, destQp: 0x12, psn: 0x101, ackRequest: true }),
    hex('01 02 03 04 05 06 07 08'),
  );
  assert.is(toHex(rebuilt), toHex(frame));
});

test('a changed payload or ICRC octet fails the check', () => {
  const frame = hex(SEND_ONLY);
  for (const index of [frame.length - 1, frame.length - 6, 0x2a + 9 /* PSN */]) {
    const broken = frame.slice();
    broken[index]! ^= 0x01;
    const udp = decodeUdpDatagram(LINKTYPE_ETHERNET, broken)!;
    assert.match(decodeIbPacket(udp.payload, new IbHeaders(), udp.ip.header, udp.header) ?? '', /ICRC mismatch/);
  }
});

test('header bytes per RC opcode are exactly rxe_opcode.c (§3.1), and each round-trips', () => {
  const expected: Record<number, number> = {
    0x00: 12,
    0x01: 12,
    0x02: 12,
    0x03: 16,
    0x04: 12,
    0x05: 16,
    0x06: 28,
    0x07: 12,
    0x08: 12,
    0x09: 16,
    0x0a: 28,
    0x0b: 32,
    0x0c: 28,
    0x0d: 16,
    0x0e: 12,
    0x0f: 16,
    0x10: 16,
    0x11: 16,
    0x12: 24,
    0x13: 40,
    0x14: 40,
    0x16: 16,
    0x17: 16,
  };
  const ip = new Uint8Array(20);
  encodeIpv4Header(ip, 0, { source: parseIpv4('127.0.0.1'), destination: parseIpv4('127.0.0.1'), payloadLength: 0 });
  const udp = new Uint8Array(8);
  for (let opcode = 0; opcode < 0x20; opcode++) {
    const info = OPCODES[opcode];
    assert.is(info !== undefined, expected[opcode] !== undefined, `opcode 0x${opcode.toString(16)} known`);
    if (info === undefined) continue;
    assert.is(encodedHeaderLength(opcode), expected[opcode], info.name);
    const fields = headersFrom({
      opcode,
      solicited: true,
      destQp: 0xabcdef,
      psn: 0xfffffe,
      ackRequest: true,
      virtualAddress: 0x0123456789abcdefn,
      rkey: 0xdeadbeef,
      dmaLength: 0x80000000,
      swapOrAdd: 0xfedcba9876543210n,
      compare: 0x1111222233334444n,
      syndrome: 0x62,
      msn: 0x123456,
      originalData: 0x8000000000000001n,
      immediate: 0xcafef00d,
      invalidateRkey: 0x01020304,
    });
    const payload = (info.headers & 0x100) !== 0 ? new Uint8Array([1, 2, 3, 4, 5]) : new Uint8Array(0);
    const packet = encodeIbPacket(fields, payload, ip, udp);
    const back = new IbHeaders();
    assert.is(decodeIbPacket(packet, back, ip, udp), undefined, info.name);
    assert.is(back.psn, 0xfffffe);
    assert.is(back.destQp, 0xabcdef);
    assert.is(back.payloadLength, payload.length);
    const reencoded = encodeIbPacket(back, packet.subarray(back.payloadOffset, back.payloadOffset + back.payloadLength), ip, udp);
    assert.is(toHex(reencoded), toHex(packet), info.name);
    if ((info.headers & 0x01) !== 0) assert.is(back.rkey, 0xdeadbeef);
    if ((info.headers & 0x05) !== 0) {
      // RETH or AtomicETH: the address also as its 32-bit halves (the responder's access check)
      assert.is(back.virtualAddress, 0x0123456789abcdefn);
      assert.is(back.virtualAddressHigh, 0x01234567);
      assert.is(back.virtualAddressLow, 0x89abcdef);
    }
    if ((info.headers & 0x04) !== 0) assert.is(back.compare, 0x1111222233334444n);
    if ((info.headers & 0x08) !== 0) assert.is(back.originalData, 0x8000000000000001n);
    if ((info.headers & 0x10) !== 0) assert.is(back.immediate, 0xcafef00d);
    if ((info.headers & 0x20) !== 0) assert.is(back.invalidateRkey, 0x01020304);
    if ((info.headers & 0x02) !== 0) assert.is(back.msn, 0x123456);
  }
});

test('malformed packets are refused with a reason', () => {
  const h = new IbHeaders();
  assert.match(decodeHeaders(new Uint8Array(10), h) ?? '', /shorter than BTH/);
  const unknown = new Uint8Array(16);
  unknown[0] = 0x15;
  assert.match(decodeHeaders(unknown, h) ?? '', /unknown opcode 0x15/);
  const shortReth = new Uint8Array(20);
  shortReth[0] = IbOpcode.RdmaWriteOnly;
  assert.match(decodeHeaders(shortReth, h) ?? '', /too short for its RETH/);
  const ackWithData = new Uint8Array(24);
  ackWithData[0] = IbOpcode.Acknowledge;
  assert.match(decodeHeaders(ackWithData, h) ?? '', /none allowed/);
  const oddPayload = new Uint8Array(19);
  oddPayload[0] = IbOpcode.SendOnly;
  assert.match(decodeHeaders(oddPayload, h) ?? '', /multiple of 4/);
});

test('AETH syndromes, RNR timer and credit tables, PSN arithmetic (§5, §6.2)', () => {
  assert.is(describeSyndrome(0x1f), 'ACK (credits 31)');
  assert.is(describeSyndrome(0x20 | 12), 'RNR NAK (timer 0.64 ms)');
  assert.is(describeSyndrome(0x60), 'NAK PSN sequence error');
  assert.is(describeSyndrome(0x61), 'NAK invalid request');
  assert.is(describeSyndrome(0x62), 'NAK remote access error');
  assert.is(describeSyndrome(0x63), 'NAK remote operational error');
  assert.is(RNR_TIMER_MICROS.length, 32);
  assert.is(RNR_TIMER_MICROS[0], 655360);
  assert.is(RNR_TIMER_MICROS[25], 61440);
  assert.is(RNR_TIMER_MICROS[31], 491520);
  assert.is(CREDIT_COUNT[0x14], 1024);
  assert.is(CREDIT_COUNT[0x1e], 32768);
  assert.ok(psnCompare(0x000001, 0xffffff) > 0, 'PSN 1 follows 0xFFFFFF');
  assert.ok(psnCompare(0xffffff, 0x000001) < 0);
  assert.is(psnCompare(5, 5), 0);
  assert.is(psnAdd(0xffffff, 2), 1);
});

test('RoCEv2 GID and rxe source port', () => {
  assert.is(toHex(ipv4MappedGid(parseIpv4('192.0.2.1'))), '00000000000000000000ffffc0000201');
  assert.is(rxeSourcePort(0x11, 0x11), 0xc121);
  assert.throws(() => parseIpv4('1.2.3'), /not an IPv4 address/);
  // Both ICRC forms agree: the whole-packet helper and the frame decoder.
  const frame = hex(SEND_ONLY);
  const udp = decodeUdpDatagram(LINKTYPE_ETHERNET, frame)!;
  assert.is(computeIcrc(udp.ip.header, udp.header, udp.payload.subarray(0, udp.payload.length - 4)), 0x366363da);
});

test.run();
