// One test per KBTP status, each reached over a real RDMAP connection to a running target.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import * as K from '../../assembly/kbtp-constants.ts';
import { startRig, testSettings, RawClient, SECRETS, type Rig } from '../support/rig.ts';
import { KbtpStatusError } from '../../host/kbtp/errors.ts';
import { statusOf } from '../support/status.ts';
import { encodeRequest, decodeCompletion, statusName } from '../../host/kbtp/wire/messages.ts';
import { decodeHelloAck } from '../../host/kbtp/wire/hello.ts';

let rig: Rig;
test.before(async () => {
  // A 300 ms Ticket Timeout, so that the TICKET_ABANDONED test reaches it quickly.
  rig = await startRig(testSettings({ session: { credits: 4, ticketTimeoutMs: 300 } }));
});
test.after(async () => {
  await rig.stop();
});

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);

async function expectStatus(name: string, promise: Promise<unknown>): Promise<KbtpStatusError> {
  try {
    await promise;
  } catch (error) {
    assert.instance(error, KbtpStatusError, String(error));
    assert.is((error as KbtpStatusError).statusName, name);
    return error as KbtpStatusError;
  }
  assert.unreachable(`expected ${name}`);
  throw new Error('unreachable');
}

async function rawSession(tenant = 'alpha'): Promise<RawClient> {
  const raw = await RawClient.connect(rig.address);
  raw.hello(tenant, SECRETS.alpha);
  const ack = await raw.next();
  assert.ok(ack !== undefined && decodeHelloAck(ack).status === K.STATUS_SUCCESS);
  return raw;
}

test('SUCCESS: store, load, free, with the completion fields of kbtp-v1 section 11', async () => {
  const alpha = await rig.session('alpha');
  const stored = await alpha.allocStore(1n, bytes('first block'), { seal: true });
  assert.is(stored.generation, 2);
  assert.is(stored.dataLength, 11);
  const loaded = await alpha.load(1n);
  assert.is(new TextDecoder().decode(loaded.data), 'first block');
  assert.equal([loaded.generation, loaded.blockOffset], [2, stored.blockOffset]);
  const freed = await alpha.free(1n);
  assert.equal([freed.generation, freed.dataLength, freed.blockOffset], [3, 0, stored.blockOffset]);
});

test('INVALID_REQUEST: malformed requests, before and after HELLO', async () => {
  const raw = await rawSession();
  raw.send(encodeRequest({ opcode: K.OPCODE_FREE, flags: K.FLAG_SEAL, requestId: 5n, handle: 2n }));
  const answer = decodeCompletion((await raw.next()) ?? new Uint8Array(0));
  assert.equal([statusName(answer.status), answer.requestId, answer.requestOpcode], ['INVALID_REQUEST', 5n, K.OPCODE_FREE]);
  raw.send(encodeRequest({ opcode: 0x77, requestId: 6n, handle: 2n }));
  assert.is(statusName(decodeCompletion((await raw.next()) ?? new Uint8Array(0)).status), 'INVALID_REQUEST');
  await raw.close();

  // Before HELLO: a COMPLETION with INVALID_REQUEST and nothing disclosed, then the target closes.
  const early = await RawClient.connect(rig.address);
  early.send(encodeRequest({ opcode: K.OPCODE_LOAD, requestId: 9n, handle: 1n, descriptor: { stag: 1, taggedOffset: 0n, length: 8 } }));
  const refused = decodeCompletion((await early.next()) ?? new Uint8Array(0));
  assert.equal([statusName(refused.status), refused.requestId, refused.generation, refused.dataLength, refused.blockOffset], ['INVALID_REQUEST', 9n, 0, 0, 0n]);
  const closed = await early.disconnected;
  assert.ok(['peer-closed', 'connection-lost', 'terminate-received'].includes(closed.reason), closed.reason);
  await early.close();
});

test('VERSION_MISMATCH: a HELLO with version 0 is refused and the connection closes', async () => {
  const raw = await RawClient.connect(rig.address);
  raw.hello('alpha', SECRETS.alpha, 0);
  const ack = decodeHelloAck((await raw.next()) ?? new Uint8Array(0));
  assert.is(statusName(ack.status), 'VERSION_MISMATCH');
  assert.is(ack.blockSize, 0, 'nothing granted');
  await raw.disconnected;
  await raw.close();
});

test('AUTH_FAILED: wrong credential or unknown tenant; the connection closes', async () => {
  await expectStatus('AUTH_FAILED', rig.session('alpha', { secret: 'wrong' }));
  await expectStatus('AUTH_FAILED', rig.session('alpha', { tenant: 'nobody', secret: 'x' }));
  const raw = await RawClient.connect(rig.address);
  raw.hello('beta', 'not the secret');
  assert.is(statusName(decodeHelloAck((await raw.next()) ?? new Uint8Array(0)).status), 'AUTH_FAILED');
  await raw.disconnected;
  await raw.close();
});

