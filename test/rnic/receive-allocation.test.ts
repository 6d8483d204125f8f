// The FPDU receiver allocates nothing per large FPDU (issue 16). The allocation tests of
// test/kbtp/no-allocation.test.ts drive 1 KiB blocks, whose payloads are always staged; from
// 32 KiB a payload is read by the kernel straight into its destination (receive.ts readBuffer),
// a path that made a view per FPDU, and with such messages the staging reads in between ask for
// more lengths than their view cache kept at one offset: a view per read. Here the receiver
// alone (no transmit side, no channel: those have tests of their own) reads a stream like a
// socket with all of it waiting: messages of 96 KiB as a target and a client receive them, each
// an FPDU of 64 KiB and one of 32 KiB, both read straight into place: an RDMA Read Response into
// shared memory (the view runs on over the rest of the Read's sink, as Placement gives it), a
// Send into a shared receive buffer, an RDMA Write into an unshared buffer (the octets past it
// borrowed, receive.ts overreadRoom), with 64-octet Sends in between; every other pass each FPDU
// arrives on its own, so the staged reads between payloads ask for many different lengths.
//
// Measured as test/kbtp/no-allocation.test.ts does: the used heap over runs in which no
// collection ran, a count of octets that does not depend on the machine's speed or load, under
// one octet per message; then the rule, heap growth after a full collection under one
// octet per message over 20,000 messages (20 KB; a full collection's result varies by a few KB).
// Each message moves 96 KiB, so far fewer of them than the million 1 KiB requests there: both
// figures are per message, and a view per FPDU is about 100 octets.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { FpduReceiver, type ReceiveSink } from '../../host/rnic/receive.ts';
import type { TerminateCause } from '../../host/rnic/terminate.ts';
import { ViewCache } from '../../host/rnic/view-cache.ts';
import { heapAfterFullCollection, sampleRuns } from '../support/heap.ts';
import { encodeTaggedHeader, encodeUntaggedHeader, writeUint32 } from '../../host/rnic/wire/ddp.ts';
import { encodeFpdu, MPA_MAX_ULPDU } from '../../host/rnic/wire/mpa.ts';
import { rdmapControl, RdmapOpcode } from '../../host/rnic/wire/rdmap.ts';

const MESSAGE = 96 * 1024;
const BLOCKS = 4;
const SMALL = 64;
/** Stream offsets of the Sends' MSN fields, rewritten before each pass (MSNs never repeat). */
const msnFields: number[] = [];
/** Where each FPDU of a pass ends: a read stops there when the next one has not arrived yet. */
const fpduEnds: number[] = [];

/** Where messages land, as a QP's Placement hands it out: cached views, none made per segment. */
class PoolSink implements ReceiveSink {
  readonly shared = new Uint8Array(new SharedArrayBuffer(BLOCKS * MESSAGE * 2));
  /** An RDMA Write's destination: ordinary memory, with room after each block. */
  readonly plain = new Uint8Array(BLOCKS * MESSAGE + 4096);
  private readonly sharedViews = new ViewCache(this.shared, 64);
  private readonly plainViews = new ViewCache(this.plain, 64);
  private readEnd = 0;
  messages = 0;
  failure: TerminateCause | undefined;

  placeTagged(opcode: number, _stag: number, _toHigh: number, toLow: number, length: number, first: boolean): Uint8Array | undefined {
    if (opcode === RdmapOpcode.RdmaWrite) return this.plainViews.view(toLow, length);
    // A Read Response: the view runs on over the rest of the Read's sink (qp-placement.ts).
    if (first) this.readEnd = toLow + MESSAGE;
    return this.sharedViews.view(toLow, this.readEnd - toLow);
  }
  placeSend(_opcode: number, messageOffset: number): Uint8Array | undefined {
    // The receive buffer is the second half of the shared memory, the view its rest.
    const base = BLOCKS * MESSAGE;
    return this.sharedViews.view(base + messageOffset, MESSAGE - messageOffset);
  }
  nextSendView(): Uint8Array | undefined {
    return undefined;
  }
  taggedMessageDone(): void {
    this.messages++;
  }
  sendMessageDone(): void {
    this.messages++;
  }
  controlMessage(): void {}
  receiveFailed(cause: TerminateCause): void {
    this.failure = cause;
  }
}

/** One message of `size` octets in FPDUs as large as MPA allows, tagged at `to` or a Send (queue 0). */
function message(kind: 'read-response' | 'write' | 'send', to: number, parts: Uint8Array[], at: number, size = MESSAGE): number {
  const tagged = kind !== 'send';
  const header = tagged ? 14 : 18;
  for (let offset = 0; offset < size; ) {
    const length = Math.min(MPA_MAX_ULPDU - header, size - offset);
    const last = offset + length === size;
    const ulpdu = new Uint8Array(header + length).fill(offset & 0xff, header);
    if (tagged) {
      const opcode = kind === 'write' ? RdmapOpcode.RdmaWrite : RdmapOpcode.RdmaReadResponse;
      encodeTaggedHeader(ulpdu, 0, { last, ddpVersion: 1, rdmapControl: rdmapControl(opcode), stag: 7, taggedOffset: BigInt(to + offset) });
    } else {
      encodeUntaggedHeader(ulpdu, 0, {
        last,
        ddpVersion: 1,
        rdmapControl: rdmapControl(RdmapOpcode.Send),
        reserved: 0,
        queueNumber: 0,
        messageSequenceNumber: 0,
        messageOffset: offset,
      });
      msnFields.push(at + 2 + 10);
    }
    const fpdu = encodeFpdu(ulpdu, false);
    parts.push(fpdu);
    at += fpdu.length;
    fpduEnds.push(at);
    offset += length;
  }
  return at;
}

