// The batched UDP socket and link (sendmmsg + GSO, recvmmsg + GRO through koffi): datagram
// boundaries through batching and GSO runs, the send worker behind a full socket (EAGAIN), a datagram larger
// than a receive slot, the link's ICRC check, receiving on the socket's own thread (no receive
// worker; idle, a burst larger than the receive area, a throwing receiver, a peer on another
// thread), close with datagrams queued and the poll handle released (the process exits), a worker
// ending with its socket open (the process survives), a send
// the kernel refuses ending the QP, and the choice between the batched link and node:dgram's.
import { execFile, type ExecFileException } from 'node:child_process';
import dgram from 'node:dgram';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { UsageError } from '../../host/errors.ts';
import { loadBatchedUdp } from '../../host/rnic/rc/batched-udp-libc.ts';
import { BatchedUdpSocket, SEND_BLOCKS } from '../../host/rnic/rc/batched-udp-socket.ts';
import { RoceEndpoint } from '../../host/rnic/rc/endpoint.ts';
import { headersFrom } from '../../host/rnic/wire/ib-headers.ts';
import { IbOpcode } from '../../host/rnic/wire/ib-opcodes.ts';
import { encodeIbPacket, ibPacketLength } from '../../host/rnic/wire/ib-packet.ts';
import { BatchedUdpLink } from '../../host/rnic/rc/batched-udp-link.ts';
import { socketIcrcHeaders, UdpLink } from '../../host/rnic/rc/link.ts';
import { openUdpLink, udpLinkKindFromEnvironment } from '../../host/rnic/rc/udp-link-choice.ts';
import { WcStatus } from '../../host/rnic/verbs.ts';
import { rcPair } from '../support/rc.ts';

const EMPTY = new Uint8Array(0);

/** A datagram of `length` octets whose content says which one it is. */
function datagram(index: number, length: number): Uint8Array {
  const bytes = new Uint8Array(new SharedArrayBuffer(length));
  for (let i = 0; i < length; i++) bytes[i] = (index * 7 + i) & 0xff;
  return bytes;
}

/** Resolves with what `socket` received once `count` datagrams arrived (or rejects after 10 s). */
function collect(socket: BatchedUdpSocket, count: number): Promise<Uint8Array[]> {
  const received: Uint8Array[] = [];
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`only ${received.length} of ${count} datagrams arrived`)), 10_000);
    socket.setReceiver((data) => {
      received.push(data.slice()); // the slot is reused after the call
      if (received.length === count) {
        clearTimeout(timer);
        resolve(received);
      }
    });
  });
}

test('koffi loads here (the batched link is what RoCE uses by default on this platform)', () => {
  const loaded = loadBatchedUdp();
  assert.not.instance(loaded, Error, loaded instanceof Error ? loaded.message : '');
});

test('datagram boundaries survive batching and GSO runs: equal runs, a shorter last, size changes, a full queue', async () => {
  const sender = await BatchedUdpSocket.open({ sendBatch: 16 });
  const receiver = await BatchedUdpSocket.open();
  try {
    // Runs of equal sizes (GSO), a shorter one ending a run, a longer one starting a new run,
    // small ones copied and large ones pointed at, more than one queue's worth in one turn.
    const lengths = [4112, 4112, 4112, 4128, 4112, 4112, 100, 100, 100, 20, 4112, 300, 300, 4096, 1, 4112];
    for (let i = 0; i < 40; i++) lengths.push(i % 5 === 4 ? 2000 : 4112);
    const sent = lengths.map((length, index) => datagram(index, length));
    const arrived = collect(receiver, sent.length);
    for (const bytes of sent) {
      // Split in three parts, as the RC link sends header, payload and trailer.
      const cut1 = Math.min(12, bytes.length);
      const cut2 = Math.max(cut1, bytes.length - 4);
      sender.send(receiver.local, bytes.subarray(0, cut1), bytes.subarray(cut1, cut2), bytes.subarray(cut2));
    }
    const received = await arrived;
    assert.is(received.length, sent.length);
    for (let i = 0; i < sent.length; i++) assert.equal(received[i], new Uint8Array(sent[i]!), `datagram ${i} (${lengths[i]} octets)`);
    assert.is(sender.stats.datagramsSent, sent.length);
    assert.ok(sender.stats.messagesSent < sent.length, `GSO joined runs: ${sender.stats.messagesSent} messages for ${sent.length} datagrams`);
    assert.ok(sender.stats.sendCalls < sender.stats.messagesSent, `${sender.stats.sendCalls} sendmmsg calls for ${sender.stats.messagesSent} messages`);
    assert.ok(receiver.stats.slotsReceived < sent.length, `GRO: ${receiver.stats.slotsReceived} receive slots for ${sent.length} datagrams`);
    assert.is(receiver.stats.datagramsReceived, sent.length);
  } finally {
    await sender.close();
    await receiver.close();
  }
});

