// Vectored reads (receive.ts readVector/commitVector, issue 16): inside a large message whose
// destination runs to the message's end, the receiver reads several FPDUs in one system call,
// payloads straight to their place and the framing between them to a side buffer. Here a
// stand-in for SocketChannel's read loop (libuv's reads through readBuffer/commit, then after a
// read that filled its buffer the vectored read-ahead) counts reads per message over a stream
// that is all waiting, and checks that what lands is what was sent when the receiver's guesses
// (segments as long as the one before, of the same kind) are wrong or the stream arrives in
// pieces.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { FpduReceiver, type ReceiveSink } from '../../host/rnic/receive.ts';
import type { TerminateCause } from '../../host/rnic/terminate.ts';
import { encodeTaggedHeader, encodeUntaggedHeader } from '../../host/rnic/wire/ddp.ts';
import { encodeFpdu, MPA_MAX_ULPDU } from '../../host/rnic/wire/mpa.ts';
import { rdmapControl, RdmapOpcode } from '../../host/rnic/wire/rdmap.ts';
import { pattern } from '../support/rnic.ts';

/** SocketChannel's READ_AHEAD_ROUNDS. */
const READ_AHEAD_ROUNDS = 4;
const STORE = 64 + 256 * 1024;

/**
 * Sends land in `contexts` (the first segment, as a target's request context) and then in
 * `blocks` at `blockAt` (as a steered STORE's block: the view runs to the message's end);
 * tagged segments at their offset in `blocks`, a Read Response's view running on to `readEnd`.
 */
class SteeringSink implements ReceiveSink {
  readonly contexts = new Uint8Array(new SharedArrayBuffer(1 << 20));
  readonly blocks = new Uint8Array(new SharedArrayBuffer(4 << 20));
  readonly events: string[] = [];
  failure: TerminateCause | undefined;
  blockAt = 0;
  sends = 0;
  readEnd = 0;
  private ends = false;

  /** With `head` > 0, steered early (work.ts steerAt): only a Send's first `head` octets go to the context. */
  constructor(readonly head = 0) {}

  /** Where octet `messageOffset` of the current Send goes once steered: after the context's share, in its block. */
  private inBlock(messageOffset: number): Uint8Array {
    const head = this.head > 0 ? this.head : MPA_MAX_ULPDU - 18;
    return this.blocks.subarray(this.blockAt + messageOffset - head, this.blockAt + STORE - head);
  }

  placeTagged(opcode: number, _stag: number, _toHigh: number, toLow: number, length: number): Uint8Array | undefined {
    this.ends = opcode === RdmapOpcode.RdmaReadResponse;
    return this.blocks.subarray(toLow, this.ends ? this.readEnd : toLow + length);
  }
  placeSend(_opcode: number, messageOffset: number): Uint8Array | undefined {
    if (messageOffset === 0) {
      // Each STORE's block is its own, named by its header (here: by its order).
      this.blockAt = this.sends++ * 300_000;
      this.ends = false;
      return this.contexts.subarray(0, this.head > 0 ? this.head : 256 * 1024);
    }
    // Steered after the first segment (or its first `head` octets): the rest goes to its block.
    this.ends = true;
    return this.inBlock(messageOffset);
  }
  nextSendView(): Uint8Array | undefined {
    if (this.head === 0) return undefined;
    this.ends = true;
    return this.inBlock(this.head);
  }
  viewHoldsMessageEnd(): boolean {
    return this.ends;
  }
  taggedMessageDone(): void {
    this.events.push('tagged done');
  }
  sendMessageDone(_opcode: number, length: number): void {
    this.events.push(`send done ${length}`);
  }
  controlMessage(): void {}
  receiveFailed(cause: TerminateCause): void {
    this.failure = cause;
  }
}

/**
 * A message of `payload` cut into segments of the given payload lengths: a Send (queue 0, MSN
 * `msnOrTo`) for opcode Send, else a tagged message (RDMA Write, Read Response) at offset `msnOrTo`.
 */
