// Runs of middle packets. Sending: a Write's and a Send's MIDDLE packets from the requester, a
// Read's MIDDLE responses from the responder travel to the batched link as runs
// (PacketLink.sendRun), not one call chain per packet. On the wire nothing may differ: every
// datagram a run sends is recorded where the socket takes it and compared with what the
// per-packet path sends for the same work (the same QPs with runs turned off), octet for octet
// but for the PSN and the ICRC that covers it, and each ICRC is checked against the encoder's.
// Receiving: Write MIDDLEs and Read Response MIDDLEs that continue the message in progress are
// placed by the lean path (endpoint wants/take) without a decode or view each; anything else,
// lost, duplicated or reordered packets included, by the full path, data exact either way.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { BatchedUdpLink } from '../../host/rnic/rc/batched-udp-link.ts';
import { Retransmission } from '../../host/rnic/rc/requester-retransmit.ts';
import type { BatchedUdpSocket } from '../../host/rnic/rc/batched-udp-socket.ts';
import { socketIcrcHeaders, type PeerAddress } from '../../host/rnic/rc/link.ts';
import { IbHeaders, decodeHeaders, Syndrome } from '../../host/rnic/wire/ib-headers.ts';
import { IbOpcode } from '../../host/rnic/wire/ib-opcodes.ts';
import { Access } from '../../host/rnic/memory.ts';
import { WcStatus } from '../../host/rnic/work.ts';
import { encodeIbPacket } from '../../host/rnic/wire/ib-packet.ts';
import { completions, expectSuccess, rcPair, type RcPairOptions, type RcSide, withRcPair } from '../support/rc.ts';
import { placementAddress } from '../../host/rnic/rc/shared-copy.ts';

const KiB = 1024;
const MiB = 1024 * KiB;

/** Records every datagram `side`'s socket is given (header, payload and trailer joined), how many runs and how many alone. */
function record(side: RcSide): { datagrams: Uint8Array[]; runs: () => number; alone: () => number } {
  assert.instance(side.link, BatchedUdpLink, 'the batched link (koffi loads here)');
  const socket: BatchedUdpSocket = (side.link as BatchedUdpLink).socket;
  const datagrams: Uint8Array[] = [];
  let runs = 0;
  let alone = 0;
  const send = socket.send.bind(socket);
  socket.send = (to, first, second, third) => {
    alone++;
    datagrams.push(new Uint8Array(Buffer.concat([first, second, third])));
    send(to, first, second, third);
  };
  const sendRun = socket.sendRun.bind(socket);
  socket.sendRun = (to, run) => {
    runs++;
    const { headers, headerLength, payload, segment, count, trailers, trailerLength } = run;
    for (let i = 0; i < count; i++) {
      datagrams.push(
        joined([
          headers.subarray(i * headerLength, (i + 1) * headerLength),
          payload.subarray(i * segment, (i + 1) * segment),
          trailers.subarray(i * trailerLength, (i + 1) * trailerLength),
        ]),
      );
    }
    sendRun(to, run);
  };
  return { datagrams, runs: () => runs, alone: () => alone };
}

function joined(parts: Uint8Array[]): Uint8Array {
  return new Uint8Array(Buffer.concat(parts));
}

/** Turns runs off for `side` (a `send` of the link's own, as a test that drops packets installs). */
function perPacket(side: RcSide): void {
  const link = side.link;
  link.send = link.send.bind(link);
}

/**
 * Gives the second packet of the first run of `opcode` packets `side` sends a bad ICRC (the link
 * has filled the trailers when its socket takes the run), so the peer drops it as lost; returns
 * how many it damaged (0 or 1).
 */
function corruptSecondOfFirstRun(side: RcSide, opcode: number): () => number {
  const socket = (side.link as BatchedUdpLink).socket;
  const sendRun = socket.sendRun.bind(socket);
  let corrupted = 0;
  socket.sendRun = (to, run) => {
    if (corrupted === 0 && run.count > 2 && run.headers[0] === opcode) {
      run.trailers[run.trailerLength] = run.trailers[run.trailerLength]! ^ 0x01;
      corrupted++;
    }
    sendRun(to, run);
  };
  return () => corrupted;
}

/** The packets' headers decoded, each checked to carry the ICRC the encoder computes for it between `from` and `to`. */
function decodeAll(datagrams: Uint8Array[], from: PeerAddress, to: PeerAddress): IbHeaders[] {
  const ip = new Uint8Array(20);
  const udp = new Uint8Array(8);
  return datagrams.map((datagram, index) => {
    const h = new IbHeaders();
    assert.is(decodeHeaders(datagram, h), undefined, `packet ${index} decodes`);
    socketIcrcHeaders(ip, udp, from, to, datagram.length);
    const again = encodeIbPacket(h, datagram.subarray(h.payloadOffset, h.payloadOffset + h.payloadLength), ip, udp);
    assert.equal(datagram, new Uint8Array(again), `packet ${index} (opcode 0x${h.opcode.toString(16)}) re-encodes with its ICRC`);
    return h;
  });
}

/** `a` and `b` are the same packets but for PSNs `shift` apart (BTH octets 9-11), a response's MSN and the ICRC. */
function samePacketsShifted(a: Uint8Array[], b: Uint8Array[], shift: number, what: string): void {
  assert.is(a.length, b.length, `${what}: packet count`);
  for (let i = 0; i < a.length; i++) {
    const x = a[i]!;
    const y = b[i]!;
    assert.is(x.length, y.length, `${what}: packet ${i} length`);
    const psnX = (x[9]! << 16) | (x[10]! << 8) | x[11]!;
    const psnY = (y[9]! << 16) | (y[10]! << 8) | y[11]!;
    assert.is((psnY - psnX) & 0xffffff, shift & 0xffffff, `${what}: packet ${i} PSN`);
    assert.equal(x.subarray(0, 9), y.subarray(0, 9), `${what}: packet ${i} BTH`);
    // A response's AETH carries the MSN, one per message: the second Read's is later.
    const aeth = x[0] === IbOpcode.RdmaReadResponseFirst || x[0] === IbOpcode.RdmaReadResponseLast || x[0] === IbOpcode.RdmaReadResponseOnly;
    if (aeth) assert.is(x[12], y[12], `${what}: packet ${i} syndrome`);
    const rest = aeth ? 16 : 12;
    assert.equal(x.subarray(rest, x.length - 4), y.subarray(rest, y.length - 4), `${what}: packet ${i} after the BTH`);
  }
}

