// The batched UDP socket and link (sendmmsg + GSO, recvmmsg + GRO through koffi): datagram
// boundaries through batching and GSO runs, the send worker behind a full socket (EAGAIN), a datagram larger
// than a receive slot, the worker's ICRC check, datagrams between two sockets of one thread (taken
// by that thread in the turn that wrote them, ICRC checked by the link), close while the receive
// worker waits, a send the kernel refuses ending the QP, and the choice between the batched link and node:dgram's.
import dgram from 'node:dgram';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { UsageError } from '../../host/errors.ts';
import { loadBatchedUdp } from '../../host/rnic/rc/batched-udp-libc.ts';
import { BatchedUdpSocket, IcrcVerdict, SEND_BLOCKS } from '../../host/rnic/rc/batched-udp-socket.ts';
import { RoceEndpoint } from '../../host/rnic/rc/endpoint.ts';
import { headersFrom } from '../../host/rnic/wire/ib-headers.ts';
import { IbOpcode } from '../../host/rnic/wire/ib-opcodes.ts';
import { encodeIbPacket, ibPacketLength } from '../../host/rnic/wire/ib-packet.ts';
import { BatchedUdpLink } from '../../host/rnic/rc/batched-udp-link.ts';
import { socketIcrcHeaders, UdpLink } from '../../host/rnic/rc/link.ts';
import { openUdpLink, udpLinkKindFromEnvironment } from '../../host/rnic/rc/udp-link-choice.ts';
import { WcStatus } from '../../host/rnic/verbs.ts';
import { rcPair } from '../support/rc.ts';

const EMPTY = new Uint8Array(0);

/** A datagram of `length` octets whose content says which one it is. */
function datagram(index: number, length: number): Uint8Array {
  const bytes = new Uint8Array(new SharedArrayBuffer(length));
  for (let i = 0; i < length; i++) bytes[i] = (index * 7 + i) & 0xff;
  return bytes;
}

/** Resolves with what `socket` received once `count` datagrams arrived (or rejects after 10 s). */
function collect(socket: BatchedUdpSocket, count: number): Promise<Uint8Array[]> {
  const received: Uint8Array[] = [];
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`only ${received.length} of ${count} datagrams arrived`)), 10_000);
    socket.setReceiver((data) => {
      received.push(data.slice()); // the slot is reused after the call
      if (received.length === count) {
        clearTimeout(timer);
        resolve(received);
      }
    });
  });
}

test('koffi loads here (the batched link is what RoCE uses by default on this platform)', () => {
  const loaded = loadBatchedUdp();
  assert.not.instance(loaded, Error, loaded instanceof Error ? loaded.message : '');
});

test('datagram boundaries survive batching and GSO runs: equal runs, a shorter last, size changes, a full queue', async () => {
  const sender = await BatchedUdpSocket.open({ sendBatch: 16 });
  const receiver = await BatchedUdpSocket.open();
  try {
    // Runs of equal sizes (GSO), a shorter one ending a run, a longer one starting a new run,
    // small ones copied and large ones pointed at, more than one queue's worth in one turn.
    const lengths = [4112, 4112, 4112, 4128, 4112, 4112, 100, 100, 100, 20, 4112, 300, 300, 4096, 1, 4112];
    for (let i = 0; i < 40; i++) lengths.push(i % 5 === 4 ? 2000 : 4112);
    const sent = lengths.map((length, index) => datagram(index, length));
    const arrived = collect(receiver, sent.length);
    for (const bytes of sent) {
      // Split in three parts, as the RC link sends header, payload and trailer.
      const cut1 = Math.min(12, bytes.length);
      const cut2 = Math.max(cut1, bytes.length - 4);
      sender.send(receiver.local, bytes.subarray(0, cut1), bytes.subarray(cut1, cut2), bytes.subarray(cut2));
    }
    const received = await arrived;
    assert.is(received.length, sent.length);
    for (let i = 0; i < sent.length; i++) assert.equal(received[i], new Uint8Array(sent[i]!), `datagram ${i} (${lengths[i]} octets)`);
    assert.is(sender.stats.datagramsSent, sent.length);
    assert.ok(sender.stats.messagesSent < sent.length, `GSO joined runs: ${sender.stats.messagesSent} messages for ${sent.length} datagrams`);
    assert.ok(sender.stats.sendCalls < sender.stats.messagesSent, `${sender.stats.sendCalls} sendmmsg calls for ${sender.stats.messagesSent} messages`);
    assert.ok(receiver.stats.slotsReceived < sent.length, `GRO: ${receiver.stats.slotsReceived} receive slots for ${sent.length} datagrams`);
    assert.is(receiver.stats.datagramsReceived, sent.length);
  } finally {
    await sender.close();
    await receiver.close();
  }
});

