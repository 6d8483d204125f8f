// What a requester does differently on a path that has not lost a packet lately. Its PSN window
// for Sends and Writes (send-queue.ts) is 1024 unacknowledged PSNs, rxe's 128 on a lossy one
// (go-back-N resends what followed a loss, so there the window bounds what a loss costs): counted
// with the responder's ACKs held back, the requester sends new packets until its window is full
// and then none. And when ACKs stop coming for the early wait, it first sends a tail-loss probe
// (the last packet again, asking for an ACK) instead of going back N: late ACKs then cost one
// packet, a lost tail the packets lost and the probe. Where the last packet is a Read request
// (no probe: sent again, it has the responder answer its whole chunk again) it waits one doubled
// expiry more instead: late responses then cost nothing, a lost request that wait.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { PacketLink } from '../../host/rnic/rc/link.ts';
import { IbOpcode } from '../../host/rnic/wire/ib-opcodes.ts';
import { completions, expectSuccess, rcPair, readRequestsInWindow, type RcPair } from '../support/rc.ts';
import type { RcStatistics } from '../../host/rnic/rc/queue-pair.ts';
import { packetsFitting } from '../../host/rnic/rc/send-queue.ts';

const MiB = 1024 * 1024;
/** The Write whose packets meet the closed window: 2048 packets at path MTU 4096, twice the clean window. */
const WRITE_BYTES = 8 * MiB;

/** Holds every Acknowledge `link` would send until `release` sends them; the rest passes. */
function holdAcks(link: PacketLink): { held(): number; release(): void } {
  const send = link.send.bind(link);
  const held: Array<{ to: Parameters<PacketLink['send']>[0]; header: Uint8Array; trailer: Uint8Array }> = [];
  let holding = true;
  link.send = (to, header, payload, trailer) => {
    // The QP reuses its header and trailer buffers: keep copies.
    if (holding && header[0] === IbOpcode.Acknowledge) held.push({ to, header: header.slice(), trailer: trailer.slice() });
    else send(to, header, payload, trailer);
  };
  return {
    held: () => held.length,
    release() {
      holding = false;
      for (const ack of held.splice(0)) send(ack.to, ack.header, new Uint8Array(0), ack.trailer);
    },
  };
}

/** Makes `link` drop the first packet it sends with `opcode` (the per-packet path: a replaced send turns runs off); returns whether it has. */
function dropFirst(link: PacketLink, opcode: number): () => boolean {
  const send = link.send.bind(link);
  let dropped = false;
  link.send = (to, header, payload, trailer) => {
    if (!dropped && header[0] === opcode) {
      dropped = true;
      return;
    }
    send(to, header, payload, trailer);
  };
  return () => dropped;
}

/**
 * A 64 KiB Write to `taggedOffset` that loses a packet: the responder NAKs the gap, and the path
 * counts as lossy for the next 4096 acknowledged PSNs.
 */
async function lossyWrite(pair: RcPair, wrId: number, taggedOffset: number): Promise<void> {
  const { client, server } = pair;
  const dropped = dropFirst(client.link, IbOpcode.RdmaWriteMiddle);
  client.qp.postSend({
    wrId,
    opcode: 'RDMA_WRITE',
    sgList: [{ lkey: client.mr.lkey, offset: 0, length: 64 * 1024 }],
    remote: { stag: server.mr.rkey, taggedOffset },
  });
  expectSuccess(await completions(client.cq, 1, 30_000));
  assert.ok(
    dropped() && server.qp.statistics.sequenceNaksSent + client.qp.statistics.earlyRetransmissions + client.qp.statistics.timeouts > 0,
    'the loss was noticed',
  );
}

/** New packets the client has sent (every packet less the retransmitted ones). */
const newPackets = (pair: RcPair): number => pair.client.qp.statistics.packetsSent - pair.client.qp.statistics.retransmittedPackets;

/**
 * The client's new packets once its window is full: waits until `expected` have gone (or, should
 * it stop short, until none has gone for 2 s), then looks 40 more times 5 ms apart that no more
 * go (a wait, not a timing: a requester with window left sends its next turn of packets at once;
 * one without sends nothing until an ACK comes).
 */
