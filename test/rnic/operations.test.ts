// Every operation over real loopback TCP between two RNIC instances: the data lands where it
// should, completions carry the right fields and come in order, and the setup options (CRC,
// markers, MULPDU, MPA revision, RTR type, IRD/ORD, private data) take effect.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { connectedPair, completions, pattern, type Pair, type PairOptions } from '../support/rnic.ts';
import { Access, createRnic, RnicError, WcStatus, type NicObserver } from '../../host/rnic/verbs.ts';

async function withPair(options: PairOptions, body: (pair: Pair) => Promise<void>): Promise<void> {
  const pair = await connectedPair(options);
  try {
    await body(pair);
  } finally {
    await pair.close();
  }
}

const equalBytes = (actual: Uint8Array, expected: Uint8Array, message?: string): void => {
  assert.is(Buffer.compare(Buffer.from(actual), Buffer.from(expected)), 0, message);
};

for (const crc of [true, false]) {
  test(`RDMA Write (gathered, multi-segment) then Send, CRC ${crc ? 'on' : 'off'}: data placed before the Send completes`, async () => {
    await withPair({ connect: { crc }, accept: { crc }, preposted: 2 }, async ({ client, server, clientSummary }) => {
      assert.is(clientSummary.crc, crc);
      const a = pattern(100_000, 1);
      const b = pattern(70_001, 2);
      client.memory.set(a, 0);
      client.memory.set(b, 200_000);
      client.qp.postSend({
        wrId: 1n,
        opcode: 'RDMA_WRITE',
        sgList: [
          { lkey: client.mr.lkey, offset: 0, length: a.length },
          { lkey: client.mr.lkey, offset: 200_000, length: b.length },
        ],
        remote: { stag: server.mr.rkey, taggedOffset: 12_345 },
      });
      client.memory.set([1, 2, 3], 400_000);
      client.qp.postSend({ wrId: 2n, opcode: 'SEND', sgList: [{ lkey: client.mr.lkey, offset: 400_000, length: 3 }] });
      const local = await completions(client.cq, 2);
      assert.equal(
        local.map((c) => [c.wrId, c.opcode, c.status, c.byteLength]),
        [
          [1n, 'RDMA_WRITE', 0, a.length + b.length],
          [2n, 'SEND', 0, 3],
        ],
      );
      const [received] = await completions(server.cq, 1);
      // The Send completed, so every earlier Write is placed (RFC 5040 §5.5).
      equalBytes(server.memory.subarray(12_345, 12_345 + a.length), a);
      equalBytes(server.memory.subarray(12_345 + a.length, 12_345 + a.length + b.length), b);
      assert.equal([received!.opcode, received!.status, received!.byteLength, received!.wrId], ['RECV', 0, 3, 1000]);
      equalBytes(server.memory.subarray(server.memory.length >> 1, (server.memory.length >> 1) + 3), new Uint8Array([1, 2, 3]));
    });
  });
}

test('RDMA Read of 300 KiB (many response segments) and zero-length Read', async () => {
  await withPair({}, async ({ client, server }) => {
    const data = pattern(300 * 1024, 3);
    server.memory.set(data, 5000);
    client.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_READ',
      sgList: [{ lkey: client.mr.lkey, offset: 600_000, length: data.length }],
      remote: { stag: server.mr.rkey, taggedOffset: 5000 },
    });
    client.qp.postSend({ wrId: 2, opcode: 'RDMA_READ', sgList: [], remote: { stag: 0xdeadbeef, taggedOffset: 0 } });
    const done = await completions(client.cq, 2);
    assert.equal(
      done.map((c) => [c.wrId, c.opcode, c.status, c.byteLength]),
      [
        [1, 'RDMA_READ', 0, data.length],
        [2, 'RDMA_READ', 0, 0],
      ],
    );
    equalBytes(client.memory.subarray(600_000, 600_000 + data.length), data);
  });
});