test('GSO runs reach a node:dgram peer as separate datagrams, and its datagrams reach the batched socket', async () => {
  const batched = await BatchedUdpSocket.open();
  const plain = dgram.createSocket('udp4');
  await new Promise<void>((resolve) => plain.bind(0, '127.0.0.1', resolve));
  try {
    const lengths = [4112, 4112, 4112, 4112, 3000];
    const got: Buffer[] = [];
    const allArrived = new Promise<void>((resolve) =>
      plain.on('message', (message) => {
        got.push(message);
        if (got.length === lengths.length) resolve();
      }),
    );
    const plainAddress = { address: '127.0.0.1', port: plain.address().port };
    for (const [index, length] of lengths.entries()) batched.send(plainAddress, datagram(index, length), EMPTY, EMPTY);
    await allArrived;
    assert.equal(
      got.map((message) => message.length),
      lengths,
    );
    for (const [index, length] of lengths.entries()) assert.equal(new Uint8Array(got[index]!), new Uint8Array(datagram(index, length)));
    const back = collect(batched, 3);
    for (const length of [10, 4112, 4112]) plain.send(Buffer.alloc(length, length & 0xff), batched.local.port, '127.0.0.1');
    assert.equal(
      (await back).map((data) => data.length),
      [10, 4112, 4112],
    );
  } finally {
    await batched.close();
    await new Promise<void>((resolve) => plain.close(() => resolve()));
  }
});

test('a full socket (EAGAIN): the send worker keeps the blocks and writes them later; with every block waiting, a packet is dropped and counted', async () => {
  const sender = await BatchedUdpSocket.open({ sendBatch: 8 });
  const receiver = await BatchedUdpSocket.open();
  try {
    sender.simulateFullSocket(60); // 60 sendmmsg calls answered EAGAIN, at least 1 ms apart
    const total = 8 * SEND_BLOCKS;
    const arrived = collect(receiver, total);
    for (let i = 0; i < total; i++) sender.send(receiver.local, datagram(i, 500), EMPTY, EMPTY);
    // Every block went to the send worker, which meets the full socket: nothing is written yet.
    assert.is(sender.pending, total);
    sender.send(receiver.local, datagram(99, 500), EMPTY, EMPTY); // no block came back in time: dropped
    assert.is(sender.stats.sendQueueDrops, 1);
    const received = await arrived;
    for (let i = 0; i < total; i++) assert.equal(received[i], new Uint8Array(datagram(i, 500)));
    assert.ok(sender.stats.sendBlocked >= 60, `blocked ${sender.stats.sendBlocked}`);
    for (let waited = 0; sender.pending > 0 && waited < 100; waited++) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.is(sender.pending, 0);

    // Close writes what was handed over, even behind a full socket buffer.
    sender.simulateFullSocket(5);
    const last = collect(receiver, 3);
    for (let i = 0; i < 3; i++) sender.send(receiver.local, datagram(200 + i, 700), EMPTY, EMPTY);
    await sender.close();
    const lastReceived = await last;
    for (let i = 0; i < 3; i++) assert.equal(lastReceived[i], new Uint8Array(datagram(200 + i, 700)));
  } finally {
    await sender.close();
    await receiver.close();
  }
});

