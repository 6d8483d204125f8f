// The probes' independent codec must reproduce the reference hex dumps of iwarp.md §9 before its
// verdicts about siw mean anything.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  decodeMpaFrame,
  decodeReadRequest,
  decodeSegment,
  encodeFpdu,
  encodeMpaFrame,
  encodeReadRequest,
  encodeTagged,
  encodeUntagged,
  MPA_REQUEST_KEY,
  OP_SEND,
  OP_WRITE,
} from './raw-iwarp.ts';

const hex = (s: string): Buffer => Buffer.from(s.replace(/[^0-9a-f]/gi, ''), 'hex');

test('Send "hello" FPDU with pad and CRC matches iwarp.md §9.2', () => {
  const fpdu = encodeFpdu(encodeUntagged(OP_SEND, 0, 1, 0, Buffer.from('hello')), true);
  assert.equal(fpdu.toString('hex'), hex('00 17 41 43 00000000 00000000 00000001 00000000 68656c6c6f 000000 b9 90 b1 0c').toString('hex'));
});

test('RDMA Write FPDU matches iwarp.md §9.3', () => {
  const payload = Buffer.from([0, 1, 2, 3, 4, 5, 6, 7]);
  const fpdu = encodeFpdu(encodeTagged(OP_WRITE, 0x12345678, 0x1000n, payload), true);
  assert.equal(fpdu.toString('hex'), hex('00 16 c1 40 12345678 0000000000001000 0001020304050607 eaefb4f7').toString('hex'));
});

test('Read Request FPDU matches iwarp.md §9.4 and decodes back', () => {
  const request = { sinkStag: 0xabcd, sinkTo: 0x2000n, size: 4096, sourceStag: 0x12345678, sourceTo: 0x1000n };
  const fpdu = encodeFpdu(encodeReadRequest(1, request), true);
  assert.equal(
    fpdu.toString('hex'),
    hex('00 2e 41 41 00000000 00000001 00000001 00000000 0000abcd 0000000000002000 00001000 12345678 0000000000001000 c7dd47ba').toString('hex'),
  );
  assert.equal(decodeReadRequest(decodeSegment(fpdu.subarray(2, 2 + 46))), request);
});

test('MPA v2 Request matches iwarp.md §9.7 and decodes its flags', () => {
  const frame = encodeMpaFrame({ key: MPA_REQUEST_KEY, crc: true, revision: 2, irdWord: 0x8010, ordWord: 0x8010, ulpData: Buffer.from('KVC1') });
  assert.equal(frame.toString('hex'), hex('4d504120494420526571204672616d65 50 02 0008 8010 8010 4b564331').toString('hex'));
  const decoded = decodeMpaFrame(frame);
  assert.ok(decoded.crc && decoded.enhanced && !decoded.markers && !decoded.reject);
  assert.is(decoded.irdWord, 0x8010);
  assert.is(decoded.ordWord, 0x8010);
  assert.is(decoded.privateData.subarray(4).toString(), 'KVC1');
});

test('a DDP segment with the wrong DDP version is refused', () => {
  assert.throws(() => decodeSegment(hex('42 43 00000000 00000000 00000001 00000000')), /DDP version/);
});

test.run();
