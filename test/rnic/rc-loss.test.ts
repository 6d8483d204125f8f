// How the RC transport recovers from loss, and what the lossy link of the tests and the RoCE
// benchmark costs. On a path that lost packets lately, a NAK that waits in the socket when the
// requester's next turn starts is read before that turn's packets go out, so a Write goes back
// at the gap at once instead of first sending a turn of packets the responder must drop (the
// responder NAKs the gap once and drops the rest silently, IBA 9.7.5.1.2, before computing their
// ICRC). A Read that lost a response packet keeps the lean receive path for the packets past the
// gap and after it, and asks again for the lost packets only, not the rest of their chunk. The
// early retransmission waits RFC 6298's srtt + 4 rttvar when the round trip jitters (never less
// than 4 srtt or 2 ms). An ImpairedLink around a link that takes runs passes runs on, less the
// packets it drops, and drops exactly the packets the same seed drops packet by packet.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { BatchedUdpLink } from '../../host/rnic/rc/batched-udp-link.ts';
import { ImpairedLink, type Impairments } from '../../host/rnic/rc/impaired-link.ts';
import type { PacketLink, PacketReceiver, PacketRun, PeerAddress } from '../../host/rnic/rc/link.ts';
import { EARLY_MIN_MS, LOSSY_EARLY_MIN_MS, RoundTripEstimate } from '../../host/rnic/rc/round-trip.ts';
import { IbOpcode } from '../../host/rnic/wire/ib-opcodes.ts';
import { completions, expectSuccess, rcPair, type RcPair } from '../support/rc.ts';

const MiB = 1024 * 1024;

/** Makes `link` lose the packet with `opcode` after `skip` others with it (the per-packet path: a replaced `send` turns runs off). */
function loseOne(link: PacketLink, opcode: number, skip: number): void {
  const send = link.send.bind(link);
  let seen = 0;
  link.send = (to, header, payload, trailer) => {
    if (header[0] === opcode && seen++ === skip) return;
    send(to, header, payload, trailer);
  };
}

/**
 * Runs `body` on a fresh pair at path MTU 4096 whose ACK timer (a minute) never decides, and
 * closes it; `goBackN`: without selective repeat (as with an rxe peer).
 */
async function onPair(body: (pair: RcPair) => Promise<void>, goBackN = false): Promise<void> {
  const pair = await rcPair({ pathMtu: 4096, ackTimeoutMs: 60_000, ...(goBackN ? { selectiveRepeat: false } : {}) });
  try {
    await body(pair);
  } finally {
    await pair.close();
  }
}

/** Writes the client's first MiB to the server's second, waits for its completion and checks the data. */
async function writeMiB({ client, server }: RcPair, wrId: number): Promise<void> {
  client.qp.postSend({
    wrId,
    opcode: 'RDMA_WRITE',
    sgList: [{ lkey: client.mr.lkey, offset: 0, length: MiB }],
    remote: { stag: server.mr.rkey, taggedOffset: MiB },
  });
  expectSuccess(await completions(client.cq, 1, 20_000));
  assert.equal(server.memory.subarray(MiB, 2 * MiB), client.memory.subarray(0, MiB), 'written data');
}