test('sendRun queues what as many sends would: a run longer than a queue, between single datagrams, in order, GSO-joined', async () => {
  const sender = await BatchedUdpSocket.open({ sendBatch: 16 });
  const receiver = await BatchedUdpSocket.open();
  try {
    const count = 40;
    const headers = datagram(1, count * 12);
    const payload = datagram(2, count * 4096);
    for (let i = 0; i < payload.length; i++) payload[i] = (i * 31 + (i >>> 12) * 17) & 0xff; // no two segments alike
    const trailers = datagram(3, count * 8);
    const before = datagram(4, 4112);
    const after = datagram(5, 300);
    const arrived = collect(receiver, count + 2);
    sender.send(receiver.local, before, EMPTY, EMPTY);
    sender.sendRun(receiver.local, { headers, headerLength: 12, payload, segment: 4096, count, trailers, trailerLength: 8 });
    sender.send(receiver.local, after, EMPTY, EMPTY);
    const received = await arrived;
    assert.equal(received[0], new Uint8Array(before));
    for (let i = 0; i < count; i++) {
      const expected = new Uint8Array(
        Buffer.concat([headers.subarray(i * 12, i * 12 + 12), payload.subarray(i * 4096, i * 4096 + 4096), trailers.subarray(i * 8, i * 8 + 8)]),
      );
      assert.equal(received[1 + i], expected, `datagram ${i} of the run`);
    }
    assert.equal(received[count + 1], new Uint8Array(after));
    assert.is(sender.stats.datagramsSent, count + 2);
    assert.ok(sender.stats.messagesSent < count, `GSO joined the run: ${sender.stats.messagesSent} messages`);
    assert.throws(
      () => sender.sendRun(receiver.local, { headers, headerLength: 12, payload, segment: 4096, count: count + 1, trailers, trailerLength: 8 }),
      RangeError,
    );
  } finally {
    await sender.close();
    await receiver.close();
  }
});

test('GSO runs reach a node:dgram peer as separate datagrams, and its datagrams reach the batched socket', async () => {
  const batched = await BatchedUdpSocket.open();
  const plain = dgram.createSocket('udp4');
  await new Promise<void>((resolve) => plain.bind(0, '127.0.0.1', resolve));
  try {
    const lengths = [4112, 4112, 4112, 4112, 3000];
    const got: Buffer[] = [];
    const allArrived = new Promise<void>((resolve) =>
      plain.on('message', (message) => {
        got.push(message);
        if (got.length === lengths.length) resolve();
      }),
    );
    const plainAddress = { address: '127.0.0.1', port: plain.address().port };
    for (const [index, length] of lengths.entries()) batched.send(plainAddress, datagram(index, length), EMPTY, EMPTY);
    await allArrived;
    assert.equal(
      got.map((message) => message.length),
      lengths,
    );
    for (const [index, length] of lengths.entries()) assert.equal(new Uint8Array(got[index]!), new Uint8Array(datagram(index, length)));
    const back = collect(batched, 3);
    for (const length of [10, 4112, 4112]) plain.send(Buffer.alloc(length, length & 0xff), batched.local.port, '127.0.0.1');
    assert.equal(
      (await back).map((data) => data.length),
      [10, 4112, 4112],
    );
  } finally {
    await batched.close();
    await new Promise<void>((resolve) => plain.close(() => resolve()));
  }
});

