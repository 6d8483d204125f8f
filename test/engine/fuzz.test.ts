// Random and mutated KBTP requests straight into the engine's programs: every one is answered
// with a COMPLETION (or GOODBYE), nothing throws, and the pool stays consistent.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import * as K from '../../assembly/kbtp-constants.ts';
import * as S from '../../assembly/struct-offsets.ts';
import { Engine } from '../../host/engine/engine.ts';
import { ThreadArena } from '../../host/engine/arena.ts';
import { auditPool } from '../../host/engine/audit.ts';
import { encodeRequest, decodeCompletion } from '../../host/kbtp/wire/messages.ts';
import { decodeHello, encodeHello } from '../../host/kbtp/wire/hello.ts';
import { MessageFormatError } from '../../host/kbtp/wire/messages.ts';
import { Random } from '../../host/util/random.ts';

function randomSource(seed: number): (n: number) => number {
  const generator = new Random(seed);
  return (n) => generator.below(n);
}

test('100,000 random and mutated requests: always a COMPLETION, the pool stays whole', () => {
  const engine = Engine.create({
    blockSize: 256,
    blockCount: 32,
    handleCount: 64,
    maxInline: 128,
    threads: 1,
    partitions: [{ blocks: 8 }],
    tenants: [
      { name: 'a', storeRange: { first: 0n, count: 32n }, loadScope: { first: 0n, count: 64n }, quota: 24 },
      { name: 'd', storeRange: { first: 32n, count: 32n }, loadScope: { first: 0n, count: 64n }, quota: 8, partition: 0 },
    ],
  });
  const arena = new ThreadArena(engine, 0);
  const sessions = [
    arena.openSession({ tenant: 0, capabilities: 0, credits: 8 }),
    arena.openSession({ tenant: 1, capabilities: K.CAP_DIRECT_ALLOC | K.CAP_DIRECT_LOAD, credits: 8 }),
  ];
  const random = randomSource(7);
  const opcodes = [K.OPCODE_LOAD, K.OPCODE_STORE, K.OPCODE_ALLOC_STORE, K.OPCODE_FREE, K.OPCODE_BIND, K.OPCODE_HELLO, 0x00, 0xff, K.OPCODE_COMPLETION];
  const valid = (): Uint8Array => {
    const opcode = opcodes[random(opcodes.length)] ?? K.OPCODE_LOAD;
    const flags = random(4) === 0 ? random(0x10000) : random(0x20);
    const inline = (flags & K.FLAG_INLINE) !== 0 ? new Uint8Array(random(200)) : undefined;
    return encodeRequest({
      opcode,
      flags,
      requestId: BigInt(random(1 << 30)),
      handle: BigInt(random(80)),
      generation: random(3),
      descriptor: { stag: random(3), taggedOffset: BigInt(random(3)), length: random(400) },
      ...(inline === undefined ? {} : { inline }),
      bind: { ticket: random(40), dataLength: random(300), blockOffset: BigInt(random(40) * 256) },
    });
  };
  const maxMessage = arena.maxMessage;
  let answered = 0;
  for (let i = 0; i < 100_000; i++) {
    let message = valid();
    const mutation = random(6);
    if (mutation === 0) message = message.slice(0, random(message.length + 1));
    else if (mutation === 1) message[random(message.length)] = random(256);
    else if (mutation === 2) message = new Uint8Array(random(maxMessage + 1)).map(() => random(256));
    // A longer Send finds no receive large enough: the RNIC terminates the stream (test/rnic).
    if (message.length > maxMessage) message = message.slice(0, maxMessage);
    const session = sessions[random(sessions.length)] ?? 0;
    const request = arena.acquireRequest(session);
    arena.place(request, message);
    let action = arena.run(request);
    for (let spins = 0; action === S.ACTION_RETRY && spins < 100; spins++) action = arena.run(request);
    if (action === S.ACTION_DATA || action === S.ACTION_DATA_AND_SEND) {
      // Half of the transfers fail, as a broken initiator buffer would make them.
      const after = arena.complete(request, random(2) === 0);
      if (action === S.ACTION_DATA) action = after;
    }
    assert.ok(
      [S.ACTION_SEND, S.ACTION_GOODBYE, S.ACTION_NONE, S.ACTION_DATA_AND_SEND].includes(action),
      `action ${action} for ${Buffer.from(message).toString('hex')}`,
    );
    if (action === S.ACTION_SEND || action === S.ACTION_DATA_AND_SEND) {
      const completion = decodeCompletion(arena.completion(request).slice());
      assert.ok(completion.status <= K.STATUS_SHUTTING_DOWN);
      answered += 1;
    }
    arena.releaseRequest(request);
  }
  assert.ok(answered > 90_000);
  for (const session of sessions) assert.is(arena.outstanding(session), 0, 'no credit leaked');
  const audit = auditPool(engine);
  assert.ok(audit.ok, JSON.stringify({ lost: audit.lost, doubled: audit.doubled, problems: audit.problems }));
});

test('random bytes as HELLO: decoded or refused with MessageFormatError, never anything else', () => {
  const random = randomSource(11);
  const good = encodeHello({ version: 1, requestId: 1n, capabilities: 3, initiatorCredits: 4, tenant: 'tenant', credential: new Uint8Array(8) });
  for (let i = 0; i < 20_000; i++) {
    let bytes = good.slice();
    if (random(2) === 0) bytes[random(bytes.length)] = random(256);
    else bytes = new Uint8Array(random(200)).map(() => random(256));
    try {
      decodeHello(bytes);
    } catch (error) {
      assert.instance(error, MessageFormatError);
    }
  }
});

test.run();
