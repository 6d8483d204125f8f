// A batch of requests waiting on the socket is read at once (issue 16): make compare's 8-in-flight
// rows put eight 16 KiB requests (STOREs) or answers (LOADs' RDMA Writes and COMPLETIONs) on the
// stream in one writev. With a 64 KiB staging buffer each took 3 reads, each its own delivery and
// turn: on the target 3 reads and 3 writes of COMPLETIONs per batch of STOREs, on the client 3
// reads per batch of LOADs (strace -f -c, kbtp bench --in-flight 8 --batch).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { FpduReceiver, type ReceiveSink } from '../../host/rnic/receive.ts';
import { sharedMemoryStaging, stageInSharedMemory } from '../../host/rnic/receive-staging.ts';
import * as payloadCopy from '../../host/rnic/payload-copy.ts';
import type { TerminateCause } from '../../host/rnic/terminate.ts';
import { encodeFpdu } from '../../host/rnic/wire/mpa.ts';
import { encodeTaggedHeader, encodeUntaggedHeader } from '../../host/rnic/wire/ddp.ts';
import { rdmapControl, RdmapOpcode } from '../../host/rnic/wire/rdmap.ts';
import { pattern } from '../support/rnic.ts';

const BLOCK = 16 * 1024;
/** A KBTP request's header and Data Descriptors, ahead of an inline STORE's data. */
const REQUEST_HEADER = 64;
const COMPLETION = 64;

/** Sends land in one receive buffer per message, Writes at their tagged offset: what a QP's placement does. */
class BatchSink implements ReceiveSink {
  /** `shared`: the receive buffers lie in a SharedArrayBuffer, as a target's request contexts do. */
  constructor(shared = false) {
    const length = 16 * (BLOCK + REQUEST_HEADER);
    this.memory = new Uint8Array(shared ? new SharedArrayBuffer(length) : new ArrayBuffer(length));
  }
  readonly memory: Uint8Array;
  sends = 0;
  writes = 0;
  sendLengths: number[] = [];
  failure: TerminateCause | undefined;
  placeTagged(_opcode: number, _stag: number, _toHigh: number, toLow: number, length: number): Uint8Array | undefined {
    return this.memory.subarray(toLow, toLow + length);
  }
  placeSend(_opcode: number, _messageOffset: number, length: number): Uint8Array | undefined {
    const at = (this.sends % 16) * (BLOCK + REQUEST_HEADER);
    return this.memory.subarray(at, at + length);
  }
  nextSendView(): Uint8Array | undefined {
    return undefined;
  }
  taggedMessageDone(): void {
    this.writes++;
  }
  sendMessageDone(_opcode: number, length: number): void {
    this.sends++;
    this.sendLengths.push(length);
  }
  controlMessage(): void {}
  receiveFailed(cause: TerminateCause): void {
    this.failure = cause;
  }
}

function send(msn: number, payload: Uint8Array): Uint8Array {
  const ulpdu = new Uint8Array(18 + payload.length);
  encodeUntaggedHeader(ulpdu, 0, {
    last: true,
    ddpVersion: 1,
    rdmapControl: rdmapControl(RdmapOpcode.Send),
    reserved: 0,
    queueNumber: 0,
    messageSequenceNumber: msn,
    messageOffset: 0,
  });
  ulpdu.set(payload, 18);
  return encodeFpdu(ulpdu, false);
}

function write(to: number, payload: Uint8Array): Uint8Array {
  const ulpdu = new Uint8Array(14 + payload.length);
  encodeTaggedHeader(ulpdu, 0, { last: true, ddpVersion: 1, rdmapControl: rdmapControl(RdmapOpcode.RdmaWrite), stag: 0x100, taggedOffset: BigInt(to) });
  ulpdu.set(payload, 14);
  return encodeFpdu(ulpdu, false);
}

const concat = (parts: Uint8Array[]): Uint8Array => new Uint8Array(Buffer.concat(parts));

