// The FPDU receiver on its own: direct placement through readBuffer/commit, reads that stop at
// payload boundaries (or run on into the trailer and next header through memory that is put back),
// marker removal, and a receiver fed from inside another one's commit.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { FpduReceiver, DIRECT_PLACEMENT_MIN, type ReceiveSink } from '../../host/rnic/receive.ts';
import { copyPayload } from '../../host/rnic/payload-copy.ts';
import { feed } from '../../host/rnic/channel.ts';
import type { TerminateCause } from '../../host/rnic/terminate.ts';
import { encodeFpdu } from '../../host/rnic/wire/mpa.ts';
import { encodeFpduWithMarkers } from '../../host/rnic/wire/markers.ts';
import { encodeTaggedHeader, encodeUntaggedHeader } from '../../host/rnic/wire/ddp.ts';
import { rdmapControl, RdmapOpcode } from '../../host/rnic/wire/rdmap.ts';
import { pattern } from '../support/rnic.ts';

class RecordingSink implements ReceiveSink {
  constructor(readonly target: Uint8Array = new Uint8Array(1 << 20)) {}
  readonly events: string[] = [];
  failure: TerminateCause | undefined;
  onControl: ((fpdu: Uint8Array) => void) | undefined;
  placeTagged(_opcode: number, stag: number, toHigh: number, toLow: number, length: number): Uint8Array | undefined {
    const taggedOffset = toHigh * 2 ** 32 + toLow;
    this.events.push(`tagged ${stag.toString(16)} ${taggedOffset} ${length}`);
    return this.target.subarray(taggedOffset, taggedOffset + length);
  }
  placeSend(_opcode: number, messageOffset: number, length: number): Uint8Array | undefined {
    this.events.push(`send ${messageOffset} ${length}`);
    return this.target.subarray(messageOffset, messageOffset + length);
  }
  nextSendView(): Uint8Array | undefined {
    return undefined;
  }
  taggedMessageDone(): void {
    this.events.push('tagged done');
  }
  sendMessageDone(_opcode: number, length: number): void {
    this.events.push(`send done ${length}`);
  }
  controlMessage(opcode: number, fpdu: Uint8Array): void {
    this.events.push(`control ${opcode} ${fpdu[fpdu.length - 1]}`);
    this.onControl?.(fpdu);
  }
  receiveFailed(cause: TerminateCause): void {
    this.failure = cause;
  }
}

function write(stag: number, to: number, payload: Uint8Array, crc = true, last = true): Uint8Array {
  const ulpdu = new Uint8Array(14 + payload.length);
  encodeTaggedHeader(ulpdu, 0, { last, ddpVersion: 1, rdmapControl: rdmapControl(RdmapOpcode.RdmaWrite), stag, taggedOffset: BigInt(to) });
  ulpdu.set(payload, 14);
  return encodeFpdu(ulpdu, crc);
}

/** One segment of a Send (queue 0) of message `msn`, at message offset `offset`. */
function send(msn: number, offset: number, payload: Uint8Array, last: boolean): Uint8Array {
  const ulpdu = new Uint8Array(18 + payload.length);
  encodeUntaggedHeader(ulpdu, 0, {
    last,
    ddpVersion: 1,
    rdmapControl: rdmapControl(RdmapOpcode.Send),
    reserved: 0,
    queueNumber: 0,
    messageSequenceNumber: msn,
    messageOffset: offset,
  });
  ulpdu.set(payload, 18);
  return encodeFpdu(ulpdu, true);
}

/** A sink whose Sends land in a receive buffer of `capacity` octets at the start of `memory`, as a QP's do: the view runs to the buffer's end. */
class ReceiveBufferSink extends RecordingSink {
  constructor(
    memory: Uint8Array,
    private readonly capacity: number,
  ) {
    super(memory);
  }
  override placeSend(opcode: number, messageOffset: number, length: number): Uint8Array | undefined {
    super.placeSend(opcode, messageOffset, length);
    return this.target.subarray(messageOffset, this.capacity);
  }
}

function immediate(msn: number, tag = 0, crc = true): Uint8Array {
  const ulpdu = new Uint8Array(26);
  encodeUntaggedHeader(ulpdu, 0, {
    last: true,
    ddpVersion: 1,
    rdmapControl: rdmapControl(RdmapOpcode.ImmediateData),
    reserved: 0,
    queueNumber: 0,
    messageSequenceNumber: msn,
    messageOffset: 0,
  });
  ulpdu[25] = tag | msn;
  return encodeFpdu(ulpdu, crc);
}