test('a datagram larger than a receive slot is counted and dropped; the next one arrives', async () => {
  const receiver = await BatchedUdpSocket.open({ slotBytes: 1024, receiveSlots: 4, gro: false });
  const plain = dgram.createSocket('udp4');
  try {
    const arrived = collect(receiver, 2);
    plain.send(Buffer.alloc(3000, 1), receiver.local.port, '127.0.0.1');
    plain.send(Buffer.alloc(0), receiver.local.port, '127.0.0.1'); // an empty datagram: handed up as such
    plain.send(Buffer.alloc(700, 2), receiver.local.port, '127.0.0.1');
    const [first, second] = await arrived;
    assert.is(first!.length, 0);
    assert.equal(second, new Uint8Array(700).fill(2));
    assert.is(receiver.stats.truncated, 1);
  } finally {
    plain.close();
    await receiver.close();
  }
});

test('the receive worker checks ICRCs: good and corrupted packets, single and in GRO runs, get their verdicts; the endpoint counts the bad', async () => {
  const receiver = await BatchedUdpSocket.open({ checkRoceIcrc: true });
  const plain = dgram.createSocket('udp4');
  await new Promise<void>((resolve) => plain.bind(0, '127.0.0.1', resolve));
  const from = { address: '127.0.0.1', port: plain.address().port };
  /** An RDMA Write Only of `length` octets to QP 0x12, its ICRC as a packet from `plain` to `receiver`; `corrupt` flips one payload octet after. */
  const packet = (length: number, psn: number, corrupt: boolean): Buffer => {
    const ip = new Uint8Array(20);
    const udp = new Uint8Array(8);
    socketIcrcHeaders(ip, udp, from, receiver.local, ibPacketLength(IbOpcode.RdmaWriteOnly, length));
    const bytes = encodeIbPacket(
      headersFrom({ opcode: IbOpcode.RdmaWriteOnly, destQp: 0x12, psn, dmaLength: length }),
      new Uint8Array(length).fill(psn),
      ip,
      udp,
    );
    if (corrupt) bytes[40] = bytes[40]! ^ 1;
    return Buffer.from(bytes);
  };
  try {
    const verdicts: IcrcVerdict[] = [];
    const sizes: number[] = [];
    const done = new Promise<void>((resolve) => {
      receiver.setReceiver((data, _from, icrc) => {
        verdicts.push(icrc);
        sizes.push(data.length);
        if (verdicts.length === 8) resolve();
      });
    });
    // Lengths vary (each its own prefix) and repeat (runs the kernel may merge by GRO).
    const plan: Array<[number, boolean]> = [
      [4096, false],
      [4096, true],
      [4096, false],
      [100, false],
      [100, true],
      [1024, true],
      [1024, false],
      [4096, false],
    ];
    for (const [psn, [length, corrupt]] of plan.entries()) plain.send(packet(length, psn, corrupt), receiver.local.port, '127.0.0.1');
    await done;
    assert.equal(
      sizes,
      plan.map(([length]) => ibPacketLength(IbOpcode.RdmaWriteOnly, length)),
    );
    assert.equal(
      verdicts,
      plan.map(([, corrupt]) => (corrupt ? IcrcVerdict.Bad : IcrcVerdict.Good)),
    );
  } finally {
    plain.close();
    await receiver.close();
  }

  // Through the link: the worker's verdict decides; a corrupted packet counts as an ICRC error, a good one gets past the check.
  const link = await BatchedUdpLink.open();
  const endpoint = new RoceEndpoint(link);
  const sender = dgram.createSocket('udp4');
  await new Promise<void>((resolve) => sender.bind(0, '127.0.0.1', resolve));
  try {
    from.port = sender.address().port;
    const ip = new Uint8Array(20);
    const udp = new Uint8Array(8);
    socketIcrcHeaders(ip, udp, from, link.local, ibPacketLength(IbOpcode.RdmaWriteOnly, 64));
    const good = Buffer.from(encodeIbPacket(headersFrom({ opcode: IbOpcode.RdmaWriteOnly, destQp: 0x12, psn: 1, dmaLength: 64 }), new Uint8Array(64), ip, udp));
    const bad = Buffer.from(good);
    bad[50] = bad[50]! ^ 0x80;
    sender.send(bad, link.local.port, '127.0.0.1');
    sender.send(good, link.local.port, '127.0.0.1');
    for (let waited = 0; endpoint.stats.packets < 2 && waited < 200; waited++) await new Promise((resolve) => setTimeout(resolve, 25));
    assert.is(endpoint.stats.packets, 2);
    assert.is(endpoint.stats.icrcErrors, 1);
    assert.is(endpoint.stats.unknownQp, 1); // the good one passed the ICRC check and found no QP 0x12
    assert.is(link.stats.datagramsReceived, 2);
  } finally {
    sender.close();
    await endpoint.close();
  }
});