test('go-back-N: on a path that lost packets lately, a NAK waiting in the socket is read before the next turn sends: the Write goes back at the gap, not a turn of packets later', async () => {
  await onPair(async (pair) => {
    const { client, server } = pair;
    if (client.link.receiveNow === undefined) {
      // node:dgram's link ($KBTP_ROCE_UDP=dgram) reads only when the event loop polls it.
      console.log('  (skipped: the link cannot be read on demand)');
      return;
    }
    // A 1 MiB Write is 256 packets. Its 11th packet (PSN index 10, a MIDDLE) is lost: the
    // responder NAKs PSN index 10 when the packets after it arrive, then drops them. On a path
    // that has not lost a packet lately a turn sends a clean window's worth (1024 packets), so
    // the first Write leaves whole before the NAK can be read: it costs indices 10-255 again
    // (246), 244 dropped unchecked. The path is lossy then and sends 64 packets per turn; read
    // at the start of the second turn, the NAK costs the first turn's packets after the gap
    // again (indices 10-63: 54); read only in the next poll, after the second turn has sent
    // indices 64-127 too, it would cost 118.
    const expected = [
      { resent: 246, pastGap: 244 },
      { resent: 54, pastGap: 52 },
    ];
    for (let i = 0; i < MiB; i++) client.memory[i] = (i * 31 + 7) & 0xff;
    for (const [round, { resent, pastGap }] of expected.entries()) {
      const before = { ...client.qp.statistics, naks: server.qp.statistics.sequenceNaksSent, pastGap: server.rnic.roceEndpoint!.stats.pastGap };
      loseOne(client.link, IbOpcode.RdmaWriteMiddle, 9);
      await writeMiB(pair, round);
      assert.is(server.qp.statistics.sequenceNaksSent - before.naks, 1, 'one NAK for the gap; what follows it is dropped silently');
      const statistics = client.qp.statistics;
      assert.is(statistics.timeouts, 0);
      // An early retransmission (a scheduling pause on a loaded machine) resends on its own account.
      if (statistics.earlyRetransmissions > before.earlyRetransmissions) continue;
      assert.is(statistics.retransmittedPackets - before.retransmittedPackets, resent, `Write ${round + 1}: packets resent for one loss`);
      // The first packet past the gap (index 11) is checked in full and NAK'd; the rest that
      // arrive before the resent one are dropped before their ICRC is computed.
      assert.is(server.rnic.roceEndpoint!.stats.pastGap - before.pastGap, pastGap, `Write ${round + 1}: requests past the NAKed gap dropped unchecked`);
    }
  }, true);
});

test('selective repeat: a Write that lost a MIDDLE has the rest placed past the gap and resends the lost packet alone', async () => {
  await onPair(async (pair) => {
    const { client, server } = pair;
    // Both ends are kbtp: the setup agreed on selective repeat. The same loss as above (index 10
    // of a 1 MiB Write, twice): the responder places indices 11-255 where their PSNs say, NAKs
    // index 10 once, and takes the Write whole when its resend arrives; nothing else is resent.
    for (let i = 0; i < MiB; i++) client.memory[i] = (i * 37 + 5) & 0xff;
    for (let round = 0; round < 2; round++) {
      const before = { ...client.qp.statistics, naks: server.qp.statistics.sequenceNaksSent, placed: server.qp.statistics.placedPastGap };
      loseOne(client.link, IbOpcode.RdmaWriteMiddle, 9);
      await writeMiB(pair, round);
      const statistics = client.qp.statistics;
      assert.is(server.qp.statistics.sequenceNaksSent - before.naks, 1, 'one NAK for the gap');
      assert.is(statistics.timeouts, 0);
      if (statistics.earlyRetransmissions > before.earlyRetransmissions) continue; // a scheduling pause resends on its own account
      assert.is(statistics.retransmittedPackets - before.retransmittedPackets, 1, `Write ${round + 1}: the lost packet alone resent`);
      assert.is(statistics.resentAlone - before.resentAlone, 1);
      assert.ok(server.qp.statistics.placedPastGap - before.placed >= 1, `Write ${round + 1}: packets placed past the gap`);
    }
  });
});

