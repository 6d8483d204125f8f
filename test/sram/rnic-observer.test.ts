// The adapter behind the software RNIC's observer hook, over real loopback traffic: every
// structure the RNIC reports lands in the model and is charged to the QP that used it.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Access, createRnic, type CompletionQueue } from '../../host/rnic/verbs.ts';
import { SramCache } from '../../host/sram/cache.ts';
import { SramNicObserver } from '../../host/sram/nic-observer.ts';

async function poll(cq: CompletionQueue, count: number): Promise<void> {
  let seen = 0;
  while (seen < count) {
    seen += cq.poll().length;
    if (seen < count) await cq.wait();
  }
}

test('a loopback RDMA Write, Read and Send through an RNIC with the SRAM model attached', async () => {
  const observer = new SramNicObserver(new SramCache({ lines: 64 }));
  const server = createRnic({ observer });
  const client = createRnic();
  const spd = server.allocPd();
  const smem = server.registerMemory(spd, new SharedArrayBuffer(65_536), { access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead });
  const scq = server.createCq();
  const sqp = server.createQp({ pd: spd, sendCq: scq, recvCq: scq });
  const cpd = client.allocPd();
  const cmem = client.registerMemory(cpd, new SharedArrayBuffer(65_536), { access: Access.LocalWrite });
  const ccq = client.createCq();
  const cqp = client.createQp({ pd: cpd, sendCq: ccq, recvCq: ccq });
  sqp.postRecv({ wrId: 1, sgList: [{ lkey: smem.lkey, offset: 0, length: 100 }] });
  const listener = await server.listen({ host: '127.0.0.1', port: 0 });
  try {
    const accepted = listener.next().then((request) => request.accept(sqp));
    await client.connect(cqp, { host: '127.0.0.1', port: listener.port });
    await accepted;
    // 8192 octets at tagged offset 4000 of a 4 KiB-page region: pages 0, 1 and 2.
    cqp.postSend({ wrId: 1, opcode: 'RDMA_WRITE', sgList: [{ lkey: cmem.lkey, offset: 0, length: 8192 }], remote: { stag: smem.rkey, taggedOffset: 4000 } });
    cqp.postSend({ wrId: 2, opcode: 'RDMA_READ', sgList: [{ lkey: cmem.lkey, offset: 0, length: 100 }], remote: { stag: smem.rkey, taggedOffset: 200 } });
    cqp.postSend({ wrId: 3, opcode: 'SEND', sgList: [{ lkey: cmem.lkey, offset: 0, length: 10 }] });
    await poll(scq, 1);
    await poll(ccq, 3);
    const live = observer.queuePair(sqp.qpNumber);
    assert.ok(live !== undefined, 'the server QP has live figures');
    server.deregisterMemory(smem);
    sqp.destroy();
    cqp.destroy();
  } finally {
    await listener.close();
  }
  const report = observer.report();
  assert.is(report.total.registrations, 1);
  assert.is(report.total.deregistrations, 1);
  assert.is(report.perQueuePair.length, 1);
  const qp = report.perQueuePair[0]!;
  assert.ok(qp.destroyed);
  // The Write's three pages miss once each (64 lines: nothing is evicted); the Read source and
  // the receive buffer are on page 0 again and hit.
  assert.is(report.perKind.MTT!.misses, 3);
  assert.ok(report.perKind.MTT!.hits >= 2, `MTT hits ${report.perKind.MTT!.hits}`);
  assert.ok(qp.translationLookups >= 3 + 5, `translation lookups ${qp.translationLookups}`);
  assert.is(qp.linesDropped, 4, 'deregistration dropped its three MTT lines, destruction its context');
  assert.is(report.control.linesDropped, 1, 'the MPT line registration wrote is charged to control');
  assert.ok(report.perKind.QPC!.hits + report.perKind.QPC!.misses >= 4, 'a QP context access per message');
  assert.is(report.perKind.CQC!.hits + report.perKind.CQC!.misses, 1, 'one completion: the receive');
  assert.is(report.perKind.MPT!.inserts, 1, 'registration wrote the MPT entry through the cache');
  assert.is(report.total.nicTimeNs, qp.nicTimeNs + report.control.nicTimeNs);
});

test.run();
