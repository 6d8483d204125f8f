// Every hex example of ../shared/reference/iwarp.md (§2.5 CRC vectors, §9 FPDUs and frames),
// encoded and decoded byte for byte.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { crc32c as nodeRsCrc32c } from '@node-rs/crc32';
import { crc32cOf, crc32cUpdate, mpaCrcImplementation, readCrc } from '../../host/rnic/wire/crc.ts';
import { loadIsal } from '../../host/util/isal.ts';
import { Random } from '../../host/util/random.ts';
import { decodeFpdu, decodeMpaFrame, encodeFpdu, encodeMpaFrame, fpduLength, computeMulpdu, MPA_REVISION_2 } from '../../host/rnic/wire/mpa.ts';
import { encodeFpduWithMarkers, stripMarkers, decodeMarker } from '../../host/rnic/wire/markers.ts';
import { decodeDdpHeader, encodeTaggedHeader, encodeUntaggedHeader, DDP_VERSION } from '../../host/rnic/wire/ddp.ts';
import { decodeRdmapSegment, encodeReadRequest, RdmapOpcode, rdmapControl, READ_REQUEST_HEADER_LENGTH } from '../../host/rnic/wire/rdmap.ts';
import {
  AtomicOpcode,
  encodeAtomicRequest,
  encodeAtomicResponse,
  encodeImmediateData,
  ALL_ONES_64,
  maskedFetchAdd,
  maskedCompareSwap,
} from '../../host/rnic/wire/atomics.ts';

const hex = (text: string): Uint8Array => new Uint8Array(Buffer.from(text.replace(/^[0-9a-f]{4}:/gm, '').replace(/[^0-9a-f]/gi, ''), 'hex'));
const toHex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');
const ascii = (text: string): Uint8Array => new Uint8Array(Buffer.from(text, 'latin1'));

function untagged(opcode: number, queue: number, msn: number, body: Uint8Array, reserved = 0): Uint8Array {
  const ulpdu = new Uint8Array(18 + body.length);
  encodeUntaggedHeader(ulpdu, 0, {
    last: true,
    ddpVersion: DDP_VERSION,
    rdmapControl: rdmapControl(opcode),
    reserved,
    queueNumber: queue,
    messageSequenceNumber: msn,
    messageOffset: 0,
  });
  ulpdu.set(body, 18);
  return ulpdu;
}

test('CRC32c test vectors of iwarp.md §2.5 (RFC 3720 B.4)', () => {
  assert.is(crc32cOf(ascii('123456789')), 0xe3069283);
  assert.is(crc32cOf(new Uint8Array(32)), 0x8a9136aa);
  assert.is(crc32cOf(new Uint8Array(32).fill(0xff)), 0x62a8ab43);
  assert.is(crc32cOf(Uint8Array.from({ length: 32 }, (_, i) => i)), 0x46dd794e);
  assert.is(crc32cOf(Uint8Array.from({ length: 32 }, (_, i) => 31 - i)), 0x113fdb5c);
  // Incremental over any split equals one pass.
  const data = ascii('123456789');
  assert.is(crc32cUpdate(crc32cUpdate(0, data.subarray(0, 4)), data.subarray(4)), 0xe3069283);
  assert.is(crc32cUpdate(0x1234, new Uint8Array(0)), 0x1234);
});

test('MPA CRC32c from 64 octets up (ISA-L where libisal2 loads) equals @node-rs/crc32 over any split, in shared and plain memory', () => {
  const isal = loadIsal();
  if (!(isal instanceof Error) && process.env.KBTP_CRC32C !== 'node-rs') assert.match(mpaCrcImplementation(), /^ISA-L/);
  const random = new Random(15);
  for (const shared of [false, true]) {
    const memory = shared ? new Uint8Array(new SharedArrayBuffer(80_000)) : new Uint8Array(80_000);
    for (let i = 0; i < memory.length; i++) memory[i] = random.next() & 0xff;
    for (const length of [63, 64, 65, 1000, 4096, 4113, 65_536, 70_001]) {
      const start = random.below(memory.length - length);
      const bytes = memory.subarray(start, start + length);
      const whole = nodeRsCrc32c(Buffer.from(bytes), 0);
      assert.is(crc32cOf(bytes), whole, `${length} octets at ${start}${shared ? ' (shared)' : ''}`);
      const split = random.below(length);
      assert.is(crc32cUpdate(crc32cUpdate(0, bytes.subarray(0, split)), bytes.subarray(split)), whole, `${length} octets split at ${split}`);
    }
  }
});

const FIG5 = hex(`
0000: 00 00 00 00 00 2a 41 43 00 00 00 00 00 00 00 00
0010: 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 00
0020: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
0030: 52 23 99 83`);

