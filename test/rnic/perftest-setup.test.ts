// perftest's side channel (host/rnic/rc/perftest-format.ts, perftest-setup.ts): the key message as
// perftest 6.06 on rxe printed it (taken from an interop run's capture) decodes and re-encodes
// byte for byte; a scripted perftest client walks kbtp's server end through the whole exchange in
// the order and sizes the capture shows (16, 4, 4, 2, 108, 108 | 108, 108, 5 x 8, 108, "done"); old
// versions and GID-less keys are refused.
import { connect, createServer, type Server, type Socket } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { EthernetLink, type FramePort } from '../../host/rnic/rc/ethernet-link.ts';
import { wiredFramePorts, type WireFramePort } from '../support/frame-wire.ts';
import { connectPerftest } from '../../host/rnic/rc/perftest-client.ts';
import { acceptPerftest } from '../../host/rnic/rc/perftest-setup.ts';
import { decodePerftestKeys, encodePerftestKeys, PERFTEST_KEY_MESSAGE_LENGTH } from '../../host/rnic/rc/perftest-format.ts';
import { Access, createRnic, RnicError } from '../../host/rnic/verbs.ts';

// ib_read_bw 6.06's key message on rxe0 (QPN 0x12, out_reads 0x80), NUL included.
const CLIENT_KEYS = '0000:0080:000012:4f07c7:000003c0:000055a9cd9d2000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:00:04:0f:00000000:';

const silentPort: FramePort = { send: () => undefined, onFrame: () => undefined, close: async () => undefined };

function listen(): Promise<Server> {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}

/** Reads exactly n octets from a socket. */
function readN(socket: Socket, n: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    let buffered = Buffer.alloc(0);
    const onClose = (): void => reject(new Error('closed'));
    const onData = (chunk: Buffer): void => {
      buffered = Buffer.concat([buffered, chunk]);
      if (buffered.length < n) return;
      socket.off('data', onData);
      socket.off('close', onClose);
      if (buffered.length > n) socket.unshift(buffered.subarray(n));
      resolve(buffered.subarray(0, n));
    };
    socket.on('data', onData);
    socket.once('close', onClose);
  });
}

test('the key message decodes and re-encodes byte for byte', () => {
  const bytes = new Uint8Array(PERFTEST_KEY_MESSAGE_LENGTH);
  bytes.set(new TextEncoder().encode(CLIENT_KEYS));
  const keys = decodePerftestKeys(bytes);
  assert.is(keys.outReads, 0x80);
  assert.is(keys.qpNumber, 0x12);
  assert.is(keys.psn, 0x4f07c7);
  assert.is(keys.rkey, 0x3c0);
  assert.is(keys.virtualAddress, 0x55a9cd9d2000n);
  assert.is(Buffer.from(keys.gid).toString('hex'), '00000000000000000000ffff0a00040f');
  assert.equal(encodePerftestKeys(keys), bytes);
  assert.throws(() => decodePerftestKeys(bytes.subarray(0, 59)), /59 octets/);
  const noGid = new Uint8Array(PERFTEST_KEY_MESSAGE_LENGTH);
  noGid.set(new TextEncoder().encode('0000:0080:000012:4f07c7:000003c0:000055a9cd9d2000:00000000'));
  assert.throws(() => decodePerftestKeys(noGid), /not a perftest key message with a GID/);
});

async function scriptedClient(version: string, run: (socket: Socket) => Promise<void>) {
  const rnic = createRnic({ name: 'perftest-unit' });
  await rnic.openRoce({ link: new EthernetLink(silentPort, { mac: new Uint8Array([2, 0, 0, 0, 0, 2]), address: '10.0.4.2' }) });
  const pd = rnic.allocPd();
  const cq = rnic.createCq();
  const qp = rnic.createRcQp({ pd, sendCq: cq, recvCq: cq });
  const region = rnic.registerMemory(pd, new SharedArrayBuffer(65536), { access: Access.RemoteWrite | Access.LocalWrite, taggedOffsetBase: 0x1000_0000n });
  const server = await listen();
  const accepted = new Promise<Socket>((resolve) => server.once('connection', resolve));
  const client = connect({ host: '127.0.0.1', port: (server.address() as { port: number }).port });
  client.on('error', () => undefined);
  const versionField = Buffer.alloc(16);
  versionField.write(version);
  client.write(versionField);
  const clientDone = run(client);
  try {
    const session = await acceptPerftest(rnic.roceEndpoint!, qp, await accepted, { region, stepTimeoutMs: 5000 });
    return { session, qp, region, clientDone, finish: session.finish(5000) };
  } catch (error) {
    return { error, qp, clientDone };
  } finally {
    server.close();
  }
}