test('selective repeat: two holes in one Write are NAKed one after the other and each resent alone; a Write and a Send after it go back N', async () => {
  await onPair(async (pair) => {
    const { client, server } = pair;
    for (let i = 0; i < MiB; i++) client.memory[i] = (i * 41 + 9) & 0xff;
    // The 1 MiB Write loses indices 10 and 100 (MIDDLEs). Behind it, posted with it: a 64 KiB
    // Write (its packets past the gap are not placed: a later message) and a Send.
    const send = client.link.send.bind(client.link);
    let seen = 0;
    const losing = new Set([9, 99]);
    client.link.send = (to, header, payload, trailer) => {
      if (header[0] === IbOpcode.RdmaWriteMiddle && losing.has(seen++)) return;
      send(to, header, payload, trailer);
    };
    server.qp.postRecv({ wrId: 77, sgList: [{ lkey: server.mr.lkey, offset: 3 * MiB, length: 4096 }] });
    const before = { ...client.qp.statistics, naks: server.qp.statistics.sequenceNaksSent };
    client.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [{ lkey: client.mr.lkey, offset: 0, length: MiB }],
      remote: { stag: server.mr.rkey, taggedOffset: MiB },
    });
    client.qp.postSend({
      wrId: 2,
      opcode: 'RDMA_WRITE',
      sgList: [{ lkey: client.mr.lkey, offset: 0, length: 64 * 1024 }],
      remote: { stag: server.mr.rkey, taggedOffset: 2 * MiB },
    });
    client.qp.postSend({ wrId: 3, opcode: 'SEND', sgList: [{ lkey: client.mr.lkey, offset: 100, length: 1000 }] });
    const done = await completions(client.cq, 3, 20_000);
    expectSuccess(done);
    assert.equal(
      done.map((completion) => completion.wrId),
      [1, 2, 3],
    );
    const received = await completions(server.cq, 1, 20_000);
    expectSuccess(received);
    assert.is(received[0]!.byteLength, 1000);
    assert.equal(server.memory.subarray(MiB, 2 * MiB), client.memory.subarray(0, MiB), 'the 1 MiB Write');
    assert.equal(server.memory.subarray(2 * MiB, 2 * MiB + 64 * 1024), client.memory.subarray(0, 64 * 1024), 'the 64 KiB Write');
    assert.equal(server.memory.subarray(3 * MiB, 3 * MiB + 1000), client.memory.subarray(100, 1100), 'the Send');
    const statistics = client.qp.statistics;
    assert.is(statistics.timeouts, 0);
    assert.ok(server.qp.statistics.sequenceNaksSent - before.naks >= 2, 'a NAK for each hole');
    if (statistics.earlyRetransmissions === before.earlyRetransmissions) {
      // Each lost packet alone; then the 17 packets after the big Write (16 of the Write, the
      // Send), whose first transmission the responder dropped past the gap, at most twice (once per NAK).
      assert.is(statistics.resentAlone - before.resentAlone, 2, 'the two lost packets resent alone');
      assert.ok(
        statistics.retransmittedPackets - before.retransmittedPackets <= 2 + 2 * 17,
        `${statistics.retransmittedPackets - before.retransmittedPackets} packets resent`,
      );
    }
  });
});

test('selective repeat: a Write with Immediate Data that lost a MIDDLE goes back to its LAST, which the responder never places past a gap', async () => {
  await onPair(async (pair) => {
    const { client, server } = pair;
    // 16 packets: FIRST, 14 MIDDLEs, LAST with Immediate Data; the third MIDDLE is lost. The NAK
    // brings the MIDDLE alone and the LAST after it, no timer. Going back only past the LAST
    // would leave the LAST to the early timer. A scheduling pause on a loaded machine may fire
    // that timer anyway: up to three attempts, one of them without it.
    let clean: { naks: number; resent: number } | undefined;
    for (let attempt = 0; attempt < 3 && clean === undefined; attempt++) {
      for (let i = 0; i < 64 * 1024; i++) client.memory[i] = (i * 47 + 13 + attempt) & 0xff;
      server.qp.postRecv({ wrId: 88 + attempt, sgList: [{ lkey: server.mr.lkey, offset: 3 * MiB, length: 16 }] });
      const before = { ...client.qp.statistics, naks: server.qp.statistics.sequenceNaksSent };
      loseOne(client.link, IbOpcode.RdmaWriteMiddle, 2); // a fresh count each attempt
      client.qp.postSend({
        wrId: attempt + 1,
        opcode: 'RDMA_WRITE_WITH_IMM',
        immediate: 0x1234n + BigInt(attempt),
        sgList: [{ lkey: client.mr.lkey, offset: 0, length: 64 * 1024 }],
        remote: { stag: server.mr.rkey, taggedOffset: MiB },
      });
      expectSuccess(await completions(client.cq, 1, 20_000));
      const received = await completions(server.cq, 1, 20_000);
      expectSuccess(received);
      assert.is(received[0]!.immediate, 0x1234n + BigInt(attempt));
      assert.equal(server.memory.subarray(MiB, MiB + 64 * 1024), client.memory.subarray(0, 64 * 1024), 'written data');
      const statistics = client.qp.statistics;
      assert.is(statistics.timeouts - before.timeouts, 0);
      if (statistics.earlyTimerFires === before.earlyTimerFires) {
        clean = { naks: server.qp.statistics.sequenceNaksSent - before.naks, resent: statistics.retransmittedPackets - before.retransmittedPackets };
      }
    }
    assert.ok(clean !== undefined, 'an attempt recovered without the early timer');
    assert.equal(clean, { naks: 1, resent: 2 }, 'one NAK; the lost MIDDLE and the LAST resent');
  });
});

