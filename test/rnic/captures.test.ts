// The real siw traffic of test/fixtures/captures: every TCP direction reassembled, parsed into the
// MPA frames and FPDUs (with CRC fields) and the RDMAP message sequence the tools exchanged;
// then replayed through this RNIC, which must accept siw's bytes and, driven with the same work
// requests as rping, emit byte-identical MPA frames and FPDUs.
import { readFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { parsePcap, LINKTYPE_ETHERNET } from '../../host/capture/pcap.ts';
import { reassembleTcp, recordIndexAt, type TcpConnection } from '../../host/capture/tcp-stream.ts';
import { decodeMpaStream, type DecodedMpaStream } from '../../host/rnic/wire/stream.ts';
import { RdmapOpcode } from '../../host/rnic/wire/rdmap.ts';
import { MemoryChannel } from '../../host/rnic/channel.ts';
import { Access, createRnic, type QueuePair, type Rnic } from '../../host/rnic/verbs.ts';

const CAPTURES = new URL('../fixtures/captures/', import.meta.url);
const load = (name: string): Uint8Array => new Uint8Array(readFileSync(new URL(name, CAPTURES)));
const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');

const rping = reassembleTcp(load('siw-rping.pcap'));
const writeR = reassembleTcp(load('siw-write_R.pcap'));

/** Opcode letters for a compact sequence: S Send, W Write, Q Read Request, R Read Response. */
function sequence(stream: DecodedMpaStream): string {
  const letters: Record<number, string> = {
    [RdmapOpcode.Send]: 'S',
    [RdmapOpcode.RdmaWrite]: 'W',
    [RdmapOpcode.RdmaReadRequest]: 'Q',
    [RdmapOpcode.RdmaReadResponse]: 'R',
  };
  return stream.fpdus
    .filter((record) => record.segment.ddp.last)
    .map((record) => letters[record.segment.opcode] ?? '?')
    .join('');
}

/** FPDU byte ranges of a direction after its MPA frame. */
function fpduBytes(direction: Uint8Array, stream: DecodedMpaStream): Uint8Array[] {
  const body = direction.subarray(stream.frameLength);
  return stream.fpdus.map((record, i) => body.subarray(record.offset, stream.fpdus[i + 1]?.offset ?? body.length));
}

test('pcap reader and TCP reassembly find the siw connections', () => {
  const file = parsePcap(load('siw-rping.pcap'));
  assert.is(file.linkType, LINKTYPE_ETHERNET);
  assert.is(file.records.length, 68);
  assert.is(rping.length, 1);
  const connection = rping[0]!;
  assert.equal(connection.initiator, { address: '10.9.0.2', port: 58291 });
  assert.equal(connection.responder, { address: '10.9.0.1', port: 18014 });
  assert.is(connection.initiatorToResponder.bytes.length, 844);
  assert.is(connection.responderToInitiator.bytes.length, 1104);
  assert.ok(connection.initiatorToResponder.sawSyn && connection.initiatorToResponder.sawFin);
  assert.equal(connection.initiatorToResponder.holes, []);
  // The MPA Request is frame 22 (index 21) of the capture.
  assert.is(recordIndexAt(connection.initiatorToResponder, 0), 21);
  assert.is(writeR.length, 2);
  assert.is(writeR[1]!.initiatorToResponder.bytes.length, 415624);
  for (const c of writeR) assert.equal([...c.initiatorToResponder.holes, ...c.responderToInitiator.holes], []);
});

test('siw-rping: MPA v2 Request/Reply (client-server, IRD 1 / ORD 1, no CRC) and the rping message sequence', () => {
  const connection = rping[0]!;
  const client = decodeMpaStream(connection.initiatorToResponder.bytes);
  const server = decodeMpaStream(connection.responderToInitiator.bytes);
  assert.is(hex(connection.initiatorToResponder.bytes.subarray(0, 24)), '4d504120494420526571204672616d651002000400010001');
  assert.is(client.frame.kind, 'request');
  assert.is(client.frame.revision, 2);
  assert.ok(client.frame.enhanced);
  assert.not.ok(client.frame.crc);
  assert.not.ok(client.frame.markers);
  assert.equal(client.frame.enhancedData, { peerToPeer: false, sendRtr: false, writeRtr: false, readRtr: false, ird: 1, ord: 1 });
  assert.is(server.frame.kind, 'reply');
  assert.not.ok(server.frame.reject);
  assert.equal(server.frame.enhancedData, client.frame.enhancedData);
  for (const stream of [client, server]) {
    assert.is(stream.trailing, 0);
    for (const record of stream.fpdus) assert.is(record.crc, 0, 'CRC off: siw leaves the field zero');
  }
  // Client: advertise source, answer the server's read, advertise sink; ten rounds of five pings.
  assert.is(sequence(client), `S${'RSS'.repeat(4)}RS`);
  // Server: read the ping, say go, write it back, say done.
  assert.is(sequence(server), 'QSWS'.repeat(5));
  const reads = server.fpdus.filter((r) => r.segment.opcode === RdmapOpcode.RdmaReadRequest);
  const responses = client.fpdus.filter((r) => r.segment.opcode === RdmapOpcode.RdmaReadResponse);
  const writes = server.fpdus.filter((r) => r.segment.opcode === RdmapOpcode.RdmaWrite);
  const clientSends = client.fpdus.filter((r) => r.segment.opcode === RdmapOpcode.Send);
  assert.equal(
    reads.map((r) => (r.segment.ddp.tagged ? -1 : r.segment.ddp.messageSequenceNumber)),
    [1, 2, 3, 4, 5],
  );
  assert.equal(
    clientSends.map((r) => (r.segment.ddp.tagged ? -1 : r.segment.ddp.messageSequenceNumber)),
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
  );
  for (let i = 0; i < 5; i++) {
    const request = reads[i]!.segment.readRequest!;
    // The client's odd Sends advertise the source buffer (addr, rkey, size) the server reads.
    const advert = Buffer.from(clientSends[2 * i]!.segment.payload);
    assert.is(request.sourceTaggedOffset, advert.readBigUInt64BE(0));
    assert.is(request.sourceStag, advert.readUInt32BE(8));
    assert.is(request.readSize, advert.readUInt32BE(12));
    assert.is(request.readSize, 64);
    const response = responses[i]!.segment;
    assert.ok(response.ddp.tagged);
    if (response.ddp.tagged) {
      assert.is(response.ddp.stag, request.sinkStag);
      assert.is(response.ddp.taggedOffset, request.sinkTaggedOffset);
    }
    assert.is(Buffer.from(response.payload).toString('latin1').slice(0, 13), `rdma-ping-${i}: `);
    // The even Sends advertise the sink the server writes the ping back to.
    const sink = Buffer.from(clientSends[2 * i + 1]!.segment.payload);
    const write = writes[i]!.segment;
    assert.ok(write.ddp.tagged);
    if (write.ddp.tagged) {
      assert.is(write.ddp.taggedOffset, sink.readBigUInt64BE(0));
      assert.is(write.ddp.stag, sink.readUInt32BE(8));
    }
    assert.is(hex(write.payload), hex(response.payload));
  }
});

test('siw-write_R: perftest control Sends (one with non-zero PAD) and 100 RDMA Writes of 4096 octets in 3 FPDUs each', () => {
  const [control, data] = writeR as [TcpConnection, TcpConnection];
  for (const direction of [control.initiatorToResponder, control.responderToInitiator]) {
    const stream = decodeMpaStream(direction.bytes);
    assert.equal(stream.frame.enhancedData, { peerToPeer: false, sendRtr: false, writeRtr: false, readRtr: false, ird: 0, ord: 0 });
    assert.is(sequence(stream), 'S'.repeat(16));
    assert.equal(
      stream.fpdus.map((r) => r.segment.payload.length),
      [16, 4, 4, 2, 56, 56, 56, 56, 56, 56, 8, 8, 8, 8, 8, 56],
    );
    const padded = stream.fpdus[3]!;
    assert.is(padded.ulpduLength, 20);
    assert.is(hex(padded.padding), '0040', 'siw sent non-zero PAD octets here');
  }
  const writes = decodeMpaStream(data.initiatorToResponder.bytes);
  const reply = decodeMpaStream(data.responderToInitiator.bytes);
  assert.is(reply.fpdus.length, 0, 'the write target never sends an FPDU');
  assert.is(sequence(writes), 'W'.repeat(100));
  assert.is(writes.fpdus.length, 300);
  for (let m = 0; m < 100; m++) {
    const parts = writes.fpdus.slice(3 * m, 3 * m + 3);
    assert.equal(
      parts.map((r) => r.ulpduLength),
      [1442, 1442, 1254],
      'siw fills each FPDU to the MSS',
    );
    assert.equal(
      parts.map((r) => r.segment.ddp.last),
      [false, false, true],
    );
    const offsets = parts.map((r) => (r.segment.ddp.tagged ? r.segment.ddp.taggedOffset : -1n));
    assert.equal(offsets, [0x55d042c27000n, 0x55d042c27000n + 1428n, 0x55d042c27000n + 2856n]);
    for (const part of parts) if (part.segment.ddp.tagged) assert.is(part.segment.ddp.stag, 0xe091a400);
  }
});

// --- Replays through this RNIC ------------------------------------------------------------------

interface Replay {
  rnic: Rnic;
  qp: QueuePair;
  channel: MemoryChannel;
  memory: Uint8Array;
}

function replaySide(ird: number, ord: number): Replay {
  const rnic = createRnic();
  const pd = rnic.allocPd();
  const cq = rnic.createCq({ depth: 1024 });
  const qp = rnic.createQp({ pd, sendCq: cq, recvCq: cq, ird, ord });
  return { rnic, qp, channel: new MemoryChannel(), memory: new Uint8Array(1 << 16) };
}

test("rping server role: accepting siw's Request yields siw's Reply, and the same work requests yield siw's FPDUs", async () => {
  const connection = rping[0]!;
  const clientBytes = connection.initiatorToResponder.bytes;
  const serverBytes = connection.responderToInitiator.bytes;
  const client = decodeMpaStream(clientBytes);
  const server = decodeMpaStream(serverBytes);
  const side = replaySide(1, 1);
  const pd = side.qp.pd;
  // rping's server buffers: receive area, the read sink (which it then writes back from).
  const recv = side.rnic.registerMemory(pd, side.memory, { access: Access.LocalWrite, offset: 0, length: 4096 });
  const readSinkStag = server.fpdus[0]!.segment.readRequest!.sinkStag;
  const readSinkTo = server.fpdus[0]!.segment.readRequest!.sinkTaggedOffset;
  const sink = side.rnic.registerMemory(pd, side.memory, {
    access: Access.LocalWrite | Access.RemoteWrite,
    offset: 8192,
    length: 64,
    stag: readSinkStag,
    taggedOffsetBase: readSinkTo,
  });
  const sendArea = side.rnic.registerMemory(pd, side.memory, { access: Access.LocalWrite, offset: 16384, length: 4096 });
  for (let i = 0; i < 10; i++) side.qp.postRecv({ wrId: i, sgList: [{ lkey: recv.lkey, offset: i * 16, length: 16 }] });

  const pending = side.rnic.acceptChannel(side.channel);
  side.channel.receive(clientBytes.subarray(0, client.frameLength));
  const request = await pending;
  const accepted = request.accept(side.qp, { crc: false });
  assert.is(hex(side.channel.drain()), hex(serverBytes.subarray(0, server.frameLength)), "Reply identical to siw's");
  await accepted;

  // Drive the QP as rping's server does, feeding the client's FPDUs as they were sent.
  const clientFpdus = fpduBytes(clientBytes, client);
  const serverSends = server.fpdus.filter((r) => r.segment.opcode === RdmapOpcode.Send).map((r) => r.segment.payload);
  const writeTargets = server.fpdus.filter((r) => r.segment.opcode === RdmapOpcode.RdmaWrite);
  let sendIndex = 0;
  const postSend = (): void => {
    const payload = serverSends[sendIndex]!;
    side.memory.set(payload, 16384 + sendIndex * 16);
    side.qp.postSend({ wrId: 100 + sendIndex, opcode: 'SEND', sgList: [{ lkey: sendArea.lkey, offset: sendIndex * 16, length: payload.length }] });
    sendIndex++;
  };
  let round = 0;
  for (const bytes of clientFpdus) {
    side.channel.receive(bytes);
    const opcode = bytes[3]! & 0x0f;
    if (opcode === RdmapOpcode.Send && round < 5 && sendIndex === 2 * round) {
      // Source advertised: read the ping.
      const advert = Buffer.from(client.fpdus.filter((r) => r.segment.opcode === RdmapOpcode.Send)[2 * round]!.segment.payload);
      side.qp.postSend({
        wrId: 200 + round,
        opcode: 'RDMA_READ',
        sgList: [{ lkey: sink.lkey, offset: 0, length: 64 }],
        remote: { stag: advert.readUInt32BE(8), taggedOffset: advert.readBigUInt64BE(0) },
      });
    } else if (opcode === RdmapOpcode.RdmaReadResponse) {
      postSend(); // "go ahead"
    } else if (opcode === RdmapOpcode.Send && sendIndex === 2 * round + 1) {
      // Sink advertised: write the ping back, then say done.
      const target = writeTargets[round]!.segment.ddp;
      if (target.tagged) {
        side.qp.postSend({
          wrId: 300 + round,
          opcode: 'RDMA_WRITE',
          sgList: [{ lkey: sink.lkey, offset: 0, length: 64 }],
          remote: { stag: target.stag, taggedOffset: target.taggedOffset },
        });
      }
      postSend();
      round++;
    }
  }
  await new Promise((resolve) => setImmediate(resolve));
  assert.is(side.qp.state, 'rts', side.qp.disconnectInfo?.message);
  const produced = side.channel.drain();
  assert.is(produced.length, serverBytes.length - server.frameLength);
  assert.is(hex(produced), hex(serverBytes.subarray(server.frameLength)), "every FPDU identical to siw's");
  const completions = side.qp.sendCq.poll(100);
  assert.is(completions.filter((c) => c.opcode === 'RECV' && c.status === 0 && c.byteLength === 16).length, 10);
  assert.is(completions.filter((c) => c.opcode === 'RDMA_READ' && c.status === 0 && c.byteLength === 64).length, 5);
  assert.is(completions.filter((c) => c.status !== 0).length, 0);
  side.qp.destroy();
});

test("rping client role: our Request equals siw's, and our Sends and Read Responses equal siw's FPDUs", async () => {
  const connection = rping[0]!;
  const clientBytes = connection.initiatorToResponder.bytes;
  const serverBytes = connection.responderToInitiator.bytes;
  const client = decodeMpaStream(clientBytes);
  const server = decodeMpaStream(serverBytes);
  const side = replaySide(1, 1);
  const pd = side.qp.pd;
  const sends = client.fpdus.filter((r) => r.segment.opcode === RdmapOpcode.Send).map((r) => Buffer.from(r.segment.payload));
  // The client's ping source and pong sink, at the STags and addresses rping advertised.
  const source = side.rnic.registerMemory(pd, side.memory, {
    access: Access.LocalWrite | Access.RemoteRead,
    offset: 0,
    length: 64,
    stag: sends[0]!.readUInt32BE(8),
    taggedOffsetBase: sends[0]!.readBigUInt64BE(0),
  });
  const pongSink = side.rnic.registerMemory(pd, side.memory, {
    access: Access.LocalWrite | Access.RemoteWrite,
    offset: 1024,
    length: 64,
    stag: sends[1]!.readUInt32BE(8),
    taggedOffsetBase: sends[1]!.readBigUInt64BE(0),
  });
  const control = side.rnic.registerMemory(pd, side.memory, { access: Access.LocalWrite, offset: 4096, length: 4096 });
  for (let i = 0; i < 10; i++) side.qp.postRecv({ wrId: i, sgList: [{ lkey: control.lkey, offset: 2048 + i * 16, length: 16 }] });

  const connected = side.rnic.connectChannel(side.qp, side.channel, { crc: false, peerToPeer: false });
  assert.is(hex(side.channel.drain()), hex(clientBytes.subarray(0, client.frameLength)), "Request identical to siw's");
  side.channel.receive(serverBytes.subarray(0, server.frameLength));
  const summary = await connected;
  assert.equal({ ird: summary.ird, ord: summary.ord, crc: summary.crc }, { ird: 1, ord: 1, crc: false });

  const responses = client.fpdus.filter((r) => r.segment.opcode === RdmapOpcode.RdmaReadResponse).map((r) => r.segment.payload);
  let next = 0;
  const postSend = (): void => {
    side.memory.set(sends[next]!, 4096 + next * 16);
    side.qp.postSend({ wrId: 100 + next, opcode: 'SEND', sgList: [{ lkey: control.lkey, offset: next * 16, length: 16 }] });
    next++;
  };
  side.memory.set(responses[0]!, 0);
  postSend(); // advertise the first ping
  let ping = 0;
  for (const bytes of fpduBytes(serverBytes, server)) {
    side.channel.receive(bytes);
    // Let write completions run, as they would before siw's next request could arrive.
    await new Promise((resolve) => setImmediate(resolve));
    const opcode = bytes[3]! & 0x0f;
    if (opcode !== RdmapOpcode.Send) continue;
    if (next % 2 === 1) {
      postSend(); // the server read the ping: advertise the pong sink
    } else {
      // Pong written back: check it, prepare and advertise the next ping.
      assert.is(hex(side.memory.subarray(1024, 1088)), hex(responses[ping]!));
      ping++;
      if (ping < 5) {
        side.memory.set(responses[ping]!, 0);
        postSend();
      }
    }
  }
  await new Promise((resolve) => setImmediate(resolve));
  assert.is(side.qp.state, 'rts', side.qp.disconnectInfo?.message);
  const produced = side.channel.drain();
  assert.is(produced.length, clientBytes.length - client.frameLength);
  assert.is(hex(produced), hex(clientBytes.subarray(client.frameLength)), "every FPDU identical to siw's");
  assert.is(source.valid && pongSink.valid, true);
  side.qp.destroy();
});

test('siw-write_R replayed into this RNIC: 300 FPDUs of Writes land in the region, non-zero PAD ignored', async () => {
  const [control, data] = writeR as [TcpConnection, TcpConnection];
  // Data connection: the target side.
  const writes = decodeMpaStream(data.initiatorToResponder.bytes);
  const side = replaySide(0, 0);
  const region = side.rnic.registerMemory(side.qp.pd, side.memory, {
    access: Access.LocalWrite | Access.RemoteWrite,
    length: 4096,
    stag: 0xe091a400,
    taggedOffsetBase: 0x55d042c27000n,
  });
  const pending = side.rnic.acceptChannel(side.channel);
  side.channel.receive(data.initiatorToResponder.bytes.subarray(0, writes.frameLength));
  const accepted = (await pending).accept(side.qp, { crc: false });
  assert.is(hex(side.channel.drain()), hex(data.responderToInitiator.bytes), "Reply identical to siw's");
  await accepted;
  // Feed in odd-sized chunks to exercise reassembly across FPDU boundaries.
  const body = data.initiatorToResponder.bytes.subarray(writes.frameLength);
  for (let offset = 0; offset < body.length; offset += 1237) side.channel.receive(body.subarray(offset, offset + 1237));
  assert.is(side.qp.state, 'rts', side.qp.disconnectInfo?.message);
  const last = writes.fpdus.slice(297).map((r) => r.segment.payload);
  assert.is(hex(region.bytes.subarray(0, 1428)), hex(last[0]!));
  assert.is(hex(region.bytes.subarray(2856, 4096)), hex(last[2]!));
  assert.is(side.qp.statistics.messagesReceived, 100);
  side.qp.destroy();

  // Control connection: both directions' Sends into posted receives.
  for (const [incoming, outgoing] of [
    [control.initiatorToResponder, control.responderToInitiator],
    [control.responderToInitiator, control.initiatorToResponder],
  ] as const) {
    const stream = decodeMpaStream(incoming.bytes);
    const peer = replaySide(0, 0);
    const recv = peer.rnic.registerMemory(peer.qp.pd, peer.memory, { access: Access.LocalWrite });
    for (let i = 0; i < 16; i++) peer.qp.postRecv({ wrId: i, sgList: [{ lkey: recv.lkey, offset: i * 64, length: 64 }] });
    peer.channel.receive(new Uint8Array(0));
    // Skip the MPA exchange: enter full operation as the side that received this direction.
    peer.qp.beginConnecting();
    peer.qp.enterRdmaMode(peer.channel, { role: 'initiator', crc: false, markersIn: false, markersOut: false, mulpdu: 1454, ird: 0, ord: 0 });
    peer.channel.receive(incoming.bytes.subarray(stream.frameLength));
    const received = peer.qp.recvCq.poll(32);
    assert.equal(
      received.map((c) => c.byteLength),
      stream.fpdus.map((r) => r.segment.payload.length),
    );
    assert.ok(received.every((c) => c.status === 0));
    assert.is(hex(recv.bytes.subarray(3 * 64, 3 * 64 + 2)), hex(stream.fpdus[3]!.segment.payload));
    assert.ok(outgoing.bytes.length > 0);
    peer.qp.destroy();
  }
});

test.run();
