import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { encodeHello, decodeHello, encodeHelloAck, decodeHelloAck, refusal, type HelloAck } from '../../host/kbtp/wire/hello.ts';
import { MessageFormatError, encodeCompletion, decodeCompletion } from '../../host/kbtp/wire/messages.ts';

test('HELLO layout of kbtp-v1 section 4, byte for byte', () => {
  const bytes = encodeHello({
    version: 1,
    requestId: 0x0102030405060708n,
    capabilities: 0x3,
    initiatorCredits: 32,
    tenant: 'ab',
    credential: new Uint8Array([0xc0, 0xde]),
  });
  assert.is(
    Buffer.from(bytes).toString('hex'),
    '01' + '01' + '0000' + '0102030405060708' + '0000000000000000' + '0000' + '0000' + '00000003' + '0020' + '02' + '02' + '6162' + 'c0de',
  );
  assert.equal(decodeHello(bytes), {
    version: 1,
    requestId: 0x0102030405060708n,
    capabilities: 3,
    initiatorCredits: 32,
    tenant: 'ab',
    credential: new Uint8Array([0xc0, 0xde]),
  });
});

test('malformed HELLOs are refused with a reason', () => {
  const good = encodeHello({ version: 1, requestId: 1n, capabilities: 0, initiatorCredits: 1, tenant: 'x', credential: new Uint8Array(0) });
  const bad: Array<[string, Uint8Array]> = [
    ['short', good.slice(0, 31)],
    ['length disagrees', new Uint8Array([...good, 1])],
    [
      'flags set',
      (() => {
        const b = good.slice();
        b[3] = 1;
        return b;
      })(),
    ],
    [
      'handle set',
      (() => {
        const b = good.slice();
        b[19] = 1;
        return b;
      })(),
    ],
    [
      'tenant length over 64',
      (() => {
        const b = good.slice();
        b[30] = 65;
        return b;
      })(),
    ],
    [
      'not UTF-8',
      (() => {
        const b = good.slice();
        b[32] = 0xff;
        return b;
      })(),
    ],
  ];
  for (const [name, bytes] of bad)
    assert.throws(
      () => decodeHello(bytes),
      (e: unknown) => e instanceof MessageFormatError,
      name,
    );
  assert.throws(() => encodeHello({ version: 1, requestId: 1n, capabilities: 0, initiatorCredits: 1, tenant: 'x'.repeat(65), credential: new Uint8Array(0) }));
});

test('HELLO_ACK is 128 octets with every field where section 5 puts it', () => {
  const ack: HelloAck = {
    version: 1,
    requestId: 9n,
    status: 0,
    capabilities: 1,
    blockSize: 65536,
    blockCount: 4096,
    targetCredits: 64,
    sharedRingOrder: 12,
    partitionRingOrder: 6,
    maxInline: 8192,
    quota: 100,
    ticketTimeoutMs: 5000,
    tableStag: 0x11223344,
    tableOffset: 0x10n,
    tableBaseHandle: 1000n,
    tableHandleCount: 16384n,
    storeFirst: 1000n,
    storeCount: 50n,
    poolStag: 0x55667788,
    partitionStag: 0x99aabbcc,
    ringStag: 0xddeeff00,
    ringOffset: 0x40n,
    headOffset: 0n,
  };
  const bytes = encodeHelloAck(ack);
  assert.is(bytes.length, 128);
  const view = new DataView(bytes.buffer);
  assert.is(view.getUint8(1), 0x02);
  assert.is(view.getUint32(28, false), 65536);
  assert.is(view.getUint8(38), 12);
  assert.is(view.getUint32(52, false), 0x11223344);
  assert.is(view.getUint32(104, false), 0xddeeff00);
  assert.is(view.getBigUint64(112, false), 0x40n);
  assert.equal(decodeHelloAck(bytes), ack);
  const refused = encodeHelloAck(refusal(5n, 3));
  assert.ok(
    refused.subarray(24).every((b) => b === 0),
    'a failed HELLO_ACK has an all-zero body',
  );
  assert.is(new DataView(refused.buffer).getUint16(22, false), 3);
});

test('COMPLETION encodes and decodes back to the same fields', () => {
  const completion = {
    version: 1,
    requestOpcode: 0x12,
    requestId: 0x1122334455667788n,
    handle: 42n,
    generation: 7,
    status: 0x000d,
    dataLength: 4096,
    blockOffset: 0x30000n,
  };
  const bytes = encodeCompletion(completion);
  assert.is(
    Buffer.from(bytes).toString('hex'),
    '01' + '20' + '0012' + '1122334455667788' + '000000000000002a' + '0007' + '000d' + '00001000' + '00000000' + '0000000000030000',
  );
  assert.equal(decodeCompletion(bytes), completion);
});

test.run();