test('a full socket (EAGAIN): the send worker keeps the blocks and writes them later; with every block waiting, a packet is dropped and counted', async () => {
  const sender = await BatchedUdpSocket.open({ sendBatch: 8 });
  const receiver = await BatchedUdpSocket.open();
  try {
    sender.simulateFullSocket(60); // 60 sendmmsg calls answered EAGAIN, at least 1 ms apart
    const total = 8 * SEND_BLOCKS;
    const arrived = collect(receiver, total);
    for (let i = 0; i < total; i++) sender.send(receiver.local, datagram(i, 500), EMPTY, EMPTY);
    // Every block went to the send worker, which meets the full socket: nothing is written yet.
    assert.is(sender.pending, total);
    sender.send(receiver.local, datagram(99, 500), EMPTY, EMPTY); // no block came back in time: dropped
    assert.is(sender.stats.sendQueueDrops, 1);
    const received = await arrived;
    for (let i = 0; i < total; i++) assert.equal(received[i], new Uint8Array(datagram(i, 500)));
    assert.ok(sender.stats.sendBlocked >= 60, `blocked ${sender.stats.sendBlocked}`);
    for (let waited = 0; sender.pending > 0 && waited < 100; waited++) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.is(sender.pending, 0);

    // Close writes what was handed over, even behind a full socket buffer.
    sender.simulateFullSocket(5);
    const last = collect(receiver, 3);
    for (let i = 0; i < 3; i++) sender.send(receiver.local, datagram(200 + i, 700), EMPTY, EMPTY);
    await sender.close();
    const lastReceived = await last;
    for (let i = 0; i < 3; i++) assert.equal(lastReceived[i], new Uint8Array(datagram(200 + i, 700)));
  } finally {
    await sender.close();
    await receiver.close();
  }
});

test('a datagram larger than a receive slot is counted and dropped; the next one arrives', async () => {
  const receiver = await BatchedUdpSocket.open({ slotBytes: 1024, receiveSlots: 4, gro: false });
  const plain = dgram.createSocket('udp4');
  try {
    const arrived = collect(receiver, 2);
    plain.send(Buffer.alloc(3000, 1), receiver.local.port, '127.0.0.1');
    plain.send(Buffer.alloc(0), receiver.local.port, '127.0.0.1'); // an empty datagram: handed up as such
    plain.send(Buffer.alloc(700, 2), receiver.local.port, '127.0.0.1');
    const [first, second] = await arrived;
    assert.is(first!.length, 0);
    assert.equal(second, new Uint8Array(700).fill(2));
    assert.is(receiver.stats.truncated, 1);
  } finally {
    plain.close();
    await receiver.close();
  }
});

test('the link checks every datagram ICRC, single and in GRO runs, from a node:dgram peer and from a batched one: the endpoint counts the bad', async () => {
  const link = await BatchedUdpLink.open();
  const endpoint = new RoceEndpoint(link);
  const plain = dgram.createSocket('udp4');
  await new Promise<void>((resolve) => plain.bind(0, '127.0.0.1', resolve));
  const batched = await BatchedUdpSocket.open();
  /** An RDMA Write Only of `length` octets to QP 0x12, its ICRC as a packet from `from` to the link; `corrupt` flips one payload octet after. */
  const packet = (from: { address: string; port: number }, length: number, psn: number, corrupt: boolean): Uint8Array => {
    const ip = new Uint8Array(20);
    const udp = new Uint8Array(8);
    socketIcrcHeaders(ip, udp, from, link.local, ibPacketLength(IbOpcode.RdmaWriteOnly, length));
    const bytes = encodeIbPacket(
      headersFrom({ opcode: IbOpcode.RdmaWriteOnly, destQp: 0x12, psn, dmaLength: length }),
      new Uint8Array(length).fill(psn),
      ip,
      udp,
    );
    if (corrupt) bytes[40] = bytes[40]! ^ 1;
    return bytes;
  };
  // Lengths vary (each its own running ICRC) and repeat (runs the kernel may merge by GRO); 4096
  // octets take the ISA-L path where it is installed.
  const plan: Array<[number, boolean]> = [
    [4096, false],
    [4096, true],
    [4096, false],
    [100, false],
    [100, true],
    [1024, true],
    [1024, false],
    [4096, false],
  ];
  const bad = plan.filter(([, corrupt]) => corrupt).length;
  try {
    const plainFrom = { address: '127.0.0.1', port: plain.address().port };
    for (const [psn, [length, corrupt]] of plan.entries()) plain.send(packet(plainFrom, length, psn, corrupt), link.local.port, '127.0.0.1');
    // Through a batched socket, not a link: a link would compute the ICRC afresh. One sendmmsg, GSO runs.
    for (const [psn, [length, corrupt]] of plan.entries()) batched.send(link.local, packet(batched.local, length, psn, corrupt), EMPTY, EMPTY);
    for (let waited = 0; endpoint.stats.packets < 2 * plan.length && waited < 400; waited++) await new Promise((resolve) => setTimeout(resolve, 25));
    assert.is(endpoint.stats.packets, 2 * plan.length);
    assert.is(endpoint.stats.icrcErrors, 2 * bad);
    assert.is(endpoint.stats.unknownQp, 2 * (plan.length - bad)); // the good ones passed the check and found no QP 0x12
    assert.is(link.stats.datagramsReceived, 2 * plan.length);
  } finally {
    plain.close();
    await batched.close();
    await endpoint.close();
  }
});