test('Send variants: Send with Invalidate, with Solicited Event, with both; scattered receive', async () => {
  await withPair({}, async ({ client, server }) => {
    const victim = server.rnic.registerMemory(server.pd, new SharedArrayBuffer(64), { access: Access.LocalWrite | Access.RemoteWrite });
    const victim2 = server.rnic.registerMemory(server.pd, new SharedArrayBuffer(64), { access: Access.LocalWrite | Access.RemoteWrite });
    for (let i = 0; i < 4; i++) {
      // Three scatter elements per receive: 5 + 0 + 100 octets.
      server.qp.postRecv({
        wrId: i,
        sgList: [
          { lkey: server.mr.lkey, offset: 10_000 + i * 1000, length: 5 },
          { lkey: server.mr.lkey, offset: 0, length: 0 },
          { lkey: server.mr.lkey, offset: 20_000 + i * 1000, length: 100 },
        ],
      });
    }
    const message = pattern(60, 9);
    client.memory.set(message, 0);
    const sg = [{ lkey: client.mr.lkey, offset: 0, length: 60 }];
    client.qp.postSend({ wrId: 1, opcode: 'SEND_WITH_INV', sgList: sg, invalidateStag: victim.rkey });
    client.qp.postSend({ wrId: 2, opcode: 'SEND_WITH_SE', sgList: sg });
    client.qp.postSend({ wrId: 3, opcode: 'SEND_WITH_SE_INV', sgList: sg, invalidateStag: victim2.rkey });
    client.qp.postSend({ wrId: 4, opcode: 'SEND', sgList: sg, solicited: true });
    await completions(client.cq, 4);
    const received = await completions(server.cq, 4);
    assert.equal(
      received.map((c) => [c.wrId, c.byteLength, c.solicited === true, c.invalidatedStag]),
      [
        [0, 60, false, victim.rkey],
        [1, 60, true, undefined],
        [2, 60, true, victim2.rkey],
        [3, 60, true, undefined],
      ],
    );
    assert.not.ok(victim.valid);
    assert.not.ok(victim2.valid);
    for (let i = 0; i < 4; i++) {
      equalBytes(server.memory.subarray(10_000 + i * 1000, 10_005 + i * 1000), message.subarray(0, 5));
      equalBytes(server.memory.subarray(20_000 + i * 1000, 20_055 + i * 1000), message.subarray(5));
    }
  });
});

test('solicited-only notification fires for the solicited Send, not for plain ones', async () => {
  await withPair({ preposted: 4 }, async ({ client, server }) => {
    let notified = 0;
    server.cq.onNotify(() => notified++);
    server.cq.requestNotify(true);
    const solicited = server.cq.wait(true);
    client.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [] });
    client.qp.postSend({ wrId: 2, opcode: 'SEND', sgList: [] });
    await completions(server.cq, 2);
    assert.is(notified, 0);
    client.qp.postSend({ wrId: 3, opcode: 'SEND_WITH_SE', sgList: [] });
    await solicited;
    assert.is(notified, 1);
    const [third] = server.cq.poll();
    assert.ok(third!.solicited);
  });
});

test('RDMA Write with Immediate: data placed, the receive completes with the 64-bit immediate', async () => {
  await withPair({ preposted: 1 }, async ({ client, server }) => {
    const data = pattern(10_000, 4);
    client.memory.set(data, 0);
    client.qp.postSend({
      wrId: 7,
      opcode: 'RDMA_WRITE_WITH_IMM',
      sgList: [{ lkey: client.mr.lkey, offset: 0, length: data.length }],
      remote: { stag: server.mr.rkey, taggedOffset: 64 },
      immediate: 0x0102030405060708n,
    });
    const [sent] = await completions(client.cq, 1);
    assert.equal([sent!.opcode, sent!.status, sent!.byteLength], ['RDMA_WRITE', 0, data.length]);
    const [received] = await completions(server.cq, 1);
    assert.equal([received!.opcode, received!.status, received!.immediate, received!.byteLength], ['RECV_RDMA_WITH_IMM', 0, 0x0102030405060708n, 0]);
    equalBytes(server.memory.subarray(64, 64 + data.length), data);
  });
});