test('selective repeat: a lost resend is recovered by the early timer going back N, the data exact', async () => {
  await onPair(async (pair) => {
    const { client, server } = pair;
    for (let i = 0; i < MiB; i++) client.memory[i] = (i * 43 + 11) & 0xff;
    const before = { ...client.qp.statistics };
    loseTwice(client.link, IbOpcode.RdmaWriteMiddle, 9);
    await writeMiB(pair, 1);
    const statistics = client.qp.statistics;
    assert.is(statistics.timeouts - before.timeouts, 0, 'no ACK timeout');
    assert.ok(statistics.resentAlone - before.resentAlone >= 1, 'the lost packet was resent alone first');
    assert.ok(server.qp.statistics.placedPastGap > 0);
  });
});

/** Makes `link` lose the packet with `opcode` after `skip` others with it, and the first resend of its PSN too. */
function loseTwice(link: PacketLink, opcode: number, skip: number): void {
  const send = link.send.bind(link);
  let seen = 0;
  let lostPsn = -1;
  let losses = 0;
  link.send = (to, header, payload, trailer) => {
    const psn = (header[9]! << 16) | (header[10]! << 8) | header[11]!;
    if (losses === 0 && header[0] === opcode && seen++ === skip) {
      lostPsn = psn;
      losses++;
      return;
    }
    if (losses === 1 && psn === lostPsn) {
      losses++;
      return;
    }
    send(to, header, payload, trailer);
  };
}

test('go-back-N: a resend of the NAKed packet lost again is NAKed again: no wait for a retransmission timer', async () => {
  // The ACK timer at a minute: only the responder's second NAK or the early timer can recover.
  await onPair(async (pair) => {
    const { client, server } = pair;
    // A 1 MiB Write (256 packets) loses its 11th packet (PSN index 10) and, after the NAK, that
    // packet's first resend: the responder, silent past a gap it NAKed, sees the go-back-N's
    // next packets (index 11 on) arrive below the highest it dropped and NAKs index 10 again.
    // Before, it stayed silent and the requester went back N only when its early timer fired.
    for (let i = 0; i < MiB; i++) client.memory[i] = (i * 29 + 3) & 0xff;
    const before = { ...client.qp.statistics, naks: server.qp.statistics.sequenceNaksSent };
    loseTwice(client.link, IbOpcode.RdmaWriteMiddle, 9);
    await writeMiB(pair, 1);
    const statistics = client.qp.statistics;
    assert.is(statistics.timeouts - before.timeouts, 0);
    // The second NAK comes whether or not a scheduling pause also fired the early timer.
    assert.ok(server.qp.statistics.sequenceNaksSent - before.naks >= 2, `${server.qp.statistics.sequenceNaksSent - before.naks} NAKs for one gap lost twice`);
    if (statistics.earlyRetransmissions === before.earlyRetransmissions && client.link.receiveNow !== undefined) {
      // Each NAK read before the requester's next turn (a link read on demand): the lossy turn
      // of 64 packets from index 10 (its first lost again), then indices 10-255 once more.
      assert.is(statistics.retransmittedPackets - before.retransmittedPackets, 246 + 64, 'packets resent for the two losses');
    }
  }, true);
});

