// The hostile-peer battery: a real target process is attacked at every stage of connection
// setup and of a session, while a legitimate client keeps storing and loading and must see no
// failure. After each case the node serves, its memory is near its baseline, the pool audit is
// clean, and its counters say what happened. Timeouts are short so the battery stays quick;
// every wait is on the target's own counters, never on elapsed time.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn } from 'node:child_process';
import * as K from '../../assembly/kbtp-constants.ts';
import { connect, TargetRefusedError, type KbtpSession } from '../../host/kbtp/initiator.ts';
import { KbtpStatusError } from '../../host/kbtp/errors.ts';
import { encodeRequest } from '../../host/kbtp/wire/messages.ts';
import { RdmapOpcode } from '../../host/rnic/wire/rdmap.ts';
import { encodeMpaFrame } from '../../host/rnic/wire/mpa.ts';
import { TargetProcess, LegitimateClient, RawPeer, connectPatiently, rawHello, rawSend, sleep, type TargetStatus } from './hostile-peers.ts';
import { untagged } from '../support/raw-peer.ts';
import { createRnic } from '../../host/rnic/verbs.ts';

const MAX_SESSIONS = 10;
const BLOCK = 65536;
const CONFIG = {
  listen: '127.0.0.1:0',
  workers: 2,
  pool: { blockSize: BLOCK, blockCount: 64, handleCount: 256, maxInline: 1024 },
  // 2 x 400 connections in MPA setup at most: the idle flood below goes past it.
  session: { credits: 4, maxSessions: MAX_SESSIONS, maxHandshakesPerWorker: 400 },
  timeouts: { mpaRequestMs: 2000, rtrMs: 2000, helloMs: 2000, idleSessionMs: 5000, rdmaReadMs: 2000 },
  tenants: [
    { name: 'legit', secret: 'legit-secret', quota: 16, storeRange: { first: 0, count: 64 } },
    { name: 'other', secret: 'other-secret', quota: 32, storeRange: { first: 64, count: 64 } },
    { name: 'limited', secret: 'limited-secret', quota: 8, storeRange: { first: 128, count: 64 }, maxSessions: 2 },
  ],
};
const MEMORY_SLACK = 128 * 2 ** 20;

let target: TargetProcess;
let legit: LegitimateClient;
let baseline: TargetStatus;

const sum = (record: Record<string, number>, ...keys: string[]): number => keys.reduce((total, key) => total + (record[key] ?? 0), 0);

/** After a case: only the legitimate session is left, the pool is whole, memory near baseline, and the client saw no failure. */
async function settled(what: string): Promise<TargetStatus> {
  // The legitimate client runs on while the hostile connections end; it pauses only for the audit.
  await target.until((s) => s.sessionsOpen === 1 && s.slotsInUse === 1, `${what}: every hostile connection closed`);
  await legit.pause();
  const status = await target.status();
  assert.ok(status.audit.ok, `${what}: pool audit ${JSON.stringify(status.audit)}`);
  assert.is(status.audit.bound, 0, `${what}: no block left bound`);
  assert.ok(
    status.rssBytes < baseline.rssBytes + MEMORY_SLACK,
    `${what}: memory ${(status.rssBytes / 2 ** 20).toFixed(0)} MiB, baseline ${(baseline.rssBytes / 2 ** 20).toFixed(0)} MiB`,
  );
  assert.is(status.internalErrors, 0, `${what}: no internal error`);
  legit.resume();
  const before = legit.rounds;
  // The node still serves: a new session works, and the legitimate client makes progress.
  const fresh = await connectPatiently(target.address, 'other', 'other-secret');
  await fresh.allocStore(127n, new Uint8Array(100).fill(9), { seal: true });
  await fresh.free(127n);
  await fresh.close(1000);
  while (legit.rounds < before + 2) await sleep(20);
  assert.equal(legit.failures, [], `${what}: the legitimate client saw failures`);
  return status;
}

test.before(async () => {
  target = await TargetProcess.start(CONFIG);
  const session = await connectPatiently(target.address, 'legit', 'legit-secret');
  legit = new LegitimateClient(session, [0n, 1n, 2n, 3n], 5000);
  while (legit.rounds < 3) await sleep(20);
  await legit.pause();
  baseline = await target.status();
  legit.resume();
});

