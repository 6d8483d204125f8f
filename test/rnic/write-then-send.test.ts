// QueuePair.postWriteThenSend (a KBTP LOAD's unsignaled RDMA Write and its COMPLETION Send,
// framed as one send queue entry; issue 16), and postSend of a short Send framed at once, against
// the generic path (the two posted one by one; the Send's octets gathered from three SGEs), and a
// Send of a head and its data (two SGEs, a KBTP inline STORE) framed at once: the same
// octets on the stream, the same completions on both sides and the same data placed, for Writes
// of several sizes (inline, a view, split across FPDUs), CRCs on and off, Send and Send with
// Invalidate; and the same completions when the pair is flushed or its memory check fails.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Access, createRnic, type CompletionQueue, type MemoryRegion, type QueuePair, type WorkCompletion } from '../../host/rnic/verbs.ts';
import { LinkedChannel } from '../../host/rnic/linked-channel.ts';
import type { SendWorkRequest } from '../../host/rnic/work.ts';
import { completions, pattern } from '../support/rnic.ts';

interface Link {
  /** The side that sends the Writes and Sends (the target of a LOAD). */
  qp: QueuePair;
  cq: CompletionQueue;
  mr: MemoryRegion;
  memory: Uint8Array;
  /** The side that receives them. */
  peerQp: QueuePair;
  peerCq: CompletionQueue;
  peerMr: MemoryRegion;
  peerMemory: Uint8Array;
  /** What the sending side wrote to the stream since the last take(). */
  take(): Uint8Array;
  close(): void;
}

const MEMORY = 1024 * 1024;
const INVALIDATED = 0x0000_9903;
const RECEIVES_AT = 400 * 1024;

/** `receives` buffers of `receiveSize` octets posted on the peer (at RECEIVES_AT). */
async function link(crc: boolean, mulpdu: number | undefined, receives = 8, receiveSize = 1024): Promise<Link> {
  const target = createRnic({ name: 'target' });
  const peer = createRnic({ name: 'peer' });
  const pd = target.allocPd();
  const peerPd = peer.allocPd();
  const memory = new Uint8Array(new SharedArrayBuffer(MEMORY));
  const peerMemory = new Uint8Array(new SharedArrayBuffer(MEMORY));
  // Fixed STags: the two ways' octets are compared across two links.
  const mr = target.registerMemory(pd, memory, { access: Access.LocalWrite, stag: 0x0000_4201 });
  const peerMr = peer.registerMemory(peerPd, peerMemory, { access: Access.LocalWrite | Access.RemoteWrite, stag: 0x0000_7702 });
  // What the Send with Invalidate invalidates.
  peer.registerMemory(peerPd, peerMemory.subarray(0, 4096), { access: Access.LocalWrite | Access.RemoteWrite, stag: INVALIDATED });
  const cq = target.createCq({ depth: 256 });
  const peerCq = peer.createCq({ depth: 256 });
  const qp = target.createQp({ pd, sendCq: cq, recvCq: cq, maxSendWr: 64, maxRecvWr: 64 });
  const peerQp = peer.createQp({ pd: peerPd, sendCq: peerCq, recvCq: peerCq, maxSendWr: 64, maxRecvWr: 64 });
  for (let i = 0; i < receives; i++)
    peerQp.postRecv({ wrId: 100 + i, sgList: [{ lkey: peerMr.lkey, offset: RECEIVES_AT + i * receiveSize, length: receiveSize }] });
  const [targetEnd, peerEnd] = LinkedChannel.pair();
  let written: Uint8Array[] = [];
  const write = targetEnd.write.bind(targetEnd);
  // Copies of what the target's QP hands its channel, in order (the chunks are final when handed over).
  targetEnd.write = (chunks, count, done) => {
    for (let i = 0; i < count; i++) written.push(chunks[i]!.slice());
    write(chunks, count, done);
  };
  const accepted = target.acceptChannel(targetEnd).then((request) => request.accept(qp, { crc, ...(mulpdu !== undefined ? { mulpdu } : {}) }));
  await peer.connectChannel(peerQp, peerEnd, { crc });
  await accepted;
  await qp.whenEstablished();
  written = [];
  return {
    qp,
    cq,
    mr,
    memory,
    peerQp,
    peerCq,
    peerMr,
    peerMemory,
    take() {
      const out = Buffer.concat(written);
      written = [];
      return new Uint8Array(out);
    },
    close() {
      qp.destroy();
      peerQp.destroy();
    },
  };
}