/** This process's threads (Linux). */
const threads = (): number => readdirSync('/proc/self/task').length;

test('the thread that owns the socket receives: no receive thread; a datagram arriving while the thread is idle is taken by it', async () => {
  const before = threads();
  const socket = await BatchedUdpSocket.open();
  const plain = dgram.createSocket('udp4');
  await new Promise<void>((resolve) => plain.bind(0, '127.0.0.1', resolve));
  try {
    // One thread more: the send worker. Session 7's socket had a receive worker too.
    assert.is(threads() - before, 1);
    const arrived = collect(socket, 1);
    await new Promise((resolve) => setTimeout(resolve, 50)); // idle: nothing runs on this thread
    plain.send(Buffer.alloc(333, 7), socket.local.port, '127.0.0.1');
    assert.equal(await arrived, [new Uint8Array(333).fill(7)]);
    assert.is(socket.stats.receiveBatches, 1);
    assert.is(socket.receiveError, undefined);
  } finally {
    plain.close();
    await socket.close();
  }
});

test('a burst larger than the receive area arrives whole and in order, a few batches per wake-up', async () => {
  const sender = await BatchedUdpSocket.open();
  const receiver = await BatchedUdpSocket.open({ receiveSlots: 4, gro: false });
  try {
    const count = 200; // 50 times the 4 slots one recvmmsg fills
    const arrived = collect(receiver, count);
    for (let i = 0; i < count; i++) sender.send(receiver.local, datagram(i, 1000), EMPTY, EMPTY);
    const received = await arrived;
    for (let i = 0; i < count; i++) assert.equal(received[i], new Uint8Array(datagram(i, 1000)), `datagram ${i}`);
    assert.is(receiver.stats.slotsReceived, count);
    assert.ok(receiver.stats.receiveBatches >= count / 4, `${receiver.stats.receiveBatches} batches`);
  } finally {
    await sender.close();
    await receiver.close();
  }
});

test('a receiver that throws loses that datagram only: the next ones arrive', async () => {
  const sender = await BatchedUdpSocket.open();
  const receiver = await BatchedUdpSocket.open({ gro: false });
  try {
    const received: number[] = [];
    const done = new Promise<void>((resolve) =>
      receiver.setReceiver((data) => {
        if (data[0] === 1) throw new Error('a receiver bug');
        received.push(data[0]!);
        if (received.length === 2) resolve();
      }),
    );
    for (const first of [0, 1, 2]) sender.send(receiver.local, new Uint8Array(300).fill(first), EMPTY, EMPTY);
    await done;
    assert.equal(received, [0, 2]);
  } finally {
    await sender.close();
    await receiver.close();
  }
});