test('atomics: FetchAdd and CmpSwap, masked and unmasked, execute in order on the target', async () => {
  await withPair({}, async ({ client, server }) => {
    const words = new BigUint64Array(server.memory.buffer, 0, 4);
    words[0] = 40n;
    words[1] = 0x00000000ffffffffn;
    words[2] = 0x11223344556677aan;
    const result = (i: number) => [{ lkey: client.mr.lkey, offset: 4096 + i * 8, length: 8 }];
    const remote = (word: number) => ({ stag: server.mr.rkey, taggedOffset: word * 8 });
    client.qp.postSend({ wrId: 1, opcode: 'ATOMIC_FETCH_ADD', sgList: result(0), remote: remote(0), atomic: { add: 2n } });
    client.qp.postSend({ wrId: 2, opcode: 'ATOMIC_CMP_SWAP', sgList: result(1), remote: remote(0), atomic: { compare: 42n, swap: 100n } });
    client.qp.postSend({ wrId: 3, opcode: 'ATOMIC_CMP_SWAP', remote: remote(0), atomic: { compare: 42n, swap: 7n } });
    // Two independent 32-bit counters in one word: the low one wraps without carrying.
    client.qp.postSend({ wrId: 4, opcode: 'ATOMIC_FETCH_ADD', remote: remote(1), atomic: { add: 0x0000000100000001n, addMask: 0x8000000080000000n } });
    // Compare the low byte only, swap the high half only.
    client.qp.postSend({
      wrId: 5,
      opcode: 'ATOMIC_CMP_SWAP',
      remote: remote(2),
      atomic: { compare: 0xaan, compareMask: 0xffn, swap: 0xdeadbeef00000000n, swapMask: 0xffffffff00000000n },
    });
    // A FetchAdd of 0 probes without changing memory.
    client.qp.postSend({ wrId: 6, opcode: 'ATOMIC_FETCH_ADD', remote: remote(2), atomic: { add: 0n } });
    const done = await completions(client.cq, 6);
    assert.equal(
      done.map((c) => [c.wrId, c.opcode, c.status, c.atomicResult]),
      [
        [1, 'FETCH_ADD', 0, 40n],
        [2, 'COMP_SWAP', 0, 42n],
        [3, 'COMP_SWAP', 0, 100n],
        [4, 'FETCH_ADD', 0, 0x00000000ffffffffn],
        [5, 'COMP_SWAP', 0, 0x11223344556677aan],
        [6, 'FETCH_ADD', 0, 0xdeadbeef556677aan],
      ],
    );
    assert.is(words[0], 100n);
    assert.is(words[1], 0x0000000100000000n);
    assert.is(words[2], 0xdeadbeef556677aan);
    // Results land in the local SGEs in host byte order.
    const results = new BigUint64Array(client.memory.buffer, 4096, 2);
    assert.equal([results[0], results[1]], [40n, 42n]);
  });
});

test('completions come in posting order: a Send posted after a Read completes after it', async () => {
  await withPair({ preposted: 4 }, async ({ client, server }) => {
    server.memory.set(pattern(200_000, 5), 0);
    client.qp.postSend({
      wrId: 'read' as unknown as number,
      opcode: 'RDMA_READ',
      sgList: [{ lkey: client.mr.lkey, offset: 0, length: 200_000 }],
      remote: { stag: server.mr.rkey, taggedOffset: 0 },
    });
    client.qp.postSend({ wrId: 'send' as unknown as number, opcode: 'SEND', sgList: [] });
    client.qp.postSend({ wrId: 'unsignaled', opcode: 'SEND', sgList: [], signaled: false } as never);
    client.qp.postSend({ wrId: 'write' as unknown as number, opcode: 'RDMA_WRITE', sgList: [], remote: { stag: server.mr.rkey, taggedOffset: 0 } });
    const done = await completions(client.cq, 3);
    assert.equal(
      done.map((c) => c.wrId),
      ['read', 'send', 'write'],
    );
  });
});