test.after(async () => {
  await legit.stop();
  const code = await target.stop();
  assert.is(code, 0, `the target exits cleanly after the battery: ${target.stderr.slice(-2000)}`);
});

test('stalls at every handshake stage and after HELLO end by their timeouts, each counted', async () => {
  const before = await target.status();
  const tcp = await RawPeer.open(target.port, { request: new Uint8Array(0) }); // connected, sends nothing
  const partial = await RawPeer.open(target.port, {
    request: encodeMpaFrame({
      kind: 'request',
      markers: false,
      crc: false,
      reject: false,
      enhanced: true,
      revision: 2,
      enhancedData: { peerToPeer: true, sendRtr: false, writeRtr: true, readRtr: false, ird: 4, ord: 4 },
      privateData: new Uint8Array(0),
    }).subarray(0, 10),
  }); // half an MPA Request
  const noRtr = await RawPeer.open(target.port, { rtr: false });
  const noHello = await RawPeer.open(target.port);
  const idle = await RawPeer.open(target.port);
  rawHello(idle, 'other', 'other-secret');
  const ack = await idle.nextSegment();
  assert.is(ack?.payload[1], K.OPCODE_HELLO_ACK);
  assert.is(new DataView(ack!.payload.buffer, ack!.payload.byteOffset).getUint16(22), K.STATUS_SUCCESS);
  // A STORE whose data the peer never lets the target read.
  const silent = await RawPeer.open(target.port);
  rawHello(silent, 'other', 'other-secret');
  await silent.nextSegment();
  rawSend(silent, encodeRequest({ opcode: K.OPCODE_ALLOC_STORE, requestId: 2n, handle: 64n, descriptor: { stag: 0x1234, taggedOffset: 0n, length: 5000 } }), 2);
  const readRequest = await silent.nextSegment();
  assert.is(readRequest?.opcode, RdmapOpcode.RdmaReadRequest, 'the target asks for the data');
  const after = await target.until(
    (s) =>
      sum(s.timeouts, 'mpa-request') >= sum(before.timeouts, 'mpa-request') + 2 &&
      sum(s.timeouts, 'rtr') > sum(before.timeouts, 'rtr') &&
      sum(s.timeouts, 'hello') > sum(before.timeouts, 'hello') &&
      sum(s.timeouts, 'idle-session') > sum(before.timeouts, 'idle-session') &&
      sum(s.timeouts, 'rdma-read') > sum(before.timeouts, 'rdma-read'),
    'a timeout at every stage',
  );
  for (const peer of [tcp, partial, noRtr, noHello, idle, silent]) await peer.closed(10_000);
  assert.ok(after.sessionsRefused >= before.sessionsRefused);
  for (const peer of [tcp, partial, noRtr, noHello, idle, silent]) peer.destroy();
  await settled('stalls');
});

test('an inline STORE whose data stops once the target holds its handle is timed out, and the handle is free again', async () => {
  const before = await target.status();
  const peer = await RawPeer.open(target.port);
  rawHello(peer, 'other', 'other-secret');
  await peer.nextSegment();
  rawSend(peer, encodeRequest({ opcode: K.OPCODE_ALLOC_STORE, flags: K.FLAG_INLINE, requestId: 2n, handle: 70n, inline: new Uint8Array(100).fill(1) }), 2);
  const bound = await peer.nextSegment();
  assert.is(new DataView(bound!.payload.buffer, bound!.payload.byteOffset).getUint16(22), K.STATUS_SUCCESS);
  // Two segments of a 1,000-octet inline STORE of the handle: at the second the target takes the
  // handle and sends the rest to its block (connection.ts steer); the rest never comes.
  const store = encodeRequest({ opcode: K.OPCODE_STORE, flags: K.FLAG_INLINE, requestId: 3n, handle: 70n, inline: new Uint8Array(1000).fill(2) });
  peer.sendUlpdu(untagged(RdmapOpcode.Send, 0, 3, store.subarray(0, 100), { last: false, offset: 0 }));
  peer.sendUlpdu(untagged(RdmapOpcode.Send, 0, 3, store.subarray(100, 200), { last: false, offset: 100 }));
  await target.until((s) => sum(s.timeouts, 'rdma-read') > sum(before.timeouts, 'rdma-read'), 'the stalled STORE timed out');
  await peer.closed(10_000);
  peer.destroy();
  // Were the handle still held, this FREE would wait for it until its call timed out.
  const fresh = await connectPatiently(target.address, 'other', 'other-secret');
  await fresh.free(70n, { timeoutMs: 3000 });
  await fresh.close(1000);
  await settled('a stalled inline STORE');
});

