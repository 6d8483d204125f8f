// kbtp as the server end of perftest -R (host/rnic/rc/perftest-cm.ts) between two kbtp RNICs on
// Ethernet links joined in memory: the client side replays what ib_write_bw -R (perftest 6.06 on
// rxe) sent in the interop run, item by item over RDMA CM connections, and checks each answer; the
// run's Write lands in the server's region; bad sequences fail the session with a clear error.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { connectRdmaCm } from '../../host/rnic/rc/cm-initiator.ts';
import { CmResponder } from '../../host/rnic/rc/cm-responder.ts';
import { EthernetLink } from '../../host/rnic/rc/ethernet-link.ts';
import { RcMessageChannel } from '../../host/rnic/rc/message-channel.ts';
import { PerftestCmServer } from '../../host/rnic/rc/perftest-cm.ts';
import { decodePerftestCmKeys, encodePerftestCmKeys, PERFTEST_CM_KEY_MESSAGE_LENGTH } from '../../host/rnic/rc/perftest-format.ts';
import {
  Access,
  createRnic,
  RnicError,
  WcStatus,
  type MemoryRegion,
  type ProtectionDomain,
  type RcQueuePair,
  type Rnic,
  type RoceEndpoint,
} from '../../host/rnic/verbs.ts';
import { wiredFramePorts } from '../support/frame-wire.ts';

const CLIENT = '10.7.1.1';
const SERVER = '10.7.1.2';
const PORT = 18515;
const TAGGED_BASE = 0x7f3a_6000_0000n;
const hex = (text: string): Uint8Array => new Uint8Array(Buffer.from(text, 'hex'));

// ib_write_bw -R's items as captured against kbtp (docs/INTEROP.md): version "6.06", cycle buffer
// 4096, cache line 64, MTU code 3 (1024), and its keys (QPN 0x12, rkey 0x339, GID index 1).
const VERSION = hex('362e3036000000000000000000000000');
const CYCLE_BUFFER = hex('00001000');
const CACHE_LINE = hex('00000040');
const MTU = hex('3300');
const ZERO_KEYS = new Uint8Array(PERFTEST_CM_KEY_MESSAGE_LENGTH);
const CLIENT_KEYS = hex('00000000000000010000001200b160ae00000339687f0000000055dd6f28100000000000000000000000ffff0a00040f0000000000000001');

interface Node {
  rnic: Rnic;
  endpoint: RoceEndpoint;
  pd: ProtectionDomain;
}

async function nodes(): Promise<[Node, Node]> {
  const [wireA, wireB] = wiredFramePorts();
  const make = async (name: string, port: typeof wireA, mac: number, address: string): Promise<Node> => {
    const rnic = createRnic({ name });
    const endpoint = await rnic.openRoce({ link: new EthernetLink(port, { mac: new Uint8Array([2, 0, 0, 0, 1, mac]), address }) });
    return { rnic, endpoint, pd: rnic.allocPd() };
  };
  return [await make('client', wireA, 1, CLIENT), await make('server', wireB, 2, SERVER)];
}

interface Served {
  server: PerftestCmServer;
  cm: CmResponder;
  testQp: RcQueuePair;
  region: MemoryRegion;
  memory: Uint8Array;
}

function serve(node: Node): Served {
  const cq = node.rnic.createCq({ depth: 64 });
  const testQp = node.rnic.createRcQp({ pd: node.pd, sendCq: cq, recvCq: cq, ird: 16, ord: 16 });
  const memory = new Uint8Array(new SharedArrayBuffer(64 * 1024));
  const region = node.rnic.registerMemory(node.pd, memory, {
    access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead,
    taggedOffsetBase: TAGGED_BASE,
  });
  const server = new PerftestCmServer({ verbs: node.rnic, endpoint: node.endpoint, pd: node.pd, region, testQp, stepTimeoutMs: 10_000 });
  const cm = new CmResponder(node.endpoint, (request) => server.onRequest(request));
  return { server, cm, testQp, region, memory };
}

async function exchange(channel: RcMessageChannel, item: Uint8Array, what: string): Promise<Uint8Array> {
  channel.send(item);
  const answer = await channel.receive(10_000, what);
  if (answer === undefined) assert.unreachable(`${what}: the server disconnected`);
  return answer!;
}