function segments(opcode: number, msnOrTo: number, payload: Uint8Array, cuts: number[], crc: boolean): Uint8Array[] {
  const untagged = opcode === RdmapOpcode.Send;
  const header = untagged ? 18 : 14;
  const fpdus: Uint8Array[] = [];
  let offset = 0;
  for (const cut of cuts) {
    if (offset === payload.length) break;
    const length = Math.min(cut, payload.length - offset);
    const ulpdu = new Uint8Array(header + length);
    const common = { last: offset + length === payload.length, ddpVersion: 1, rdmapControl: rdmapControl(opcode) };
    if (untagged) encodeUntaggedHeader(ulpdu, 0, { ...common, reserved: 0, queueNumber: 0, messageSequenceNumber: msnOrTo, messageOffset: offset });
    else encodeTaggedHeader(ulpdu, 0, { ...common, stag: 5, taggedOffset: BigInt(msnOrTo + offset) });
    ulpdu.set(payload.subarray(offset, offset + length), header);
    fpdus.push(encodeFpdu(ulpdu, crc));
    offset += length;
  }
  assert.is(offset, payload.length, 'the cuts cover the message');
  return fpdus;
}

const send = (msn: number, payload: Uint8Array, cuts: number[], crc: boolean): Uint8Array[] => segments(RdmapOpcode.Send, msn, payload, cuts, crc);
const tagged = segments;

/** Segments as a sender cuts at MPA's largest ULPDU. */
function fullCuts(header: number, length: number): number[] {
  const size = MPA_MAX_ULPDU - header;
  return Array.from({ length: Math.ceil(length / size) }, () => size);
}

const concat = (parts: Uint8Array[]): Uint8Array => new Uint8Array(Buffer.concat(parts));

/**
 * Reads `stream` as SocketChannel over libuv does: a read of what readBuffer() asks, and after a
 * read that filled it, vectored reads while the receiver plans them and each is filled, then
 * libuv's next read. `arrivals` are the stream offsets up to which octets have arrived before
 * each read may go on (none: all waiting). Returns the read system calls made: vectored ones,
 * and the one that finds nothing waiting after a read that filled its buffer (EAGAIN; libuv
 * reads until a read comes back short).
 */
function readLikeSocket(receiver: FpduReceiver, stream: Uint8Array, arrivals: number[] = [], vectored = true): number {
  let offset = 0;
  let reads = 0;
  let arrival = 0;
  const waiting = (): number => {
    while (arrival < arrivals.length && arrivals[arrival]! <= offset) arrival++;
    return arrival < arrivals.length ? arrivals[arrival]! : stream.length;
  };
  let full = false;
  while (offset < stream.length && !receiver.dead) {
    const buffer = receiver.readBuffer();
    const length = Math.min(buffer.length, waiting() - offset);
    buffer.set(stream.subarray(offset, offset + length));
    offset += length;
    reads++;
    receiver.commit(length);
    full = length === buffer.length;
    if (!vectored || !full) continue;
    for (let round = 0; round < READ_AHEAD_ROUNDS; round++) {
      const vector = receiver.readVector();
      if (vector === undefined) break;
      const end = waiting();
      let read = 0;
      let planned = 0;
      for (const piece of vector) {
        planned += piece.length;
        const take = Math.min(piece.length, end - offset);
        if (take <= 0) continue;
        piece.set(stream.subarray(offset, offset + take));
        offset += take;
        read += take;
      }
      if (read === 0) {
        receiver.commitVector(0); // EAGAIN
        reads++;
        break;
      }
      reads++;
      receiver.commitVector(read);
      if (read < planned) break;
    }
  }
  // libuv's read after one that filled its buffer finds nothing more.
  return full ? reads + 1 : reads;
}

/** Ten 256 KiB STOREs as a client sends them inline: a Send each, cut at the largest ULPDU, each block at its own place. */
function stores(crc: boolean, cuts = fullCuts(18, STORE)): { stream: Uint8Array; payloads: Uint8Array[]; boundaries: number[] } {
  const payloads: Uint8Array[] = [];
  const parts: Uint8Array[] = [];
  const boundaries: number[] = [];
  let at = 0;
  for (let i = 0; i < 10; i++) {
    const payload = pattern(STORE, i + 1);
    payloads.push(payload);
    const message = concat(send(i + 1, payload, cuts, crc));
    parts.push(message);
    at += message.length;
    boundaries.push(at);
  }
  return { stream: concat(parts), payloads, boundaries };
}

/** Reads the STOREs one at a time (one in flight: each is all there is to read), as a target does; returns reads per STORE. */
function readStores(receiver: FpduReceiver, stream: Uint8Array, boundaries: number[], vectored: boolean): number[] {
  const reads: number[] = [];
  let start = 0;
  for (let i = 0; i < boundaries.length; i++) {
    reads.push(readLikeSocket(receiver, stream.subarray(start, boundaries[i]), [], vectored));
    start = boundaries[i]!;
  }
  return reads;
}

