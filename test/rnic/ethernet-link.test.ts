// The Ethernet-frame link a QEMU guest's RoCE stack talks to: ARP answered and used, ICMP echo
// answered, RoCEv2 carried in real IPv4/UDP headers with a valid ICRC, other traffic ignored,
// and a whole RC connection (Write, Read, atomic) between two RNICs over two such links.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { decodeUdpDatagram } from '../../host/capture/packet.ts';
import { LINKTYPE_ETHERNET } from '../../host/capture/pcap.ts';
import { EthernetLink, type FramePort } from '../../host/rnic/rc/ethernet-link.ts';
import { IbHeaders, headersFrom, encodeHeaders } from '../../host/rnic/wire/ib-headers.ts';
import { decodeIbPacket } from '../../host/rnic/wire/ib-packet.ts';
import { internetChecksum } from '../../host/rnic/wire/roce-frame.ts';
import { Access, createRnic, WcStatus } from '../../host/rnic/verbs.ts';

class FakePort implements FramePort {
  readonly sent: Uint8Array[] = [];
  private handler: ((frame: Uint8Array) => void) | undefined;
  peer: FakePort | undefined;
  send(frame: Uint8Array): void {
    this.sent.push(frame.slice());
    const peer = this.peer;
    if (peer !== undefined) setImmediate(() => peer.deliver(frame.slice()));
  }
  onFrame(handler: (frame: Uint8Array) => void): void {
    this.handler = handler;
  }
  deliver(frame: Uint8Array): void {
    this.handler?.(frame);
  }
  async close(): Promise<void> {}
}

const HOST_MAC = new Uint8Array([0x02, 0, 0, 0, 0, 0x01]);
const GUEST_MAC = new Uint8Array([0x52, 0x54, 0, 0, 0, 0x0a]);
const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');

function arpRequest(targetAddress: number[]): Uint8Array {
  return new Uint8Array([
    ...new Uint8Array(6).fill(0xff),
    ...GUEST_MAC,
    0x08,
    0x06,
    0,
    1,
    0x08,
    0,
    6,
    4,
    0,
    1,
    ...GUEST_MAC,
    10,
    9,
    0,
    1,
    0,
    0,
    0,
    0,
    0,
    0,
    ...targetAddress,
  ]);
}

test('ARP: answers for its address only, and resolves the peer before sending RoCE', () => {
  const port = new FakePort();
  const link = new EthernetLink(port, { mac: HOST_MAC, address: '10.9.0.2' });
  port.deliver(arpRequest([10, 9, 0, 3]));
  assert.is(port.sent.length, 0, 'not our address');
  port.deliver(arpRequest([10, 9, 0, 2]));
  assert.is(port.sent.length, 1);
  const reply = port.sent[0]!;
  assert.is(hex(reply.subarray(0, 6)), hex(GUEST_MAC));
  assert.is(hex(reply.subarray(20, 22)), '0002', 'ARP reply');
  assert.is(hex(reply.subarray(22, 28)), hex(HOST_MAC));
  assert.is(hex(reply.subarray(28, 32)), '0a090002');
  // The guest is now known (it asked): a RoCE packet goes straight out, ICRC valid.
  const h = headersFrom({ opcode: 0x04, destQp: 0x11, psn: 5, ackRequest: true });
  const header = new Uint8Array(12);
  encodeHeaders(header, 0, h);
  link.send({ address: '10.9.0.1', port: 4791 }, header, new Uint8Array([1, 2, 3, 4]), new Uint8Array(4));
  assert.is(port.sent.length, 2);
  const udp = decodeUdpDatagram(LINKTYPE_ETHERNET, port.sent[1]!)!;
  assert.is(udp.destinationPort, 4791);
  assert.is(udp.ip.destinationAddress, '10.9.0.1');
  assert.is(udp.ip.header[6]! & 0x40, 0x40, 'DF');
  assert.is(internetChecksum(udp.ip.header), 0, 'IPv4 checksum');
  assert.is(decodeIbPacket(udp.payload, new IbHeaders(), udp.ip.header, udp.header), undefined, 'ICRC over the real headers');
  // An unknown peer is resolved first; the packet waits for the reply.
  link.send({ address: '10.9.0.7', port: 4791 }, header, new Uint8Array([1, 2, 3, 4]), new Uint8Array(4));
  assert.is(port.sent.length, 3);
  assert.is(hex(port.sent[2]!.subarray(12, 14)), '0806', 'ARP request sent');
  const answer = new Uint8Array([...HOST_MAC, ...GUEST_MAC, 0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 2, ...GUEST_MAC, 10, 9, 0, 7, ...HOST_MAC, 10, 9, 0, 2]);
  port.deliver(answer);
  assert.is(port.sent.length, 4, 'the queued packet left');
  assert.is(hex(port.sent[3]!.subarray(0, 6)), hex(GUEST_MAC));
});