const FIG6 = hex(`
01ec: 00 2a 41 43 00 00 00 00 00 00 00 00 00 00 00 02
01fc: 00 00 00 00 00 00 00 14 00 00 00 00 00 00 00 00
020c: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
021c: 84 92 58 98`);

test('§9.1 RFC 5044 Fig. 5 and Fig. 6: markers and CRC reproduced exactly', () => {
  const send = (msn: number) => untagged(RdmapOpcode.Send, 0, msn, new Uint8Array(24));
  const first = encodeFpduWithMarkers(send(1), 0, true);
  assert.is(toHex(first.bytes), toHex(FIG5));
  assert.is(readCrc(FIG5, 48), 0x83992352);
  assert.is(crc32cOf(FIG5.subarray(0, 48)), 0x83992352);
  // Fig. 6: the second FPDU starts at 0x1EC, so the marker at 0x200 falls inside it.
  const second = encodeFpduWithMarkers(send(2), 0x1ec, true);
  assert.is(toHex(second.bytes), toHex(FIG6));
  assert.is(decodeMarker(FIG6, 0x14), 0x14);
  assert.is(crc32cOf(FIG6.subarray(0, 48)), 0x98589284);
  assert.is(second.nextStreamOffset, 0x1ec + 52);
  // A stream holding both (with filler FPDUs between) strips back to marker-free FPDUs.
  const stream = new Uint8Array(0x1ec + FIG6.length);
  stream.set(FIG5, 0);
  let offset = FIG5.length;
  while (offset < 0x1ec) {
    const filler = encodeFpduWithMarkers(untagged(RdmapOpcode.Send, 0, 9, new Uint8Array(Math.min(200, 0x1ec - offset - 26))), offset, true);
    stream.set(filler.bytes, offset);
    offset = filler.nextStreamOffset;
  }
  assert.is(offset, 0x1ec);
  stream.set(FIG6, 0x1ec);
  const stripped = stripMarkers(stream);
  assert.equal(stripped.markers, [
    { streamOffset: 0, fpduPointer: 0 },
    { streamOffset: 512, fpduPointer: 0x14 },
  ]);
  const firstFpdu = decodeFpdu(stripped.bytes);
  assert.ok(firstFpdu);
  assert.is(firstFpdu.length, 48);
  const segment = decodeRdmapSegment(firstFpdu.ulpdu);
  assert.is(segment.opcode, RdmapOpcode.Send);
  assert.is(segment.payload.length, 24);
});

const SEND_HELLO = hex(`
0000: 00 17 41 43 00 00 00 00 00 00 00 00 00 00 00 01
0010: 00 00 00 00 68 65 6c 6c 6f 00 00 00 b9 90 b1 0c`);

test('§9.2 untagged Send "hello" with PAD', () => {
  const fpdu = encodeFpdu(untagged(RdmapOpcode.Send, 0, 1, ascii('hello')), true);
  assert.is(toHex(fpdu), toHex(SEND_HELLO));
  assert.is(fpduLength(23), 32);
  const decoded = decodeFpdu(SEND_HELLO);
  assert.ok(decoded);
  assert.is(decoded.crc, 0x0cb190b9);
  assert.is(decoded.computedCrc, 0x0cb190b9);
  assert.is(decoded.padding.length, 3);
  const segment = decodeRdmapSegment(decoded.ulpdu);
  assert.is(segment.ddp.tagged, false);
  if (segment.ddp.tagged) return;
  assert.is(segment.ddp.queueNumber, 0);
  assert.is(segment.ddp.messageSequenceNumber, 1);
  assert.is(segment.ddp.messageOffset, 0);
  assert.is(Buffer.from(segment.payload).toString(), 'hello');
});

const WRITE = hex(`
0000: 00 16 c1 40 12 34 56 78 00 00 00 00 00 00 10 00
0010: 00 01 02 03 04 05 06 07 ea ef b4 f7`);

test('§9.3 tagged RDMA Write', () => {
  const ulpdu = new Uint8Array(22);
  encodeTaggedHeader(ulpdu, 0, { last: true, ddpVersion: 1, rdmapControl: rdmapControl(RdmapOpcode.RdmaWrite), stag: 0x12345678, taggedOffset: 0x1000n });
  ulpdu.set([0, 1, 2, 3, 4, 5, 6, 7], 14);
  assert.is(toHex(encodeFpdu(ulpdu, true)), toHex(WRITE));
  const decoded = decodeFpdu(WRITE);
  assert.ok(decoded);
  assert.is(decoded.computedCrc, 0xf7b4efea);
  const header = decodeDdpHeader(decoded.ulpdu);
  assert.equal(header, { tagged: true, last: true, ddpVersion: 1, rdmapControl: 0x40, stag: 0x12345678, taggedOffset: 0x1000n });
});