test('between two sockets of one thread, datagrams arrive in the turn that wrote them (no worker hand-over); datagrams from elsewhere still arrive', async () => {
  const sender = await BatchedUdpSocket.open();
  const receiver = await BatchedUdpSocket.open();
  const plain = dgram.createSocket('udp4');
  try {
    const received: Uint8Array[] = [];
    receiver.setReceiver((data) => received.push(data.slice()));
    // More than a turn the RC thread would write itself to any other peer (4 packets, 2 KiB).
    const sent = Array.from({ length: 20 }, (_, index) => datagram(index, 4112));
    for (const bytes of sent) sender.send(receiver.local, bytes.subarray(0, 12), bytes.subarray(12, 4108), bytes.subarray(4108));
    assert.is(received.length, 0);
    await Promise.resolve(); // the turn ends in the microtask it enlisted before this one
    assert.is(received.length, sent.length, 'every datagram arrived before the turn ended');
    for (let i = 0; i < sent.length; i++) assert.equal(received[i], new Uint8Array(sent[i]!), `datagram ${i}`);
    assert.is(sender.stats.sendCalls, 1);
    assert.is(sender.pending, 0);
    // Another round after the receive worker was woken for nothing (it sleeps a moment now).
    await new Promise((resolve) => setTimeout(resolve, 5));
    for (const bytes of sent.slice(0, 3)) sender.send(receiver.local, bytes, EMPTY, EMPTY);
    await Promise.resolve();
    assert.is(received.length, sent.length + 3);
    // A datagram from another socket (node:dgram here) goes through the receive worker as before.
    const back = collect(receiver, 2);
    plain.send(Buffer.alloc(30, 3), receiver.local.port, '127.0.0.1');
    plain.send(Buffer.alloc(4112, 4), receiver.local.port, '127.0.0.1');
    assert.equal(await back, [new Uint8Array(30).fill(3), new Uint8Array(4112).fill(4)]);
  } finally {
    plain.close();
    await sender.close();
    await receiver.close();
  }
});

test('a socket closed while datagrams from its own thread wait for the end of the turn closes promptly', async () => {
  for (let round = 0; round < 3; round++) {
    const sender = await BatchedUdpSocket.open();
    const receiver = await BatchedUdpSocket.open();
    for (let i = 0; i < 8; i++) sender.send(receiver.local, datagram(i, 4112), EMPTY, EMPTY);
    sender.flush(); // written now: the receiver's ring is held for this thread until its turn ends
    await Promise.race([
      Promise.all([receiver.close(), sender.close()]),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error('close did not end within 10 s')), 10_000).unref()),
    ]);
  }
});