test('perftest -R against kbtp: every setup item answered as perftest expects, the run reaches kbtp memory, the closing items are counted', async () => {
  const [client, serverNode] = await nodes();
  const served = serve(serverNode);
  const channel = new RcMessageChannel(client.rnic, client.pd);
  await connectRdmaCm(client.endpoint, channel.qp, { address: SERVER, port: PORT });
  assert.equal(await exchange(channel, VERSION, 'version'), VERSION, "the client's own version");
  assert.equal(await exchange(channel, CYCLE_BUFFER, 'cycle buffer'), CYCLE_BUFFER);
  assert.equal(await exchange(channel, CACHE_LINE, 'cache line'), CACHE_LINE);
  assert.equal(await exchange(channel, MTU, 'MTU'), MTU, 'the smaller MTU: 1024');
  assert.equal(await exchange(channel, ZERO_KEYS, 'zero keys'), ZERO_KEYS, 'zeros answered with zeros');

  const cq = client.rnic.createCq({ depth: 16 });
  const testQp = client.rnic.createRcQp({ pd: client.pd, sendCq: cq, recvCq: cq, ird: 16, ord: 16 });
  await connectRdmaCm(client.endpoint, testQp, { address: SERVER, port: PORT });
  assert.equal(await exchange(channel, ZERO_KEYS, 'zero keys again'), ZERO_KEYS);
  const keys = decodePerftestCmKeys(await exchange(channel, CLIENT_KEYS, 'keys'));
  assert.is(keys.qpNumber, served.testQp.qpNumber, "kbtp's test QP");
  assert.is(keys.rkey, served.region.rkey);
  assert.is(keys.virtualAddress, TAGGED_BASE);
  assert.is(keys.outReads, 16);
  assert.is(keys.gidIndex, 1, "the client's GID index mirrored");
  assert.equal([...keys.gid.subarray(12)], [10, 7, 1, 2], "kbtp's IPv4-mapped GID");
  assert.equal(decodePerftestCmKeys(await exchange(channel, CLIENT_KEYS, 'barrier')), keys, 'the same keys as the barrier');
  const session = await served.server.session;
  assert.is(session.clientVersion, '6.06');
  assert.is(session.client.rkey, 0x339);
  assert.is(session.client.virtualAddress, 0x55dd6f281000n);
  assert.is(session.pathMtu, 1024);

  // The run: one Write from the client's test QP to kbtp's region at the advertised address.
  const source = client.rnic.registerMemory(client.pd, new SharedArrayBuffer(4096), { access: Access.LocalWrite });
  for (let i = 0; i < 4096; i++) source.bytes[i] = (i * 5 + 1) & 0xff;
  testQp.postSend({
    wrId: 1,
    opcode: 'RDMA_WRITE',
    sgList: [{ lkey: source.lkey, offset: 0, length: 4096 }],
    remote: { stag: keys.rkey, taggedOffset: keys.virtualAddress + 512n },
  });
  for (let waited = 0; cq.size === 0 && waited < 10_000; waited += 5) await new Promise((resolve) => setTimeout(resolve, 5));
  assert.is(cq.poll(1)[0]?.status, WcStatus.Success, 'the Write completed');
  assert.equal(served.memory.subarray(512, 512 + 4096), source.bytes.subarray(0, 4096));

  const finished = session.finish(10_000);
  const encodedKeys = encodePerftestCmKeys(keys);
  assert.equal(await exchange(channel, CLIENT_KEYS, 'first barrier after the run'), encodedKeys);
  assert.equal(await exchange(channel, CLIENT_KEYS, 'second barrier after the run'), encodedKeys);
  for (let i = 0; i < 5; i++)
    assert.equal(await exchange(channel, hex('4017e82f42540b8a'), `report item ${i}`), new Uint8Array(8), 'zeros: kbtp measured nothing');
  assert.equal(await exchange(channel, CLIENT_KEYS, 'closing keys'), encodedKeys);
  await channel.close();
  testQp.disconnect();
  assert.equal(await finished, [56, 56, 8, 8, 8, 8, 8, 56]);
  await served.server.close();
  served.cm.close();
});