async function untilStalled(pair: RcPair, expected: number): Promise<number> {
  const deadline = Date.now() + 30_000;
  let last = newPackets(pair);
  let progressAt = Date.now();
  while (last < expected && Date.now() - progressAt < 2_000 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 5));
    const now = newPackets(pair);
    if (now !== last) progressAt = Date.now();
    last = now;
  }
  for (let look = 0; look < 40; look++) {
    await new Promise((resolve) => setTimeout(resolve, 5));
    last = newPackets(pair);
  }
  return last;
}

/** Posts an 8 MiB Write (WRITE_BYTES) with the responder's ACKs held; returns the new packets sent before the window stopped it, then lets it finish. */
async function packetsBeforeTheWindowCloses(pair: RcPair, wrId: number, expected: number): Promise<number> {
  const { client, server } = pair;
  const acks = holdAcks(server.link);
  const before = newPackets(pair);
  client.qp.postSend({
    wrId,
    opcode: 'RDMA_WRITE',
    sgList: [{ lkey: client.mr.lkey, offset: 0, length: WRITE_BYTES }],
    remote: { stag: server.mr.rkey, taggedOffset: 0 },
  });
  const sent = (await untilStalled(pair, before + expected)) - before;
  assert.ok(acks.held() > 0, 'the responder acknowledged what asked for it');
  acks.release();
  expectSuccess(await completions(client.cq, 1, 30_000));
  assert.equal(server.memory.subarray(0, WRITE_BYTES), client.memory.subarray(0, WRITE_BYTES), 'written data');
  return sent;
}

test('a clean path keeps 1024 PSNs of Writes unacknowledged; one that lost a packet lately, 128 (as the receive buffer holds)', async () => {
  // No ACK timer in the way. The early timer arms only once a round trip is measured: not during
  // the first Write of a new pair; later it may resend (old packets, not new ones), never fail the QP.
  const pair = await rcPair({ pathMtu: 4096, ackTimeoutMs: 60_000, bytes: 16 * MiB });
  try {
    const { client } = pair;
    // Where net.core.rmem_max keeps the socket's buffer under ~4.4 MiB, what it holds bounds both windows.
    const fit = packetsFitting(client.link.receiveBufferBytes, 4096);
    const clean = Math.min(1024, fit);
    const lossy = Math.min(128, fit);
    for (let i = 0; i < WRITE_BYTES; i++) client.memory[i] = (i * 29 + 3) & 0xff;
    assert.is(await packetsBeforeTheWindowCloses(pair, 1, clean), clean, 'clean path: new packets before the first ACK');
    await lossyWrite(pair, 2, WRITE_BYTES);
    assert.is(await packetsBeforeTheWindowCloses(pair, 3, lossy), lossy, 'lossy path: new packets before the first ACK');
  } finally {
    await pair.close();
  }
});

test('the window is what the receive buffer of the link holds when that is less: a 256 KiB socket buffer', async () => {
  const pair = await rcPair({ pathMtu: 4096, ackTimeoutMs: 60_000, bytes: 16 * MiB, udpReceiveBufferBytes: 256 * 1024 });
  try {
    const { client } = pair;
    const granted = client.link.receiveBufferBytes;
    assert.ok(granted !== undefined && granted > 0 && granted <= 512 * 1024, `the kernel granted ${granted} octets (at most twice what was asked)`);
    const fit = packetsFitting(granted, 4096);
    assert.ok(fit >= 16 && fit < 128, `${fit} packets of 4 KiB fit ${granted} octets: fewer than either default window`);
    for (let i = 0; i < WRITE_BYTES; i++) client.memory[i] = (i * 13 + 5) & 0xff;
    assert.is(await packetsBeforeTheWindowCloses(pair, 1, fit), fit, 'new packets before the first ACK');
    // The Read window too: its responses land in this side's socket.
    for (let i = 0; i < 4 * MiB; i++) pair.server.memory[8 * MiB + i] = (i * 11 + 1) & 0xff;
    pair.client.qp.postSend({
      wrId: 9,
      opcode: 'RDMA_READ',
      sgList: [{ lkey: client.mr.lkey, offset: 0, length: 4 * MiB }],
      remote: { stag: pair.server.mr.rkey, taggedOffset: 8 * MiB },
    });
    expectSuccess(await completions(client.cq, 1, 30_000));
    assert.equal(client.memory.subarray(0, 4 * MiB), pair.server.memory.subarray(8 * MiB, 12 * MiB), 'read data');
    assert.is(client.qp.statistics.retransmittedPackets, 0, 'nothing sent again: nothing overflowed');
  } finally {
    await pair.close();
  }
});

