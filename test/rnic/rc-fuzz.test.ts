// 100,000 random and mutated RoCEv2 packets (valid ICRC, so they reach the QP) aimed at one RC
// QP: nothing throws, the process lives, the QP either keeps working or ends in the error state
// with its work flushed, and a second QP on the same RNIC port is unharmed.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Random } from '../../host/util/random.ts';
import { encodeHeaders, headersFrom } from '../../host/rnic/wire/ib-headers.ts';
import { headerLength, OPCODES } from '../../host/rnic/wire/ib-opcodes.ts';
import { Access, WcStatus, type UdpLink } from '../../host/rnic/verbs.ts';
import { completions, expectSuccess, rcPair } from '../support/rc.ts';

test('fuzz: 100,000 packets at one QP; it errors cleanly, the other QP on the port is unharmed', async () => {
  const pair = await rcPair({ pathMtu: 1024 });
  const { client, server } = pair;
  try {
    // A second connection between the same two RNIC ports.
    const pd = server.rnic.allocPd();
    const cq = server.rnic.createCq({ depth: 1024 });
    const otherServer = server.rnic.createRcQp({ pd, sendCq: cq, recvCq: cq });
    const memory = new Uint8Array(new SharedArrayBuffer(65536));
    const region = server.rnic.registerMemory(pd, memory, { access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead });
    const clientPd = client.rnic.allocPd();
    const clientCq = client.rnic.createCq({ depth: 1024 });
    const otherClient = client.rnic.createRcQp({ pd: clientPd, sendCq: clientCq, recvCq: clientCq });
    const clientMemory = new Uint8Array(65536);
    const clientRegion = client.rnic.registerMemory(clientPd, clientMemory, { access: Access.LocalWrite });
    const listener = await server.rnic.listenRc({ pathMtu: 1024 });
    const accepted = listener.next().then((request) => request.accept(otherServer));
    await client.rnic.connectRc(otherClient, { host: '127.0.0.1', port: listener.port, pathMtu: 1024 });
    await accepted;
    await listener.close();

    server.qp.postRecv({ wrId: 1, sgList: [{ lkey: server.mr.lkey, offset: 0, length: 64 }] });
    const random = new Random(2026);
    const link = client.link as UdpLink;
    const peer = client.qp.path!.peer;
    const knownOpcodes = OPCODES.map((info, opcode) => (info === undefined ? -1 : opcode)).filter((opcode) => opcode >= 0);
    const endpoint = server.rnic.roceEndpoint!;
    let lostToBuffers = 0;
    for (let sent = 0; sent < 100_000; sent++) {
      const opcode = random.below(4) === 0 ? random.below(256) : knownOpcodes[random.below(knownOpcodes.length)]!;
      const info = OPCODES[opcode];
      const h = headersFrom({
        opcode: info === undefined ? 0 : opcode,
        destQp: random.below(8) === 0 ? random.below(1 << 24) : server.qp.qpNumber,
        psn: random.below(3) === 0 ? random.below(1 << 24) : (client.qp.path!.sendPsn + random.below(64)) & 0xffffff,
        ackRequest: random.below(2) === 0,
        solicited: random.below(2) === 0,
        virtualAddress: BigInt(random.below(1 << 23)),
        rkey: random.below(2) === 0 ? server.mr.rkey : random.next(),
        dmaLength: random.below(3) === 0 ? random.next() : random.below(70000),
        syndrome: random.below(256),
        msn: random.below(1 << 24),
        swapOrAdd: BigInt(random.next()),
        compare: BigInt(random.next()),
        immediate: random.next(),
        invalidateRkey: random.below(2) === 0 ? server.mr.rkey : random.next(),
        transportVersion: random.below(16) === 0 ? 1 : 0,
        pkey: random.below(16) === 0 ? random.below(65536) : 0xffff,
      });
      const length = headerLength(info?.headers ?? 0);
      const payloadLength = random.below(4) === 0 ? random.below(1100) : random.below(2) === 0 ? 1024 : 0;
      const bytes = new Uint8Array(length + payloadLength + 3 + 4);
      encodeHeaders(bytes, 0, h);
      if (info === undefined) bytes[0] = opcode;
      for (let i = length; i < length + payloadLength; i++) bytes[i] = random.below(256);
      if (random.below(8) === 0) bytes[random.below(length)] = random.below(256); // mutate a header octet
      const pad = random.below(4);
      bytes[1] = (bytes[1]! & 0xcf) | ((random.below(8) === 0 ? random.below(4) : pad) << 4);
      link.send(
        peer,
        bytes.subarray(0, length),
        bytes.subarray(length, length + payloadLength),
        bytes.subarray(length + payloadLength, length + payloadLength + pad + 4),
      );
      if (sent % 500 === 499) {
        // Loopback UDP drops what the receiving socket's buffer cannot hold: on a loaded machine a
        // free-running sender loses most packets before they reach the port. Let the port catch up
        // (most of the burst counted, or a bounded wait) before the next burst.
        const waitUntil = Date.now() + 2000;
        while (endpoint.stats.packets + lostToBuffers < sent - 250 && Date.now() < waitUntil) await new Promise((resolve) => setTimeout(resolve, 1));
        // Still short after the wait: those were dropped, and later bursts do not wait for them.
        if (endpoint.stats.packets + lostToBuffers < sent - 250) lostToBuffers = sent + 1 - endpoint.stats.packets;
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.ok(endpoint.stats.packets > 10_000, `packets reached the port (${endpoint.stats.packets})`);
    assert.ok(endpoint.stats.malformed + endpoint.stats.unknownQp + endpoint.stats.badVersionOrKey > 0, 'bad packets were dropped and counted');
    if (server.qp.state === 'error') {
      assert.ok(server.qp.disconnectInfo !== undefined && server.qp.disconnectInfo.message.length > 0, 'the error says why');
      const flushed = server.cq.poll(16);
      for (const wc of flushed) assert.ok(wc.status === WcStatus.WrFlushError || wc.status === WcStatus.Success || wc.error !== undefined);
    } else {
      assert.is(server.qp.state, 'rts');
    }
    // The other connection on the same ports works: a Write and a Read, data exact.
    for (let i = 0; i < 8192; i++) clientMemory[i] = (i * 7) & 0xff;
    otherClient.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [{ lkey: clientRegion.lkey, offset: 0, length: 8192 }],
      remote: { stag: region.rkey, taggedOffset: 0 },
    });
    otherClient.postSend({
      wrId: 2,
      opcode: 'RDMA_READ',
      sgList: [{ lkey: clientRegion.lkey, offset: 16384, length: 8192 }],
      remote: { stag: region.rkey, taggedOffset: 0 },
    });
    expectSuccess(await completions(clientCq, 2));
    assert.is(Buffer.compare(clientMemory.subarray(0, 8192), clientMemory.subarray(16384, 24576)), 0);
    assert.is(otherServer.state, 'rts');
  } finally {
    await pair.close();
  }
});

test.run();