test('NOT_SUPPORTED: RECORD on the RDMAP binding, BIND without DIRECT_ALLOC, direct modes not granted', async () => {
  const raw = await rawSession();
  raw.send(encodeRequest({ opcode: K.OPCODE_FREE, flags: K.FLAG_RECORD, requestId: 1n, handle: 3n }));
  assert.is(statusName(decodeCompletion((await raw.next()) ?? new Uint8Array(0)).status), 'NOT_SUPPORTED');
  raw.send(encodeRequest({ opcode: K.OPCODE_BIND, requestId: 2n, handle: 3n, bind: { ticket: 0, dataLength: 0, blockOffset: 0n } }));
  assert.is(statusName(decodeCompletion((await raw.next()) ?? new Uint8Array(0)).status), 'NOT_SUPPORTED');
  await raw.close();
  const alpha = await rig.session('alpha', { capabilities: K.CAP_DIRECT_LOAD | K.CAP_DIRECT_ALLOC });
  assert.is(alpha.hello.capabilities, 0, 'an untrusted tenant is granted no direct mode');
  assert.is(alpha.hello.tableStag, 0);
  await expectStatus('NOT_SUPPORTED', alpha.directLoad(1n));
  await expectStatus('NOT_SUPPORTED', alpha.directAllocStore(3n, bytes('x')));
});

test('OUT_OF_RANGE, ACCESS_DENIED, NOT_VALID, NOT_SEALED, SEALED, ALREADY_VALID, GENERATION_MISMATCH', async () => {
  const alpha = await rig.session('alpha');
  const beta = await rig.session('beta');
  await expectStatus('OUT_OF_RANGE', alpha.load(4096n));
  await expectStatus('ACCESS_DENIED', alpha.allocStore(70n, bytes('not mine')));
  await expectStatus('ACCESS_DENIED', beta.load(10n));
  await expectStatus('NOT_VALID', alpha.load(10n));
  await alpha.allocStore(10n, bytes('open block'));
  await expectStatus('NOT_SEALED', alpha.load(10n));
  assert.is(new TextDecoder().decode((await alpha.load(10n, { allowUnsealed: true })).data), 'open block');
  await alpha.store(10n, bytes('now sealed'), { seal: true });
  await expectStatus('SEALED', alpha.store(10n, bytes('again')));
  await expectStatus('ALREADY_VALID', alpha.allocStore(10n, bytes('again')));
  const error = await expectStatus('GENERATION_MISMATCH', alpha.free(10n, { generation: 9 }));
  assert.is(error.completion?.generation, 2, 'the completion carries the current generation');
  await alpha.free(10n, { generation: 2 });
});

test('LENGTH_ERROR: a LOAD whose block is longer than the descriptor, inline over Max Inline', async () => {
  const alpha = await rig.session('alpha');
  await alpha.allocStore(11n, bytes('twelve bytes'), { seal: true });
  const raw = await rawSession();
  raw.send(encodeRequest({ opcode: K.OPCODE_LOAD, requestId: 3n, handle: 11n, descriptor: { stag: raw.dataRegion.stag, taggedOffset: 0n, length: 4 } }));
  const answer = decodeCompletion((await raw.next()) ?? new Uint8Array(0));
  assert.is(statusName(answer.status), 'LENGTH_ERROR');
  assert.ok(
    raw.data.subarray(0, 16).every((b) => b === 0),
    'nothing was written to the buffer',
  );
  raw.send(encodeRequest({ opcode: K.OPCODE_ALLOC_STORE, flags: K.FLAG_INLINE, requestId: 4n, handle: 12n, inline: new Uint8Array(1025) }));
  assert.is(statusName(decodeCompletion((await raw.next()) ?? new Uint8Array(0)).status), 'LENGTH_ERROR');
  await raw.close();
  await alpha.free(11n);
});

test('NO_SPACE: allocations past the tenant quota', async () => {
  const beta = await rig.session('beta');
  for (let i = 0n; i < 8n; i++) await beta.allocStore(64n + i, bytes(`b${i}`), { seal: true });
  await expectStatus('NO_SPACE', beta.allocStore(72n, bytes('one too many')));
  await beta.free(64n);
  await beta.allocStore(72n, bytes('fits again'));
  for (const handle of [65n, 66n, 67n, 68n, 69n, 70n, 71n, 72n]) await beta.free(handle);
});