test('a receive buffer the link cannot report leaves the windows as they are', () => {
  assert.is(packetsFitting(undefined, 4096), Number.POSITIVE_INFINITY);
  assert.is(packetsFitting(0, 4096), Number.POSITIVE_INFINITY);
  assert.is(packetsFitting(8 * MiB, 4096), 1820);
  assert.is(packetsFitting(425_984, 4096), 92);
  assert.is(packetsFitting(16 * 1024, 4096), 16, 'never below 16 packets');
});

test('an explicit maxUnackedPackets is the window on a clean path too', async () => {
  const pair = await rcPair({ pathMtu: 4096, ackTimeoutMs: 60_000, bytes: 16 * MiB, maxUnackedPackets: 200 });
  try {
    assert.is(await packetsBeforeTheWindowCloses(pair, 1, 200), 200);
  } finally {
    await pair.close();
  }
});

const psnOf = (header: Uint8Array): number => (header[9]! << 16) | (header[10]! << 8) | header[11]!;

/** The client's statistics moved by `run` (the early timer must have measured a round trip: a Write first). */
async function counted(pair: RcPair, run: () => Promise<void>): Promise<Record<'resent' | 'probes' | 'waits' | 'backN' | 'naks', number>> {
  const client = (): RcStatistics => pair.client.qp.statistics;
  const before = client();
  const naks = pair.server.qp.statistics.sequenceNaksSent;
  await run();
  const after = client();
  return {
    resent: after.retransmittedPackets - before.retransmittedPackets,
    probes: after.tailProbes - before.tailProbes,
    waits: after.earlyWaits - before.earlyWaits,
    backN: after.earlyRetransmissions - before.earlyRetransmissions,
    naks: pair.server.qp.statistics.sequenceNaksSent - naks,
  };
}

/** Calls `then` at the moment the client's early timer counts a wait (the counter's setter), before anything else runs. */
function onEarlyWait(pair: RcPair, then: () => void): void {
  const stats = pair.client.qp.stats;
  let waits = stats.earlyWaits;
  Object.defineProperty(stats, 'earlyWaits', {
    get: () => waits,
    set: (value: number) => {
      waits = value;
      then();
    },
    enumerable: true,
    configurable: true,
  });
}

const isReadResponse = (opcode: number): boolean => opcode >= IbOpcode.RdmaReadResponseFirst && opcode <= IbOpcode.RdmaReadResponseOnly;

async function read(pair: RcPair, wrId: number, length: number): Promise<void> {
  const { client, server } = pair;
  client.qp.postSend({
    wrId,
    opcode: 'RDMA_READ',
    sgList: [{ lkey: client.mr.lkey, offset: MiB, length }],
    remote: { stag: server.mr.rkey, taggedOffset: 0 },
  });
  expectSuccess(await completions(client.cq, 1, 30_000));
  assert.equal(client.memory.subarray(MiB, MiB + length), server.memory.subarray(0, length), 'read data');
}

/** `read`, returning the messages the responder received for it: its Read requests (a retry answered from the responder's resources is not one). */
async function readRequests(pair: RcPair, wrId: number, length: number): Promise<number> {
  const before = pair.server.qp.statistics.messagesReceived;
  await read(pair, wrId, length);
  return pair.server.qp.statistics.messagesReceived - before;
}

