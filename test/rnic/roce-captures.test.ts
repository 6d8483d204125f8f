// The rxe captures (test/fixtures/captures/rxe-*.pcap, perftest between two Linux 6.1 Soft-RoCE
// guests): every RoCEv2 packet decodes completely with a verified ICRC, re-encodes to the same
// octets, and the RC sequencing is what roce.md §6 says rxe does (one PSN per packet, FIRST/
// MIDDLE/LAST at path MTU 1024, AckReq on the last packet, ACK/atomic-ACK PSN and MSN).
import { readFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { decodeRoceCapture, type RoceCapture } from '../../host/capture/roce.ts';
import { psnAdd, Syndrome } from '../../host/rnic/wire/ib-headers.ts';
import { IbOpcode, OPCODES, Position } from '../../host/rnic/wire/ib-opcodes.ts';
import { encodeIbPacket } from '../../host/rnic/wire/ib-packet.ts';
import { rxeSourcePort } from '../../host/rnic/wire/roce-frame.ts';

const FIXTURES = new URL('../fixtures/captures/', import.meta.url);
const load = (name: string): RoceCapture => decodeRoceCapture(new Uint8Array(readFileSync(new URL(name, FIXTURES))));
const toHex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');

function checkComplete(capture: RoceCapture, expectedPackets: number): void {
  assert.is(capture.packets.length, expectedPackets);
  for (const packet of capture.packets) {
    assert.is(packet.problem, undefined, `record ${packet.recordIndex}`);
    // Re-encoding the decoded fields and payload gives the captured octets (headers, pad, ICRC).
    const again = encodeIbPacket(packet.headers, packet.payload, packet.udp.ip.header, packet.udp.header);
    assert.is(toHex(again), toHex(packet.bytes), `record ${packet.recordIndex} re-encodes`);
    assert.is(packet.udp.header[6]! | packet.udp.header[7]!, 0, 'UDP checksum 0');
    assert.is(packet.udp.ip.header[6]! & 0x40, 0x40, 'DF set');
    assert.is(packet.headers.pkey, 0xffff);
    assert.not.ok(packet.headers.migReq, 'rxe sends M = 0');
    assert.is(packet.udp.sourcePort, rxeSourcePort(0x11, 0x11), 'rxe source port from the QPN pair');
  }
}

/** Checks a run of messages of `packetsPerMessage` packets each, answered by one ACK each. */
function checkMessages(capture: RoceCapture, first: number, middle: number, last: number, reth: boolean): void {
  const requests = capture.packets.filter((packet) => packet.udp.ip.sourceAddress === '10.9.0.2');
  const acks = capture.packets.filter((packet) => packet.udp.ip.sourceAddress === '10.9.0.1');
  let psn = requests[0]!.headers.psn;
  let messages = 0;
  for (let i = 0; i < requests.length; i++) {
    const h = requests[i]!.headers;
    assert.is(h.psn, psn, 'one PSN per packet');
    psn = psnAdd(psn, 1);
    const position = OPCODES[h.opcode]!.position;
    assert.is(h.opcode, [first, middle, middle, last][i % 4], 'FIRST MIDDLE MIDDLE LAST');
    assert.is(requests[i]!.payload.length, 1024, 'path MTU 1024');
    assert.is(h.ackRequest, position === Position.Last, 'AckReq on the last packet only');
    if (reth && position === Position.First) assert.is(h.dmaLength, 4096, 'RETH carries the whole length');
    if (position === Position.Last) messages++;
  }
  assert.is(acks.length, messages);
  const lastPsns = requests.filter((packet) => packet.headers.ackRequest).map((packet) => packet.headers.psn);
  for (let i = 0; i < acks.length; i++) {
    const h = acks[i]!.headers;
    assert.is(h.opcode, IbOpcode.Acknowledge);
    assert.is(h.syndrome, Syndrome.AckUnlimitedCredits);
    assert.is(h.psn, lastPsns[i], 'the ACK carries the last packet PSN');
    assert.is(h.msn, (i + 1) & 0xffffff, 'MSN counts completed messages');
  }
}

test('rxe-send: 100 Sends of 4 KiB (400 packets), 100 ACKs, all ICRCs verified', () => {
  const capture = load('rxe-send.pcap');
  checkComplete(capture, 500);
  checkMessages(capture, IbOpcode.SendFirst, IbOpcode.SendMiddle, IbOpcode.SendLast, false);
});

test('rxe-write: 100 RDMA Writes of 4 KiB, RETH on FIRST, 100 ACKs', () => {
  const capture = load('rxe-write.pcap');
  checkComplete(capture, 500);
  checkMessages(capture, IbOpcode.RdmaWriteFirst, IbOpcode.RdmaWriteMiddle, IbOpcode.RdmaWriteLast, true);
});

test('rxe-atomic: 100 FetchAdds, each answered by an ATOMIC_ACKNOWLEDGE with its PSN and MSN', () => {
  const capture = load('rxe-atomic.pcap');
  checkComplete(capture, 200);
  const requests = capture.packets.filter((packet) => packet.headers.opcode === IbOpcode.FetchAdd);
  const answers = capture.packets.filter((packet) => packet.headers.opcode === IbOpcode.AtomicAcknowledge);
  assert.is(requests.length, 100);
  assert.is(answers.length, 100);
  for (let i = 0; i < 100; i++) {
    const request = requests[i]!.headers;
    const answer = answers[i]!.headers;
    assert.ok(request.ackRequest);
    assert.is(request.virtualAddress % 8n, 0n, 'aligned target');
    assert.is(request.compare, 0n, 'FetchAdd carries Compare 0');
    assert.is(answer.psn, request.psn);
    assert.is(answer.msn, i + 1);
    assert.is(answer.syndrome, Syndrome.AckUnlimitedCredits);
    if (i > 0) assert.is(request.psn, psnAdd(requests[i - 1]!.headers.psn, 1));
  }
});

test.run();