test('TOO_MANY_REQUESTS: requests beyond the credits are answered at once and change nothing', async () => {
  const alpha = await rig.session('alpha');
  const handles = [20n, 21n, 22n, 23n, 24n, 25n, 26n, 27n];
  for (const handle of handles) await alpha.allocStore(handle, bytes('unsealed'));
  const raw = await rawSession();
  raw.data.fill(0x5a, 0, 2000);
  // Eight mapped stores in one burst against 4 credits; each stays outstanding while the target
  // pulls its 2000 octets with RDMA Read.
  for (const handle of handles) {
    raw.send(encodeRequest({ opcode: K.OPCODE_STORE, requestId: handle, handle, descriptor: { stag: raw.dataRegion.stag, taggedOffset: 0n, length: 2000 } }));
  }
  const answers = new Map<bigint, string>();
  for (let i = 0; i < 8; i++) {
    const completion = decodeCompletion((await raw.next()) ?? new Uint8Array(0));
    answers.set(completion.requestId, statusName(completion.status));
  }
  const statuses = [...answers.values()];
  assert.ok(statuses.includes('TOO_MANY_REQUESTS'), statuses.join(','));
  assert.ok(statuses.filter((s) => s === 'SUCCESS').length >= 4, statuses.join(','));
  assert.is(answers.size, 8);
  assert.is(await raw.next(200), undefined, 'exactly one COMPLETION per request');
  for (const handle of handles) {
    const loaded = await alpha.load(handle, { allowUnsealed: true });
    // Refused requests changed nothing; accepted ones stored the 2000 octets.
    assert.is(loaded.dataLength, answers.get(handle) === 'SUCCESS' ? 2000 : 8, `handle ${handle}`);
    await alpha.free(handle);
  }
  await raw.close();
});

test('REMOTE_ACCESS on RDMAP: a bad initiator buffer terminates the stream; the request changes nothing', async () => {
  const raw = await rawSession();
  const before = rig.target.audit();
  // ALLOC_STORE through RDMA Read of an STag the initiator never registered.
  raw.send(encodeRequest({ opcode: K.OPCODE_ALLOC_STORE, requestId: 8n, handle: 30n, descriptor: { stag: 0x7777_7700, taggedOffset: 0n, length: 100 } }));
  const info = await raw.disconnected;
  assert.ok(info.reason === 'terminate-sent' || info.reason === 'terminate-received' || info.reason === 'peer-closed', info.reason);
  await raw.close();
  const alpha = await rig.session('alpha');
  await expectStatus('NOT_VALID', alpha.load(30n));
  // The failed session's release runs on its worker: wait for it, bounded, not a fixed time.
  const deadline = Date.now() + 20_000;
  let after = rig.target.audit();
  while ((!after.ok || after.bound !== before.bound) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    after = rig.target.audit();
  }
  assert.ok(after.ok);
  assert.is(after.bound, before.bound);
});

test('TICKET_ABANDONED and BAD_TICKET: BIND of a reclaimed ticket and of tickets never taken', async () => {
  const gamma = await rig.session('gamma', { capabilities: K.CAP_DIRECT_ALLOC });
  const taken = await gamma.directTakeBlock();
  await expectStatus('BAD_TICKET', gamma.bind(130n, taken.ticket + 5, taken.blockOffset, 4));
  await expectStatus('BAD_TICKET', gamma.bind(130n, taken.ticket, taken.blockOffset + 4096n, 4));
  await new Promise((resolve) => setTimeout(resolve, 600)); // past the 300 ms Ticket Timeout
  await expectStatus('TICKET_ABANDONED', gamma.bind(130n, taken.ticket, taken.blockOffset, 4));
  // The Partition STag was invalidated first: DIRECT_ALLOC is over for this session.
  // A Write through it is refused by the target's RNIC with a Terminate, which ends the stream;
  // the reclaimed block never sees the data.
  await gamma.directWrite(taken.blockOffset, bytes('late!')).catch(() => undefined);
  let ended = false;
  await gamma.free(130n).catch((error: Error) => {
    ended = /connection to the target lost/.test(error.message);
  });
  assert.ok(ended, 'the session ended');
  assert.not.equal(Array.from(rig.target.engine.block(taken.blockOffset, 5)), Array.from(bytes('late!')));
});

test('SHUTTING_DOWN: requests after the target starts draining', async () => {
  const { target } = await startRig().then((r) => ({ target: r, alpha: undefined }));
  const alpha = await target.session('alpha');
  await alpha.allocStore(40n, bytes('x'), { seal: true });
  target.target.drain();
  // drain() reaches the workers by message: a load may still be served until it lands (a fixed
  // 50 ms was not enough on a loaded machine), after which every request is refused.
  const deadline = Date.now() + 20_000;
  let served = 0;
  for (;;) {
    const status = await statusOf(alpha.load(40n));
    if (status === 'SHUTTING_DOWN') break;
    assert.is(status, 'SUCCESS');
    served++;
    if (Date.now() > deadline) assert.unreachable(`still served ${served} loads 20 s after drain()`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  await expectStatus('SHUTTING_DOWN', alpha.load(40n));
  await target.stop();
});

test('TIER_ERROR is not produced: this target has no durable tier (PERSISTENT is never granted)', async () => {
  const alpha = await rig.session('alpha', { capabilities: K.CAP_PERSISTENT });
  assert.is(alpha.hello.capabilities & K.CAP_PERSISTENT, 0);
});

test.run();