async function write(pair: RcPair, wrId: number, length: number): Promise<void> {
  const { client, server } = pair;
  client.qp.postSend({
    wrId,
    opcode: 'RDMA_WRITE',
    sgList: [{ lkey: client.mr.lkey, offset: 0, length }],
    remote: { stag: server.mr.rkey, taggedOffset: 0 },
  });
  expectSuccess(await completions(client.cq, 1, 30_000));
  assert.equal(server.memory.subarray(0, length), client.memory.subarray(0, length), 'written data');
}

test('ACKs late on a clean path: the early timer sends one probe, and its ACK acknowledges everything (nothing is sent again)', async () => {
  const pair = await rcPair({ pathMtu: 4096, ackTimeoutMs: 60_000 });
  try {
    const { client, server } = pair;
    for (let i = 0; i < MiB; i++) client.memory[i] = (i * 7 + 1) & 0xff;
    await write(pair, 1, 64 * 1024); // measures a round trip: the early timer arms from now on
    // The responder's ACKs are held until the requester sends a packet a second time: whatever
    // the early timer does first is what the requester does about ACKs that are only late.
    const acks = holdAcks(server.link);
    const send = client.link.send.bind(client.link);
    let highest = -1;
    client.link.send = (to, header, payload, trailer) => {
      const psn = psnOf(header);
      const ahead = (psn - highest) & 0xffffff;
      if (highest >= 0 && (ahead === 0 || ahead > 0x7fffff))
        acks.release(); // not past the highest PSN sent: sent again
      else highest = psn;
      send(to, header, payload, trailer);
    };
    const moved = await counted(pair, () => write(pair, 2, MiB));
    assert.equal(moved, { resent: 1, probes: 1, waits: 0, backN: 0, naks: 0 }, 'one packet sent again, a probe');
  } finally {
    await pair.close();
  }
});

for (const goBackN of [true, false]) {
  test(`a lost tail on a clean path: the probe draws a NAK sequence error, and only the lost packets follow it (${goBackN ? 'go-back-N' : 'selective repeat'})`, async () => {
    const pair = await rcPair({ pathMtu: 4096, ackTimeoutMs: 60_000, ...(goBackN ? { selectiveRepeat: false } : {}) });
    try {
      const { client } = pair;
      for (let i = 0; i < MiB; i++) client.memory[i] = (i * 11 + 5) & 0xff;
      await write(pair, 1, 64 * 1024);
      // A 1 MiB Write is 256 packets; its last two (indices 254 and 255, the LAST asks for an ACK)
      // are lost the first time. The responder acknowledged index 191 (every 64th asks) and sees
      // nothing after 253 that would reveal the gap: only the requester's timer can.
      const send = client.link.send.bind(client.link);
      let first = -1;
      const lost = new Set<number>();
      client.link.send = (to, header, payload, trailer) => {
        const psn = psnOf(header);
        if (header[0] === IbOpcode.RdmaWriteFirst && first < 0) first = psn;
        const index = first < 0 ? -1 : (psn - first) & 0xffffff;
        if ((index === 254 || index === 255) && !lost.has(index)) {
          lost.add(index);
          return;
        }
        send(to, header, payload, trailer);
      };
      const moved = await counted(pair, () => write(pair, 2, MiB));
      assert.is(lost.size, 2);
      // Each probe is one packet (a scheduling pause on a loaded machine may add one that finds the
      // ACKs late, no more): the lost two follow the NAK, nothing else is sent again. With
      // selective repeat the probe (index 255) is placed past the gap and index 254 alone follows.
      assert.ok(moved.probes >= 1, `${moved.probes} probes`);
      if (goBackN) assert.equal(moved, { resent: moved.probes + 2, probes: moved.probes, waits: 0, backN: 0, naks: 1 }, 'the probe and the two lost packets');
      else if (moved.probes === 1) assert.equal(moved, { resent: 2, probes: 1, waits: 0, backN: 0, naks: 1 }, 'the probe and the packet before it');
    } finally {
      await pair.close();
    }
  });
}