/** An RDMA Write of `length` octets from the start of `client`'s region to the start of `server`'s, completed. */
async function writeFromStart(client: RcSide, server: RcSide, length: number): Promise<void> {
  client.qp.postSend({
    wrId: 1,
    opcode: 'RDMA_WRITE',
    sgList: [{ lkey: client.mr.lkey, offset: 0, length }],
    remote: { stag: server.mr.rkey, taggedOffset: 0 },
  });
  expectSuccess(await completions(client.cq, 1, 20_000));
}

/** `count` RDMA Writes of `size` octets posted at once, the i-th from `client`'s i * size to `server`'s, completed, the data checked. */
async function writeEach(client: RcSide, server: RcSide, count: number, size: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    client.qp.postSend({
      wrId: i,
      opcode: 'RDMA_WRITE',
      sgList: [{ lkey: client.mr.lkey, offset: i * size, length: size }],
      remote: { stag: server.mr.rkey, taggedOffset: i * size },
    });
  }
  expectSuccess(await completions(client.cq, count, 20_000));
  assert.equal(server.memory.subarray(0, count * size), client.memory.subarray(0, count * size), 'written data');
}

/** The first transmission of each PSN among `datagrams` whose opcode is in [low, high]. */
function firstTransmissions(datagrams: Uint8Array[], low: number, high: number): Uint8Array[] {
  const seen = new Set<number>();
  return datagrams.filter((datagram) => {
    const psn = (datagram[9]! << 16) | (datagram[10]! << 8) | datagram[11]!;
    if (datagram[0]! < low || datagram[0]! > high || seen.has(psn)) return false;
    seen.add(psn);
    return true;
  });
}

test('a Write and a Read go as runs of middle packets, and the wire carries what the per-packet path sends', async () => {
  // A retransmission (the early timer on a loaded machine) moves where later AckReqs fall: such
  // an attempt is repeated, a few times at most.
  for (let attempt = 1; ; attempt++) {
    // The 10-packet Write as FIRST, MIDDLE and LAST too, as the per-packet path sends it (without
    // runs a short Write is not sent as ONLY packets).
    const pair = await rcPair({ pathMtu: 1024, maxUnackedPackets: 1024, onlyPacketWritesUpTo: 1 });
    try {
      const { client, server } = pair;
      const sent = record(client);
      const answered = record(server);
      for (let i = 0; i < 310 * KiB; i++) client.memory[i] = (i * 13 + 7) & 0xff;
      for (let i = 0; i < 64 * KiB; i++) server.memory[512 * KiB + i] = (i * 29 + 3) & 0xff;
      // Writes of 10 and 300 packets (within a 1024-PSN window: no AckReq depends on when ACKs arrive), and
      // a 64 KiB Read: one request of 64 responses on this clean path, FIRST, 62 MIDDLE, LAST.
      const write = (wrId: number, offset: number, length: number): void =>
        client.qp.postSend({
          wrId,
          opcode: 'RDMA_WRITE',
          sgList: [{ lkey: client.mr.lkey, offset, length }],
          remote: { stag: server.mr.rkey, taggedOffset: offset },
        });
      const read = (wrId: number): void =>
        client.qp.postSend({
          wrId,
          opcode: 'RDMA_READ',
          sgList: [{ lkey: client.mr.lkey, offset: 1024 * KiB, length: 64 * KiB }],
          remote: { stag: server.mr.rkey, taggedOffset: 512 * KiB },
        });
      const both = async (first: number): Promise<{ requests: Uint8Array[]; responses: Uint8Array[] }> => {
        // A 10-packet Write first, in the same turn: the long one's runs then start off the
        // 64-packet rhythm of the AckReq counter and of the turn's budget.
        write(first, 300 * KiB, 10 * KiB);
        write(first + 1, 0, 300 * KiB);
        expectSuccess(await completions(client.cq, 2, 20_000));
        read(first + 2);
        expectSuccess(await completions(client.cq, 1, 20_000));
        assert.equal(server.memory.subarray(0, 310 * KiB), client.memory.subarray(0, 310 * KiB), 'written data');
        assert.equal(client.memory.subarray(1024 * KiB, 1088 * KiB), server.memory.subarray(512 * KiB, 576 * KiB), 'read data');
        // Requests (Write and Read Request packets) and Read Responses: the ACKs depend on timing.
        return {
          requests: firstTransmissions(sent.datagrams.splice(0), IbOpcode.RdmaWriteFirst, IbOpcode.RdmaReadRequest),
          responses: firstTransmissions(answered.datagrams.splice(0), IbOpcode.RdmaReadResponseFirst, IbOpcode.RdmaReadResponseOnly),
        };
      };

      const withRuns = await both(1);
      assert.ok(sent.runs() >= 2, `the Write's middle packets went as runs (${sent.runs()})`);
      assert.ok(answered.runs() >= 1, `the Read's middle responses went as runs (${answered.runs()})`);
      perPacket(client);
      perPacket(server);
      const runsBefore = sent.runs() + answered.runs();
      const onePerPacket = await both(4);
      assert.is(sent.runs() + answered.runs(), runsBefore, 'runs turned off');
      const retransmitted = client.qp.statistics.retransmittedPackets + server.qp.statistics.retransmittedPackets;
      if (retransmitted > 0 && attempt < 5) continue;
      assert.is(retransmitted, 0, 'no retransmission in five attempts');

      const requests = decodeAll(withRuns.requests, client.link.local, server.link.local);
      decodeAll(onePerPacket.requests, client.link.local, server.link.local);
      decodeAll(withRuns.responses, server.link.local, client.link.local);
      decodeAll(onePerPacket.responses, server.link.local, client.link.local);
      // The Write: FIRST, 298 MIDDLE, LAST, PSNs in order, AckReq on every 64th and the last.
      assert.equal(
        requests.slice(0, 10).flatMap((h, index) => (h.ackRequest ? [index] : [])),
        [9],
      );
      const writePackets = requests.slice(10, 310);
      assert.equal(
        writePackets.map((h) => h.opcode),
        [IbOpcode.RdmaWriteFirst, ...new Array<number>(298).fill(IbOpcode.RdmaWriteMiddle), IbOpcode.RdmaWriteLast],
      );
      for (let i = 1; i < 300; i++) assert.is(writePackets[i]!.psn, (writePackets[0]!.psn + i) & 0xffffff, `Write packet ${i} PSN`);
      assert.equal(
        writePackets.flatMap((h, index) => (h.ackRequest ? [index] : [])),
        [63, 127, 191, 255, 299],
      );
      assert.is(withRuns.responses.length, 64);
      // Both rounds sent the same packets; the second one's PSNs are 374 later.
      samePacketsShifted(withRuns.requests, onePerPacket.requests, 374, 'requests');
      samePacketsShifted(withRuns.responses, onePerPacket.responses, 374, 'Read responses');
      return;
    } finally {
      await pair.close();
    }
  }
});