const READ_REQUEST = hex(`
0000: 00 2e 41 41 00 00 00 00 00 00 00 01 00 00 00 01
0010: 00 00 00 00 00 00 ab cd 00 00 00 00 00 00 20 00
0020: 00 00 10 00 12 34 56 78 00 00 00 00 00 00 10 00
0030: c7 dd 47 ba`);

test('§9.4 RDMA Read Request', () => {
  const body = new Uint8Array(READ_REQUEST_HEADER_LENGTH);
  const request = { sinkStag: 0xabcd, sinkTaggedOffset: 0x2000n, readSize: 4096, sourceStag: 0x12345678, sourceTaggedOffset: 0x1000n };
  encodeReadRequest(body, 0, request);
  assert.is(toHex(encodeFpdu(untagged(RdmapOpcode.RdmaReadRequest, 1, 1, body), true)), toHex(READ_REQUEST));
  const decoded = decodeFpdu(READ_REQUEST);
  assert.ok(decoded);
  assert.is(decoded.computedCrc, 0xba47ddc7);
  assert.equal(decodeRdmapSegment(decoded.ulpdu).readRequest, request);
});

const ATOMIC_REQUEST = hex(`
0000: 00 46 41 4a 00 00 00 00 00 00 00 01 00 00 00 02
0010: 00 00 00 00 00 00 00 00 00 00 00 07 12 34 56 78
0020: 00 00 00 00 00 00 00 40 00 00 00 00 00 00 00 01
0030: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
0040: ff ff ff ff ff ff ff ff e1 78 6e df`);

const ATOMIC_RESPONSE = hex(`
0000: 00 1e 41 4b 00 00 00 00 00 00 00 03 00 00 00 01
0010: 00 00 00 00 00 00 00 07 00 00 00 00 00 00 00 2a
0020: 4d 18 ff fb`);

test('§9.5 Atomic Request (FetchAdd +1) and its Response', () => {
  const request = {
    atomicOpcode: AtomicOpcode.FetchAdd,
    requestId: 7,
    remoteStag: 0x12345678,
    remoteTaggedOffset: 0x40n,
    addOrSwapData: 1n,
    addOrSwapMask: 0n,
    compareData: 0n,
    compareMask: ALL_ONES_64,
  };
  const body = new Uint8Array(52);
  encodeAtomicRequest(body, 0, request);
  assert.is(toHex(encodeFpdu(untagged(RdmapOpcode.AtomicRequest, 1, 2, body), true)), toHex(ATOMIC_REQUEST));
  const decodedRequest = decodeFpdu(ATOMIC_REQUEST);
  assert.ok(decodedRequest);
  assert.is(decodedRequest.computedCrc, 0xdf6e78e1);
  assert.equal(decodeRdmapSegment(decodedRequest.ulpdu).atomicRequest, request);

  const response = new Uint8Array(12);
  encodeAtomicResponse(response, 0, { requestId: 7, originalValue: 0x2an });
  assert.is(toHex(encodeFpdu(untagged(RdmapOpcode.AtomicResponse, 3, 1, response), true)), toHex(ATOMIC_RESPONSE));
  const decodedResponse = decodeFpdu(ATOMIC_RESPONSE);
  assert.ok(decodedResponse);
  assert.is(decodedResponse.computedCrc, 0xfbff184d);
  assert.equal(decodeRdmapSegment(decodedResponse.ulpdu).atomicResponse, { requestId: 7, originalValue: 0x2an });
});

const IMMEDIATE = hex(`
0000: 00 1a 41 48 00 00 00 00 00 00 00 00 00 00 00 02
0010: 00 00 00 00 01 02 03 04 05 06 07 08 a9 8a 5e 54`);

test('§9.6 Immediate Data', () => {
  const body = new Uint8Array(8);
  encodeImmediateData(body, 0, 0x0102030405060708n);
  assert.is(toHex(encodeFpdu(untagged(RdmapOpcode.ImmediateData, 0, 2, body), true)), toHex(IMMEDIATE));
  const decoded = decodeFpdu(IMMEDIATE);
  assert.ok(decoded);
  assert.is(decoded.computedCrc, 0x545e8aa9);
  assert.is(decodeRdmapSegment(decoded.ulpdu).immediateData, 0x0102030405060708n);
});

const MPA_REQUEST = hex(`
0000: 4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65
0010: 50 02 00 08 80 10 80 10 4b 56 43 31`);
const MPA_REPLY = hex(`
0000: 4d 50 41 20 49 44 20 52 65 70 20 46 72 61 6d 65
0010: 50 02 00 04 80 10 80 10`);