/**
 * A pass: for each block a Read Response, a Send and an RDMA Write of 96 KiB, each followed by a
 * Send of 64 octets (a request, a COMPLETION): the staged reads between large payloads then ask
 * for many lengths, as a target's and a client's do.
 */
function passStream(): Uint8Array {
  const parts: Uint8Array[] = [];
  let at = 0;
  for (let block = 0; block < BLOCKS; block++) {
    at = message('read-response', block * MESSAGE, parts, at);
    at = message('send', 0, parts, at, SMALL);
    at = message('send', 0, parts, at);
    at = message('send', 0, parts, at, SMALL);
    at = message('write', block * MESSAGE, parts, at);
    at = message('send', 0, parts, at, SMALL);
  }
  const stream = new Uint8Array(at);
  let offset = 0;
  for (const part of parts) {
    stream.set(part, offset);
    offset += part.length;
  }
  return stream;
}

const MESSAGES_PER_PASS = BLOCKS * 6;

class Reader {
  readonly sink = new PoolSink();
  readonly receiver = new FpduReceiver(this.sink, { crc: false, markers: false });
  private readonly stream = passStream();
  /** The stream's pieces as the reads take them: the same each pass, so a view each, made once. */
  private readonly pieces = new ViewCache(this.stream, 256);
  private msn = 1;

  /** Reads `passes` passes of the stream through readBuffer/commit, as a socket with all of it waiting would. */
  run(passes: number): void {
    const { receiver, stream } = this;
    for (let pass = 0; pass < passes; pass++) {
      let field = 0;
      for (let i = 0; i < BLOCKS; i++) {
        // A block's small Send, its large one (both FPDUs carry the MSN), two more small ones.
        writeUint32(stream, msnFields[field++]!, this.msn++);
        writeUint32(stream, msnFields[field++]!, this.msn);
        writeUint32(stream, msnFields[field++]!, this.msn++);
        writeUint32(stream, msnFields[field++]!, this.msn++);
        writeUint32(stream, msnFields[field++]!, this.msn++);
      }
      let offset = 0;
      let end = 0;
      while (offset < stream.length) {
        // Every other pass, each FPDU arrives on its own (reads end at FPDU boundaries), as the
        // sender's writes come over a socket when the reader keeps up.
        if (pass % 2 === 1) while (fpduEnds[end]! <= offset) end++;
        const arrived = pass % 2 === 1 ? fpduEnds[end]! : stream.length;
        const buffer = receiver.readBuffer();
        const length = Math.min(buffer.length, arrived - offset);
        buffer.set(this.pieces.view(offset, length));
        offset += length;
        receiver.commit(length);
      }
    }
  }
}

test('messages of 96 KiB read straight into place: the receiver allocates nothing per FPDU or read, and keeps nothing', async () => {
  const reader = new Reader();
  reader.run(200); // warm-up: compile, fill the view caches
  assert.is(reader.sink.failure, undefined, reader.sink.failure?.reason);
  assert.is(reader.sink.messages, 200 * MESSAGES_PER_PASS);
  // A view per large FPDU or per staged read is about 100 octets: a run of 4,800 messages sees it whole.
  const allocated = await sampleRuns(200 * MESSAGES_PER_PASS, () => reader.run(200));
  assert.ok(!Number.isNaN(allocated), 'every run saw a garbage collection: cannot measure allocation');
  assert.ok(allocated < 1, `${allocated.toFixed(2)} octets allocated per message`);

  const passes = Math.ceil(20_000 / MESSAGES_PER_PASS);
  const before = heapAfterFullCollection();
  reader.run(passes);
  const growth = (heapAfterFullCollection() - before) / (passes * MESSAGES_PER_PASS);
  assert.is(reader.sink.failure, undefined, reader.sink.failure?.reason);
  assert.ok(growth < 1, `heap grew ${growth.toFixed(2)} octets per message`);
  // Every FPDU's payload is filled with its message offset's low octet: each landed where it belongs.
  const tagged = MPA_MAX_ULPDU - 14;
  const untagged = MPA_MAX_ULPDU - 18;
  const holds = (memory: Uint8Array, base: number, split: number): boolean =>
    memory.subarray(base, base + split).every((octet) => octet === 0) &&
    memory.subarray(base + split, base + MESSAGE).every((octet) => octet === (split & 0xff));
  for (let block = 0; block < BLOCKS; block++) {
    assert.ok(holds(reader.sink.shared, block * MESSAGE, tagged), `Read Response ${block} placed`);
    assert.ok(holds(reader.sink.plain, block * MESSAGE, tagged), `RDMA Write ${block} placed`);
  }
  assert.ok(holds(reader.sink.shared, BLOCKS * MESSAGE, untagged), 'Send placed');
});

test.run();