test('a scripted perftest client walks kbtp through the whole exchange', async () => {
  const clientKeys = new Uint8Array(PERFTEST_KEY_MESSAGE_LENGTH);
  clientKeys.set(new TextEncoder().encode(CLIENT_KEYS));
  const seen: Buffer[] = [];
  const result = await scriptedClient('6.06', async (client) => {
    seen.push(await readN(client, 16));
    for (const item of [Buffer.from([0, 0, 0x10, 0]), Buffer.from([0, 0, 0, 0x40]), Buffer.from('3\0')]) {
      client.write(item);
      seen.push(await readN(client, item.length));
    }
    for (let i = 0; i < 4; i++) {
      client.write(clientKeys);
      seen.push(await readN(client, PERFTEST_KEY_MESSAGE_LENGTH));
    }
    for (let i = 0; i < 5; i++) {
      client.write(Buffer.alloc(8, i + 1));
      seen.push(await readN(client, 8));
    }
    client.write(clientKeys);
    seen.push(await readN(client, PERFTEST_KEY_MESSAGE_LENGTH));
    client.write('done\0');
    seen.push(await readN(client, 5));
    client.end();
  });
  assert.ok(result.session, String(result.error));
  await result.clientDone;
  assert.equal(await result.finish, [108, 108, 8, 8, 8, 8, 8, 108, 5]);
  assert.is(seen[0]!.toString('latin1').replace(/\0+$/, ''), '6.06');
  assert.is(seen[1]!.readUInt32BE(0), 4096, 'cycle buffer: the client');
  assert.is(seen[3]!.toString('latin1'), '3\0', 'MTU code 3 = 1024');
  const keys = decodePerftestKeys(seen[4]!);
  assert.is(keys.qpNumber, result.qp.qpNumber);
  assert.is(keys.rkey, result.region!.stag);
  assert.is(keys.virtualAddress, 0x1000_0000n);
  assert.is(keys.outReads, 16);
  assert.is(Buffer.from(keys.gid).toString('hex'), '00000000000000000000ffff0a000402');
  assert.equal(seen[5], seen[4], 'the barrier repeats the keys');
  assert.equal(seen[8], Buffer.alloc(8), 'report items answered with zeros');
  assert.is(seen[14]!.toString('latin1'), 'done\0');
  assert.is(result.qp.state, 'rts');
  assert.is(result.qp.path?.peer.address, '10.0.4.15');
  assert.is(result.qp.path?.destQpNumber, 0x12);
  assert.is(result.qp.path?.receivePsn, 0x4f07c7);
  assert.is(result.qp.path?.pathMtu, 1024);
  assert.is(result.qp.path?.ord, 16);
  result.qp.destroy();
});

test('an old perftest client is refused; its QP does not stay half set up', async () => {
  const result = await scriptedClient('5.60', async () => undefined);
  assert.instance(result.error, RnicError);
  assert.match(String(result.error), /older than 5.7/);
  assert.is(result.qp.state, 'error');
});

test('kbtp perftest client against kbtp perftest server: the two sequences mirror each other; a Write and a FetchAdd land', async () => {
  const [wireA, wireB] = wiredFramePorts();
  const side = async (wire: WireFramePort, address: string, mac: number) => {
    const rnic = createRnic({ name: address });
    await rnic.openRoce({ link: new EthernetLink(wire, { mac: new Uint8Array([2, 0, 0, 0, 0, mac]), address }) });
    const pd = rnic.allocPd();
    const cq = rnic.createCq();
    const qp = rnic.createRcQp({ pd, sendCq: cq, recvCq: cq });
    const region = rnic.registerMemory(pd, new SharedArrayBuffer(65536), {
      access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteAtomic,
      taggedOffsetBase: 0x5000_0000n,
    });
    return { rnic, cq, qp, region };
  };
  const client = await side(wireA, '10.0.4.2', 1);
  const server = await side(wireB, '10.0.4.15', 2);
  const listener = await listen();
  try {
    const accepted = new Promise<Socket>((resolve) => listener.once('connection', resolve));
    const connecting = connectPerftest(client.rnic.roceEndpoint!, client.qp, {
      host: '127.0.0.1',
      port: (listener.address() as { port: number }).port,
      region: client.region,
      pathMtu: 1024,
    });
    const serverSession = await acceptPerftest(server.rnic.roceEndpoint!, server.qp, await accepted, { region: server.region });
    const clientSession = await connecting;
    assert.is(clientSession.serverVersion, '6.06');
    assert.is(clientSession.pathMtu, 1024);
    assert.is(serverSession.pathMtu, 1024);
    assert.is(clientSession.server.rkey, server.region.stag);
    client.region.bytes.fill(0x5a, 0, 3000);
    const remote = { stag: clientSession.server.rkey, taggedOffset: clientSession.server.virtualAddress };
    client.qp.postSend({ wrId: 1, opcode: 'RDMA_WRITE', sgList: [{ lkey: client.region.lkey, offset: 0, length: 3000 }], remote });
    client.qp.postSend({
      wrId: 2,
      opcode: 'ATOMIC_FETCH_ADD',
      sgList: [{ lkey: client.region.lkey, offset: 4096, length: 8 }],
      remote: { ...remote, taggedOffset: remote.taggedOffset + 4096n },
      atomic: { add: 5n },
    });
    const done = [];
    const deadline = Date.now() + 20_000;
    while (done.length < 2 && Date.now() < deadline) {
      done.push(...client.cq.poll(2));
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    assert.equal(
      done.map((wc) => wc.status),
      [0, 0],
    );
    assert.ok(server.region.bytes.subarray(0, 3000).every((octet) => octet === 0x5a));
    assert.is(new DataView(server.region.bytes.buffer).getBigUint64(4096, true), 5n);
    const [items] = await Promise.all([serverSession.finish(5000), clientSession.finish()]);
    assert.equal(items, [108, 108, 8, 8, 8, 8, 8, 108, 5]);
  } finally {
    listener.close();
    await client.rnic.close();
    await server.rnic.close();
  }
});

test.run();