test('local invalidate, deregistration and re-validation gate remote access', async () => {
  await withPair({}, async ({ client, server }) => {
    const extra = server.rnic.registerMemory(server.pd, new SharedArrayBuffer(4096), { access: Access.LocalWrite | Access.RemoteRead });
    server.qp.postSend({ wrId: 1, opcode: 'LOCAL_INV', invalidateStag: extra.stag });
    const [inv] = await completions(server.cq, 1);
    assert.equal([inv!.opcode, inv!.status], ['LOCAL_INV', 0]);
    assert.not.ok(extra.valid);
    server.rnic.revalidate(extra);
    assert.ok(extra.valid);
    new Uint8Array(extra.buffer).set([9, 8, 7], 0);
    client.qp.postSend({
      wrId: 2,
      opcode: 'RDMA_READ',
      sgList: [{ lkey: client.mr.lkey, offset: 0, length: 3 }],
      remote: { stag: extra.rkey, taggedOffset: 0 },
    });
    await completions(client.cq, 1);
    equalBytes(client.memory.subarray(0, 3), new Uint8Array([9, 8, 7]));
    server.rnic.deregisterMemory(extra);
    assert.throws(() => server.rnic.deregisterMemory(extra), /not registered/);
  });
});

test('non-zero tagged-offset base, a view registration and a small MULPDU', async () => {
  await withPair({ connect: { mulpdu: 128 }, accept: { mulpdu: 128 } }, async ({ client, server }) => {
    const backing = new SharedArrayBuffer(1 << 16);
    const view = new Uint8Array(backing, 4096, 8192);
    const region = server.rnic.registerMemory(server.pd, view, {
      access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead,
      offset: 1024,
      taggedOffsetBase: 0xffff_0000_0000_0000n,
    });
    assert.is(region.byteOffset, 4096 + 1024);
    assert.is(region.length, 8192 - 1024);
    const data = pattern(3000, 6);
    client.memory.set(data, 0);
    client.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [{ lkey: client.mr.lkey, offset: 0, length: 3000 }],
      remote: { stag: region.rkey, taggedOffset: 0xffff_0000_0000_0010n },
    });
    client.qp.postSend({
      wrId: 2,
      opcode: 'RDMA_READ',
      sgList: [{ lkey: client.mr.lkey, offset: 10_000, length: 3000 }],
      remote: { stag: region.rkey, taggedOffset: 0xffff_0000_0000_0010n },
    });
    await completions(client.cq, 2);
    equalBytes(new Uint8Array(backing, 4096 + 1024 + 16, 3000), data);
    equalBytes(client.memory.subarray(10_000, 13_000), data);
    // 3000 octets in 114-octet segments: 27 FPDUs for the write.
    assert.ok(client.qp.statistics.messagesSent >= 3);
  });
});

test('markers in both directions, with CRC', async () => {
  await withPair({ connect: { markers: true }, accept: { markers: true }, preposted: 2 }, async ({ client, server, clientSummary, serverSummary }) => {
    assert.equal([clientSummary.markersIn, clientSummary.markersOut, serverSummary.markersIn, serverSummary.markersOut], [true, true, true, true]);
    const data = pattern(50_000, 7);
    client.memory.set(data, 0);
    client.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [{ lkey: client.mr.lkey, offset: 0, length: data.length }],
      remote: { stag: server.mr.rkey, taggedOffset: 3 },
    });
    client.qp.postSend({ wrId: 2, opcode: 'SEND', sgList: [{ lkey: client.mr.lkey, offset: 0, length: 777 }] });
    await completions(server.cq, 1);
    equalBytes(server.memory.subarray(3, 3 + data.length), data);
    server.qp.postSend({
      wrId: 3,
      opcode: 'RDMA_READ',
      sgList: [{ lkey: server.mr.lkey, offset: 100_000, length: 40_000 }],
      remote: { stag: client.mr.rkey, taggedOffset: 1 },
    });
    await completions(server.cq, 1);
    equalBytes(server.memory.subarray(100_000, 140_000), data.subarray(1, 40_001));
  });
});

