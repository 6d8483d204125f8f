// Tenants cannot reach each other's handles or STags; direct modes need trust.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import * as K from '../../assembly/kbtp-constants.ts';
import { startRig, testSettings, RawClient, SECRETS, type Rig } from '../support/rig.ts';
import { statusOf } from '../support/status.ts';
import { encodeRequest, statusName } from '../../host/kbtp/wire/messages.ts';
import { decodeHelloAck } from '../../host/kbtp/wire/hello.ts';

let rig: Rig;
// One worker, so that every session shares one RNIC and only the protection domains separate them.
test.before(async () => {
  rig = await startRig(testSettings({ workers: 1 }));
});
test.after(async () => {
  await rig.stop();
});

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);

test('a tenant cannot store, free or load outside its range and scope', async () => {
  const alpha = await rig.session('alpha');
  const beta = await rig.session('beta');
  await alpha.allocStore(2n, bytes('alpha data'), { seal: true });
  await beta.allocStore(66n, bytes('beta data'), { seal: true });
  assert.is(await statusOf(beta.free(2n)), 'ACCESS_DENIED');
  assert.is(await statusOf(beta.store(2n, bytes('x'))), 'ACCESS_DENIED');
  assert.is(await statusOf(beta.allocStore(3n, bytes('x'))), 'ACCESS_DENIED');
  assert.is(await statusOf(beta.load(2n)), 'ACCESS_DENIED');
  assert.is(await statusOf(alpha.free(66n)), 'ACCESS_DENIED');
  // alpha's load scope covers every handle: it may read beta's block, not change it.
  assert.is(new TextDecoder().decode((await alpha.load(66n)).data), 'beta data');
  assert.is(new TextDecoder().decode((await alpha.load(2n)).data), 'alpha data');
  await alpha.free(2n);
  await beta.free(66n);
});

test('a trusted tenant cannot BIND outside its range; untrusted ones are not granted direct modes', async () => {
  const gamma = await rig.session('gamma', { capabilities: K.CAP_DIRECT_ALLOC | K.CAP_DIRECT_LOAD });
  assert.is(gamma.hello.capabilities, K.CAP_DIRECT_ALLOC | K.CAP_DIRECT_LOAD);
  const taken = await gamma.directTakeBlock();
  assert.is(await statusOf(gamma.bind(5n, taken.ticket, taken.blockOffset, 0)), 'ACCESS_DENIED');
  assert.is((await gamma.bind(140n, taken.ticket, taken.blockOffset, 0)).generation, 2);
  await gamma.free(140n);
  for (const tenant of ['alpha', 'beta', 'open'] as const) {
    const session = await rig.session(tenant, { capabilities: K.CAP_DIRECT_ALLOC | K.CAP_DIRECT_LOAD });
    assert.is(session.hello.capabilities, 0, tenant);
    assert.equal([session.hello.tableStag, session.hello.poolStag, session.hello.partitionStag, session.hello.ringStag], [0, 0, 0, 0]);
  }
});

test("one session's STags do not work on another session's connection", async () => {
  const gamma = await rig.session('gamma', { capabilities: K.CAP_DIRECT_LOAD });
  const poolStag = gamma.hello.poolStag;
  assert.ok(poolStag !== 0);
  const raw = await RawClient.connect(rig.address);
  raw.hello('alpha', SECRETS.alpha);
  assert.is(decodeHelloAck((await raw.next()) ?? new Uint8Array(0)).status, K.STATUS_SUCCESS);
  // alpha's connection reads the pool through gamma's STag: the target's RNIC refuses it.
  raw.qp.postSend({
    wrId: 5,
    opcode: 'RDMA_READ',
    remote: { stag: poolStag, taggedOffset: 0n },
    sgList: [{ lkey: raw.dataRegion.stag, offset: 0, length: 64 }],
  });
  const info = await raw.disconnected;
  assert.ok(info.reason === 'terminate-received' || info.reason === 'peer-closed', info.reason);
  await raw.close();
  // gamma's own session still works.
  await gamma.directReadEntry(0n);
});

test('a wrong credential gets AUTH_FAILED and the connection closes; other sessions go on', async () => {
  const alpha = await rig.session('alpha');
  const raw = await RawClient.connect(rig.address);
  raw.hello('gamma', SECRETS.alpha, 1, K.CAP_DIRECT_ALLOC);
  const ack = decodeHelloAck((await raw.next()) ?? new Uint8Array(0));
  assert.is(statusName(ack.status), 'AUTH_FAILED');
  assert.equal([ack.partitionStag, ack.ringStag, ack.poolStag], [0, 0, 0]);
  await raw.disconnected;
  // Nothing sent after a refused HELLO is served.
  raw.send(encodeRequest({ opcode: K.OPCODE_FREE, requestId: 1n, handle: 130n }));
  assert.is(await raw.next(200), undefined);
  await raw.close();
  await alpha.allocStore(4n, bytes('still here'));
  await alpha.free(4n);
});

test.run();