interface Pair {
  write: SendWorkRequest;
  send: SendWorkRequest;
}

/** A LOAD's two work requests: `length` octets from `at` to the peer's region at `to`, then a 40-octet COMPLETION. */
function pair(l: Link, id: number, at: number, length: number, to: number, invalidateStag: number): Pair {
  return {
    write: {
      wrId: id,
      opcode: 'RDMA_WRITE',
      signaled: false,
      sgList: [{ lkey: l.mr.lkey, offset: at, length }],
      remote: { stag: l.peerMr.rkey, taggedOffset: to },
    },
    send: {
      wrId: id + 1,
      opcode: invalidateStag !== 0 ? 'SEND_WITH_INV' : 'SEND',
      invalidateStag,
      sgList: [{ lkey: l.mr.lkey, offset: 300_000 + (id % 8) * 64, length: 40 }],
    },
  };
}

type Shape = Array<[bigint | number, string, number, number]>;
const shape = (list: WorkCompletion[]): Shape => list.map((c) => [c.wrId, c.opcode, c.status, c.byteLength]);

interface Outcome {
  wire: Uint8Array;
  sent: Shape;
  received: Shape;
  placed: Uint8Array;
  /** Send queue entries right after posting: 1 per pair framed at once, 2 one by one. */
  entries: number[];
}

/** Two LOADs' pairs (a Send, then a Send with Invalidate) posted one way or the other. */
async function run(fast: boolean, crc: boolean, mulpdu: number | undefined, length: number): Promise<Outcome> {
  const l = await link(crc, mulpdu);
  try {
    l.memory.set(pattern(length + 8, 7), 0);
    for (let i = 0; i < 8; i++) l.memory.set(pattern(40, 20 + i), 300_000 + i * 64);
    const entries: number[] = [];
    const pairs = [pair(l, 10, 0, length, 1000, 0), pair(l, 20, 8, length, 1000 + length + 16, INVALIDATED)];
    for (const p of pairs) {
      if (fast) l.qp.postWriteThenSend(p.write, p.send);
      else {
        l.qp.postSend(p.write);
        l.qp.postSend(p.send);
      }
      entries.push(l.qp.outstandingSends);
    }
    const sent = shape(await completions(l.cq, 2));
    const received = shape(await completions(l.peerCq, 2));
    return { wire: l.take(), sent, received, placed: l.peerMemory.slice(), entries };
  } finally {
    l.close();
  }
}

for (const crc of [false, true]) {
  for (const [mulpdu, lengths] of [
    [undefined, [0, 1, 40, 4096, 4097, 16_384, 70_000]],
    [1024, [1009, 1010, 16_384]],
  ] as const) {
    for (const length of lengths) {
      test(`Write of ${length} then Send, CRC ${crc ? 'on' : 'off'}, MULPDU ${mulpdu ?? 'default'}: framed at once = one by one`, async () => {
        const slow = await run(false, crc, mulpdu, length);
        const fast = await run(true, crc, mulpdu, length);
        assert.equal(slow.entries, [2, 4], 'one by one: two entries per pair');
        assert.equal(fast.entries, [1, 2], 'framed at once: one entry per pair');
        assert.ok(fast.wire.length > 2 * length, 'the Writes went out');
        assert.is(Buffer.compare(Buffer.from(fast.wire), Buffer.from(slow.wire)), 0, 'the same octets on the stream');
        assert.equal(fast.sent, slow.sent);
        assert.equal(fast.sent, [
          [11, 'SEND', 0, 40],
          [21, 'SEND', 0, 40],
        ]);
        assert.equal(fast.received, slow.received);
        assert.is(Buffer.compare(Buffer.from(fast.placed), Buffer.from(slow.placed)), 0, 'the same data placed');
        assert.is(Buffer.compare(Buffer.from(fast.placed.subarray(1000, 1000 + length)), Buffer.from(pattern(length + 8, 7).subarray(0, length))), 0);
      });
    }
  }
}