test('§9.7 MPA v2 Request and Reply', () => {
  const enhancedData = { peerToPeer: true, sendRtr: false, writeRtr: true, readRtr: false, ird: 16, ord: 16 };
  const request = {
    kind: 'request' as const,
    markers: false,
    crc: true,
    reject: false,
    enhanced: true,
    revision: MPA_REVISION_2,
    enhancedData,
    privateData: ascii('KVC1'),
  };
  assert.is(toHex(encodeMpaFrame(request)), toHex(MPA_REQUEST));
  assert.equal(decodeMpaFrame(MPA_REQUEST), { ...request, reservedFlags: 0 });
  const reply = { ...request, kind: 'reply' as const, privateData: new Uint8Array(0) };
  assert.is(toHex(encodeMpaFrame(reply)), toHex(MPA_REPLY));
  assert.equal(decodeMpaFrame(MPA_REPLY), { ...reply, reservedFlags: 0 });
});

const WRITE_RTR = hex(`
0000: 00 0e c1 40 00 00 00 00 00 00 00 00 00 00 00 00
0010: a3 05 72 ab`);
const SEND_RTR = hex(`
0000: 00 12 41 43 00 00 00 00 00 00 00 00 00 00 00 01
0010: 00 00 00 00 58 7b e8 c4`);

test('§9.7 ready-to-receive messages: zero-length Write, Send and Read', () => {
  const write = new Uint8Array(14);
  encodeTaggedHeader(write, 0, { last: true, ddpVersion: 1, rdmapControl: 0x40, stag: 0, taggedOffset: 0n });
  assert.is(toHex(encodeFpdu(write, true)), toHex(WRITE_RTR));
  assert.is(toHex(encodeFpdu(untagged(RdmapOpcode.Send, 0, 1, new Uint8Array(0)), true)), toHex(SEND_RTR));
  const read = encodeFpdu(untagged(RdmapOpcode.RdmaReadRequest, 1, 1, new Uint8Array(28)), true);
  assert.is(read.length, 52);
  assert.is(readCrc(read, 48), 0x3dddc6f2);
  assert.is(toHex(read.subarray(48)), 'f2c6dd3d');
});

test('§2.2 MULPDU: EMSS 1460 gives 1454 without markers and 1442 with', () => {
  assert.is(computeMulpdu(1460, false), 1454);
  assert.is(computeMulpdu(1460, true), 1442);
  assert.is(computeMulpdu(65483, false), 64768);
  assert.is(computeMulpdu(100, false), 128);
});

test('§7.5 masked FetchAdd examples and equality with the RFC bit loop', () => {
  assert.is(maskedFetchAdd(0x00000000ffffffffn, 1n, 0x8000000080000000n), 0n);
  assert.is(maskedFetchAdd(0x7f7f7f7f7f7f7f7fn, 0x0101010101010101n, 0x8080808080808080n), 0x8080808080808080n);
  assert.is(maskedFetchAdd(0x00ff00ff00ff00ffn, 0x0001000100010001n, 0x8000800080008000n), 0x0100010001000100n);
  assert.is(maskedFetchAdd(ALL_ONES_64, 1n, 0n), 0n);
  const loop = (orig: bigint, add: bigint, mask: bigint): bigint => {
    let result = 0n;
    let carry = 0n;
    for (let bit = 0n; bit < 64n; bit++) {
      const sum = ((orig >> bit) & 1n) + ((add >> bit) & 1n) + carry;
      if (sum & 1n) result |= 1n << bit;
      carry = (sum >> 1n) & 1n;
      if ((mask >> bit) & 1n) carry = 0n;
    }
    return result;
  };
  let seed = 0x9e3779b97f4a7c15n;
  const next = (): bigint => {
    seed = (seed * 6364136223846793005n + 1442695040888963407n) & ALL_ONES_64;
    return seed;
  };
  const masks = [0n, ALL_ONES_64, 0x8080808080808080n, 0x8000000080000000n, 1n << 63n];
  for (let i = 0; i < 2000; i++) {
    const mask = i < masks.length * 100 ? masks[i % masks.length]! : next();
    const orig = next();
    const add = next();
    assert.is(maskedFetchAdd(orig, add, mask), loop(orig, add, mask));
  }
});

test('§7.6 masked CmpSwap', () => {
  assert.is(maskedCompareSwap(5n, 5n, ALL_ONES_64, 9n, ALL_ONES_64), 9n);
  assert.is(maskedCompareSwap(5n, 6n, ALL_ONES_64, 9n, ALL_ONES_64), 5n);
  // Compare only the low byte, swap only the high half.
  assert.is(maskedCompareSwap(0x11223344_556677aan, 0xaan, 0xffn, 0xdeadbeef_00000000n, 0xffffffff_00000000n), 0xdeadbeef_556677aan);
  // Compare mask 0 always matches (an unconditional swap).
  assert.is(maskedCompareSwap(1n, 2n, 0n, 3n, ALL_ONES_64), 3n);
});

test.run();