test("a message's LAST ends the run of its MIDDLE packets where it is BTH and a whole MTU: a 16 KiB Write or Send is FIRST and one run, on the wire as the per-packet path sends it", async () => {
  // Writes as FIRST, MIDDLE and LAST here (a short one goes as ONLY packets by default: tested below).
  const size = 16 * KiB;
  // The LAST joins the run: RDMA_WRITE, SEND, SEND_WITH_SE (its SE bit on the LAST); it does not:
  // a Write with immediate (ImmDt) and a Write whose LAST is short.
  const cases = [
    { opcode: 'RDMA_WRITE', length: size, joins: true },
    { opcode: 'SEND', length: size, joins: true },
    { opcode: 'SEND_WITH_SE', length: size, joins: true },
    { opcode: 'RDMA_WRITE_WITH_IMM', length: size, joins: false },
    { opcode: 'RDMA_WRITE', length: size - 100, joins: false },
  ] as const;
  for (let attempt = 1; ; attempt++) {
    const pair = await rcPair({ pathMtu: 4096, maxUnackedPackets: 1024, onlyPacketWritesUpTo: 1 });
    try {
      const { client, server } = pair;
      const sent = record(client);
      for (let i = 0; i < cases.length * size; i++) client.memory[i] = (i * 17 + 5) & 0xff;
      const round = async (wrBase: number): Promise<Uint8Array[]> => {
        for (const [index, { opcode, length, joins }] of cases.entries()) {
          const offset = index * size;
          const remote = MiB + offset;
          server.memory.fill(0, remote, remote + size);
          const runs = sent.runs();
          const alone = sent.alone();
          const datagrams = sent.datagrams.length;
          if (opcode !== 'RDMA_WRITE') server.qp.postRecv({ wrId: wrBase + index, sgList: [{ lkey: server.mr.lkey, offset: remote, length: size }] });
          client.qp.postSend({
            wrId: wrBase + index,
            opcode,
            sgList: [{ lkey: client.mr.lkey, offset, length }],
            ...(opcode.startsWith('RDMA') ? { remote: { stag: server.mr.rkey, taggedOffset: remote } } : {}),
            ...(opcode === 'RDMA_WRITE_WITH_IMM' ? { immediate: 0x1234_5678n } : {}),
          });
          expectSuccess(await completions(client.cq, 1, 20_000));
          if (opcode !== 'RDMA_WRITE') expectSuccess(await completions(server.cq, 1, 20_000));
          assert.equal(server.memory.subarray(remote, remote + length), client.memory.subarray(offset, offset + length), `${opcode} of ${length}: data`);
          const what = `${opcode} of ${length}`;
          if (sent.runs() === runs) continue; // runs turned off (the second round)
          assert.is(sent.datagrams.length - datagrams, 4, `${what}: four packets`);
          assert.is(sent.runs() - runs, 1, `${what}: one run`);
          assert.is(sent.alone() - alone, joins ? 1 : 2, `${what}: ${joins ? 'the FIRST alone, the LAST in the run' : 'FIRST and LAST alone'}`);
        }
        return firstTransmissions(sent.datagrams.splice(0), IbOpcode.SendFirst, IbOpcode.RdmaWriteOnlyWithImmediate);
      };
      const withRuns = await round(1);
      perPacket(client);
      const runsBefore = sent.runs();
      const onePerPacket = await round(100);
      assert.is(sent.runs(), runsBefore, 'runs turned off');
      const retransmitted = client.qp.statistics.retransmittedPackets;
      if (retransmitted > 0 && attempt < 5) continue;
      assert.is(retransmitted, 0, 'no retransmission in five attempts');
      const headers = decodeAll(withRuns, client.link.local, server.link.local);
      assert.equal(
        headers.map((h) => h.opcode),
        [
          ...[IbOpcode.RdmaWriteFirst, IbOpcode.RdmaWriteMiddle, IbOpcode.RdmaWriteMiddle, IbOpcode.RdmaWriteLast],
          ...[IbOpcode.SendFirst, IbOpcode.SendMiddle, IbOpcode.SendMiddle, IbOpcode.SendLast],
          ...[IbOpcode.SendFirst, IbOpcode.SendMiddle, IbOpcode.SendMiddle, IbOpcode.SendLast],
          ...[IbOpcode.RdmaWriteFirst, IbOpcode.RdmaWriteMiddle, IbOpcode.RdmaWriteMiddle, IbOpcode.RdmaWriteLastWithImmediate],
          ...[IbOpcode.RdmaWriteFirst, IbOpcode.RdmaWriteMiddle, IbOpcode.RdmaWriteMiddle, IbOpcode.RdmaWriteLast],
        ],
      );
      assert.equal(
        headers.flatMap((h, index) => (h.ackRequest ? [index] : [])),
        [3, 7, 11, 15, 19],
        'AckReq on each LAST only',
      );
      assert.equal(
        headers.flatMap((h, index) => (h.solicited ? [index] : [])),
        [11],
        "SE on SEND_WITH_SE's LAST only",
      );
      samePacketsShifted(withRuns, onePerPacket, 4 * cases.length, 'requests');
      return;
    } finally {
      await pair.close();
    }
  }
});