test('on a lossy path a turn sends in parts, the thread read between them: a responder on the same thread takes each part and acknowledges it in the turn', async () => {
  await onPair(async (pair) => {
    const { client, server } = pair;
    if (!(client.link instanceof BatchedUdpLink) || !(server.link instanceof BatchedUdpLink)) {
      console.log('  (skipped: the link cannot read this thread on demand)');
      return;
    }
    for (let i = 0; i < MiB; i++) client.memory[i] = (i * 17 + 1) & 0xff;
    // One lost packet makes the path lossy (on both sides: the responder NAKed a gap).
    loseOne(client.link, IbOpcode.RdmaWriteMiddle, 9);
    await writeMiB(pair, 1);
    // A 1 MiB Write with nothing lost: 256 packets, four parts of 64 in one turn. In 64-packet
    // turns the responder's socket woke its poll once per turn (4) and the requester's once per
    // ACK; read between the parts, the responder takes each part, its ACK goes out at the end of
    // that delivery and the requester reads it before its next part.
    const responderWakes = server.link.stats.readableEvents;
    const requesterWakes = client.link.stats.readableEvents;
    const naks = server.qp.statistics.sequenceNaksSent;
    for (let i = 0; i < MiB; i++) client.memory[i] = (i * 19 + 2) & 0xff;
    await writeMiB(pair, 2);
    assert.is(server.qp.statistics.sequenceNaksSent, naks, 'nothing lost in the second Write');
    const early = client.qp.statistics.earlyRetransmissions + client.qp.statistics.earlyTimerFires;
    // A scheduling pause (an early timer firing) may add a wake-up; the parts leave none per part.
    assert.ok(server.link.stats.readableEvents - responderWakes <= 1 + early, `responder woken ${server.link.stats.readableEvents - responderWakes} times`);
    assert.ok(client.link.stats.readableEvents - requesterWakes <= 1 + early, `requester woken ${client.link.stats.readableEvents - requesterWakes} times`);
  });
});

/** Reads the server's second MiB into the client's first in `reads` equal Reads posted together; checks that they complete in order, the data exact. */
async function readMiBIn({ client, server }: RcPair, reads: number): Promise<void> {
  const length = MiB / reads;
  for (let read = 0; read < reads; read++) {
    client.qp.postSend({
      wrId: read + 1,
      opcode: 'RDMA_READ',
      sgList: [{ lkey: client.mr.lkey, offset: read * length, length }],
      remote: { stag: server.mr.rkey, taggedOffset: MiB + read * length },
    });
  }
  const done = await completions(client.cq, reads, 20_000);
  expectSuccess(done);
  assert.equal(
    done.map((completion) => completion.wrId),
    Array.from({ length: reads }, (_, read) => read + 1),
    'Reads complete in order',
  );
  assert.equal(client.memory.subarray(0, MiB), server.memory.subarray(MiB, 2 * MiB), 'read data');
}

/**
 * readMiBIn with the server losing the third Read Response MIDDLE it sends (index 3 of the first
 * Read), no timer deciding. Returns the Read Responses the client's lean path placed and the
 * response packets the server sent; undefined where the link has no lean receive path.
 */
async function readsLosingOneResponse(pair: RcPair, reads: number): Promise<{ lean: number; sent: number } | undefined> {
  const { client, server } = pair;
  const endpoint = client.rnic.roceEndpoint!;
  if (client.link.setLeanReceiver === undefined) {
    console.log('  (skipped: the link has no lean receive path)');
    return undefined;
  }
  loseOne(server.link, IbOpcode.RdmaReadResponseMiddle, 2);
  for (let i = 0; i < MiB; i++) server.memory[MiB + i] = (i * 13 + 5 * reads) & 0xff;
  const before = endpoint.stats.lean;
  const sentBefore = server.qp.statistics.packetsSent;
  await readMiBIn(pair, reads);
  assert.is(client.qp.statistics.timeouts, 0);
  return { lean: endpoint.stats.lean - before, sent: server.qp.statistics.packetsSent - sentBefore };
}

test('a Read that lost a response packet keeps the lean path: the packets past the gap and after it are placed without the full path', async () => {
  await onPair(async (pair) => {
    // A 1 MiB Read is asked for in 4 chunks of 64 response packets (FIRST, 62 MIDDLEs, LAST).
    // The requester asks for the lost one again when index 4 arrives, and that answer comes after
    // every other chunk's.
    const counted = await readsLosingOneResponse(pair, 1);
    if (counted === undefined) return;
    // Every response that arrived, past the gap and the retried one included, but the pair's
    // first packet (the endpoint checks one in full before it takes the QP's packets lean): 256
    // less the lost one. Only the in-order MIDDLEs before the gap (2) when a Read with a gap
    // left the lean path; 223 while FIRST and LAST took the full path.
    assert.is(counted.lean, 255, 'Read Responses placed by the lean path');
    // The retry asks for the lost packet alone (a sub-range of the chunk's resource), not for the
    // rest of its chunk (indices 3-63, 60 of which had arrived).
    assert.is(counted.sent, 256 + 1, 'response packets sent, the lost one twice');
  });
});