test('Read responses late on a clean path: the early timer waits one doubled expiry instead of going back N, and nothing is sent again', async () => {
  const pair = await rcPair({ pathMtu: 4096, ackTimeoutMs: 60_000, bytes: 2 * MiB });
  try {
    const { client, server } = pair;
    for (let i = 0; i < 64 * 1024; i++) client.memory[i] = (i * 3 + 1) & 0xff;
    await write(pair, 1, 64 * 1024); // measures a round trip: the early timer arms from now on
    // The responder's Read Responses (a replaced send: one packet each) are held until the
    // requester's early timer has decided what to do about them: a wait (now), or, before, going
    // back N, which sends the Read request again.
    const send = server.link.send.bind(server.link);
    const held: Array<() => void> = [];
    let holding = true;
    const release = (): void => {
      holding = false;
      for (const packet of held.splice(0)) packet();
    };
    server.link.send = (to, header, payload, trailer) => {
      if (holding && isReadResponse(header[0]!)) {
        const [h, p, t] = [header.slice(), payload.slice(), trailer.slice()];
        held.push(() => send(to, h, p, t));
      } else send(to, header, payload, trailer);
    };
    onEarlyWait(pair, release);
    const clientSend = client.link.send.bind(client.link);
    let requests = 0;
    client.link.send = (to, header, payload, trailer) => {
      if (header[0] === IbOpcode.RdmaReadRequest && ++requests > 1) release(); // sent again: what going back N does
      clientSend(to, header, payload, trailer);
    };
    const moved = await counted(pair, () => read(pair, 2, 64 * 1024));
    assert.ok(held.length === 0 && !holding, 'the responses were held, then released');
    assert.equal(moved, { resent: 0, probes: 0, waits: 1, backN: 0, naks: 0 }, 'one wait, no Read request sent again');
    assert.is(requests, 1);
  } finally {
    await pair.close();
  }
});

/**
 * Posts a 4 MiB Read (1024 response packets at path MTU 4096, 16 requests of 64) with the
 * responder's Read Responses held; returns the Read requests sent before the Read window stopped
 * the requester, then lets it finish.
 */
async function readRequestsBeforeTheWindowCloses(pair: RcPair, wrId: number, expected: number): Promise<number> {
  const { client, server } = pair;
  const send = server.link.send.bind(server.link);
  const held: Array<{ to: Parameters<PacketLink['send']>[0]; header: Uint8Array; payload: Uint8Array; trailer: Uint8Array }> = [];
  let holding = true;
  server.link.send = (to, header, payload, trailer) => {
    const opcode = header[0]!;
    // The QP reuses its header and trailer buffers: keep copies (the payload is the region's).
    if (holding && opcode >= IbOpcode.RdmaReadResponseFirst && opcode <= IbOpcode.RdmaReadResponseOnly)
      held.push({ to, header: header.slice(), payload, trailer: trailer.slice() });
    else send(to, header, payload, trailer);
  };
  const before = newPackets(pair);
  client.qp.postSend({
    wrId,
    opcode: 'RDMA_READ',
    sgList: [{ lkey: client.mr.lkey, offset: 0, length: 4 * MiB }],
    remote: { stag: server.mr.rkey, taggedOffset: 4 * MiB },
  });
  const sent = (await untilStalled(pair, before + expected)) - before;
  assert.ok(held.length > 0, 'the responder answered');
  holding = false;
  for (const response of held.splice(0)) send(response.to, response.header, response.payload, response.trailer);
  server.link.send = send;
  expectSuccess(await completions(client.cq, 1, 30_000));
  assert.equal(client.memory.subarray(0, 4 * MiB), server.memory.subarray(4 * MiB, 8 * MiB), 'read data');
  return sent;
}