function assertStoresPlaced(sink: SteeringSink, payloads: Uint8Array[]): void {
  const first = sink.head > 0 ? sink.head : MPA_MAX_ULPDU - 18;
  assert.is(sink.failure, undefined, sink.failure?.reason);
  assert.equal(
    sink.events,
    payloads.map(() => `send done ${STORE}`),
  );
  payloads.forEach((payload, i) => {
    const block = sink.blocks.subarray(i * 300_000, i * 300_000 + STORE - first);
    assert.ok(Buffer.from(block).equals(Buffer.from(payload.subarray(first))), `STORE ${i}'s data is in its block`);
  });
}

for (const crc of [false, true]) {
  test(`a 256 KiB STORE all waiting: 4 reads, not 6 (the rest after its first FPDU in one), CRC ${crc ? 'on' : 'off'}`, () => {
    const { stream, payloads, boundaries } = stores(crc);
    const sink = new SteeringSink();
    const receiver = new FpduReceiver(sink, { crc, markers: false });
    const reads = readStores(receiver, stream, boundaries, true);
    assertStoresPlaced(sink, payloads);
    // From the third STORE on the receiver reads in bulk: the prefix, the first FPDU's payload
    // into the context (steer is still to come), one vectored read of the next three FPDUs into
    // the block, and a staged read of the short last one.
    assert.equal(reads.slice(2), [4, 4, 4, 4, 4, 4, 4, 4]);
    const plain = new SteeringSink();
    const without = readStores(new FpduReceiver(plain, { crc, markers: false }), stream, boundaries, false);
    assertStoresPlaced(plain, payloads);
    assert.equal(without.slice(2), [6, 6, 6, 6, 6, 6, 6, 6]);
  });
}

test("STOREs back to back on a connection (storeMany): 2 reads each, the next one's prefix read with the last segment", () => {
  const { stream, payloads } = stores(false);
  const sink = new SteeringSink();
  const reads = readLikeSocket(new FpduReceiver(sink, { crc: false, markers: false }), stream);
  assertStoresPlaced(sink, payloads);
  const plain = new SteeringSink();
  const without = readLikeSocket(new FpduReceiver(plain, { crc: false, markers: false }), stream, [], false);
  assertStoresPlaced(plain, payloads);
  // The first STORE meets a receiver not yet reading in bulk; from the second on, each takes
  // its first FPDU's payload into the context, then one vectored read of the rest with the next
  // STORE's prefix. Without vectored reads: 5 each (the prefix arrives with the last segment).
  assert.ok(reads <= 3 + 2 * 9, `${reads} reads for 10 STOREs`);
  assert.ok(without >= 5 * 9, `${without} reads for 10 STOREs without vectored reads`);
});

test('a 256 KiB STORE steered right after its header (CRC off): 3 reads, one of them finding nothing', () => {
  const { stream, payloads, boundaries } = stores(false);
  const sink = new SteeringSink(56);
  const reads = readStores(new FpduReceiver(sink, { crc: false, markers: false }), stream, boundaries, true);
  assertStoresPlaced(sink, payloads);
  // The prefix with the header (into the context), one vectored read of all the rest into the
  // block, and libuv's read after a full one, which finds nothing.
  assert.equal(reads.slice(2), [3, 3, 3, 3, 3, 3, 3, 3]);
  assert.equal(Buffer.from(sink.contexts.subarray(0, 56)), Buffer.from(payloads[9]!.subarray(0, 56)));
});

test('a 1 MiB Read Response all waiting: 8 FPDUs per vectored read', () => {
  const sink = new SteeringSink();
  const receiver = new FpduReceiver(sink, { crc: true, markers: false });
  const payload = pattern(1 << 20, 3);
  const cuts = fullCuts(14, payload.length);
  // A first message of another kind, longer than a staging read (STAGING_SIZE), so that its last
  // FPDUs are read as large ones are; then the Read Response (at 0x10000 in the blocks).
  const warm = concat(tagged(RdmapOpcode.RdmaWrite, 3 << 20, pattern(300_000, 9), fullCuts(14, 300_000), true));
  sink.readEnd = 0x10000 + payload.length;
  const stream = concat([warm, ...tagged(RdmapOpcode.RdmaReadResponse, 0x10000, payload, cuts, true)]);
  const reads = readLikeSocket(receiver, stream);
  assert.is(sink.failure, undefined, sink.failure?.reason);
  assert.equal(sink.events, ['tagged done', 'tagged done']);
  assert.ok(Buffer.from(sink.blocks.subarray(0x10000, 0x10000 + payload.length)).equals(Buffer.from(payload)));
  // 17 FPDUs (16 full, 1 short): after the Write (one staged read, then its last FPDU's prefix,
  // payload, tail), the Response's first payload, two vectored reads of 8 and 7, and the short last one.
  const plain = new SteeringSink();
  plain.readEnd = sink.readEnd;
  const without = readLikeSocket(new FpduReceiver(plain, { crc: true, markers: false }), stream, [], false);
  assert.ok(Buffer.from(plain.blocks.subarray(0x10000, 0x10000 + payload.length)).equals(Buffer.from(payload)));
  assert.ok(reads <= without - 13, `${reads} reads with vectored reads, ${without} without`);
});