test('Reads behind one that lost a response packet keep the lean path too, and the lost packet is asked for again once', async () => {
  await onPair(async (pair) => {
    // Four 256 KiB Reads, 64 responses each. The first stays the oldest unfinished WQE until its
    // retry is answered, after the other three Reads' responses. Those were the full path's while
    // the lean path took only the oldest WQE's (63 of 256 lean).
    const counted = await readsLosingOneResponse(pair, 4);
    if (counted === undefined) return;
    assert.is(counted.lean, 255, 'Read Responses placed by the lean path');
    // Each later Read's responses show the first Read's gap again; it is asked for once.
    assert.is(counted.sent, 256 + 1, 'response packets sent, the lost one twice');
  });
});

test('the early timer with only Reads outstanding asks again for the missing packets alone, not for every response from the oldest unacknowledged PSN on', async () => {
  await onPair(async (pair) => {
    const { client, server } = pair;
    // Four 256 KiB Reads posted together (256 responses). The first Read's fourth packet (index 3)
    // is lost, and so is the answer to its retry: the first Read stays the oldest unfinished WQE,
    // nothing acknowledges past it, and the early timer fires while the other Reads' responses
    // arrive. Going back N from index 3 asked for everything from there again (about 250
    // responses the requester already had); now only index 3 is asked for.
    loseTwice(server.link, IbOpcode.RdmaReadResponseMiddle, 2);
    for (let i = 0; i < MiB; i++) server.memory[MiB + i] = (i * 53 + 17) & 0xff;
    const before = { ...client.qp.statistics, sent: server.qp.statistics.packetsSent };
    await readMiBIn(pair, 4);
    const statistics = client.qp.statistics;
    const early = statistics.earlyRetransmissions - before.earlyRetransmissions;
    assert.ok(early >= 1, 'the early timer recovered the lost retry');
    assert.is(statistics.timeouts - before.timeouts, 0);
    // 256 responses, the lost one's retry, and one more per early expiry (each asks for index 3 alone).
    const sent = server.qp.statistics.packetsSent - before.sent;
    assert.ok(sent >= 256 + 2 && sent <= 256 + 1 + early, `${sent} response packets sent for ${early} early expiries`);
  });
});

test('the early retransmission waits srtt + 4 rttvar (RFC 6298 gains) when that is longer than 4 srtt, never less than its floor', () => {
  const estimate = new RoundTripEstimate();
  assert.is(estimate.measured, false, 'no early wait before a round trip is measured');
  estimate.sample(2);
  assert.is(estimate.measured, true);
  assert.is(estimate.smoothed, 2);
  assert.is(estimate.variation, 1);
  assert.is(estimate.earlyWait, 8, 'first sample: 4 * R (R + 4 * R/2 is 6)');
  estimate.sample(1);
  assert.is(estimate.variation, 0.75 * 1 + 0.25 * 1);
  assert.is(estimate.smoothed, 2 + (1 - 2) / 8);
  // A steady loopback round trip: the wait is the floor.
  const steady = new RoundTripEstimate();
  for (let i = 0; i < 100; i++) steady.sample(0.1);
  assert.ok(Math.abs(steady.smoothed - 0.1) < 1e-9);
  assert.is(steady.earlyWait, EARLY_MIN_MS);
  // On a path that lost a packet lately the floor is lower: there the wait is what a lost NAK costs.
  assert.is(steady.lossyEarlyWait, LOSSY_EARLY_MIN_MS);
  assert.is(LOSSY_EARLY_MIN_MS, 0.5);
  // A steady 1 ms one: 4 * srtt (srtt + 4 rttvar is about 1 ms): a peer on another thread is
  // late by a scheduler slice often enough that a shorter wait went back N for nothing.
  const slower = new RoundTripEstimate();
  for (let i = 0; i < 100; i++) slower.sample(1);
  assert.ok(Math.abs(slower.earlyWait - 4) < 1e-9, `wait ${slower.earlyWait} ms`);
  assert.is(EARLY_MIN_MS, 2);
  // A jittery one (a loaded machine): the variation term widens the wait by itself.
  const jittery = new RoundTripEstimate();
  for (let i = 0; i < 100; i++) jittery.sample(i % 2 === 0 ? 0.2 : 3);
  assert.ok(jittery.earlyWait > 4 * jittery.smoothed, `wait ${jittery.earlyWait} ms for round trips of 0.2-3 ms (srtt ${jittery.smoothed})`);
});