test('ICMP echo is answered; other traffic ignored', () => {
  const port = new FakePort();
  const link = new EthernetLink(port, { mac: HOST_MAC, address: '10.9.0.2' });
  const icmp = new Uint8Array([8, 0, 0, 0, 0x12, 0x34, 0, 1, 0xaa, 0xbb]);
  const sum = internetChecksum(icmp);
  icmp[2] = sum >> 8;
  icmp[3] = sum & 0xff;
  const ip = new Uint8Array([0x45, 0, 0, 20 + icmp.length, 0, 1, 0, 0, 64, 1, 0, 0, 10, 9, 0, 1, 10, 9, 0, 2]);
  const ipSum = internetChecksum(ip);
  ip[10] = ipSum >> 8;
  ip[11] = ipSum & 0xff;
  port.deliver(new Uint8Array([...HOST_MAC, ...GUEST_MAC, 0x08, 0x00, ...ip, ...icmp]));
  assert.is(port.sent.length, 1);
  const reply = port.sent[0]!;
  assert.is(reply[34], 0, 'echo reply');
  assert.is(internetChecksum(reply.subarray(34)), 0);
  assert.is(hex(reply.subarray(38)), hex(icmp.subarray(4)), 'identifier, sequence and data echoed');
  port.deliver(new Uint8Array([...HOST_MAC, ...GUEST_MAC, 0x86, 0xdd, 0x60, 0, 0, 0])); // IPv6: ignored
  port.deliver(new Uint8Array(5)); // runt
  assert.is(port.sent.length, 1);
  assert.is(link.stats.ignored, 2);
});

test('an RC connection over two Ethernet links: Write, Read and FetchAdd, data exact', async () => {
  const portA = new FakePort();
  const portB = new FakePort();
  portA.peer = portB;
  portB.peer = portA;
  const a = createRnic();
  const b = createRnic();
  await a.openRoce({ link: new EthernetLink(portA, { mac: HOST_MAC, address: '10.9.0.2' }) });
  await b.openRoce({ link: new EthernetLink(portB, { mac: GUEST_MAC, address: '10.9.0.1' }) });
  try {
    const side = (rnic: typeof a) => {
      const pd = rnic.allocPd();
      const memory = new Uint8Array(new SharedArrayBuffer(65536));
      const mr = rnic.registerMemory(pd, memory, { access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead | Access.RemoteAtomic });
      const cq = rnic.createCq();
      const qp = rnic.createRcQp({ pd, sendCq: cq, recvCq: cq });
      return { memory, mr, cq, qp };
    };
    const client = side(a);
    const server = side(b);
    // The side channel runs over loopback TCP; the packets over the two frame ports.
    const listener = await b.listenRc({ pathMtu: 1024 });
    const accepted = listener.next().then((request) => request.accept(server.qp));
    await a.connectRc(client.qp, { host: '127.0.0.1', port: listener.port, pathMtu: 1024 });
    await accepted;
    await listener.close();
    for (let i = 0; i < 10000; i++) client.memory[i] = (i * 13) & 0xff;
    client.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [{ lkey: client.mr.lkey, offset: 0, length: 10000 }],
      remote: { stag: server.mr.rkey, taggedOffset: 0 },
    });
    client.qp.postSend({
      wrId: 2,
      opcode: 'RDMA_READ',
      sgList: [{ lkey: client.mr.lkey, offset: 20000, length: 10000 }],
      remote: { stag: server.mr.rkey, taggedOffset: 0 },
    });
    client.qp.postSend({ wrId: 3, opcode: 'ATOMIC_FETCH_ADD', remote: { stag: server.mr.rkey, taggedOffset: 32768 }, atomic: { add: 7n } });
    const done: Array<{ status: number; atomicResult?: bigint }> = [];
    const deadline = Date.now() + 30_000;
    while (done.length < 3 && Date.now() < deadline) {
      done.push(...client.cq.poll(3));
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.equal(
      done.map((wc) => wc.status),
      [WcStatus.Success, WcStatus.Success, WcStatus.Success],
    );
    assert.is(Buffer.compare(client.memory.subarray(0, 10000), client.memory.subarray(20000, 30000)), 0);
    assert.is(new DataView(server.memory.buffer).getBigUint64(32768, true), 7n);
    assert.ok(
      portA.sent.some((frame) => frame[12] === 0x08 && frame[13] === 0x06),
      'ARP resolved the peer',
    );
  } finally {
    await a.close();
    await b.close();
  }
});

test.run();