/** A 1 MiB Write and a 1 MiB Read through a pair made with `options`, the data checked; the endpoints' lean counts. */
async function writeAndRead(options: RcPairOptions): Promise<{ serverLean: number; clientLean: number; retransmitted: number; declined: number }> {
  const pair = await rcPair({ bytes: 4 * 1024 * KiB, ...options });
  try {
    const { client, server } = pair;
    // A packet the lean path is offered after its ICRC was computed should be one it takes: a
    // packet the QP would not place (past a gap, a duplicate) is declined before (`wants`), so
    // the full path computes its ICRC once.
    let declined = 0;
    for (const side of [client, server]) {
      const endpoint = side.rnic.roceEndpoint!;
      const take = endpoint.take.bind(endpoint);
      endpoint.take = (area, at, address, length) => {
        const taken = take(area, at, address, length);
        if (!taken) declined++;
        return taken;
      };
    }
    for (let i = 0; i < 1024 * KiB; i++) client.memory[i] = (i * 7 + (i >>> 12)) & 0xff;
    for (let i = 0; i < 1024 * KiB; i++) server.memory[2048 * KiB + i] = (i * 11 + (i >>> 10)) & 0xff;
    client.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [{ lkey: client.mr.lkey, offset: 0, length: 1024 * KiB }],
      remote: { stag: server.mr.rkey, taggedOffset: 0 },
    });
    client.qp.postSend({
      wrId: 2,
      opcode: 'RDMA_READ',
      sgList: [{ lkey: client.mr.lkey, offset: 2048 * KiB, length: 1024 * KiB }],
      remote: { stag: server.mr.rkey, taggedOffset: 2048 * KiB },
    });
    expectSuccess(await completions(client.cq, 2, 60_000));
    assert.equal(server.memory.subarray(0, 1024 * KiB), client.memory.subarray(0, 1024 * KiB), 'written data');
    assert.equal(client.memory.subarray(2048 * KiB, 3072 * KiB), server.memory.subarray(2048 * KiB, 3072 * KiB), 'read data');
    return {
      serverLean: server.rnic.roceEndpoint!.stats.lean,
      clientLean: client.rnic.roceEndpoint!.stats.lean,
      retransmitted: client.qp.statistics.retransmittedPackets + server.qp.statistics.retransmittedPackets,
      declined,
    };
  } finally {
    await pair.close();
  }
}

/** The responder's own fields and checks that the detach tests set and ask (a Write or Send in progress, as the full path leaves one). */
interface ResponderState {
  inProgress: number;
  writeTarget: Uint8Array;
  writeAddress: number;
  writeLength: number;
  writeFirstPsn: number;
  writePackets: number;
  scatter: Uint8Array[];
  scatterAddress: number;
  placed: number;
  expectedPsn: number;
  acceptsWrite(last: boolean, psn: number, length: number): boolean;
  acceptsSend(last: boolean, psn: number, length: number): boolean;
}

function responderOf(side: RcSide): ResponderState {
  return (side.qp as unknown as { responder: ResponderState }).responder;
}

test('the lean path places the middle packets of a Write and a Read; with loss, duplication and reordering the full path takes what does not continue, its ICRC computed once', async () => {
  // Path MTU 4096: 256 packets each way, 254 of the Write's MIDDLE, 14 of each Read chunk's 16.
  const clean = await writeAndRead({});
  assert.ok(clean.serverLean > 200, `the responder placed ${clean.serverLean} Write MIDDLEs on the lean path`);
  assert.ok(clean.clientLean > 150, `the requester placed ${clean.clientLean} Read Response MIDDLEs on the lean path`);
  const impaired = await writeAndRead({ impairments: { loss: 0.03, duplicate: 0.03, reorder: 0.03 }, pathMtu: 1024 });
  assert.ok(impaired.retransmitted > 0, 'packets were lost and sent again');
  assert.ok(impaired.serverLean > 0 && impaired.clientLean > 0, `the lean path still placed packets (${impaired.serverLean}, ${impaired.clientLean})`);
  assert.is(clean.declined + impaired.declined, 0, 'no packet reached take that the QP would not place');
});

test('plain (non-shared) registered memory of 4 KiB and more is placed on the lean path too: a Write into it, a Read into it; smaller plain memory goes the full path', async () => {
  // A KBTP client's load buffers are plain memory: the target's Writes into them took the full
  // path (decode, checks, V8's copy) for every packet, a 256 KiB LOAD over RoCE half the speed.
  await withRcPair({}, async ({ client, server }) => {
    const plainTarget = new Uint8Array(512 * KiB);
    const plainSink = new Uint8Array(512 * KiB);
    const small = new Uint8Array(2 * KiB);
    const access = Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead;
    const targetMr = server.rnic.registerMemory(server.pd, plainTarget, { access });
    const sinkMr = client.rnic.registerMemory(client.pd, plainSink, { access });
    const smallMr = server.rnic.registerMemory(server.pd, small, { access });
    for (let i = 0; i < 512 * KiB; i++) client.memory[i] = (i * 13 + (i >>> 11)) & 0xff;
    for (let i = 0; i < 512 * KiB; i++) server.memory[MiB + i] = (i * 5 + (i >>> 9)) & 0xff;
    const serverLean = server.rnic.roceEndpoint!.stats.lean;
    const clientLean = client.rnic.roceEndpoint!.stats.lean;
    client.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [{ lkey: client.mr.lkey, offset: 0, length: 512 * KiB }],
      remote: { stag: targetMr.rkey, taggedOffset: 0 },
    });
    client.qp.postSend({
      wrId: 2,
      opcode: 'RDMA_READ',
      sgList: [{ lkey: sinkMr.lkey, offset: 0, length: 512 * KiB }],
      remote: { stag: server.mr.rkey, taggedOffset: MiB },
    });
    client.qp.postSend({
      wrId: 3,
      opcode: 'RDMA_WRITE',
      sgList: [{ lkey: client.mr.lkey, offset: 0, length: 2 * KiB }],
      remote: { stag: smallMr.rkey, taggedOffset: 0 },
    });
    expectSuccess(await completions(client.cq, 3));
    assert.equal(plainTarget, client.memory.subarray(0, 512 * KiB), 'written into plain memory');
    assert.equal(plainSink, server.memory.subarray(MiB, MiB + 512 * KiB), 'read into plain memory');
    assert.equal(small, client.memory.subarray(0, 2 * KiB), 'written into small plain memory');
    // Path MTU 4096: the Write is 128 packets, the Read's responses 128.
    assert.ok(server.rnic.roceEndpoint!.stats.lean - serverLean > 100, 'the Write into plain memory took the lean path');
    assert.ok(client.rnic.roceEndpoint!.stats.lean - clientLean > 100, 'the Read into plain memory took the lean path');
  });
});