test('perftest -R against kbtp: keys before the test QP connects, a wrong-size item and a third connection are refused clearly', async () => {
  const [client, serverNode] = await nodes();
  let served = serve(serverNode);
  let channel = new RcMessageChannel(client.rnic, client.pd);
  await connectRdmaCm(client.endpoint, channel.qp, { address: SERVER, port: PORT });
  for (const item of [VERSION, CYCLE_BUFFER, CACHE_LINE, MTU]) await exchange(channel, item, 'setup');
  channel.send(CLIENT_KEYS);
  const early = await served.server.session.then(
    () => undefined,
    (error: unknown) => error,
  );
  assert.instance(early, RnicError);
  assert.match((early as RnicError).message, /keys before connecting its test QP/);
  await channel.close();
  await served.server.close();
  served.cm.close();

  served = serve(serverNode);
  channel = new RcMessageChannel(client.rnic, client.pd);
  await connectRdmaCm(client.endpoint, channel.qp, { address: SERVER, port: PORT });
  channel.send(hex('362e30'));
  const short = await served.server.session.then(
    () => undefined,
    (error: unknown) => error,
  );
  assert.instance(short, RnicError);
  assert.match((short as RnicError).message, /version: a message of 3 octets, expected 16/);
  // Its second connection (the test QP) is accepted; a third is rejected.
  const cq = client.rnic.createCq({ depth: 4 });
  await connectRdmaCm(client.endpoint, client.rnic.createRcQp({ pd: client.pd, sendCq: cq, recvCq: cq }), { address: SERVER, port: PORT });
  const third = await connectRdmaCm(client.endpoint, client.rnic.createRcQp({ pd: client.pd, sendCq: cq, recvCq: cq }), { address: SERVER, port: PORT }).then(
    () => undefined,
    (error: unknown) => error,
  );
  assert.instance(third, RnicError, 'a third CM connection is rejected');
  assert.is(served.server.connections, 3);
  await channel.close();
  await served.server.close();
  served.cm.close();
});

test('connectRdmaCm retries while the peer answers REJ "invalid service ID" (not listening yet), and fails at once without retries', async () => {
  const [client, serverNode] = await nodes();
  let refusals = 2;
  const accepted: RcQueuePair[] = [];
  const cm = new CmResponder(serverNode.endpoint, (request) => {
    if (refusals-- > 0) return request.reject(8);
    const cq = serverNode.rnic.createCq({ depth: 4 });
    const qp = serverNode.rnic.createRcQp({ pd: serverNode.pd, sendCq: cq, recvCq: cq });
    accepted.push(qp);
    request.accept(qp);
  });
  const cq = client.rnic.createCq({ depth: 4 });
  const patient = client.rnic.createRcQp({ pd: client.pd, sendCq: cq, recvCq: cq });
  await connectRdmaCm(client.endpoint, patient, { address: SERVER, port: PORT, retriesWhileNotListening: 3, retryMs: 20 });
  assert.is(patient.state, 'rts');
  // A REQ repeated by the 20 ms timer before its answer came (a loaded machine) is a duplicate,
  // not another attempt.
  assert.is(cm.stats.reqs - cm.stats.duplicateReqs, 3, 'two refused REQs, then the accepted one');
  refusals = 1;
  const hasty = client.rnic.createRcQp({ pd: client.pd, sendCq: cq, recvCq: cq });
  const refused = await connectRdmaCm(client.endpoint, hasty, { address: SERVER, port: PORT, retryMs: 20 }).then(
    () => undefined,
    (error: unknown) => error,
  );
  assert.instance(refused, RnicError);
  assert.match((refused as RnicError).message, /rejected the connection \(CM REJ reason 8\)/);
  // The failed second connect did not take QP1's MADs away from the first connection: the
  // server's DREQ still reaches it and ends it.
  accepted[0]!.disconnect();
  for (let waited = 0; patient.state !== 'error' && waited < 5000; waited += 5) await new Promise((resolve) => setTimeout(resolve, 5));
  assert.is(patient.state, 'error', "the server's DREQ ended the client's QP");
  cm.close();
});

test.run();
