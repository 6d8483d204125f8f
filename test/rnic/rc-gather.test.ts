// Sends and Writes of several SGEs over RC (RoCE): every packet that lies inside one element is
// sent from that element's memory, as a one-SGE message is; only a packet spanning two elements
// is copied (at post, into a path-MTU buffer the send queue reuses once the WQE completes). The
// data arrives exact on clean and impaired paths whatever the elements' lengths (aligned to the
// MTU or not, empty, several boundaries inside one packet, a message shorter than a packet).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { BatchedUdpLink } from '../../host/rnic/rc/batched-udp-link.ts';
import type { BatchedUdpSocket } from '../../host/rnic/rc/batched-udp-socket.ts';
import type { Sge } from '../../host/rnic/work.ts';
import { completions, expectSuccess, type RcSide, withRcPair } from '../support/rc.ts';

const KiB = 1024;
const MTU = 4096;

/** Element lengths and how many packets of the message span two of them at path MTU 4096. */
const LAYOUTS: Array<{ lengths: number[]; spanning: number }> = [
  { lengths: [64, 256 * KiB], spanning: 1 }, // a KBTP inline STORE: the request, then the block
  { lengths: [4096, 8192], spanning: 0 },
  { lengths: [100, 0, 50, 4000, 3, 20000], spanning: 2 },
  { lengths: [10, 20], spanning: 1 },
  { lengths: [5000, 5000, 5000], spanning: 2 },
];

/** Where each payload octet the client's socket was given came from: the registered memory, or elsewhere (a copy), and the other buffers seen. */
function payloadOrigins(side: RcSide): { fromMemory: () => number; copied: () => number; copyBuffers: Set<ArrayBufferLike> } {
  assert.instance(side.link, BatchedUdpLink, 'the batched link (koffi loads here)');
  const socket: BatchedUdpSocket = (side.link as BatchedUdpLink).socket;
  let fromMemory = 0;
  let copied = 0;
  const copyBuffers = new Set<ArrayBufferLike>();
  const count = (payload: Uint8Array): void => {
    if (payload.buffer === side.memory.buffer) fromMemory += payload.length;
    else if (payload.length > 0) {
      copied += payload.length;
      copyBuffers.add(payload.buffer);
    }
  };
  const send = socket.send.bind(socket);
  socket.send = (to, header, payload, trailer) => {
    count(payload);
    send(to, header, payload, trailer);
  };
  const sendRun = socket.sendRun.bind(socket);
  socket.sendRun = (to, run) => {
    count(run.payload.subarray(0, run.segment * run.count));
    sendRun(to, run);
  };
  return { fromMemory: () => fromMemory, copied: () => copied, copyBuffers };
}

/** SGEs of `lengths` in the client's memory, each 1000 octets past the last (so none is contiguous with the next). */
function elements(side: RcSide, lengths: number[], base: number): Sge[] {
  const sgList: Sge[] = [];
  let offset = base;
  for (const length of lengths) {
    sgList.push({ lkey: side.mr.lkey, offset, length });
    offset += length + 1000;
  }
  return sgList;
}

/** The octets the SGEs name, joined. */
function gathered(side: RcSide, sgList: Sge[]): Uint8Array {
  return new Uint8Array(Buffer.concat(sgList.map((sge) => side.memory.subarray(sge.offset, sge.offset + sge.length))));
}

function fill(memory: Uint8Array, seed: number): void {
  for (let i = 0; i < memory.length; i++) memory[i] = (i * 131 + seed * 17 + (i >>> 12)) & 0xff;
}