test('a plain target detached while registered is written no more: its address is gone, the lean path declines the Write in progress', async () => {
  await withRcPair({}, async ({ server }) => {
    const plain = new Uint8Array(64 * KiB);
    server.rnic.registerMemory(server.pd, plain, { access: Access.LocalWrite | Access.RemoteWrite });
    const view = new Uint8Array(plain.buffer, 0, 8 * KiB);
    assert.ok(placementAddress(view) >= 0, 'plain memory of 64 KiB has an address');
    assert.is(placementAddress(new Uint8Array(1024)), -1, 'a small plain buffer has none (it may live on the moving heap)');
    // A Write in progress into it, as takeWriteStart leaves one (the responder's own fields).
    const responder = responderOf(server);
    const psn = responder.expectedPsn;
    Object.assign(responder, {
      inProgress: 2,
      writeTarget: view,
      writeAddress: placementAddress(view),
      writeLength: 8 * KiB,
      writeFirstPsn: psn,
      writePackets: 2,
      placed: 0,
    });
    assert.ok(responder.acceptsWrite(false, psn, 4096), 'before: the lean path takes the next MIDDLE');
    // Detaching (a transfer) frees or moves the memory: the address kept for the Write must not be used after it.
    structuredClone(plain.buffer, { transfer: [plain.buffer] });
    assert.is(view.length, 0, 'detached');
    assert.not.ok(responder.acceptsWrite(false, psn, 4096), 'after: declined');
    assert.is(placementAddress(view), -1);
    Object.assign(responder, { inProgress: 0, writeTarget: new Uint8Array(0), writeAddress: -1 });
  });
});

test('the lean path places the MIDDLE and plain LAST packets of a Send into a receive of one element, shared or plain memory; a receive of several elements, or a LAST with SE, goes the full path', async () => {
  // A KBTP inline STORE over RoCE is a Send: 62 of a 256 KiB one's 64 packets are MIDDLEs.
  await withRcPair({}, async ({ client, server }) => {
    const plain = new Uint8Array(512 * KiB);
    const plainMr = server.rnic.registerMemory(server.pd, plain, { access: Access.LocalWrite });
    for (let i = 0; i < 512 * KiB; i++) client.memory[i] = (i * 29 + (i >>> 12)) & 0xff;
    const cases = [
      // Path MTU 4096: FIRST, 74 MIDDLEs, a LAST of 64 octets.
      { what: 'shared memory', length: 300 * KiB + 64, sgList: [{ lkey: server.mr.lkey, offset: 0, length: 320 * KiB }], lean: 75, solicited: false },
      { what: 'plain memory', length: 256 * KiB, sgList: [{ lkey: plainMr.lkey, offset: 0, length: 512 * KiB }], lean: 63, solicited: false },
      {
        what: 'two elements',
        length: 64 * KiB,
        sgList: [
          { lkey: server.mr.lkey, offset: 0, length: 10_000 },
          { lkey: server.mr.lkey, offset: 20_000, length: 100_000 },
        ],
        lean: 0,
        solicited: false,
      },
      // Its LAST carries the SE bit, which the lean path does not look at.
      { what: 'SE', length: 64 * KiB, sgList: [{ lkey: server.mr.lkey, offset: 0, length: 64 * KiB }], lean: 14, solicited: true },
    ];
    for (const [index, { what, length, sgList, lean, solicited }] of cases.entries()) {
      server.memory.fill(0, 0, 320 * KiB);
      plain.fill(0);
      const before = server.rnic.roceEndpoint!.stats.lean;
      server.qp.postRecv({ wrId: 100 + index, sgList });
      client.qp.postSend({ wrId: index, opcode: solicited ? 'SEND_WITH_SE' : 'SEND', sgList: [{ lkey: client.mr.lkey, offset: 0, length }] });
      expectSuccess(await completions(client.cq, 1));
      const [received] = await completions(server.cq, 1);
      expectSuccess([received!]);
      assert.is(received!.wrId, 100 + index);
      assert.is(received!.opcode, 'RECV');
      assert.is(received!.byteLength, length, `${what}: length`);
      assert.is(received!.solicited ?? false, solicited, `${what}: solicited`);
      const landed =
        sgList.length === 1
          ? (sgList[0]!.lkey === plainMr.lkey ? plain : server.memory).subarray(0, length)
          : new Uint8Array(Buffer.concat([server.memory.subarray(0, 10_000), server.memory.subarray(20_000, 20_000 + length - 10_000)]));
      assert.equal(landed, client.memory.subarray(0, length), `${what}: data`);
      assert.is(server.rnic.roceEndpoint!.stats.lean - before, lean, `${what}: packets on the lean path`);
    }
  });
});

test('a plain receive buffer detached while a Send lands in it is written no more: the lean path declines the Send in progress', async () => {
  await withRcPair({}, async ({ server }) => {
    const plain = new Uint8Array(64 * KiB);
    server.rnic.registerMemory(server.pd, plain, { access: Access.LocalWrite });
    const view = new Uint8Array(plain.buffer, 0, 16 * KiB);
    const responder = responderOf(server);
    const psn = responder.expectedPsn;
    // A Send in progress into it, as `send` leaves one after its FIRST (the responder's own fields).
    Object.assign(responder, { inProgress: 1, scatter: [view], scatterAddress: placementAddress(view), placed: 4096 });
    assert.ok(responder.acceptsSend(false, psn, 4096), 'before: the lean path takes the next MIDDLE');
    assert.ok(responder.acceptsSend(true, psn, 100), 'and a LAST that fits');
    assert.not.ok(responder.acceptsSend(true, psn, 4097), 'not a LAST longer than the path MTU');
    assert.not.ok(responder.acceptsSend(false, psn + 1, 4096), 'not a packet past the next PSN');
    structuredClone(plain.buffer, { transfer: [plain.buffer] });
    assert.is(view.length, 0, 'detached');
    assert.not.ok(responder.acceptsSend(false, psn, 4096), 'after: declined');
    assert.not.ok(responder.acceptsSend(true, psn, 100), 'after: its LAST declined too');
    Object.assign(responder, { inProgress: 0, scatter: [], scatterAddress: -1, placed: 0 });
  });
});

test('a middle packet with a bad ICRC, in sequence, is not placed by the lean path: the full path drops and counts it, the Write recovers', async () => {
  const pair = await rcPair({ pathMtu: 1024 });
  try {
    const { client, server } = pair;
    const socket = (client.link as BatchedUdpLink).socket;
    const sendRun = socket.sendRun.bind(socket);
    let corrupted = 0;
    socket.sendRun = (to, run) => {
      // The ICRC of the run's third packet, once: the link has filled the trailers.
      if (corrupted === 0 && run.count > 3) {
        const icrcAt = 2 * run.trailerLength;
        run.trailers[icrcAt] = run.trailers[icrcAt]! ^ 0x01;
        corrupted++;
      }
      sendRun(to, run);
    };
    for (let i = 0; i < 64 * KiB; i++) client.memory[i] = (i * 17 + 5) & 0xff;
    await writeFromStart(client, server, 64 * KiB);
    assert.is(corrupted, 1);
    assert.equal(server.memory.subarray(0, 64 * KiB), client.memory.subarray(0, 64 * KiB), 'written data');
    const stats = server.rnic.roceEndpoint!.stats;
    assert.is(stats.icrcErrors, 1, 'the bad packet was dropped and counted');
    assert.ok(stats.lean > 0, 'the packets around it took the lean path');
    // Its GRO run failed the one-call check of the run's ICRCs (icrc-runs.ts): its packets were
    // then checked one by one, and only the bad one dropped.
    const received = (server.link as BatchedUdpLink).socket.stats;
    assert.ok(received.runChecks > received.runChecksPassed, `a run check failed (${received.runChecksPassed} of ${received.runChecks} passed)`);
  } finally {
    await pair.close();
  }
});