test('garbage at every stage is refused or closed, counted, and harms nobody else', async () => {
  const before = await target.status();
  const http = await RawPeer.open(target.port, { request: new TextEncoder().encode('GET / HTTP/1.1\r\nHost: x\r\n\r\n') });
  const noise = await RawPeer.open(target.port, { rtr: false });
  noise.sendRaw(new Uint8Array(64).map((_, i) => (i * 37) & 0xff)); // garbage where the RTR belongs
  const afterRtr = await RawPeer.open(target.port);
  afterRtr.sendRaw(new Uint8Array(64).fill(0xee)); // garbage where FPDUs belong
  const notHello = await RawPeer.open(target.port);
  rawSend(notHello, encodeRequest({ opcode: K.OPCODE_LOAD, requestId: 5n, handle: 1n, descriptor: { stag: 1, taggedOffset: 0n, length: 10 } }), 1);
  const notHelloAnswer = await notHello.nextSegment();
  assert.is(new DataView(notHelloAnswer!.payload.buffer, notHelloAnswer!.payload.byteOffset).getUint16(22), K.STATUS_INVALID_REQUEST);
  const badHello = await RawPeer.open(target.port);
  rawSend(
    badHello,
    new Uint8Array(40).fill(0).map((_, i) => (i === 0 ? 1 : i === 1 ? K.OPCODE_HELLO : i === 30 ? 60 : 0)),
    1,
  );
  const badHelloAnswer = await badHello.nextSegment();
  assert.is(new DataView(badHelloAnswer!.payload.buffer, badHelloAnswer!.payload.byteOffset).getUint16(22), K.STATUS_INVALID_REQUEST);
  // After HELLO: a malformed request gets INVALID_REQUEST and the session goes on; then bytes that are not FPDUs end it.
  const session = await RawPeer.open(target.port);
  rawHello(session, 'other', 'other-secret');
  await session.nextSegment();
  rawSend(session, new Uint8Array(30).fill(0xab), 2);
  const invalid = await session.nextSegment();
  assert.is(new DataView(invalid!.payload.buffer, invalid!.payload.byteOffset).getUint16(22), K.STATUS_INVALID_REQUEST);
  session.sendRaw(new Uint8Array(100).fill(0x5a));
  for (const peer of [http, noise, afterRtr, notHello, badHello, session]) await peer.closed(10_000);
  const after = await target.until(
    (s) =>
      sum(s.setupFailures, 'bad-mpa') > sum(before.setupFailures, 'bad-mpa') &&
      sum(s.setupFailures, 'setup-error', 'closed-before-hello') >= sum(before.setupFailures, 'setup-error', 'closed-before-hello') + 2 &&
      sum(s.refusals, 'not-hello') > sum(before.refusals, 'not-hello') &&
      sum(s.refusals, 'bad-hello') > sum(before.refusals, 'bad-hello'),
    'garbage counted at every stage',
  );
  assert.ok(after.sessionsOpen >= 1);
  await settled('garbage');
});

