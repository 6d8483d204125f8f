// The rc_pingpong peer and setup (host/rnic/rc/pingpong-setup.ts) between two kbtp RNICs on two
// Ethernet links joined in memory, with the side channel on loopback TCP: the 52-octet messages
// and "done" are exchanged, both QPs reach RTS with each other's QPN/PSN/GID, Sends flow both
// ways; the echo checks catch data that is not an echo; bad destinations are refused.
import { createServer, type Server, type Socket } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { EthernetLink } from '../../host/rnic/rc/ethernet-link.ts';
import { wiredFramePorts } from '../support/frame-wire.ts';
import { acceptPingpong } from '../../host/rnic/rc/pingpong-setup.ts';
import { encodePingpong, PINGPONG_DONE } from '../../host/rnic/rc/pingpong-format.ts';
import { createRnic, RnicError, type Rnic } from '../../host/rnic/verbs.ts';
import { pingpongPattern, runPingpongClient, runPingpongServer } from './rc-pingpong-peer.ts';

async function pair(): Promise<{ a: Rnic; b: Rnic }> {
  const [wireA, wireB] = wiredFramePorts();
  const a = createRnic({ name: 'a' });
  const b = createRnic({ name: 'b' });
  await a.openRoce({ link: new EthernetLink(wireA, { mac: new Uint8Array([2, 0, 0, 0, 0, 1]), address: '10.7.0.1' }) });
  await b.openRoce({ link: new EthernetLink(wireB, { mac: new Uint8Array([2, 0, 0, 0, 0, 2]), address: '10.7.0.2' }) });
  return { a, b };
}

function listen(): Promise<Server> {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}

test('pingpongPattern: 0 at page starts (what -c checks), differs per iteration', () => {
  const p = pingpongPattern(3, 9000);
  assert.is(p[0], 0);
  assert.is(p[4096], 0);
  assert.is(p[8192], 0);
  assert.ok(p.subarray(1, 4096).every((octet) => octet !== 0));
  assert.not.equal(pingpongPattern(4, 9000), p);
});

test('kbtp client and server: setup, 20 Sends each way; the server flags what is not an echo', async () => {
  const { a, b } = await pair();
  const server = await listen();
  try {
    const served = new Promise<Awaited<ReturnType<typeof runPingpongServer>>>((resolve, reject) => {
      server.once('connection', (socket: Socket) => runPingpongServer({ rnic: b, socket, size: 3000, iterations: 20 }).then(resolve, reject));
    });
    const port = (server.address() as { port: number }).port;
    const client = await runPingpongClient({ rnic: a, host: '127.0.0.1', port, size: 3000, iterations: 20 });
    const serverReport = await served;
    assert.is(client.connection.remote.qpNumber, serverReport.qp.qpNumber);
    assert.is(serverReport.connection.remote.psn, client.connection.local.psn);
    assert.is(Buffer.from(client.connection.remote.gid).toString('hex'), '00000000000000000000ffff0a070002');
    // kbtp's server sends its own pattern i, which is what kbtp's client expects back as message i...
    assert.equal(client.mismatches, []);
    // ...but kbtp's client is not the tool: its first message is no 0x7b buffer, and message i is
    // pattern i rather than the echo of pattern i - 1. The checks see that.
    assert.is(serverReport.mismatches.length, 10);
    assert.match(serverReport.mismatches[0]!, /not the tool's initial buffer/);
    assert.match(serverReport.mismatches[1]!, /^message 1: octet 1 is/);
    assert.is(client.qp.statistics.messagesSent, 20);
    assert.is(serverReport.qp.statistics.messagesReceived, 20);
    client.close();
    serverReport.close();
  } finally {
    server.close();
    await a.close();
    await b.close();
  }
});

test('acceptPingpong refuses an all-zero GID (rc_pingpong without -g) and a bad "done"', async () => {
  const { b } = await pair();
  const server = await listen();
  const port = (server.address() as { port: number }).port;
  const { connect } = await import('node:net');
  const attempt = async (message: Uint8Array, done: Uint8Array): Promise<unknown> => {
    const accepted = new Promise<Socket>((resolve) => server.once('connection', resolve));
    const socket = connect({ host: '127.0.0.1', port });
    socket.on('error', () => undefined);
    socket.write(message);
    socket.on('data', () => socket.end(done));
    const pd = b.allocPd();
    const cq = b.createCq();
    const qp = b.createRcQp({ pd, sendCq: cq, recvCq: cq });
    try {
      await acceptPingpong(b.roceEndpoint!, qp, await accepted, { timeoutMs: 5000 });
      return undefined;
    } catch (error) {
      assert.is(qp.state, 'error', 'the QP does not stay half set up');
      return error;
    } finally {
      socket.destroy();
    }
  };
  try {
    const zeroGid = await attempt(encodePingpong({ lid: 0, qpNumber: 0x11, psn: 1, gid: new Uint8Array(16) }), PINGPONG_DONE);
    assert.instance(zeroGid, RnicError);
    assert.match((zeroGid as Error).message, /not an IPv4-mapped RoCEv2 GID.*-g/);
    const gid = new Uint8Array([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 7, 0, 1]);
    const badDone = await attempt(encodePingpong({ lid: 0, qpNumber: 0x11, psn: 1, gid }), new TextEncoder().encode('nope!'));
    assert.instance(badDone, RnicError);
    assert.match((badDone as Error).message, /confirmed with "nope!"/);
  } finally {
    server.close();
    await b.close();
  }
});

test.run();