test('segments shorter or longer than the guess, or a message that ends early: what lands is what was sent', () => {
  const first = MPA_MAX_ULPDU - 18;
  const cutsList = [
    [first, 40_000, 64_000, 64_750, 64_750, 64_750], // shorter, then longer than the one before
    [first, 64_750, 20_000, 64_750, 64_750, 64_750],
    [first, 64_000, 64_000, 64_000, 64_000, 64_000], // all a little shorter: the last guess runs past the end
  ];
  for (const cuts of cutsList) {
    for (const crc of [false, true]) {
      const { stream, payloads, boundaries } = stores(crc, cuts);
      const sink = new SteeringSink();
      readStores(new FpduReceiver(sink, { crc, markers: false }), stream, boundaries, true);
      assertStoresPlaced(sink, payloads);
    }
  }
});

test("an RDMA Write between a Send's segments (a prefix of another length than guessed): placed as sent", () => {
  const sink = new SteeringSink();
  const receiver = new FpduReceiver(sink, { crc: true, markers: false });
  const payload = pattern(STORE, 4);
  const written = pattern(70_000, 5);
  const write = tagged(RdmapOpcode.RdmaWrite, 3 << 20, written, [60_000, 10_000], true);
  // Warm up the bulk reads with one STORE first, then the Write after the second segment.
  const warm = send(1, pattern(STORE, 6), fullCuts(18, STORE), true);
  readLikeSocket(receiver, concat(warm));
  const segments = send(2, payload, fullCuts(18, STORE), true);
  readLikeSocket(receiver, concat([segments[0]!, segments[1]!, ...write, ...segments.slice(2)]));
  assert.is(sink.failure, undefined, sink.failure?.reason);
  const first = MPA_MAX_ULPDU - 18;
  assert.ok(Buffer.from(sink.blocks.subarray(300_000, 300_000 + STORE - first)).equals(Buffer.from(payload.subarray(first))), 'the STORE landed');
  assert.ok(Buffer.from(sink.blocks.subarray(3 << 20, (3 << 20) + 70_000)).equals(Buffer.from(written)), 'the Write landed');
});

test('a stream that arrives in pieces of every size: vectored reads stop short and carry on, data placed as sent', () => {
  for (const crc of [false, true]) {
    const { stream, payloads, boundaries } = stores(crc);
    let seed = crc ? 7 : 3;
    const random = (): number => {
      seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
      return seed / 2_147_483_648;
    };
    const arrivals: number[] = [];
    for (let at = 0; at < stream.length; ) {
      at += 1 + Math.floor(random() * (random() < 0.3 ? 40 : 90_000));
      arrivals.push(Math.min(at, stream.length));
    }
    const sink = new SteeringSink();
    const receiver = new FpduReceiver(sink, { crc, markers: false });
    let start = 0;
    for (let i = 0; i < boundaries.length; i++) {
      const end = boundaries[i]!;
      const pieces = arrivals.filter((at) => at > start && at < end).map((at) => at - start);
      readLikeSocket(receiver, stream.subarray(start, end), pieces);
      start = end;
    }
    assertStoresPlaced(sink, payloads);
  }
});

test('a corrupted FPDU inside a vectored read is a CRC error, not placed data taken as good', () => {
  const { stream, boundaries } = stores(true);
  const sink = new SteeringSink();
  const receiver = new FpduReceiver(sink, { crc: true, markers: false });
  // Flip an octet in the third FPDU's payload of the fourth STORE (read by a vectored read).
  const fpdu = 2 + MPA_MAX_ULPDU + 2 + 4;
  const corrupted = boundaries[2]! + 2 * fpdu + 1000;
  stream[corrupted] = stream[corrupted]! ^ 0x40;
  readStores(receiver, stream, boundaries.slice(0, 4), true);
  assert.ok(sink.failure !== undefined, 'the stream failed');
  assert.match(sink.failure!.reason, /CRC/);
  assert.is(sink.events.length, 3, 'three STOREs completed before it');
});

test.run();