for (const form of ['ONLY packets', 'FIRST, MIDDLE and LAST'] as const) {
  test(`16 KiB Writes (as ${form}) and Reads: the lean path takes every packet of both (4 each), FIRST and LAST too, and the Read Requests`, async () => {
    const pair = await rcPair({ pathMtu: 4096, ...(form === 'ONLY packets' ? {} : { onlyPacketWritesUpTo: 1 }) });
    try {
      const { client, server } = pair;
      const count = 8;
      const size = 16 * KiB;
      for (let i = 0; i < count * size; i++) client.memory[i] = (i * 5 + 3) & 0xff;
      for (let i = 0; i < count * size; i++) server.memory[MiB + i] = (i * 9 + 1) & 0xff;
      await writeEach(client, server, count, size);
      // All but the pair's first packet (the endpoint checks one in full before it takes the QP's
      // packets lean): four ONLY packets, or FIRST (its RETH's range checked there), MIDDLE, MIDDLE, LAST.
      assert.is(server.rnic.roceEndpoint!.stats.lean, 4 * count - 1, 'Write packets placed by the lean path');
      const readBefore = client.rnic.roceEndpoint!.stats.lean;
      const requestsBefore = server.rnic.roceEndpoint!.stats.lean;
      for (let i = 0; i < count; i++) {
        client.qp.postSend({
          wrId: 100 + i,
          opcode: 'RDMA_READ',
          sgList: [{ lkey: client.mr.lkey, offset: MiB + i * size, length: size }],
          remote: { stag: server.mr.rkey, taggedOffset: MiB + i * size },
        });
      }
      expectSuccess(await completions(client.cq, count, 20_000));
      assert.equal(client.memory.subarray(MiB, MiB + count * size), server.memory.subarray(MiB, MiB + count * size), 'read data');
      // The client's endpoint took the Writes' ACKs in full first: every response goes lean.
      assert.is(client.rnic.roceEndpoint!.stats.lean - readBefore, 4 * count, 'Read Responses placed by the lean path');
      assert.is(server.rnic.roceEndpoint!.stats.lean - requestsBefore, count, 'Read Requests answered by the lean path');
      // The responder counts messages (its MSN): a Write as ONLY packets is four of them.
      const writeMessages = form === 'ONLY packets' ? 4 * count : count;
      assert.is(server.qp.statistics.messagesReceived, writeMessages + count, 'each Write completed at the responder (MSN), each Read executed');
    } finally {
      await pair.close();
    }
  });
}

test("the lean path settles a Read's responses once per turn, not per packet: the acknowledged PSN and timers (advanced) follow about as often as the requester receives", async () => {
  const advanced = Retransmission.prototype.advanced;
  let calls = 0;
  Retransmission.prototype.advanced = function (this: Retransmission): void {
    calls++;
    advanced.call(this);
  };
  try {
    for (let attempt = 1; ; attempt++) {
      const pair = await rcPair({ pathMtu: 4096, bytes: 4 * MiB });
      try {
        const { client, server } = pair;
        for (let i = 0; i < MiB; i++) server.memory[MiB + i] = (i * 23 + (i >>> 12)) & 0xff;
        // A Write first: the client's endpoint takes its ACK in full, then the QP's responses lean.
        await writeFromStart(client, server, 4 * KiB);
        const endpoint = client.rnic.roceEndpoint!;
        const socket = (client.link as BatchedUdpLink).socket;
        const before = {
          batches: socket.stats.receiveBatches,
          packets: endpoint.stats.packets,
          lean: endpoint.stats.lean,
          settles: client.qp.stats.leanSettles,
        };
        calls = 0;
        client.qp.postSend({
          wrId: 2,
          opcode: 'RDMA_READ',
          sgList: [{ lkey: client.mr.lkey, offset: 2 * MiB, length: MiB }],
          remote: { stag: server.mr.rkey, taggedOffset: MiB },
        });
        expectSuccess(await completions(client.cq, 1, 30_000));
        assert.equal(client.memory.subarray(2 * MiB, 3 * MiB), server.memory.subarray(MiB, 2 * MiB), 'read data');
        // A retransmitted Read request (the early timer on a loaded machine, a full socket buffer)
        // settles per packet past the gap: such an attempt is repeated, a few times at most.
        if (client.qp.statistics.retransmittedPackets > 0 && attempt < 5) continue;
        assert.is(client.qp.statistics.retransmittedPackets, 0, 'no retransmission in five attempts');
        const lean = endpoint.stats.lean - before.lean;
        const fullPath = endpoint.stats.packets - before.packets - lean;
        const batches = socket.stats.receiveBatches - before.batches;
        const settles = client.qp.stats.leanSettles - before.settles;
        assert.ok(lean > 0, 'responses placed by the lean path');
        // A settle ends a turn with lean responses in it, precedes a full-path packet, or ends the Read.
        assert.ok(settles <= batches + fullPath + 1, `${settles} settles for ${batches} receive batches and ${fullPath} packets on the full path`);
        // Without the settling each lean response called advanced: as many calls as lean responses and more.
        assert.ok(
          calls <= 2 * fullPath + batches + 1,
          `advanced ran ${calls} times for ${lean} lean responses, ${fullPath} on the full path, ${batches} receive batches`,
        );
        return;
      } finally {
        await pair.close();
      }
    }
  } finally {
    Retransmission.prototype.advanced = advanced;
  }
});