for (const rtr of ['write', 'read', 'send'] as const) {
  test(`peer-to-peer setup with a zero-length ${rtr} RTR`, async () => {
    await withPair(
      { connect: { rtr: [rtr] }, accept: { acceptRtr: [rtr] }, preposted: rtr === 'send' ? 2 : 0 },
      async ({ client, server, clientSummary, serverSummary }) => {
        assert.is(clientSummary.rtr, rtr);
        assert.is(serverSummary.rtr, rtr);
        if (rtr === 'send') {
          // The Send RTR consumed one posted receive with a zero-length completion.
          const [consumed] = await completions(server.cq, 1);
          assert.equal([consumed!.opcode, consumed!.byteLength, consumed!.status], ['RECV', 0, 0]);
        }
        client.memory.set([5, 6, 7, 8], 0);
        client.qp.postSend({
          wrId: 1,
          opcode: 'RDMA_WRITE',
          sgList: [{ lkey: client.mr.lkey, offset: 0, length: 4 }],
          remote: { stag: server.mr.rkey, taggedOffset: 0 },
        });
        server.qp.postSend({
          wrId: 2,
          opcode: 'RDMA_READ',
          sgList: [{ lkey: server.mr.lkey, offset: 64, length: 4 }],
          remote: { stag: client.mr.rkey, taggedOffset: 0 },
        });
        await completions(server.cq, 1);
        await completions(client.cq, 1);
        equalBytes(server.memory.subarray(0, 4), new Uint8Array([5, 6, 7, 8]));
        equalBytes(server.memory.subarray(64, 68), new Uint8Array([5, 6, 7, 8]));
      },
    );
  });
}

test('firstFpduDelayMs holds the RTR after the Reply and delays connect', async () => {
  const started = Date.now();
  await withPair({ connect: { firstFpduDelayMs: 60 } }, async ({ client, server }) => {
    assert.ok(Date.now() - started >= 50, 'connect waited for the hold');
    client.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [{ lkey: client.mr.lkey, offset: 0, length: 4 }],
      remote: { stag: server.mr.rkey, taggedOffset: 0 },
    });
    await completions(client.cq, 1);
  });
});

test('MPA revision 1, client-server model, private data both ways, IRD/ORD negotiation', async () => {
  await withPair(
    { connect: { revision: 1, privateData: new Uint8Array([1, 2, 3]) }, accept: { privateData: new Uint8Array([4, 5]) } },
    async ({ clientSummary, serverSummary, client, server }) => {
      assert.is(clientSummary.revision, 1);
      assert.not.ok(clientSummary.enhanced);
      assert.equal([...clientSummary.privateData], [4, 5]);
      assert.equal([...serverSummary.privateData], [1, 2, 3]);
      assert.equal([...server.qp.peerPrivateData], [1, 2, 3]);
      assert.is(client.qp.state, 'rts');
    },
  );
  await withPair({ ird: 4, ord: 2 }, async ({ clientSummary, serverSummary }) => {
    // Each side's IRD covers the other's ORD; ORD never exceeds the other's IRD.
    assert.equal([clientSummary.ird, clientSummary.ord, serverSummary.ird, serverSummary.ord], [4, 2, 4, 2]);
  });
  const server = createRnic();
  const client = createRnic();
  const make = (rnic: typeof server, ird: number, ord: number) => {
    const pd = rnic.allocPd();
    const cq = rnic.createCq();
    return rnic.createQp({ pd, sendCq: cq, recvCq: cq, ird, ord });
  };
  const listener = await server.listen();
  const serverQp = make(server, 2, 8);
  const clientQp = make(client, 1, 16);
  const accepted = listener.next().then((request) => {
    assert.equal([request.ird, request.ord], [1, 16]);
    return request.accept(serverQp);
  });
  const summary = await client.connect(clientQp, { host: '127.0.0.1', port: listener.port });
  const serverSummary = await accepted;
  // Responder raised its IRD to the initiator's ORD 16 and lowered its ORD to the initiator's IRD 1.
  assert.equal([serverSummary.ird, serverSummary.ord], [16, 1]);
  assert.equal([summary.ird, summary.ord], [1, 16]);
  clientQp.destroy();
  serverQp.destroy();
  await listener.close();
});