/** A link that records what reaches it: the PSN of each packet, and how many calls of send and sendRun. */
class RecordingLink implements PacketLink {
  readonly local: PeerAddress = { address: '127.0.0.1', port: 1 };
  readonly psns: number[] = [];
  sends = 0;
  runs = 0;
  constructor(withRuns: boolean) {
    if (!withRuns) this.sendRun = undefined;
  }
  send(_to: PeerAddress, header: Uint8Array, payload: Uint8Array, trailer: Uint8Array): void {
    this.sends++;
    assert.is(payload[0], header[11], 'payload travels with its header');
    assert.is(trailer.length, 4);
    this.psns.push(header[11]!);
  }
  sendRun? = (_to: PeerAddress, run: PacketRun): void => {
    this.runs++;
    for (let i = 0; i < run.count; i++) {
      const psn = run.headers[i * run.headerLength + 11]!;
      assert.is(run.payload[i * run.segment], psn, 'payload travels with its header');
      this.psns.push(psn);
    }
  };
  setReceiver(_receiver: PacketReceiver): void {}
  async close(): Promise<void> {}
}

/** A run of `count` 12-octet BTHs (PSN in octet 11), 8-octet payloads starting with the PSN, 4-octet trailers. */
function runOf(count: number): PacketRun {
  const headers = new Uint8Array(count * 12);
  const payload = new Uint8Array(count * 8);
  for (let i = 0; i < count; i++) {
    headers[i * 12 + 11] = i;
    payload[i * 8] = i;
  }
  return { headers, headerLength: 12, payload, segment: 8, count, trailers: new Uint8Array(count * 4), trailerLength: 4 };
}

const TO: PeerAddress = { address: '127.0.0.1', port: 2 };

/** What reaches the inner link when `impairments` act on runs of 50, through sendRun or packet by packet through send. */
async function through(impairments: Impairments, asRuns: boolean): Promise<RecordingLink> {
  const inner = new RecordingLink(true);
  const link = new ImpairedLink(inner, impairments);
  for (let round = 0; round < 4; round++) {
    const run = runOf(50);
    if (asRuns) link.sendRun!(TO, run);
    else {
      for (let i = 0; i < run.count; i++) {
        link.send(TO, run.headers.subarray(i * 12, i * 12 + 12), run.payload.subarray(i * 8, i * 8 + 8), run.trailers.subarray(i * 4, i * 4 + 4));
      }
    }
  }
  await new Promise((resolve) => setTimeout(resolve, 10)); // a packet held back for reordering leaves
  await link.close();
  return inner;
}

test('an ImpairedLink passes runs on as runs, less what it drops, and drops what the same seed drops packet by packet', async () => {
  const lossy = { loss: 0.05, seed: 3 };
  const runs = await through(lossy, true);
  const packets = await through(lossy, false);
  assert.equal(runs.psns, packets.psns, 'the same packets, in the same order');
  assert.ok(runs.psns.length < 200 && runs.psns.length > 150, `${runs.psns.length} of 200 packets kept`);
  assert.is(runs.sends, 0, 'no packet went alone');
  // A run leaves as at most one part more than it lost packets; with nothing lost, as itself.
  assert.ok(runs.runs >= 4 && runs.runs <= 4 + (200 - runs.psns.length), `${runs.runs} runs`);
  const clean = await through({ loss: 0, seed: 3 }, true);
  assert.is(clean.runs, 4);
  assert.is(clean.psns.length, 200);
  // Duplication and reordering act per packet: the run goes through send, the same as packet by packet.
  const mixed = { loss: 0.03, duplicate: 0.03, reorder: 0.03, seed: 5 };
  const mixedRuns = await through(mixed, true);
  assert.equal(mixedRuns.psns, (await through(mixed, false)).psns);
  assert.is(mixedRuns.runs, 0);
  // Around a link without runs there are none to pass on: the RC layer sends packet by packet.
  assert.is(new ImpairedLink(new RecordingLink(false), lossy).sendRun, undefined);
});

test.run();