test('a datagram the thread took itself gets its ICRC checked by the link: the endpoint counts a corrupted one', async () => {
  const from = await BatchedUdpLink.open();
  const to = await BatchedUdpLink.open();
  const endpoint = new RoceEndpoint(to);
  try {
    const ip = new Uint8Array(20);
    const udp = new Uint8Array(8);
    const length = 4096; // long enough for the ISA-L path where it is installed
    socketIcrcHeaders(ip, udp, from.local, to.local, ibPacketLength(IbOpcode.RdmaWriteOnly, length));
    const good = encodeIbPacket(
      headersFrom({ opcode: IbOpcode.RdmaWriteOnly, destQp: 0x12, psn: 1, dmaLength: length }),
      new Uint8Array(length).fill(9),
      ip,
      udp,
    );
    const bad = good.slice();
    bad[2000] = bad[2000]! ^ 0x10;
    // Through the socket, not the link: the link would compute the ICRC afresh.
    from.socket.send(to.local, bad, EMPTY, EMPTY);
    from.socket.send(to.local, good, EMPTY, EMPTY);
    await Promise.resolve();
    assert.is(endpoint.stats.packets, 2);
    assert.is(endpoint.stats.icrcErrors, 1);
    assert.is(endpoint.stats.unknownQp, 1); // the good one passed the check and found no QP 0x12
  } finally {
    await from.close();
    await endpoint.close();
  }
});

test('close while the receive worker waits ends it promptly; sends after close are ignored; close twice is harmless', async () => {
  for (let round = 0; round < 3; round++) {
    const socket = await BatchedUdpSocket.open();
    await new Promise((resolve) => setTimeout(resolve, 20)); // the worker is waiting in poll now
    const started = Date.now();
    await socket.close();
    // Generous bound for a loaded machine: poll's own timeout is 200 ms, shutdown wakes it at once.
    assert.ok(Date.now() - started < 5000, `close took ${Date.now() - started} ms`);
    socket.send({ address: '127.0.0.1', port: 9 }, datagram(0, 10), EMPTY, EMPTY);
    await socket.close();
    assert.is(socket.stats.datagramsSent, 0);
  }
});

test('a packet the kernel refuses to send (port 0: EINVAL) ends the QP at once with the reason, not after its retries', async () => {
  const pair = await rcPair({ pathMtu: 1024 });
  try {
    const { client, server } = pair;
    assert.instance(client.link, BatchedUdpLink);
    const path = client.qp.path!;
    path.peer = { address: '127.0.0.1', port: 0 };
    client.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [{ lkey: client.mr.lkey, offset: 0, length: 64 }],
      remote: { stag: server.mr.rkey, taggedOffset: 0 },
    });
    const info = await Promise.race([
      client.qp.whenDisconnected(),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error('the QP did not end within 10 s')), 10_000).unref()),
    ]);
    assert.is(info.reason, 'connection-lost');
    assert.match(info.message, /UDP send to 127\.0\.0\.1:0 failed: EINVAL/);
    const [completion] = client.cq.poll(1);
    assert.is(completion!.status, WcStatus.WrFlushError);
    assert.is(client.rnic.roceEndpoint!.stats.sendFailures, 1);
  } finally {
    await pair.close();
  }
});

test('the UDP link choice: auto takes the batched link here, dgram node:dgram; KBTP_ROCE_UDP is checked', async () => {
  const auto = await openUdpLink({ udpLink: 'auto' });
  const plain = await openUdpLink({ udpLink: 'dgram' });
  const batched = await openUdpLink({ udpLink: 'batched' });
  try {
    assert.instance(auto, BatchedUdpLink);
    assert.instance(plain, UdpLink);
    assert.instance(batched, BatchedUdpLink);
  } finally {
    await Promise.all([auto.close(), plain.close(), batched.close()]);
  }
  assert.is(udpLinkKindFromEnvironment(undefined), 'auto');
  assert.is(udpLinkKindFromEnvironment('dgram'), 'dgram');
  assert.throws(
    () => udpLinkKindFromEnvironment('fast'),
    (error: unknown) => error instanceof UsageError && /KBTP_ROCE_UDP=fast: use auto, batched, dgram/.test(error.message),
  );
});

test.run();