test('a Read is asked for in requests of 64 response packets on a clean path and on one that lost a packet lately', async () => {
  const pair = await rcPair({ pathMtu: 4096, ackTimeoutMs: 60_000, bytes: 2 * MiB });
  try {
    const { client, server } = pair;
    for (let i = 0; i < MiB; i++) server.memory[i] = (i * 11 + 7) & 0xff;
    // 1 MiB at path MTU 4096: 256 response packets.
    assert.is(await readRequests(pair, 1, MiB), 4, 'clean path: Read requests for 1 MiB');
    for (let i = 0; i < 64 * 1024; i++) client.memory[i] = (i * 3 + 1) & 0xff;
    await lossyWrite(pair, 2, MiB);
    // 16-packet requests made lossy Reads 10-20 % slower, and a loss costs only the missing run.
    assert.is(await readRequests(pair, 3, MiB), 4, 'lossy path: Read requests for 1 MiB');
  } finally {
    await pair.close();
  }
});

test('a clean path keeps 16 Read requests of 64 responses outstanding (4 MiB); one that lost a packet lately, 4 (1 MiB)', async () => {
  // No ACK timer in the way (the held responses are late, not lost, and are released).
  const pair = await rcPair({ pathMtu: 4096, ackTimeoutMs: 60_000, bytes: 8 * MiB });
  try {
    const { client, server } = pair;
    for (let i = 0; i < 4 * MiB; i++) server.memory[4 * MiB + i] = (i * 23 + 9) & 0xff;
    // As many as the receive buffer holds where it holds fewer (node:dgram's link reports half of it).
    const clean = readRequestsInWindow(client.link, 1024, 16);
    const lossy = readRequestsInWindow(client.link, 256, 4);
    assert.is(await readRequestsBeforeTheWindowCloses(pair, 1, clean), clean, 'clean path: Read requests before the first response');
    for (let i = 0; i < 64 * 1024; i++) client.memory[i] = (i * 3 + 1) & 0xff;
    await lossyWrite(pair, 2, 0);
    server.memory.fill(0, 0, 64 * 1024);
    assert.is(await readRequestsBeforeTheWindowCloses(pair, 3, lossy), lossy, 'lossy path: Read requests before the first response');
  } finally {
    await pair.close();
  }
});

test('a lost Read Response makes the path lossy: the next Read keeps 1 MiB outstanding, not 4', async () => {
  const pair = await rcPair({ pathMtu: 4096, ackTimeoutMs: 60_000, bytes: 8 * MiB });
  try {
    const { server } = pair;
    for (let i = 0; i < 4 * MiB; i++) server.memory[4 * MiB + i] = (i * 7 + 3) & 0xff;
    const dropped = dropFirst(server.link, IbOpcode.RdmaReadResponseMiddle);
    // 4 requests (the retry of the lost response is a duplicate, answered from the responder's
    // resources, not a message).
    assert.is(await readRequests(pair, 1, MiB), 4, 'Read requests for the first 1 MiB');
    assert.ok(dropped(), 'a response was lost');
    assert.ok(pair.client.qp.statistics.retransmittedPackets > 0, 'the lost response was asked for again');
    const lossy = readRequestsInWindow(pair.client.link, 256, 4);
    assert.is(await readRequestsBeforeTheWindowCloses(pair, 2, lossy), lossy, 'Read requests of the next Read before its first response');
  } finally {
    await pair.close();
  }
});

test('a Read request lost on a clean path: one doubled wait, then back N, and the Read completes', async () => {
  const pair = await rcPair({ pathMtu: 4096, ackTimeoutMs: 60_000, bytes: 2 * MiB });
  try {
    const { client } = pair;
    for (let i = 0; i < 64 * 1024; i++) client.memory[i] = (i * 5 + 2) & 0xff;
    await write(pair, 1, 64 * 1024);
    const send = client.link.send.bind(client.link);
    let dropped = 0;
    client.link.send = (to, header, payload, trailer) => {
      if (header[0] === IbOpcode.RdmaReadRequest && dropped === 0) {
        dropped++;
        return;
      }
      send(to, header, payload, trailer);
    };
    const moved = await counted(pair, () => read(pair, 2, 64 * 1024));
    assert.is(dropped, 1);
    assert.is(moved.waits, 1, 'one wait first');
    assert.ok(moved.backN >= 1 && moved.resent >= 1, `then back N (${moved.backN}), the request sent again (${moved.resent})`);
  } finally {
    await pair.close();
  }
});

test.run();