test('a Send and a Write of several SGEs: data exact, sent from the elements, only the packets that span two copied', async () => {
  await withRcPair({ pathMtu: MTU }, async ({ client, server }) => {
    fill(client.memory, 1);
    const origins = payloadOrigins(client);
    let wrId = 1;
    for (const { lengths, spanning } of LAYOUTS) {
      const sgList = elements(client, lengths, 4096);
      const expected = gathered(client, sgList);
      const total = expected.length;
      const where = `elements ${lengths.join(', ')}`;
      for (const opcode of ['SEND', 'RDMA_WRITE'] as const) {
        const copiedBefore = origins.copied();
        const fromMemoryBefore = origins.fromMemory();
        server.memory.fill(0, 0, 1024 * KiB);
        if (opcode === 'SEND') server.qp.postRecv({ wrId: wrId + 1000, sgList: [{ lkey: server.mr.lkey, offset: 0, length: 512 * KiB }] });
        client.qp.postSend({ wrId, opcode, sgList, ...(opcode === 'RDMA_WRITE' ? { remote: { stag: server.mr.rkey, taggedOffset: 0 } } : {}) });
        const [sent] = await completions(client.cq, 1);
        expectSuccess([sent!]);
        assert.is(sent!.byteLength, total, `${opcode} of ${where}: length`);
        if (opcode === 'SEND') {
          const [received] = await completions(server.cq, 1);
          expectSuccess([received!]);
          assert.is(received!.byteLength, total, `${opcode} of ${where}: received length`);
        }
        assert.equal(server.memory.subarray(0, total), expected, `${opcode} of ${where}: data`);
        // A spanning packet is a whole path MTU but the message's last (shorter) one.
        const copied = origins.copied() - copiedBefore;
        const spanningOctets = spanning === 0 ? 0 : Math.min(total, spanning * MTU);
        assert.ok(
          copied <= spanningOctets && (spanning === 0 ? copied === 0 : copied > 0),
          `${opcode} of ${where}: ${copied} octets copied, ${spanning} spanning packets`,
        );
        assert.is(origins.fromMemory() - fromMemoryBefore + copied, total, `${opcode} of ${where}: every octet sent once`);
        wrId++;
      }
    }
  });
});

test('the copies of spanning packets are reused once their WQE completes: 400 gathered Writes use a handful of buffers', async () => {
  await withRcPair({ pathMtu: MTU }, async ({ client, server }) => {
    fill(client.memory, 2);
    const origins = payloadOrigins(client);
    const sgList = elements(client, [64, 16 * KiB], 0);
    const expected = gathered(client, sgList);
    for (let batch = 0; batch < 50; batch++) {
      for (let i = 0; i < 8; i++) {
        client.qp.postSend({ wrId: batch * 8 + i, opcode: 'RDMA_WRITE', sgList, remote: { stag: server.mr.rkey, taggedOffset: i * 32 * KiB } });
      }
      expectSuccess(await completions(client.cq, 8));
    }
    for (let i = 0; i < 8; i++) assert.equal(server.memory.subarray(i * 32 * KiB, i * 32 * KiB + expected.length), expected, `Write ${i}: data`);
    assert.ok(origins.copied() >= 400 * 64, 'each Write sent its spanning packet from a copy');
    assert.ok(origins.copyBuffers.size <= 9, `${origins.copyBuffers.size} buffers held spanning packets (8 Writes outstanding at a time)`);
  });
});

test('gathered Sends and Writes over a path that drops, duplicates and reorders packets: every one completes, data exact', async () => {
  await withRcPair({ pathMtu: MTU, impairments: { loss: 0.03, duplicate: 0.02, reorder: 0.02 }, ackTimeoutMs: 50 }, async ({ client, server }) => {
    fill(client.memory, 3);
    const layouts = LAYOUTS.map(({ lengths }) => lengths);
    const messages = 40;
    for (let m = 0; m < messages; m++) {
      const sgList = elements(client, layouts[m % layouts.length]!, 4096 + (m % 7) * 13);
      const expected = gathered(client, sgList);
      const send = m % 2 === 0;
      const at = (m % 4) * 512 * KiB;
      if (send) server.qp.postRecv({ wrId: 10_000 + m, sgList: [{ lkey: server.mr.lkey, offset: at, length: 512 * KiB }] });
      client.qp.postSend({ wrId: m, opcode: send ? 'SEND' : 'RDMA_WRITE', sgList, ...(send ? {} : { remote: { stag: server.mr.rkey, taggedOffset: at } }) });
      expectSuccess(await completions(client.cq, 1));
      if (send) expectSuccess(await completions(server.cq, 1));
      assert.equal(
        server.memory.subarray(at, at + expected.length),
        expected,
        `message ${m} (${send ? 'Send' : 'Write'} of ${layouts[m % layouts.length]!.join(', ')})`,
      );
    }
    assert.ok(client.qp.statistics.retransmittedPackets > 0, 'the path lost packets and the requester sent them again');
  });
});

test.run();
