// kbtp against rxe's own packets (test/fixtures/captures/rxe-*.pcap, perftest between two Linux
// 6.1 Soft-RoCE guests). Requester: driven with the work requests perftest posted (same QPN,
// PSN, rkey, VA, data), kbtp's RC QP emits rxe's request packets byte for byte, ICRC included
// (computed over the captured IP/UDP headers). Responder: fed rxe's requests, it answers with
// rxe's ACKs and Atomic Acknowledges byte for byte (PSN, MSN, syndrome, original data).
import { readFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { decodeRoceCapture, type RocePacket } from '../../host/capture/roce.ts';
import { fillIcrc, type PacketLink, type PacketReceiver, type PeerAddress } from '../../host/rnic/rc/link.ts';
import { IbOpcode } from '../../host/rnic/wire/ib-opcodes.ts';
import { Access, createRnic, type RcQueuePair, type Rnic, type SendWorkRequest } from '../../host/rnic/verbs.ts';

const FIXTURES = new URL('../fixtures/captures/', import.meta.url);
const capture = (name: string): RocePacket[] => decodeRoceCapture(new Uint8Array(readFileSync(new URL(name, FIXTURES)))).packets;
const toHex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');
const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** Records what the QP sends; the ICRC is computed over the headers of the packet it should match. */
class RecordingLink implements PacketLink {
  readonly local: PeerAddress = { address: '10.9.0.2', port: 0xc121 };
  readonly sent: Uint8Array[] = [];
  constructor(private readonly expected: RocePacket[]) {}
  send(_to: PeerAddress, header: Uint8Array, payload: Uint8Array, trailer: Uint8Array): void {
    const reference = this.expected[this.sent.length];
    if (reference !== undefined) fillIcrc(reference.udp.ip.header, reference.udp.header, header, payload, trailer);
    this.sent.push(new Uint8Array([...header, ...payload, ...trailer]));
  }
  setReceiver(_receiver: PacketReceiver): void {}
  async close(): Promise<void> {}
}

function rcQp(rnic: Rnic, link: PacketLink, sendPsn: number, receivePsn: number): RcQueuePair {
  const pd = rnic.allocPd();
  const cq = rnic.createCq({ depth: 4096 });
  const qp = rnic.createRcQp({ pd, sendCq: cq, recvCq: cq, ird: 16, ord: 16 });
  qp.activate(link, { peer: { address: '10.9.0.1', port: 4791 }, destQpNumber: 0x11, sendPsn, receivePsn, pathMtu: 1024, ird: 16, ord: 16, timeout: 0 });
  return qp;
}

function requests(packets: RocePacket[]): RocePacket[] {
  return packets.filter((packet) => packet.udp.ip.sourceAddress === '10.9.0.2');
}

function answers(packets: RocePacket[]): RocePacket[] {
  return packets.filter((packet) => packet.udp.ip.sourceAddress === '10.9.0.1');
}

for (const [file, opcode] of [
  ['rxe-write.pcap', 'RDMA_WRITE'],
  ['rxe-send.pcap', 'SEND'],
] as const) {
  test(`${file}: kbtp's requester sends rxe's packets byte for byte, its responder rxe's ACKs`, async () => {
    const packets = capture(file);
    const sent = requests(packets).slice(0, 96); // 24 messages: inside the 128-PSN window
    const acks = answers(packets).slice(0, 24);
    // Requester.
    const rnic = createRnic();
    const link = new RecordingLink(sent);
    const qp = rcQp(rnic, link, sent[0]!.headers.psn, 0);
    const pd = qp.pd;
    const data = new Uint8Array(4096 * 24);
    for (let message = 0; message < 24; message++) {
      for (let part = 0; part < 4; part++) data.set(sent[message * 4 + part]!.payload, message * 4096 + part * 1024);
    }
    const region = rnic.registerMemory(pd, data, { access: Access.LocalWrite });
    const first = sent[0]!.headers;
    for (let message = 0; message < 24; message++) {
      const wr: SendWorkRequest =
        opcode === 'RDMA_WRITE'
          ? {
              wrId: message,
              opcode,
              sgList: [{ lkey: region.lkey, offset: message * 4096, length: 4096 }],
              remote: { stag: first.rkey, taggedOffset: first.virtualAddress },
            }
          : { wrId: message, opcode, sgList: [{ lkey: region.lkey, offset: message * 4096, length: 4096 }] };
      qp.postSend(wr);
    }
    for (let i = 0; i < 10 && link.sent.length < 96; i++) await turn();
    assert.is(link.sent.length, 96);
    for (let i = 0; i < 96; i++) assert.is(toHex(link.sent[i]!), toHex(sent[i]!.bytes), `request packet ${i}`);
    await rnic.close();

    // Responder: rxe's requests in, one message per event-loop turn (rxe ACKs each message).
    const responderRnic = createRnic();
    const responderLink = new RecordingLink(acks);
    const responder = rcQp(responderRnic, responderLink, 0, first.psn);
    const memory = new Uint8Array(4096);
    if (opcode === 'RDMA_WRITE') {
      responderRnic.registerMemory(responder.pd, memory, {
        access: Access.LocalWrite | Access.RemoteWrite,
        stag: first.rkey,
        taggedOffsetBase: first.virtualAddress,
      });
    } else {
      const target = responderRnic.registerMemory(responder.pd, memory, { access: Access.LocalWrite });
      for (let i = 0; i < 24; i++) responder.postRecv({ wrId: i, sgList: [{ lkey: target.lkey, offset: 0, length: 4096 }] });
    }
    for (let message = 0; message < 24; message++) {
      for (let part = 0; part < 4; part++) {
        const packet = sent[message * 4 + part]!;
        responder.receive(packet.headers, packet.bytes);
      }
      await turn();
      await turn();
    }
    assert.is(responderLink.sent.length, 24);
    for (let i = 0; i < 24; i++) assert.is(toHex(responderLink.sent[i]!), toHex(acks[i]!.bytes), `ACK ${i}`);
    assert.is(toHex(memory.subarray(0, 1024)), toHex(sent[92]!.payload), 'the last message is in place');
    await responderRnic.close();
  });
}

test('rxe-atomic.pcap: FetchAdd requests and Atomic Acknowledges byte for byte', async () => {
  const packets = capture('rxe-atomic.pcap');
  const fetches = packets.filter((packet) => packet.headers.opcode === IbOpcode.FetchAdd);
  const acks = packets.filter((packet) => packet.headers.opcode === IbOpcode.AtomicAcknowledge);
  // Requester: ORD 16 outstanding; rxe's answers are fed back as they would arrive.
  const rnic = createRnic();
  const link = new RecordingLink(fetches);
  const qp = rcQp(rnic, link, fetches[0]!.headers.psn, 0);
  for (const [index, packet] of fetches.entries()) {
    qp.postSend({
      wrId: index,
      opcode: 'ATOMIC_FETCH_ADD',
      remote: { stag: packet.headers.rkey, taggedOffset: packet.headers.virtualAddress },
      atomic: { add: packet.headers.swapOrAdd },
    });
  }
  for (let answered = 0; answered < 100; answered++) {
    for (let i = 0; i < 5 && link.sent.length <= answered; i++) await turn();
    qp.receive(acks[answered]!.headers, acks[answered]!.bytes);
  }
  for (let i = 0; i < 5; i++) await turn();
  assert.is(link.sent.length, 100);
  for (let i = 0; i < 100; i++) assert.is(toHex(link.sent[i]!), toHex(fetches[i]!.bytes), `FetchAdd ${i}`);
  const results = qp.sendCq.poll(200);
  assert.is(results.length, 100);
  assert.equal(
    results.map((wc) => wc.atomicResult),
    acks.map((ack) => ack.headers.originalData),
  );
  await rnic.close();

  // Responder: the target words hold what rxe's memory held, so the answers must be identical.
  const responderRnic = createRnic();
  const responderLink = new RecordingLink(acks);
  const responder = rcQp(responderRnic, responderLink, 0, fetches[0]!.headers.psn);
  const addresses = fetches.map((packet) => packet.headers.virtualAddress);
  const sorted = [...addresses].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const base = sorted[0]!;
  const top = sorted[sorted.length - 1]!;
  const memory = new Uint8Array(new SharedArrayBuffer(Number(top - base) + 8));
  responderRnic.registerMemory(responder.pd, memory, {
    access: Access.LocalWrite | Access.RemoteAtomic,
    stag: fetches[0]!.headers.rkey,
    taggedOffsetBase: base,
  });
  const words = new DataView(memory.buffer);
  for (let i = 0; i < 100; i++) {
    words.setBigUint64(Number(fetches[i]!.headers.virtualAddress - base), acks[i]!.headers.originalData, true);
    responder.receive(fetches[i]!.headers, fetches[i]!.bytes);
    assert.is(
      words.getBigUint64(Number(fetches[i]!.headers.virtualAddress - base), true),
      BigInt.asUintN(64, acks[i]!.headers.originalData + fetches[i]!.headers.swapOrAdd),
    );
  }
  assert.is(responderLink.sent.length, 100);
  for (let i = 0; i < 100; i++) assert.is(toHex(responderLink.sent[i]!), toHex(acks[i]!.bytes), `Atomic Acknowledge ${i}`);
  await responderRnic.close();
});

test.run();