test('rejection with private data, setup timeout, refused TCP, posting before connect', async () => {
  const server = createRnic();
  const client = createRnic();
  const pd = client.allocPd();
  const cq = client.createCq();
  const listener = await server.listen();
  listener.next().then((request) => request.reject(new TextEncoder().encode('no room')));
  const qp = client.createQp({ pd, sendCq: cq, recvCq: cq });
  assert.throws(
    () => qp.postSend({ wrId: 1, opcode: 'SEND' }),
    (error: unknown) => error instanceof RnicError && error.errno === 'ENOTCONN',
  );
  qp.postRecv({ wrId: 1, sgList: [] });
  try {
    await client.connect(qp, { host: '127.0.0.1', port: listener.port });
    assert.unreachable('connect should be refused');
  } catch (error) {
    assert.instance(error, RnicError);
    assert.is((error as RnicError).errno, 'ECONNREFUSED');
    assert.is(new TextDecoder().decode(qp.peerPrivateData), 'no room');
  }
  assert.is(qp.state, 'error');
  const [flushed] = cq.poll();
  assert.is(flushed!.status, WcStatus.WrFlushError);
  await listener.close();

  // A server that accepts TCP but never answers the MPA Request.
  const net = await import('node:net');
  const silent = net.createServer(() => undefined);
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  const port = (silent.address() as { port: number }).port;
  const qp2 = client.createQp({ pd, sendCq: cq, recvCq: cq });
  try {
    await client.connect(qp2, { host: '127.0.0.1', port, timeoutMs: 200 });
    assert.unreachable('connect should time out');
  } catch (error) {
    assert.is((error as RnicError).errno, 'ETIMEDOUT');
    assert.match((error as Error).message, /Reply/);
    // The caller's bound, not the default one, ended the wait (named in the message: no clock
    // comparison, which a loaded machine could break).
    assert.match((error as Error).message, /within [0-9]{1,3} ms/);
  }
  silent.close();
  await new Promise((resolve) => setTimeout(resolve, 10));
  const qp3 = client.createQp({ pd, sendCq: cq, recvCq: cq });
  try {
    await client.connect(qp3, { host: '127.0.0.1', port });
    assert.unreachable('connect should be refused');
  } catch (error) {
    assert.is((error as RnicError).errno, 'ECONNREFUSED');
  }
});

test('a listener drops a connection that never sends its MPA Request', async () => {
  const server = createRnic();
  const listener = await server.listen({ timeoutMs: 100 });
  const net = await import('node:net');
  const socket = net.connect(listener.port, '127.0.0.1');
  socket.on('error', () => undefined);
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
  await closed;
  assert.match(listener.failures.at(-1) ?? '', /waiting for the Request/);
  await listener.close();
});

test('two QPs wired back to back through synchronous in-memory channels (nested receive paths)', async () => {
  const a = createRnic();
  const b = createRnic();
  const { MemoryChannel } = await import('../../host/rnic/channel.ts');
  let toB: InstanceType<typeof MemoryChannel> | undefined;
  let toA: InstanceType<typeof MemoryChannel> | undefined;
  // Each side's writes are delivered to the other side at once, from inside its own processing.
  const channelA = new MemoryChannel(0, (chunks) => {
    for (const chunk of chunks) toB?.receive(chunk);
  });
  const channelB = new MemoryChannel(0, (chunks) => {
    for (const chunk of chunks) toA?.receive(chunk);
  });
  toA = channelA;
  toB = channelB;
  const side = (rnic: typeof a) => {
    const pd = rnic.allocPd();
    const memory = new Uint8Array(new SharedArrayBuffer(1 << 18));
    const mr = rnic.registerMemory(pd, memory, { access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead | Access.RemoteAtomic });
    const cq = rnic.createCq();
    return { memory, mr, cq, qp: rnic.createQp({ pd, sendCq: cq, recvCq: cq }) };
  };
  const left = side(a);
  const right = side(b);
  const accepted = b.acceptChannel(channelB).then((request) => request.accept(right.qp));
  await a.connectChannel(left.qp, channelA);
  await accepted;
  const data = pattern(150_000, 11);
  right.memory.set(data, 0);
  left.qp.postSend({
    wrId: 1,
    opcode: 'RDMA_READ',
    sgList: [{ lkey: left.mr.lkey, offset: 0, length: data.length }],
    remote: { stag: right.mr.rkey, taggedOffset: 0 },
  });
  left.qp.postSend({
    wrId: 2,
    opcode: 'RDMA_WRITE',
    sgList: [{ lkey: left.mr.lkey, offset: 0, length: data.length }],
    remote: { stag: right.mr.rkey, taggedOffset: 100_000 },
  });
  left.qp.postSend({ wrId: 3, opcode: 'ATOMIC_FETCH_ADD', remote: { stag: right.mr.rkey, taggedOffset: 250_000 }, atomic: { add: 3n } });
  const done = await completions(left.cq, 3);
  assert.ok(
    done.every((c) => c.status === 0),
    JSON.stringify(done.map((c) => c.error)),
  );
  equalBytes(left.memory.subarray(0, data.length), data);
  equalBytes(right.memory.subarray(100_000, 100_000 + data.length), data);
  left.qp.destroy();
  right.qp.destroy();
});