test('past the node and tenant limits, with and without completed handshakes: refused with a reason the client prints', async () => {
  const before = await target.status();
  const sessions: KbtpSession[] = [];
  let refusal: unknown;
  for (let i = 0; i < MAX_SESSIONS + 2 && refusal === undefined; i++) {
    try {
      sessions.push(await connect(target.address, { tenant: 'other', secret: 'other-secret', pipeline: 2 }));
    } catch (error) {
      refusal = error;
    }
  }
  assert.instance(refusal, TargetRefusedError);
  assert.match((refusal as Error).message, new RegExp(`refused the connection: kbtp: the node holds its limit of ${MAX_SESSIONS} sessions`));
  assert.is(sessions.length, MAX_SESSIONS - 1, 'the legitimate session holds the other slot');
  await Promise.all(sessions.map((session) => session.close(1000)));
  // Without completed handshakes: MPA only, never a HELLO. They hold slots until the HELLO timeout.
  await target.until((s) => s.slotsInUse === 1, 'slots back');
  const stalled: RawPeer[] = [];
  let rejected = false;
  for (let i = 0; i < MAX_SESSIONS + 2 && !rejected; i++) {
    try {
      stalled.push(await RawPeer.open(target.port));
    } catch (error) {
      assert.match((error as Error).message, /rejected/);
      rejected = true;
    }
  }
  assert.ok(rejected, 'the MPA Request past the limit gets an MPA Reject');
  const limited = [await connect(target.address, { tenant: 'limited', secret: 'limited-secret' }).catch((error: unknown) => error)];
  assert.instance(limited[0], TargetRefusedError, 'while the slots are held by stalled peers, a new session is refused, not served late');
  const full = await target.until(
    (s) => sum(s.timeouts, 'hello') >= sum(before.timeouts, 'hello') + stalled.length && s.slotsInUse === 1,
    'stalled handshakes time out and give their slots back',
  );
  assert.ok(sum(full.refusals, 'node-full') >= sum(before.refusals, 'node-full') + 3);
  for (const peer of stalled) peer.destroy();
  // The tenant limit: two sessions of 'limited'; the third is told why in its HELLO_ACK.
  const first = await connectPatiently(target.address, 'limited', 'limited-secret');
  const second = await connectPatiently(target.address, 'limited', 'limited-secret');
  const third = await connect(target.address, { tenant: 'limited', secret: 'limited-secret' }).catch((error: unknown) => error);
  assert.instance(third, KbtpStatusError);
  assert.is((third as KbtpStatusError).statusName, 'TOO_MANY_REQUESTS');
  assert.match((third as Error).message, /tenant 'limited' already has as many sessions as the target allows it/);
  await first.close(1000);
  await second.close(1000);
  const tenantFull = await target.until((s) => s.slotsInUse === 1, 'tenant sessions closed');
  assert.ok(sum(tenantFull.refusals, 'tenant-full') > sum(before.refusals, 'tenant-full'));
  const again = await connectPatiently(target.address, 'limited', 'limited-secret');
  await again.close(1000);
  await settled('limits');
});

test('abrupt disconnects mid-request (RDMA Read outstanding, Write half sent) release what the request held', async () => {
  // A bound 64 KiB block for the LOAD whose Write the peer cuts off.
  const filler = await connectPatiently(target.address, 'other', 'other-secret');
  await filler.allocStore(70n, new Uint8Array(BLOCK).fill(3), { seal: true });
  await filler.close(1000);
  const reading = await RawPeer.open(target.port);
  rawHello(reading, 'other', 'other-secret');
  await reading.nextSegment();
  rawSend(
    reading,
    encodeRequest({ opcode: K.OPCODE_ALLOC_STORE, requestId: 2n, handle: 65n, descriptor: { stag: 0x99, taggedOffset: 0n, length: 40_000 } }),
    2,
  );
  assert.is((await reading.nextSegment())?.opcode, RdmapOpcode.RdmaReadRequest);
  reading.destroy();
  const writing = await RawPeer.open(target.port);
  rawHello(writing, 'other', 'other-secret');
  await writing.nextSegment();
  rawSend(writing, encodeRequest({ opcode: K.OPCODE_LOAD, requestId: 3n, handle: 70n, descriptor: { stag: 0x77, taggedOffset: 0n, length: BLOCK } }), 2);
  assert.is((await writing.nextSegment())?.opcode, RdmapOpcode.RdmaWrite, 'the Write has started');
  writing.destroy();
  // Half a request, then gone.
  const half = await RawPeer.open(target.port);
  rawHello(half, 'other', 'other-secret');
  await half.nextSegment();
  half.sendRaw(new Uint8Array([0, 60, 0x41, 0x43]));
  half.destroy();
  await target.until((s) => s.slotsInUse === 1, 'the cut connections are cleaned up');
  // The handles are free again: the LOAD's shared lock and the ALLOC_STORE's exclusive lock, block and quota came back.
  const owner = await connectPatiently(target.address, 'other', 'other-secret');
  await owner.free(70n);
  await owner.allocStore(65n, new Uint8Array(10).fill(1), { seal: true });
  await owner.free(65n);
  await owner.close(1000);
  await settled('abrupt disconnects');
});

