// kbtp's RC requester against rxe's responder: the guest runs perftest's servers (ib_write_bw,
// ib_read_bw, ib_atomic_bw, each as `-d rxe0 -x <idx>` without a server name), kbtp connects as
// the client through perftest's own side-channel exchange (host/rnic/rc/perftest-client.ts) and
// posts the operations itself against the server's advertised buffer, so what comes back can be
// checked: Reads of overlapping ranges must agree, FetchAdds on one word must return consecutive
// originals, a chain of CmpSwaps must each find the value the previous one stored, a CmpSwap with
// a wrong compare value must change nothing, and a Write outside the server's buffer must end in
// rxe's NAK (remote access error) and a clean error on kbtp's QP, not a hang.
import { readFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { decodeRoceCapture } from '../../host/capture/roce.ts';
import { connectPerftestCm } from '../../host/rnic/rc/perftest-cm.ts';
import { connectPerftest, type PerftestClientSession } from '../../host/rnic/rc/perftest-client.ts';
import type { RcQueuePair } from '../../host/rnic/rc/queue-pair.ts';
import { Access, WcStatus, wcStatusName, type CompletionQueue, type MemoryRegion, type WorkCompletion } from '../../host/rnic/verbs.ts';
import { GUEST_TUNNEL_ADDRESS, Guest } from './guest.ts';
import { openRxeNeighbour, type RxeNeighbour } from './rxe-tunnel.ts';

const PORT = 18515;
const SIZE = 16384;

interface Client {
  readonly qp: RcQueuePair;
  readonly cq: CompletionQueue;
  readonly region: MemoryRegion;
  readonly session: PerftestClientSession;
}

async function connect(neighbour: RxeNeighbour, guest: Guest): Promise<Client> {
  const { rnic } = neighbour;
  const pd = rnic.allocPd();
  const cq = rnic.createCq({ depth: 256 });
  const qp = rnic.createRcQp({ pd, sendCq: cq, recvCq: cq, ird: 16, ord: 16, maxSendWr: 128 });
  const region = rnic.registerMemory(pd, new SharedArrayBuffer(1024 * 1024), { access: Access.LocalWrite });
  const session = await connectPerftest(rnic.roceEndpoint!, qp, { host: '127.0.0.1', port: guest.hostPort(PORT), region });
  return { qp, cq, region, session };
}

/** The run's tunnel capture, every RoCEv2 packet of which must decode with its ICRC verified. */
function decodedCapture(pcapPath: string) {
  const capture = decodeRoceCapture(new Uint8Array(readFileSync(pcapPath)));
  assert.equal(
    capture.packets.filter((packet) => packet.problem !== undefined).map((packet) => `record ${packet.recordIndex}: ${packet.problem}`),
    [],
    'every RoCEv2 packet decodes, ICRC verified',
  );
  return capture;
}

async function completions(cq: CompletionQueue, count: number, timeoutMs = 120_000): Promise<WorkCompletion[]> {
  const done: WorkCompletion[] = [];
  const deadline = Date.now() + timeoutMs;
  while (done.length < count) {
    done.push(...cq.poll(count - done.length));
    if (done.length >= count) break;
    if (Date.now() > deadline) throw new Error(`${done.length} of ${count} completions within ${timeoutMs} ms`);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([cq.wait(), new Promise<void>((resolve) => (timer = setTimeout(resolve, 500)))]);
    clearTimeout(timer);
  }
  return done;
}

function allSucceeded(done: WorkCompletion[], what: string): void {
  const failed = done.filter((wc) => wc.status !== WcStatus.Success);
  assert.equal(
    failed.map((wc) => `${wc.wrId}: ${wcStatusName(wc.status)} ${wc.error ?? ''}`),
    [],
    what,
  );
}

async function atomic(
  client: Client,
  opcode: 'ATOMIC_FETCH_ADD' | 'ATOMIC_CMP_SWAP',
  offset: number,
  values: { add?: bigint; compare?: bigint; swap?: bigint },
): Promise<bigint> {
  const { server } = client.session;
  client.qp.postSend({
    wrId: 1,
    opcode,
    sgList: [{ lkey: client.region.lkey, offset: 0, length: 8 }],
    remote: { stag: server.rkey, taggedOffset: server.virtualAddress + BigInt(offset) },
    atomic: opcode === 'ATOMIC_FETCH_ADD' ? { add: values.add ?? 0n } : { compare: values.compare ?? 0n, swap: values.swap ?? 0n },
  });
  const [wc] = await completions(client.cq, 1);
  allSucceeded([wc!], opcode);
  return wc!.atomicResult!;
}

test('kbtp as perftest client against rxe servers: Write, Read, FetchAdd, CmpSwap; data checked', async () => {
  const neighbour = await openRxeNeighbour('perftest-client');
  const servers = [
    { name: 'write', tool: `ib_write_bw -s ${SIZE}` },
    { name: 'read', tool: `ib_read_bw -s ${SIZE}` },
    { name: 'fetch-add', tool: 'ib_atomic_bw -A FETCH_AND_ADD' },
    { name: 'compare-swap', tool: 'ib_atomic_bw -A CMP_AND_SWAP' },
  ];
  const script = [
    'status=0',
    'g=$(rxe_gid_index)',
    ...servers.map((s) =>
      [
        `${s.tool} -d rxe0 -x $g -F -p ${PORT} & pid=$!`,
        `wait_tcp_listen ${PORT} || exit 10`,
        `echo "KBTP-READY ${s.name}"`,
        `wait $pid; rc=$?; echo "KBTP-PERFTEST-SERVER ${s.name} $rc"; [ $rc = 0 ] || status=1`,
      ].join('\n'),
    ),
    'exit $status',
  ].join('\n');
  const guest = await Guest.start({
    name: 'rxe-perftest-client',
    frameTunnel: neighbour.ports,
    forwardGuestPorts: [PORT],
    peerScript: script,
    timeoutMs: 420_000,
  });
  try {
    // --- ib_write_bw: 50 Writes of 16 KiB, then one past the server's buffer -------------------
    await guest.waitForLine(/KBTP-READY write/, 180_000);
    let client = await connect(neighbour, guest);
    assert.is(client.session.pathMtu, 1024, "rxe's active MTU");
    for (let i = 0; i < SIZE; i++) client.region.bytes[i] = (i * 13 + 5) & 0xff;
    const target = { stag: client.session.server.rkey, taggedOffset: client.session.server.virtualAddress };
    for (let i = 0; i < 50; i++)
      client.qp.postSend({ wrId: i, opcode: 'RDMA_WRITE', sgList: [{ lkey: client.region.lkey, offset: 0, length: SIZE }], remote: target });
    allSucceeded(await completions(client.cq, 50), 'Writes');
    client.qp.postSend({
      wrId: 99,
      opcode: 'RDMA_WRITE',
      sgList: [{ lkey: client.region.lkey, offset: 0, length: 64 }],
      remote: { stag: target.stag, taggedOffset: target.taggedOffset + 64n * 1024n * 1024n },
    });
    const [outside] = await completions(client.cq, 1);
    assert.is(outside!.status, WcStatus.RemoteAccessError, `Write outside the buffer: ${wcStatusName(outside!.status)} ${outside!.error ?? ''}`);
    assert.is(client.qp.state, 'error');
    await client.session.finish();
    client.qp.destroy();

    // --- ib_read_bw: overlapping Reads agree ---------------------------------------------------
    await guest.waitForLine(/KBTP-READY read/, 180_000);
    client = await connect(neighbour, guest);
    const server = { stag: client.session.server.rkey, taggedOffset: client.session.server.virtualAddress };
    client.qp.postSend({ wrId: 1, opcode: 'RDMA_READ', sgList: [{ lkey: client.region.lkey, offset: 0, length: SIZE }], remote: server });
    client.qp.postSend({
      wrId: 2,
      opcode: 'RDMA_READ',
      sgList: [{ lkey: client.region.lkey, offset: 65536, length: 8192 }],
      remote: { stag: server.stag, taggedOffset: server.taggedOffset + 4096n },
    });
    for (let i = 0; i < 30; i++) {
      client.qp.postSend({
        wrId: 10 + i,
        opcode: 'RDMA_READ',
        sgList: [{ lkey: client.region.lkey, offset: 131072 + i * SIZE, length: SIZE }],
        remote: server,
      });
    }
    allSucceeded(await completions(client.cq, 32), 'Reads');
    const whole = client.region.bytes.subarray(0, SIZE);
    assert.equal(client.region.bytes.subarray(65536, 65536 + 8192), whole.subarray(4096, 4096 + 8192), 'the sub-range Read agrees with the whole');
    for (let i = 0; i < 30; i++) assert.equal(client.region.bytes.subarray(131072 + i * SIZE, 131072 + (i + 1) * SIZE), whole, `Read ${i} agrees`);
    await client.session.finish();
    client.qp.destroy();

    // --- ib_atomic_bw FETCH_AND_ADD: 100 FetchAdds on one word return consecutive originals -----
    await guest.waitForLine(/KBTP-READY fetch-add/, 180_000);
    client = await connect(neighbour, guest);
    const start = await atomic(client, 'ATOMIC_FETCH_ADD', 8, { add: 0n });
    const word = { stag: client.session.server.rkey, taggedOffset: client.session.server.virtualAddress + 8n };
    for (let i = 0; i < 100; i++) {
      client.qp.postSend({
        wrId: i,
        opcode: 'ATOMIC_FETCH_ADD',
        sgList: [{ lkey: client.region.lkey, offset: 8 * i, length: 8 }],
        remote: word,
        atomic: { add: 3n },
      });
    }
    const adds = await completions(client.cq, 100);
    allSucceeded(adds, 'FetchAdds');
    assert.equal(
      adds.map((wc) => wc.atomicResult),
      adds.map((_, i) => BigInt.asUintN(64, start + 3n * BigInt(i))),
      'each FetchAdd executed once, in order',
    );
    assert.is(await atomic(client, 'ATOMIC_FETCH_ADD', 8, { add: 0n }), BigInt.asUintN(64, start + 300n));
    await client.session.finish();
    client.qp.destroy();

    // --- ib_atomic_bw CMP_AND_SWAP: a chain of 20 swaps, and one that must not swap -------------
    await guest.waitForLine(/KBTP-READY compare-swap/, 180_000);
    client = await connect(neighbour, guest);
    let value = await atomic(client, 'ATOMIC_FETCH_ADD', 16, { add: 0n });
    for (let i = 0; i < 20; i++) {
      const next = BigInt.asUintN(64, value * 3n + 0x1234_5678_9abc_def1n);
      assert.is(await atomic(client, 'ATOMIC_CMP_SWAP', 16, { compare: value, swap: next }), value, `CmpSwap ${i} found the previous value`);
      value = next;
    }
    assert.is(await atomic(client, 'ATOMIC_CMP_SWAP', 16, { compare: value ^ 1n, swap: 0n }), value, 'a wrong compare value returns the current one');
    assert.is(await atomic(client, 'ATOMIC_FETCH_ADD', 16, { add: 0n }), value, '...and changes nothing');
    await client.session.finish();
    client.qp.destroy();

    const result = await guest.exited;
    assert.is(result.guestFailure, null);
    for (const s of servers) assert.match(result.log, new RegExp(`KBTP-PERFTEST-SERVER ${s.name} 0`), `${s.name} server exit status (log ${result.logPath})`);
    assert.ok(decodedCapture(result.tunnelPcapPath!).packets.length > 1000);
  } finally {
    guest.kill();
    await neighbour.close();
  }
});

test('kbtp as perftest -R client against rxe servers (both QPs over RDMA CM): Writes land, overlapping Reads agree', async () => {
  const neighbour = await openRxeNeighbour('perftest-cm-client');
  const { rnic } = neighbour;
  const servers = [
    { name: 'write', tool: `ib_write_bw -R -s ${SIZE}` },
    { name: 'read', tool: `ib_read_bw -R -s ${SIZE}` },
  ];
  const script = [
    'status=0',
    'g=$(rxe_gid_index)',
    ...servers.map((s) =>
      [
        `${s.tool} -d rxe0 -x $g -F -p ${PORT} & pid=$!`,
        'sleep 2',
        `echo "KBTP-READY ${s.name}"`,
        `wait $pid; rc=$?; echo "KBTP-PERFTEST-SERVER ${s.name} $rc"; [ $rc = 0 ] || status=1`,
      ].join('\n'),
    ),
    'exit $status',
  ].join('\n');
  const guest = await Guest.start({ name: 'rxe-perftest-cm-client', frameTunnel: neighbour.ports, peerScript: script, timeoutMs: 420_000 });
  const connect = async () => {
    const pd = rnic.allocPd();
    const cq = rnic.createCq({ depth: 256 });
    const qp = rnic.createRcQp({ pd, sendCq: cq, recvCq: cq, ird: 16, ord: 16, maxSendWr: 128 });
    const region = rnic.registerMemory(pd, new SharedArrayBuffer(1024 * 1024), { access: Access.LocalWrite });
    const session = await connectPerftestCm({ verbs: rnic, endpoint: rnic.roceEndpoint!, pd, address: GUEST_TUNNEL_ADDRESS, port: PORT, region, testQp: qp });
    return { qp, cq, region, session, target: { stag: session.server.rkey, taggedOffset: session.server.virtualAddress } };
  };
  try {
    await guest.waitForLine(/KBTP-READY write/, 180_000);
    let client = await connect();
    assert.is(client.session.serverVersion, '6.06');
    for (let i = 0; i < SIZE; i++) client.region.bytes[i] = (i * 11 + 7) & 0xff;
    for (let i = 0; i < 20; i++)
      client.qp.postSend({ wrId: i, opcode: 'RDMA_WRITE', sgList: [{ lkey: client.region.lkey, offset: 0, length: SIZE }], remote: client.target });
    allSucceeded(await completions(client.cq, 20), 'Writes over the CM-connected QP');
    await client.session.finish();
    client.qp.disconnect();

    await guest.waitForLine(/KBTP-READY read/, 180_000);
    client = await connect();
    client.qp.postSend({ wrId: 1, opcode: 'RDMA_READ', sgList: [{ lkey: client.region.lkey, offset: 0, length: SIZE }], remote: client.target });
    client.qp.postSend({
      wrId: 2,
      opcode: 'RDMA_READ',
      sgList: [{ lkey: client.region.lkey, offset: 65536, length: 8192 }],
      remote: { stag: client.target.stag, taggedOffset: client.target.taggedOffset + 4096n },
    });
    allSucceeded(await completions(client.cq, 2), 'Reads over the CM-connected QP');
    assert.equal(
      client.region.bytes.subarray(65536, 65536 + 8192),
      client.region.bytes.subarray(4096, 4096 + 8192),
      'the sub-range Read agrees with the whole',
    );
    await client.session.finish();
    client.qp.disconnect();

    const result = await guest.exited;
    assert.is(result.guestFailure, null);
    for (const s of servers) assert.match(result.log, new RegExp(`KBTP-PERFTEST-SERVER ${s.name} 0`), `${s.name} server exit status (log ${result.logPath})`);
    assert.match(result.log, /Data ex\. method : rdma_cm/);
    decodedCapture(result.tunnelPcapPath!);
  } finally {
    guest.kill();
    await neighbour.close();
  }
});

test.run();