test('the observer sees every hook; without one nothing is called', async () => {
  const calls = new Map<string, number>();
  const count = (name: string) => () => calls.set(name, (calls.get(name) ?? 0) + 1);
  const observer: NicObserver = {
    queuePairContext: count('queuePairContext'),
    memoryTranslation: count('memoryTranslation'),
    completionQueue: count('completionQueue'),
    eventQueue: count('eventQueue'),
    registerRegion: count('registerRegion'),
    deregisterRegion: count('deregisterRegion'),
    queuePairCreated: count('queuePairCreated'),
    queuePairDestroyed: count('queuePairDestroyed'),
  };
  const server = createRnic({ observer });
  const client = createRnic();
  const spd = server.allocPd();
  const smem = server.registerMemory(spd, new SharedArrayBuffer(65536), { access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead });
  const scq = server.createCq();
  const sqp = server.createQp({ pd: spd, sendCq: scq, recvCq: scq });
  const cpd = client.allocPd();
  const cmem = client.registerMemory(cpd, new SharedArrayBuffer(65536), { access: Access.LocalWrite });
  const ccq = client.createCq();
  const cqp = client.createQp({ pd: cpd, sendCq: ccq, recvCq: ccq });
  sqp.postRecv({ wrId: 1, sgList: [{ lkey: smem.lkey, offset: 0, length: 100 }] });
  const listener = await server.listen();
  const accepted = listener.next().then((request) => request.accept(sqp));
  await client.connect(cqp, { host: '127.0.0.1', port: listener.port });
  await accepted;
  scq.requestNotify();
  cqp.postSend({ wrId: 1, opcode: 'RDMA_WRITE', sgList: [{ lkey: cmem.lkey, offset: 0, length: 100 }], remote: { stag: smem.rkey, taggedOffset: 200 } });
  cqp.postSend({ wrId: 2, opcode: 'RDMA_READ', sgList: [{ lkey: cmem.lkey, offset: 0, length: 100 }], remote: { stag: smem.rkey, taggedOffset: 200 } });
  cqp.postSend({ wrId: 3, opcode: 'SEND', sgList: [{ lkey: cmem.lkey, offset: 0, length: 10 }] });
  await completions(scq, 1);
  await completions(ccq, 3);
  server.deregisterMemory(smem);
  sqp.destroy();
  cqp.destroy();
  await listener.close();
  assert.is(calls.get('registerRegion'), 1);
  assert.is(calls.get('deregisterRegion'), 1);
  assert.is(calls.get('queuePairCreated'), 1);
  assert.is(calls.get('queuePairDestroyed'), 1);
  assert.is(calls.get('completionQueue'), 1); // the receive
  assert.is(calls.get('eventQueue'), 1); // its notification
  // Write placed + Read source + the receive buffer.
  assert.ok((calls.get('memoryTranslation') ?? 0) >= 3);
  // Messages received (Write, Read Request, Send, RTR) and sent (Read Response).
  assert.ok((calls.get('queuePairContext') ?? 0) >= 5);
});

test.run();