/** The target's completions when its QP is disconnected right after posting, or the Write's lkey is wrong. */
async function failing(fast: boolean, how: 'flush' | 'bad-lkey'): Promise<{ sent: Shape; errors: string[]; state: string; wire: number }> {
  const l = await link(false, undefined);
  try {
    const base = pair(l, 10, 0, 16_384, 1000, 0);
    const p = how === 'bad-lkey' ? { ...base, write: { ...base.write, sgList: [{ lkey: l.mr.lkey ^ 0x100, offset: 0, length: 16_384 }] } } : base;
    if (fast) l.qp.postWriteThenSend(p.write, p.send);
    else {
      l.qp.postSend(p.write);
      l.qp.postSend(p.send);
    }
    if (how === 'flush') l.qp.disconnect();
    const list = await completions(l.cq, 2);
    return { sent: shape(list), errors: list.map((c) => c.error ?? ''), state: l.qp.state, wire: l.take().length };
  } finally {
    l.close();
  }
}

test('a pair flushed before its write completed: the Write and the Send complete as flushed, as one by one', async () => {
  const slow = await failing(false, 'flush');
  const fast = await failing(true, 'flush');
  assert.equal(fast, slow);
  assert.equal(
    fast.sent.map((c) => c.slice(0, 2)),
    [
      [10, 'RDMA_WRITE'],
      [11, 'SEND'],
    ],
  );
  assert.ok(fast.sent.every((c) => c[2] !== 0));
});

test('a Write whose memory check fails: the same failure and Terminate as one by one', async () => {
  const slow = await failing(false, 'bad-lkey');
  const fast = await failing(true, 'bad-lkey');
  assert.equal(fast, slow);
  assert.is(fast.state, 'error');
  assert.ok(fast.wire > 0, 'a Terminate went out');
  assert.equal(
    fast.sent.map((c) => c.slice(0, 2)),
    [
      [10, 'RDMA_WRITE'],
      [11, 'SEND'],
    ],
  );
});

/** Counts the calls of the transmitter's framing method `method` (each frames one message at once). */
function countFramed(l: Link, method: 'sendSmall' | 'sendHeadAndData'): { framed: number } {
  const counter = { framed: 0 };
  const transmitter = l.qp.transmitter!;
  const original = transmitter[method].bind(transmitter) as (...args: unknown[]) => number;
  (transmitter as unknown as Record<string, (...args: unknown[]) => number>)[method] = (...args) => {
    counter.framed++;
    return original(...args);
  };
  return counter;
}

/** A Send, then a Send with Invalidate, of the octets `sgList` gathers; what both sides saw. */
async function sendTwice(l: Link, sgList: Array<{ lkey: number; offset: number; length: number }>): Promise<Outcome> {
  l.qp.postSend({ wrId: 1, opcode: 'SEND', sgList });
  l.qp.postSend({ wrId: 2, opcode: 'SEND_WITH_INV', invalidateStag: INVALIDATED, sgList });
  const sent = shape(await completions(l.cq, 2));
  const received = shape(await completions(l.peerCq, 2));
  return { wire: l.take(), sent, received, placed: l.peerMemory.slice(), entries: [] };
}

/** Sends alone: of one SGE (framed at once) or the same octets gathered from three (one by one). */
async function sends(fast: boolean, crc: boolean, length: number): Promise<Outcome & { framed: number }> {
  const l = await link(crc, undefined);
  try {
    l.memory.set(pattern(length, 9), 100_000);
    const counter = countFramed(l, 'sendSmall');
    const third = Math.floor(length / 3);
    // Three SGEs: the generic path (two are framed at once too, as a head and its data: below).
    const sgList = fast
      ? [{ lkey: l.mr.lkey, offset: 100_000, length }]
      : [
          { lkey: l.mr.lkey, offset: 100_000, length: third },
          { lkey: l.mr.lkey, offset: 100_000 + third, length: third },
          { lkey: l.mr.lkey, offset: 100_000 + 2 * third, length: length - 2 * third },
        ];
    const outcome = await sendTwice(l, sgList);
    return { ...outcome, framed: counter.framed };
  } finally {
    l.close();
  }
}

