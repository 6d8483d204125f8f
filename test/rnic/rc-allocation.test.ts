// What the RC (RoCE) path allocates per operation, both sides in this thread over the batched UDP
// link: 16 KiB Writes and Reads, 16 posted at a time. The send queue reuses its WQE records
// (about 260 octets per WR before session 22, the path's largest allocation); what remains is
// per packet and short-lived (the heap numbers of the addresses and CRCs handed to native code,
// header encoding). Measured from the used heap over runs in which no collection ran (a count of
// octets, independent of the machine's speed), as test/kbtp/no-allocation does for iWARP. Session
// 22: Writes 510-565, Reads 430-501 octets per operation (702-778 and 811 with a WQE object per
// post).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { BatchedUdpLink } from '../../host/rnic/rc/batched-udp-link.ts';
import type { SendWorkRequest } from '../../host/rnic/work.ts';
import { sampleRuns } from '../support/heap.ts';
import { rcPair } from '../support/rc.ts';

const KiB = 1024;
const BATCH = 16;
const OPERATIONS = 8000;
/**
 * Octets per operation at most: about twice what is measured (a whole make test's JIT state and
 * the collector's timing move it), so a buffer per message or an object per packet fails here;
 * the reuse of WQE records is checked exactly by the next test.
 */
const BUDGET = 1000;

test('16 KiB RDMA Writes and Reads over RC allocate under 1,000 octets per operation', async () => {
  const pair = await rcPair({ pathMtu: 4096 });
  try {
    const { client, server } = pair;
    if (!(client.link instanceof BatchedUdpLink)) {
      // node:dgram's link ($KBTP_ROCE_UDP=dgram) makes a Buffer per datagram by design.
      console.log('  (skipped: not the batched UDP link)');
      return;
    }
    const batch = (opcode: 'RDMA_WRITE' | 'RDMA_READ'): SendWorkRequest[] =>
      Array.from({ length: BATCH }, (_, i) => ({
        wrId: i,
        opcode,
        sgList: [{ lkey: client.mr.lkey, offset: opcode === 'RDMA_READ' ? 64 * KiB : 0, length: 16 * KiB }],
        remote: { stag: server.mr.rkey, taggedOffset: 0 },
        signaled: true,
      }));
    const ignore = (): void => undefined;
    const drive = async (wrs: SendWorkRequest[], operations: number): Promise<void> => {
      for (let done = 0; done < operations; done += BATCH) {
        for (const wr of wrs) client.qp.postSend(wr);
        let completed = 0;
        while (completed < BATCH) {
          completed += client.cq.drain(ignore, BATCH);
          if (completed < BATCH) await new Promise((resolve) => setImmediate(resolve));
        }
      }
    };
    for (const opcode of ['RDMA_WRITE', 'RDMA_READ'] as const) {
      const wrs = batch(opcode);
      await drive(wrs, 3 * OPERATIONS); // warm-up: compiled code, queues at their working size
      const perOperation = await sampleRuns(OPERATIONS, () => drive(wrs, OPERATIONS));
      assert.ok(!Number.isNaN(perOperation), `${opcode}: every sampled run saw a collection`);
      console.log(`  ${opcode}: ${perOperation.toFixed(1)} octets allocated per 16 KiB operation (both sides)`);
      assert.ok(perOperation < BUDGET, `${opcode}: ${perOperation.toFixed(1)} octets per operation (budget ${BUDGET})`);
    }
  } finally {
    await pair.close();
  }
});

test('a completed WQE record is posted again: after a run the send queue keeps spare records, and the next post takes one', async () => {
  const pair = await rcPair({ pathMtu: 4096 });
  try {
    const { client, server } = pair;
    type QueueView = { wqes: object[]; spareWqes: object[] };
    const queue = (client.qp as unknown as { requester: { queue: QueueView } }).requester.queue;
    const wr: SendWorkRequest = {
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [{ lkey: client.mr.lkey, offset: 0, length: 4 * KiB }],
      remote: { stag: server.mr.rkey, taggedOffset: 0 },
      signaled: true,
    };
    // More than 256 completed (the queue lets completed records go in batches past that).
    for (let round = 0; round < 40; round++) {
      for (let i = 0; i < BATCH; i++) client.qp.postSend(wr);
      let completed = 0;
      while (completed < BATCH) {
        completed += client.cq.drain(() => undefined, BATCH);
        if (completed < BATCH) await new Promise((resolve) => setImmediate(resolve));
      }
    }
    assert.ok(queue.spareWqes.length > 0, 'completed records are kept');
    const next = queue.spareWqes[queue.spareWqes.length - 1];
    client.qp.postSend({ ...wr, wrId: 99 });
    assert.is(queue.wqes[queue.wqes.length - 1], next, 'the post took a kept record');
    const [done] = await new Promise<Array<{ wrId: number | bigint; status: number }>>((resolve) => {
      const poll = (): void => {
        const got = client.cq.poll(1);
        if (got.length > 0) resolve(got);
        else setImmediate(poll);
      };
      poll();
    });
    assert.is(done!.wrId, 99, 'and completes as the WR posted');
    assert.is(done!.status, 0);
  } finally {
    await pair.close();
  }
});

test.run();