test('a Write FIRST whose range its R_Key does not allow is left to the full path: NAK remote access error, the QP in error', async () => {
  const pair = await rcPair({ pathMtu: 4096, onlyPacketWritesUpTo: 1 });
  try {
    const { client, server } = pair;
    const write = (wrId: number, stag: number, taggedOffset: number): void =>
      client.qp.postSend({ wrId, opcode: 'RDMA_WRITE', sgList: [{ lkey: client.mr.lkey, offset: 0, length: 16 * KiB }], remote: { stag, taggedOffset } });
    write(1, server.mr.rkey, 0); // the endpoint takes the QP's packets lean from now on
    expectSuccess(await completions(client.cq, 1, 20_000));
    const lean = server.rnic.roceEndpoint!.stats.lean;
    write(2, server.mr.rkey, server.memory.length - 8 * KiB); // runs past the region's end
    const [failed] = await completions(client.cq, 1, 20_000);
    assert.is(failed!.status, WcStatus.RemoteAccessError, failed!.error);
    assert.is(server.rnic.roceEndpoint!.stats.lean, lean, 'nothing of it placed by the lean path');
    assert.is(server.qp.state, 'error');
  } finally {
    await pair.close();
  }
});

test('a plain Write of 2 to 16 packets goes as RDMA WRITE ONLY packets in one run, each RETH naming its own part; with Immediate Data, or longer, as FIRST, MIDDLE and LAST', async () => {
  const size = 16 * KiB;
  // `only`: the Write's packets as ONLY ones; `alone`: packets sent outside a run (a short last
  // ONLY packet; a FIRST; a LAST with ImmDt).
  const cases = [
    { opcode: 'RDMA_WRITE', length: size, only: true, alone: 0 },
    { opcode: 'RDMA_WRITE', length: size - 100, only: true, alone: 1 },
    { opcode: 'RDMA_WRITE', length: 64 * KiB, only: true, alone: 0 },
    { opcode: 'RDMA_WRITE_WITH_IMM', length: size, only: false, alone: 2 },
    { opcode: 'RDMA_WRITE', length: 68 * KiB, only: false, alone: 1 },
  ] as const;
  for (let attempt = 1; ; attempt++) {
    const pair = await rcPair({ pathMtu: 4096, maxUnackedPackets: 1024 });
    try {
      const { client, server } = pair;
      const sent = record(client);
      const span = 68 * KiB;
      for (let i = 0; i < cases.length * span; i++) client.memory[i] = (i * 19 + 11) & 0xff;
      const headersByCase: IbHeaders[][] = [];
      for (const [index, { opcode, length, alone }] of cases.entries()) {
        const offset = index * span;
        const remote = MiB + offset;
        const runs = sent.runs();
        const before = sent.alone();
        if (opcode !== 'RDMA_WRITE') server.qp.postRecv({ wrId: index, sgList: [{ lkey: server.mr.lkey, offset: 3 * MiB, length: 4 * KiB }] });
        client.qp.postSend({
          wrId: index,
          opcode,
          sgList: [{ lkey: client.mr.lkey, offset, length }],
          remote: { stag: server.mr.rkey, taggedOffset: remote },
          ...(opcode === 'RDMA_WRITE_WITH_IMM' ? { immediate: 0x0bad_cafen } : {}),
        });
        expectSuccess(await completions(client.cq, 1, 20_000));
        if (opcode !== 'RDMA_WRITE') expectSuccess(await completions(server.cq, 1, 20_000));
        const what = `${opcode} of ${length}`;
        assert.equal(server.memory.subarray(remote, remote + length), client.memory.subarray(offset, offset + length), `${what}: data`);
        assert.is(sent.runs() - runs, 1, `${what}: one run`);
        assert.is(sent.alone() - before, alone, `${what}: ${alone} packets alone`);
        headersByCase.push(decodeAll(sent.datagrams.splice(0), client.link.local, server.link.local));
      }
      const retransmitted = client.qp.statistics.retransmittedPackets;
      if (retransmitted > 0 && attempt < 5) continue;
      assert.is(retransmitted, 0, 'no retransmission in five attempts');
      for (const [index, { opcode, length, only }] of cases.entries()) {
        const headers = headersByCase[index]!;
        const what = `${opcode} of ${length}`;
        const packets = Math.ceil(length / 4096);
        assert.is(headers.length, packets, `${what}: packets`);
        for (let i = 1; i < packets; i++) assert.is(headers[i]!.psn, (headers[0]!.psn + i) & 0xffffff, `${what}: packet ${i} PSN`);
        assert.equal(
          headers.flatMap((h, i) => (h.ackRequest ? [i] : [])),
          [packets - 1],
          `${what}: AckReq on the last packet only`,
        );
        if (!only) {
          assert.is(headers[0]!.opcode, IbOpcode.RdmaWriteFirst, `${what}: a FIRST`);
          assert.is(headers[0]!.dmaLength, length, `${what}: the FIRST's RETH names the whole Write`);
          continue;
        }
        const remote = MiB + index * 68 * KiB;
        for (const [i, h] of headers.entries()) {
          assert.is(h.opcode, IbOpcode.RdmaWriteOnly, `${what}: packet ${i} ONLY`);
          assert.is(h.virtualAddress, BigInt(remote + i * 4096), `${what}: packet ${i} RETH address`);
          assert.is(h.rkey, server.mr.rkey, `${what}: packet ${i} R_Key`);
          assert.is(h.dmaLength, Math.min(4096, length - i * 4096), `${what}: packet ${i} DMA length`);
          assert.is(h.payloadLength, h.dmaLength, `${what}: packet ${i} payload`);
        }
      }
      return;
    } finally {
      await pair.close();
    }
  }
});

test('a lost ONLY packet: the responder NAKs the gap and the requester goes back N (ONLY packets are not resent alone), every octet arrives; the path, lossy now, still sends a short Write as ONLY packets', async () => {
  await withRcPair({ pathMtu: 4096 }, async ({ client, server }) => {
    const sent = record(client);
    const corrupted = corruptSecondOfFirstRun(client, IbOpcode.RdmaWriteOnly);
    const size = 16 * KiB;
    const count = 4;
    for (let i = 0; i < (count + 1) * size; i++) client.memory[i] = (i * 7 + 13) & 0xff;
    await writeEach(client, server, count, size);
    assert.is(corrupted(), 1);
    assert.is(server.rnic.roceEndpoint!.stats.icrcErrors, 1, 'the bad packet was dropped');
    assert.ok(server.qp.statistics.sequenceNaksSent >= 1, 'the gap was NAKed');
    assert.is(client.qp.stats.resentAlone, 0, 'no ONLY packet resent alone');
    assert.ok(client.qp.statistics.retransmittedPackets >= 4 * count - 1, `went back N (${client.qp.statistics.retransmittedPackets} resent)`);
    sent.datagrams.splice(0);
    client.qp.postSend({
      wrId: 9,
      opcode: 'RDMA_WRITE',
      sgList: [{ lkey: client.mr.lkey, offset: count * size, length: size }],
      remote: { stag: server.mr.rkey, taggedOffset: count * size },
    });
    expectSuccess(await completions(client.cq, 1, 20_000));
    assert.equal(server.memory.subarray(count * size, (count + 1) * size), client.memory.subarray(count * size, (count + 1) * size), 'the next Write');
    assert.ok(client.qp.statistics.sequenceNaksReceived >= 1, 'the path lost a packet lately');
    assert.equal(
      sent.datagrams.map((datagram) => datagram[0]),
      new Array<number>(4).fill(IbOpcode.RdmaWriteOnly),
      'ONLY packets on the lossy path too',
    );
  });
});