for (const crc of [false, true]) {
  for (const length of [2, 3, 40, 64, 1000]) {
    test(`a Send of ${length}, CRC ${crc ? 'on' : 'off'}: framed at once = gathered one by one`, async () => {
      const slow = await sends(false, crc, length);
      const fast = await sends(true, crc, length);
      assert.is(slow.framed, 0, 'three SGEs: not framed at once');
      assert.is(fast.framed, 2, 'one SGE: framed at once');
      assert.is(Buffer.compare(Buffer.from(fast.wire), Buffer.from(slow.wire)), 0, 'the same octets on the stream');
      assert.equal(fast.sent, slow.sent);
      assert.equal(fast.sent, [
        [1, 'SEND', 0, length],
        [2, 'SEND', 0, length],
      ]);
      assert.equal(fast.received, slow.received);
      assert.is(Buffer.compare(Buffer.from(fast.placed), Buffer.from(slow.placed)), 0, 'the same data received');
    });
  }
}

/**
 * Sends of a head and its data (a KBTP inline STORE's request and block): two SGEs (framed at once
 * when they fit one FPDU) against the same octets from three (the generic path).
 */
async function headAndData(fast: boolean, crc: boolean, headLength: number, dataLength: number): Promise<Outcome & { framed: number }> {
  const l = await link(crc, undefined, 2, 70_000);
  try {
    l.memory.set(pattern(headLength, 11), 100_000);
    l.memory.set(pattern(dataLength, 12), 120_000);
    const counter = countFramed(l, 'sendHeadAndData');
    const half = dataLength >> 1;
    const head = { lkey: l.mr.lkey, offset: 100_000, length: headLength };
    const sgList = fast
      ? [head, { lkey: l.mr.lkey, offset: 120_000, length: dataLength }]
      : [head, { lkey: l.mr.lkey, offset: 120_000, length: half }, { lkey: l.mr.lkey, offset: 120_000 + half, length: dataLength - half }];
    const outcome = await sendTwice(l, sgList);
    return { ...outcome, framed: counter.framed };
  } finally {
    l.close();
  }
}

// The longest payload one FPDU carries at the default MULPDU (64,768 less the 18-octet untagged header).
const ONE_FPDU = 64_768 - 18;
for (const crc of [false, true]) {
  for (const [headLength, dataLength, framedAtOnce] of [
    [64, 16_384, true],
    [64, 0, true],
    [0, 100, true],
    [64, 1, true],
    [4096, 8192, true],
    [64, ONE_FPDU - 64, true],
    [64, ONE_FPDU - 63, false],
    [4097, 100, false],
  ] as const) {
    test(`a Send of a ${headLength}-octet head and ${dataLength} octets of data, CRC ${crc ? 'on' : 'off'}: ${framedAtOnce ? 'framed at once' : 'one by one'} = gathered from three SGEs`, async () => {
      const slow = await headAndData(false, crc, headLength, dataLength);
      const fast = await headAndData(true, crc, headLength, dataLength);
      assert.is(slow.framed, 0, 'three SGEs: not framed at once');
      assert.is(fast.framed, framedAtOnce ? 2 : 0);
      assert.ok(fast.wire.length > headLength + dataLength, 'the Sends went out');
      assert.is(Buffer.compare(Buffer.from(fast.wire), Buffer.from(slow.wire)), 0, 'the same octets on the stream');
      assert.equal(fast.sent, slow.sent);
      assert.equal(fast.received, slow.received);
      assert.equal(
        fast.received.map((c) => c[3]),
        [headLength + dataLength, headLength + dataLength],
      );
      assert.is(Buffer.compare(Buffer.from(fast.placed), Buffer.from(slow.placed)), 0, 'the same data received');
    });
  }
}

test('a head-and-data Send whose data memory check fails: the same failure and Terminate as gathered one by one', async () => {
  const outcome = async (fast: boolean): Promise<{ sent: Shape; state: string; wire: number }> => {
    const l = await link(false, undefined);
    try {
      const head = { lkey: l.mr.lkey, offset: 100_000, length: 64 };
      const bad = { lkey: l.mr.lkey ^ 0x100, offset: 0, length: 16_384 };
      const sgList = fast ? [head, bad] : [head, bad, { lkey: l.mr.lkey, offset: 0, length: 0 }];
      l.qp.postSend({ wrId: 5, opcode: 'SEND', sgList });
      const sent = shape(await completions(l.cq, 1));
      return { sent, state: l.qp.state, wire: l.take().length };
    } finally {
      l.close();
    }
  };
  const slow = await outcome(false);
  const fast = await outcome(true);
  assert.equal(fast, slow);
  assert.is(fast.state, 'error');
  assert.ok(fast.sent[0]![2] !== 0, 'the Send failed');
});

test.run();