test('2,000 idle TCP connections: past the handshake bound the oldest are closed; all counted; the node serves throughout', async () => {
  const before = await target.status();
  // From a child process with its descriptor limit raised: this process keeps its own for the test.
  const flood = spawn('sh', [
    '-c',
    'ulimit -n $(ulimit -Hn) 2>/dev/null; ulimit -n 8192 2>/dev/null; exec "$0" "$@"',
    process.execPath,
    '-e',
    `
    const net = require('node:net');
    const wanted = Math.min(2000, Number(require('node:child_process').execSync('ulimit -n', { shell: '/bin/sh' }).toString()) - 64);
    const sockets = [];
    let connected = 0, failed = 0;
    const open = (i) => {
      if (i >= wanted) { console.log('connected ' + connected + ' failed ' + failed); return; }
      const batch = [];
      for (let j = i; j < Math.min(wanted, i + 100); j++) batch.push(new Promise((resolve) => {
        const socket = net.connect({ host: '127.0.0.1', port: ${target.port} });
        socket.on('connect', () => { connected++; sockets.push(socket); resolve(); });
        socket.on('error', () => { failed++; resolve(); });
      }));
      Promise.all(batch).then(() => open(i + 100));
    };
    open(0);
    process.stdin.on('data', () => { for (const socket of sockets) socket.destroy(); console.log('closed'); setTimeout(() => process.exit(0), 100); });
  `,
  ]);
  let output = '';
  flood.stdout.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  flood.stderr.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  while (!/connected [0-9]+/.test(output)) {
    if (flood.exitCode !== null) throw new Error(`flood: ${output}`);
    await sleep(50);
  }
  const connected = Number(/connected ([0-9]+)/.exec(output)?.[1]);
  assert.ok(connected >= 1000, `only ${connected} connections: ${output}`);
  // The node serves while they are open.
  const during = await connectPatiently(target.address, 'other', 'other-secret');
  await during.allocStore(66n, new Uint8Array(2000).fill(6), { seal: true });
  await during.free(66n);
  await during.close(1000);
  flood.stdin.write('close\n');
  await new Promise((resolve) => flood.on('close', resolve));
  const ended = (s: TargetStatus): number => sum(s.timeouts, 'mpa-request') + sum(s.setupFailures, 'closed-during-setup', 'evicted');
  const after = await target.until((s) => ended(s) >= ended(before) + connected, 'every idle connection counted');
  assert.is(ended(after), ended(before) + connected, 'each idle connection ended exactly once');
  if (connected > 2 * 400) assert.ok(sum(after.setupFailures, 'evicted') > sum(before.setupFailures, 'evicted'), 'the oldest were closed to make room');
  await settled('2,000 idle connections');
});

test('a client that is refused at the MPA stage hears why; the rnic reports the Reject private data', async () => {
  // Exercised end to end above; here the raw reason, as an operator's tool would see it.
  const rnic = createRnic({ name: 'probe' });
  const pd = rnic.allocPd();
  const cq = rnic.createCq({ depth: 16 });
  const holders: KbtpSession[] = [];
  for (let i = 0; i < MAX_SESSIONS - 1; i++) holders.push(await connectPatiently(target.address, 'other', 'other-secret'));
  const qp = rnic.createQp({ pd, sendCq: cq, recvCq: cq });
  const error = await rnic.connect(qp, { host: '127.0.0.1', port: target.port, crc: false }).catch((e: unknown) => e);
  assert.match((error as Error).message, /rejected the connection/);
  assert.match(new TextDecoder().decode(qp.peerPrivateData), /^kbtp: the node holds its limit of 10 sessions/);
  await rnic.close();
  await Promise.all(holders.map((session) => session.close(1000)));
  await settled('reject reason');
});

test.run();