test('a short Write whose R_Key allows only its first half: its ONLY packets inside the range are placed, the first outside it is NAKed (remote access error), nothing past the range is written, the QP ends in error', async () => {
  await withRcPair({ pathMtu: 4096 }, async ({ client, server }) => {
    for (let i = 0; i < 64 * KiB; i++) client.memory[i] = (i * 3 + 1) | 1; // no zero octet
    await writeFromStart(client, server, 4 * KiB); // the endpoint takes the QP's packets lean from now on
    const base = MiB;
    const limited = server.rnic.registerMemory(server.pd, server.memory.subarray(base, base + 64 * KiB), { access: Access.LocalWrite | Access.RemoteWrite });
    // 16 KiB at 56 KiB into a 64 KiB region: two packets inside, two past its end.
    client.qp.postSend({
      wrId: 2,
      opcode: 'RDMA_WRITE',
      sgList: [{ lkey: client.mr.lkey, offset: 0, length: 16 * KiB }],
      remote: { stag: limited.rkey, taggedOffset: 56 * KiB },
    });
    const [failed] = await completions(client.cq, 1, 20_000);
    assert.is(failed!.status, WcStatus.RemoteAccessError, failed!.error);
    assert.is(server.qp.state, 'error');
    assert.equal(server.memory.subarray(base + 56 * KiB, base + 64 * KiB), client.memory.subarray(0, 8 * KiB), 'the packets inside the range were placed');
    assert.ok(
      server.memory.subarray(base + 64 * KiB, base + 128 * KiB).every((octet) => octet === 0),
      'nothing written past the range the R_Key allows',
    );
  });
});

/** A Read of `length` octets from `server`'s `remote` into `client`'s `local`, completed. */
async function readInto(client: RcSide, server: RcSide, local: number, remote: number, length: number): Promise<void> {
  client.qp.postSend({
    wrId: 7,
    opcode: 'RDMA_READ',
    sgList: [{ lkey: client.mr.lkey, offset: local, length }],
    remote: { stag: server.mr.rkey, taggedOffset: remote },
  });
  expectSuccess(await completions(client.cq, 1, 20_000));
  assert.equal(client.memory.subarray(local, local + length), server.memory.subarray(remote, remote + length), `read data (${length} octets)`);
}

test('between kbtp RNICs a Read of 2 to 8 packets is answered with READ RESPONSE ONLY packets in one run, each AETH an ACK; a longer Read, or an end that does not offer it, gets FIRST, MIDDLE and LAST', async () => {
  const cases = [
    { length: 16 * KiB, only: true, alone: 0 },
    { length: 16 * KiB - 100, only: true, alone: 1 },
    { length: 32 * KiB, only: true, alone: 0 },
    { length: 36 * KiB, only: false, alone: 2 },
  ] as const;
  for (const offered of ['both', 'the responder only', 'the requester only'] as const) {
    const pair = await rcPair({
      pathMtu: 4096,
      ...(offered === 'the responder only' ? { onlyReadResponses: false, acceptOptions: {} } : {}),
      ...(offered === 'the requester only' ? { acceptOptions: { onlyReadResponses: false } } : {}),
    });
    try {
      const { client, server } = pair;
      const on = offered === 'both';
      assert.is(client.qp.path?.onlyReadResponses === true, on, `${offered}: the client's path`);
      assert.is(server.qp.path?.onlyReadResponses === true, on, `${offered}: the server's path`);
      for (let i = 0; i < MiB; i++) server.memory[MiB + i] = (i * 37 + (i >>> 9)) & 0xff;
      const answered = record(server);
      for (const { length, only, alone } of cases) {
        const what = `${offered}, a Read of ${length}`;
        const runs = answered.runs();
        const before = answered.alone();
        await readInto(client, server, 2 * MiB, MiB, length);
        const headers = decodeAll(answered.datagrams.splice(0), server.link.local, client.link.local);
        const packets = Math.ceil(length / 4096);
        assert.is(headers.length, packets, `${what}: packets`);
        for (let i = 1; i < packets; i++) assert.is(headers[i]!.psn, (headers[0]!.psn + i) & 0xffffff, `${what}: packet ${i} PSN`);
        if (on && only) {
          assert.ok(
            headers.every((h) => h.opcode === IbOpcode.RdmaReadResponseOnly && (h.syndrome & Syndrome.TypeMask) === Syndrome.TypeAck),
            `${what}: ONLY responses, each AETH an ACK`,
          );
          assert.is(answered.runs() - runs, 1, `${what}: one run`);
          assert.is(answered.alone() - before, alone, `${what}: ${alone} alone`);
        } else {
          assert.is(headers[0]!.opcode, IbOpcode.RdmaReadResponseFirst, `${what}: a FIRST`);
          assert.is(headers[packets - 1]!.opcode, IbOpcode.RdmaReadResponseLast, `${what}: a LAST`);
        }
      }
    } finally {
      await pair.close();
    }
  }
});

test('a lost ONLY response of a short Read is asked for again alone when the next one arrives: no timeout, every octet read', async () => {
  await withRcPair({ pathMtu: 4096, ackTimeoutMs: 60_000 }, async ({ client, server }) => {
    const corrupted = corruptSecondOfFirstRun(server, IbOpcode.RdmaReadResponseOnly);
    for (let i = 0; i < 64 * KiB; i++) server.memory[MiB + i] = (i * 41 + 3) & 0xff;
    const sentBefore = server.qp.statistics.packetsSent;
    await readInto(client, server, 2 * MiB, MiB, 16 * KiB);
    assert.is(corrupted(), 1);
    assert.is(client.rnic.roceEndpoint!.stats.icrcErrors, 1, 'the bad response was dropped');
    assert.is(client.qp.statistics.timeouts, 0, 'no ACK timeout');
    assert.is(server.qp.statistics.packetsSent - sentBefore, 5, 'four responses and the lost one again');
  });
});

test.run();