test('a batched socket on another thread: 300 round trips, each way through a socket its own thread receives on', async () => {
  const socket = await BatchedUdpSocket.open();
  // A plain-JS worker that loads the socket through tsx (as spawnWorker does) and echoes every datagram.
  const moduleUrl = new URL('../../host/rnic/rc/batched-udp-socket.ts', import.meta.url).href;
  const worker = new Worker(
    `const { parentPort } = require('node:worker_threads');
     import('tsx/esm/api').then((tsx) => { tsx.register(); return import(${JSON.stringify(moduleUrl)}); }).then(async ({ BatchedUdpSocket }) => {
       const echo = await BatchedUdpSocket.open();
       const empty = new Uint8Array(0);
       echo.setReceiver((data, from) => echo.send(from, data.slice(), empty, empty));
       parentPort.once('message', () => echo.close().then(() => parentPort.postMessage('closed')));
       parentPort.postMessage(echo.local.port);
     });`,
    { eval: true },
  );
  try {
    const port = await new Promise<number>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
    const peer = { address: '127.0.0.1', port };
    let round = 0;
    const done = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`round trip ${round} did not come back within 20 s`)), 20_000);
      socket.setReceiver((data) => {
        if (data.length !== 4112 || data[0] !== (round & 0xff)) {
          clearTimeout(timer);
          reject(new Error(`round ${round}: got ${data.length} octets starting ${data[0]}`));
          return;
        }
        if (++round === 300) {
          clearTimeout(timer);
          resolve();
        } else socket.send(peer, new Uint8Array(4112).fill(round & 0xff), EMPTY, EMPTY);
      });
    });
    socket.send(peer, new Uint8Array(4112).fill(0), EMPTY, EMPTY);
    await done;
    worker.postMessage('close');
    assert.is(await new Promise((resolve) => worker.once('message', resolve)), 'closed');
  } finally {
    await worker.terminate();
    await socket.close();
  }
});

test('a socket closed with datagrams waiting in its kernel queue closes promptly', async () => {
  for (let round = 0; round < 3; round++) {
    const sender = await BatchedUdpSocket.open();
    const receiver = await BatchedUdpSocket.open();
    for (let i = 0; i < 8; i++) sender.send(receiver.local, datagram(i, 4112), EMPTY, EMPTY);
    sender.flush(); // written now: readable before the event loop gets to the receiver
    await Promise.race([
      Promise.all([receiver.close(), sender.close()]),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error('close did not end within 10 s')), 10_000).unref()),
    ]);
  }
});

test('close releases the poll handle: sends after close are ignored, close twice is harmless, and a process whose sockets closed exits', async () => {
  for (let round = 0; round < 3; round++) {
    const socket = await BatchedUdpSocket.open();
    await new Promise((resolve) => setTimeout(resolve, 20));
    const started = Date.now();
    await socket.close();
    assert.ok(Date.now() - started < 5000, `close took ${Date.now() - started} ms`);
    socket.send({ address: '127.0.0.1', port: 9 }, datagram(0, 10), EMPTY, EMPTY);
    await socket.close();
    assert.is(socket.stats.datagramsSent, 0);
  }
  // A process that opened two sockets, moved datagrams between them and closed them ends by
  // itself: nothing (a poll handle, a worker) keeps its event loop alive. A datagram that reaches
  // a closed socket's port afterwards changes nothing.
  const moduleUrl = new URL('../../host/rnic/rc/batched-udp-socket.ts', import.meta.url).href;
  const script = `
    const { BatchedUdpSocket } = await import(${JSON.stringify(moduleUrl)});
    const a = await BatchedUdpSocket.open();
    const b = await BatchedUdpSocket.open();
    const empty = new Uint8Array(0);
    await new Promise((resolve) => { b.setReceiver(resolve); a.send(b.local, new Uint8Array(100), empty, empty); });
    await b.close();
    a.send(b.local, new Uint8Array(100), empty, empty);
    await a.close();
    console.log('closed');
  `;
  const run = await new Promise<{ error: ExecFileException | null; stdout: string; stderr: string }>((resolve) =>
    execFile(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { timeout: 20_000 }, (error, stdout, stderr) =>
      resolve({ error, stdout, stderr }),
    ),
  );
  assert.is(run.error?.killed ?? false, false, 'the process did not exit within 20 s of closing its sockets');
  assert.is(run.stderr, '');
  assert.is(run.stdout.trim(), 'closed');
  assert.is(run.error, null);
});