/** Reads `stream` like a socket that has all of it waiting: each read's size and whether it went straight to `target`. */
function readStream(receiver: FpduReceiver, target: Uint8Array, stream: Uint8Array): Array<[number, boolean]> {
  const reads: Array<[number, boolean]> = [];
  let offset = 0;
  while (offset < stream.length) {
    const buffer = receiver.readBuffer();
    const length = Math.min(buffer.length, stream.length - offset);
    buffer.set(stream.subarray(offset, offset + length));
    reads.push([length, buffer.buffer === target.buffer]);
    offset += length;
    receiver.commit(length);
  }
  return reads;
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

test('after a large FPDU, reads stop at the next payload, which the kernel places directly', () => {
  const sink = new RecordingSink();
  const receiver = new FpduReceiver(sink, { crc: true, markers: false });
  const payload = pattern(60_000, 1);
  // First FPDU: nothing known yet, so one staging read takes all of it (and copies it).
  assert.equal(readStream(receiver, sink.target, write(7, 1000, payload)), [[60_020, false]]);
  // From then on: the header, then the payload straight into the target; the trailer of a
  // message's last FPDU is read apart (the memory after it is not the message's).
  assert.equal(readStream(receiver, sink.target, write(7, 70_000, payload)), [
    [16, false],
    [60_000, true],
    [4, false],
  ]);
  assert.is(sink.failure, undefined);
  assert.equal(sink.events, ['tagged 7 1000 60000', 'tagged done', 'tagged 7 70000 60000', 'tagged done']);
  assert.is(Buffer.compare(Buffer.from(sink.target.subarray(70_000, 130_000)), Buffer.from(payload)), 0);
  assert.is(Buffer.compare(Buffer.from(sink.target.subarray(1000, 61_000)), Buffer.from(payload)), 0);
  assert.ok(DIRECT_PLACEMENT_MIN <= 60_000);
});

test('large FPDUs take one read each; the memory after each payload is put back', () => {
  // The block ends 10 octets before its buffer does, and those octets belong to someone else.
  const memory = new Uint8Array(3 * 50_000 + 10).fill(0xee);
  const sink = new RecordingSink(memory);
  const receiver = new FpduReceiver(sink, { crc: true, markers: false });
  const payloads = [pattern(50_000, 2), pattern(50_000, 3), pattern(49_999, 4)];
  readStream(receiver, memory, write(9, 0, pattern(50_000, 5))); // the first FPDU goes through staging
  // One RDMA Write message of three FPDUs (L=0, L=0, L=1).
  const stream = concat([
    write(9, 0, payloads[0]!, true, false),
    write(9, 50_000, payloads[1]!, true, false),
    write(9, 100_000, payloads[2]!),
    immediate(1, 0x40),
  ]);
  const reads = readStream(receiver, memory, stream);
  // Header; then each payload of the message but the last with its trailer and the next FPDU's
  // 16-octet prefix; the last FPDU's payload alone (the memory after it is someone else's), then
  // its PAD and CRC and the whole Immediate Data FPDU in one staged read (a message's end reads a
  // little past the next prefix: three reads before).
  assert.equal(reads, [
    [16, false],
    [50_020, true],
    [50_020, true],
    [49_999, true],
    [37, false],
  ]);
  assert.is(sink.failure, undefined);
  assert.equal(sink.events.slice(2), ['tagged 9 0 50000', 'tagged 9 50000 50000', 'tagged 9 100000 49999', 'tagged done', 'control 8 65']);
  for (let i = 0; i < 3; i++) assert.is(Buffer.compare(memory.subarray(i * 50_000, i * 50_000 + payloads[i]!.length), payloads[i]!), 0, `payload ${i}`);
  assert.equal([...memory.subarray(149_999)], new Array(11).fill(0xee), 'the octets after the block are as they were');
});

test("a LOAD's answer: the RDMA Write's short last segment and the COMPLETION Send after it come in one read", () => {
  // A 256 KiB block is 4 FPDUs of 64,756 payload octets and a last one of 3,120 (MPA's 16-bit
  // length); the target writes the COMPLETION Send behind it. That short tail is staged (below
  // DIRECT_PLACEMENT_MIN), and its read now runs on over the small Send (issue 16: 7 reads per
  // 256 KiB LOAD on the client, one of them for the COMPLETION's last 44 octets).
  const memory = new Uint8Array(300_000);
  const sink = new RecordingSink(memory);
  const receiver = new FpduReceiver(sink, { crc: false, markers: false });
  readStream(receiver, memory, concat([write(2, 0, pattern(60_000, 20)), send(1, 0, pattern(24, 21), true)])); // through staging; learns the Send after the Write
  const parts = [pattern(60_000, 22), pattern(60_000, 23), pattern(3_120, 24)];
  const completion = pattern(24, 25);
  const reads = readStream(
    receiver,
    memory,
    concat([write(2, 100_000, parts[0]!, true, false), write(2, 160_000, parts[1]!, true, false), write(2, 220_000, parts[2]!), send(2, 0, completion, true)]),
  );
  assert.equal(reads, [
    [16, false],
    [60_020, true],
    [60_020, true],
    [3_120 + 4 + 48, false], // the tail, its CRC field, the whole Send FPDU (48 octets)
  ]);
  assert.is(sink.failure, undefined);
  assert.equal(sink.events.slice(-4), ['tagged 2 220000 3120', 'tagged done', 'send 0 24', 'send done 24']);
  for (let i = 0; i < 3; i++) {
    const at = 100_000 + i * 60_000;
    assert.is(Buffer.compare(memory.subarray(at, at + parts[i]!.length), parts[i]!), 0, `segment ${i}`);
  }
  assert.is(Buffer.compare(memory.subarray(0, 24), completion), 0, 'the COMPLETION');
});

test("after a message's last FPDU nothing is borrowed: the application's writes next to the block between reads are kept", () => {
  const memory = new Uint8Array(200_000).fill(0xee);
  const sink = new RecordingSink(memory);
  const receiver = new FpduReceiver(sink, { crc: true, markers: false });
  readStream(receiver, memory, write(5, 0, pattern(60_000, 7))); // through staging
  const payload = pattern(60_000, 8);
  const stream = concat([write(5, 100_000, payload), immediate(1, 0x40)]);
  let offset = 0;
  while (offset < stream.length) {
    const buffer = receiver.readBuffer();
    // The application writes the block after the landing one while the read is pending (Node
    // hands out the next read's buffer right after the previous read).
    if (buffer.buffer === memory.buffer) memory.fill(0x5a, 160_000, 160_064);
    const length = Math.min(buffer.length, stream.length - offset);
    buffer.set(stream.subarray(offset, offset + length));
    offset += length;
    receiver.commit(length);
  }
  assert.is(sink.failure, undefined);
  assert.is(Buffer.compare(memory.subarray(100_000, 160_000), payload), 0);
  assert.equal([...memory.subarray(160_000, 160_064)], new Array(64).fill(0x5a), "the application's write stands");
});

test('memory shared with other threads is never read past a tagged payload', () => {
  const memory = new Uint8Array(new SharedArrayBuffer(1 << 20));
  const sink = new RecordingSink(memory);
  const receiver = new FpduReceiver(sink, { crc: true, markers: false });
  const payload = pattern(60_000, 6);
  readStream(receiver, memory, write(3, 0, payload));
  // Also inside a message (L=0): a tagged segment's view is its payload and no more.
  assert.equal(readStream(receiver, memory, concat([write(3, 100_000, payload, true, false), write(3, 160_000, payload)])), [
    [16, false],
    [60_000, true],
    [20, false],
    [60_000, true],
    [4, false],
  ]);
  assert.is(Buffer.compare(memory.subarray(100_000, 160_000), payload), 0);
  assert.is(Buffer.compare(memory.subarray(160_000, 220_000), payload), 0);
  assert.is(sink.failure, undefined);
});

test("a Send of several FPDUs into a shared receive buffer takes one read per FPDU, borrowing only the buffer's own memory", () => {
  // A target's request contexts are WebAssembly shared memory (issue 16: a 256 KiB inline STORE
  // took 15 reads, three per FPDU). The receive buffer is the first 200,000 octets; after it,
  // another context's memory that must never be touched.
  const memory = new Uint8Array(new SharedArrayBuffer(300_000)).fill(0xee);
  const sink = new ReceiveBufferSink(memory, 200_000);
  const receiver = new FpduReceiver(sink, { crc: true, markers: false });
  readStream(receiver, memory, send(1, 0, pattern(60_000, 9), true)); // through staging
  const parts = [pattern(60_000, 10), pattern(60_000, 11), pattern(50_000, 12)];
  const message = (msn: number): Uint8Array =>
    concat([send(msn, 0, parts[0]!, false), send(msn, 60_000, parts[1]!, false), send(msn, 120_000, parts[2]!, true)]);
  const borrowed = memory.slice(170_000, 200_000);
  // The first header is read whole (a Send followed the last Send); each payload but the last
  // with its CRC and the next segment's whole 20-octet untagged prefix; the last one's CRC apart.
  assert.equal(readStream(receiver, memory, message(2)), [
    [20, false],
    [60_024, true],
    [60_024, true],
    [50_000, true],
    [4, false],
  ]);
  assert.is(sink.failure, undefined);
  assert.equal(sink.events.slice(-4), ['send 0 60000', 'send 60000 60000', 'send 120000 50000', 'send done 170000']);
  for (let i = 0; i < 3; i++) assert.is(Buffer.compare(memory.subarray(i * 60_000, i * 60_000 + parts[i]!.length), parts[i]!), 0, `segment ${i}`);
  assert.is(Buffer.compare(memory.subarray(170_000, 200_000), borrowed), 0, 'the rest of the receive buffer is as it was');
  assert.equal([...new Set(memory.subarray(200_000))], [0xee], 'the memory after the receive buffer is untouched');
});

test("a Read Response into shared memory borrows only the rest of the Read's sink", () => {
  // qp-placement.ts hands a Read Response segment a view running on over the rest of the Read's
  // sink (a target's pool block being stored, issue 16): one read per segment, never past the sink.
  const memory = new Uint8Array(new SharedArrayBuffer(300_000)).fill(0xee);
  const sinkEnd = 150_000;
  const sink = new RecordingSink(memory);
  sink.placeTagged = (_opcode, stag, toHigh, toLow, length) => {
    sink.events.push(`tagged ${stag} ${toHigh * 2 ** 32 + toLow} ${length}`);
    return memory.subarray(toLow, sinkEnd);
  };
  const receiver = new FpduReceiver(sink, { crc: true, markers: false });
  readStream(receiver, memory, write(4, 0, pattern(60_000, 16))); // through staging
  memory.fill(0xee);
  const parts = [pattern(60_000, 17), pattern(60_000, 18), pattern(30_000, 19)];
  const reads = readStream(
    receiver,
    memory,
    concat([write(4, 0, parts[0]!, true, false), write(4, 60_000, parts[1]!, true, false), write(4, 120_000, parts[2]!)]),
  );
  assert.equal(reads, [
    [16, false],
    [60_020, true],
    [60_020, true],
    [30_004, false], // below DIRECT_PLACEMENT_MIN: staged with its CRC
  ]);
  assert.is(sink.failure, undefined);
  for (let i = 0; i < 3; i++) assert.is(Buffer.compare(memory.subarray(i * 60_000, i * 60_000 + parts[i]!.length), parts[i]!), 0, `segment ${i}`);
  assert.equal([...new Set(memory.subarray(sinkEnd))], [0xee], 'nothing after the sink was touched');
});

test("a read past a Send's payload stops at the end of its receive buffer", () => {
  // The receive buffer ends 10 octets after the first segment's payload: the read takes those
  // 10 (the message's last segment lands there), never the shared memory after the buffer.
  const memory = new Uint8Array(new SharedArrayBuffer(100_000)).fill(0xee);
  const sink = new ReceiveBufferSink(memory, 60_010);
  const receiver = new FpduReceiver(sink, { crc: true, markers: false });
  readStream(receiver, memory, send(1, 0, pattern(60_010, 13), true)); // through staging
  memory.fill(0xee);
  const tail = pattern(10, 14);
  const reads = readStream(receiver, memory, concat([send(2, 0, pattern(60_000, 15), false), send(2, 60_000, tail, true)]));
  assert.equal(reads.slice(0, 2), [
    [20, false],
    [60_010, true],
  ]);
  assert.is(sink.failure, undefined);
  assert.is(Buffer.compare(memory.subarray(0, 60_000), pattern(60_000, 15)), 0);
  assert.is(Buffer.compare(memory.subarray(60_000, 60_010), tail), 0);
  assert.equal([...new Set(memory.subarray(60_010))], [0xee], 'nothing after the receive buffer was touched');
});

test('payloads land octet for octet in shared memory at any alignment of source and destination', () => {
  // Misaligned copies into shared memory go through a bounce buffer (V8 copies them octet by
  // octet otherwise); every pair of alignments, short and long, must place the same octets and
  // touch nothing around them.
  const source = pattern(4096, 11);
  for (const shared of [true, false]) {
    const memory = new Uint8Array(shared ? new SharedArrayBuffer(8192) : new ArrayBuffer(8192));
    for (const length of [100, 300, 3000]) {
      for (let from = 0; from < 8; from++) {
        for (let at = 0; at < 8; at++) {
          memory.fill(0xee);
          const target = memory.subarray(64 + at, 64 + at + length + 16);
          copyPayload(target, 0, source, from, length);
          const where = `${shared ? 'shared' : 'plain'} length ${length} from ${from} at ${at}`;
          assert.is(Buffer.compare(memory.subarray(64 + at, 64 + at + length), source.subarray(from, from + length)), 0, where);
          assert.ok(
            memory.subarray(0, 64 + at).every((octet) => octet === 0xee),
            `${where}: nothing before`,
          );
          assert.ok(
            memory.subarray(64 + at + length).every((octet) => octet === 0xee),
            `${where}: nothing after`,
          );
        }
      }
    }
  }
  // Through the receiver: a staged 16,000-octet RDMA Write into shared memory at odd offsets.
  const memory = new Uint8Array(new SharedArrayBuffer(1 << 16));
  const sink = new RecordingSink(memory);
  const receiver = new FpduReceiver(sink, { crc: true, markers: false });
  const payload = pattern(16_000, 12);
  for (const to of [5, 20_003]) {
    readStream(receiver, memory, write(4, to, payload));
    assert.is(Buffer.compare(memory.subarray(to, to + payload.length), payload), 0, `placed at ${to}`);
  }
  assert.is(sink.failure, undefined);
});

test('markers are removed, checked and covered by the CRC, in any chunking', () => {
  for (const pieces of [1, 7, 512, 100_000]) {
    const sink = new RecordingSink();
    const receiver = new FpduReceiver(sink, { crc: true, markers: true });
    const chunks: Uint8Array[] = [];
    let offset = 0;
    for (const [to, size] of [
      [0, 1000],
      [5000, 20_000],
      [40_000, 3],
    ] as const) {
      const ulpdu = new Uint8Array(14 + size);
      encodeTaggedHeader(ulpdu, 0, { last: true, ddpVersion: 1, rdmapControl: 0x40, stag: 9, taggedOffset: BigInt(to) });
      ulpdu.set(pattern(size, to + 1), 14);
      const framed = encodeFpduWithMarkers(ulpdu, offset, true);
      offset = framed.nextStreamOffset;
      chunks.push(framed.bytes);
    }
    const stream = new Uint8Array(chunks.reduce((sum, chunk) => sum + chunk.length, 0));
    chunks.reduce((at, chunk) => {
      stream.set(chunk, at);
      return at + chunk.length;
    }, 0);
    for (let at = 0; at < stream.length; at += pieces) feed(() => receiver, stream.subarray(at, at + pieces));
    assert.is(sink.failure, undefined, `chunks of ${pieces}`);
    assert.is(sink.events.filter((event) => event === 'tagged done').length, 3);
    assert.is(Buffer.compare(Buffer.from(sink.target.subarray(5000, 25_000)), Buffer.from(pattern(20_000, 5001))), 0);
  }
  // A marker whose FPDUPTR lies is an MPA marker error (when the CRC still matches).
  const sink = new RecordingSink();
  const receiver = new FpduReceiver(sink, { crc: false, markers: true });
  const ulpdu = new Uint8Array(14 + 600);
  encodeTaggedHeader(ulpdu, 0, { last: true, ddpVersion: 1, rdmapControl: 0x40, stag: 9, taggedOffset: 0n });
  const framed = encodeFpduWithMarkers(ulpdu, 0, false).bytes.slice();
  framed[512 + 3] = 0x10; // the marker at 512 should point 508 back
  feed(() => receiver, framed);
  assert.equal([sink.failure?.layer, sink.failure?.errorType, sink.failure?.errorCode], [2, 0, 3]);
});

test("a receiver fed from inside another receiver's commit does not disturb it", () => {
  const inner = new RecordingSink();
  const innerReceiver = new FpduReceiver(inner, { crc: true, markers: false });
  const outer = new RecordingSink();
  const outerReceiver = new FpduReceiver(outer, { crc: true, markers: false });
  // Each control message the outer stream delivers makes the inner stream receive two FPDUs.
  let next = 1;
  outer.onControl = () => {
    feed(() => innerReceiver, new Uint8Array([...immediate(next, 0x80), ...immediate(next + 1, 0x80)]));
    next += 2;
  };
  const stream = new Uint8Array([...immediate(1), ...immediate(2), ...immediate(3), ...immediate(4)]);
  feed(() => outerReceiver, stream);
  assert.is(outer.failure, undefined);
  assert.is(inner.failure, undefined);
  assert.equal(outer.events, ['control 8 1', 'control 8 2', 'control 8 3', 'control 8 4']);
  assert.equal(
    inner.events,
    [1, 2, 3, 4, 5, 6, 7, 8].map((msn) => `control 8 ${0x80 | msn}`),
  );
});

test.run();