const same = (a: Uint8Array, b: Uint8Array): boolean => Buffer.compare(a, b) === 0;

/** Reads `stream` like a socket with all of it waiting; returns the number of reads. */
function reads(receiver: FpduReceiver, stream: Uint8Array): number {
  let count = 0;
  for (let offset = 0; offset < stream.length; count++) {
    const buffer = receiver.readBuffer();
    const length = Math.min(buffer.length, stream.length - offset);
    buffer.set(stream.subarray(offset, offset + length));
    offset += length;
    receiver.commit(length);
  }
  return count;
}

test('eight 16 KiB inline STOREs waiting on the socket come in one read', () => {
  const sink = new BatchSink();
  const receiver = new FpduReceiver(sink, { crc: false, markers: false });
  const batch = (first: number): Uint8Array => concat(Array.from({ length: 8 }, (_, i) => send(first + i, pattern(REQUEST_HEADER + BLOCK, first + i))));
  // Twice: the second batch after the receiver has seen the first (what it learned must not split reads).
  assert.is(reads(receiver, batch(1)), 1);
  assert.is(reads(receiver, batch(9)), 1);
  assert.is(sink.failure, undefined);
  assert.is(sink.sends, 16);
  assert.ok(sink.sendLengths.every((length) => length === REQUEST_HEADER + BLOCK));
  // The last message of the second batch, in the last receive buffer.
  assert.ok(same(sink.memory.subarray(15 * (BLOCK + REQUEST_HEADER), 16 * (BLOCK + REQUEST_HEADER)), pattern(REQUEST_HEADER + BLOCK, 16)));
});

test("eight LOADs' answers (16 KiB RDMA Write, COMPLETION Send) waiting on the socket come in one read", () => {
  const sink = new BatchSink();
  const receiver = new FpduReceiver(sink, { crc: false, markers: false });
  let msn = 1;
  const batch = (): Uint8Array =>
    concat(Array.from({ length: 8 }, (_, i) => [write(i * BLOCK, pattern(BLOCK, i)), send(msn++, pattern(COMPLETION, 100 + i))]).flat());
  assert.is(reads(receiver, batch()), 1);
  assert.is(reads(receiver, batch()), 1);
  assert.is(sink.failure, undefined);
  assert.is(sink.writes, 16);
  assert.is(sink.sends, 16);
  assert.ok(same(sink.memory.subarray(3 * BLOCK, 4 * BLOCK), pattern(BLOCK, 3)));
});

test("a target's thread stages in shared memory: inline STOREs reach their shared contexts by memmove, octet for octet", () => {
  stageInSharedMemory(true);
  try {
    assert.ok(sharedMemoryStaging?.buffer instanceof SharedArrayBuffer);
    const sink = new BatchSink(true);
    const receiver = new FpduReceiver(sink, { crc: false, markers: false });
    const moved = payloadCopy.sharedMoves;
    const batch = (first: number): Uint8Array => concat(Array.from({ length: 8 }, (_, i) => send(first + i, pattern(REQUEST_HEADER + BLOCK, first + i))));
    assert.is(reads(receiver, batch(1)), 1);
    assert.is(reads(receiver, batch(9)), 1);
    assert.is(sink.failure, undefined);
    assert.is(sink.sends, 16);
    // Each STORE's payload (its request and data) went by memmove, none through V8's shared-memory copy.
    assert.is(payloadCopy.sharedMoves - moved, 16);
    for (let i = 0; i < 16; i++) {
      const at = i * (BLOCK + REQUEST_HEADER);
      assert.ok(same(sink.memory.subarray(at, at + BLOCK + REQUEST_HEADER), pattern(REQUEST_HEADER + BLOCK, i + 1)), `STORE ${i + 1}`);
    }
  } finally {
    stageInSharedMemory(false);
  }
  assert.is(sharedMemoryStaging, undefined);
});

test.run();