test('a worker thread that ends with its socket open (terminated, or by an uncaught exception) leaves the process running', async () => {
  // In a child whose main thread never loads koffi: there Node unloads the addon with the
  // worker, and koffi's close callback for the still-open poll handle ran in unmapped code
  // (SIGSEGV) until batched-udp-libc.ts kept the binary loaded.
  const moduleUrl = new URL('../../host/rnic/rc/batched-udp-socket.ts', import.meta.url).href;
  const script = `
    const { Worker } = await import('node:worker_threads');
    const body = (ending) => \`
      const { parentPort } = require('node:worker_threads');
      import('tsx/esm/api').then((tsx) => { tsx.register(); return import(${JSON.stringify(moduleUrl)}); }).then(async ({ BatchedUdpSocket }) => {
        const socket = await BatchedUdpSocket.open();
        socket.setReceiver(() => undefined);
        parentPort.postMessage(socket.local.port);
        \${ending}
      });\`;
    for (const ending of ['', 'setTimeout(() => { throw new Error("worker bug"); }, 10);']) {
      const worker = new Worker(body(ending), { eval: true });
      worker.on('error', () => undefined);
      await new Promise((resolve) => worker.once('message', resolve));
      if (ending === '') await worker.terminate();
      else await new Promise((resolve) => worker.once('exit', resolve));
    }
    console.log('survived');
  `;
  // From a file: an eval'd worker would inherit --input-type=module from an eval'd script.
  const directory = mkdtempSync(join(tmpdir(), 'kbtp-batched-udp-'));
  const file = join(directory, 'workers-end.mjs');
  writeFileSync(file, script);
  const run = await new Promise<{ error: ExecFileException | null; stdout: string; stderr: string }>((resolve) =>
    execFile(process.execPath, ['--import', 'tsx', file], { timeout: 30_000 }, (error, stdout, stderr) => resolve({ error, stdout, stderr })),
  );
  rmSync(directory, { recursive: true, force: true });
  assert.is(run.error?.signal ?? null, null, `the process died of ${run.error?.signal}`);
  assert.is(run.stdout.trim(), 'survived', run.stderr);
  assert.is(run.error, null);
});

test('a packet the kernel refuses to send (port 0: EINVAL) ends the QP at once with the reason, not after its retries', async () => {
  const pair = await rcPair({ pathMtu: 1024 });
  try {
    const { client, server } = pair;
    assert.instance(client.link, BatchedUdpLink);
    const path = client.qp.path!;
    path.peer = { address: '127.0.0.1', port: 0 };
    client.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [{ lkey: client.mr.lkey, offset: 0, length: 64 }],
      remote: { stag: server.mr.rkey, taggedOffset: 0 },
    });
    const info = await Promise.race([
      client.qp.whenDisconnected(),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error('the QP did not end within 10 s')), 10_000).unref()),
    ]);
    assert.is(info.reason, 'connection-lost');
    assert.match(info.message, /UDP send to 127\.0\.0\.1:0 failed: EINVAL/);
    const [completion] = client.cq.poll(1);
    assert.is(completion!.status, WcStatus.WrFlushError);
    assert.is(client.rnic.roceEndpoint!.stats.sendFailures, 1);
  } finally {
    await pair.close();
  }
});

test('the UDP link choice: auto takes the batched link here, dgram node:dgram; KBTP_ROCE_UDP is checked', async () => {
  const auto = await openUdpLink({ udpLink: 'auto' });
  const plain = await openUdpLink({ udpLink: 'dgram' });
  const batched = await openUdpLink({ udpLink: 'batched' });
  try {
    assert.instance(auto, BatchedUdpLink);
    assert.instance(plain, UdpLink);
    assert.instance(batched, BatchedUdpLink);
  } finally {
    await Promise.all([auto.close(), plain.close(), batched.close()]);
  }
  assert.is(udpLinkKindFromEnvironment(undefined), 'auto');
  assert.is(udpLinkKindFromEnvironment('dgram'), 'dgram');
  assert.throws(
    () => udpLinkKindFromEnvironment('fast'),
    (error: unknown) => error instanceof UsageError && /KBTP_ROCE_UDP=fast: use auto, batched, dgram/.test(error.message),
  );
});

test.run();
