import { ImpairedLink, type SendWorkRequest } from '../host/rnic/verbs.ts';
import { rcPair, completions } from '../test/support/rc.ts';
const MiB = 1024 * 1024;
const rounds = Number(process.argv[2] ?? 50);
for (let round = 0; round < rounds; round++) {
  const pair = await rcPair({ pathMtu: 1024, impairments: { loss: 0.02, duplicate: 0.02, reorder: 0.02, seed: 1000 + round }, ackTimeoutMs: 50 });
  // per-side seeds
  for (const [i, s] of [pair.client, pair.server].entries()) { const l = s.link as ImpairedLink; (l as any).random = new (await import('../host/util/random.ts')).Random(round * 7 + i + 3); }
  const { client, server } = pair;
  const work: SendWorkRequest[] = [];
  for (let i = 0; i < 64; i++) {
    work.push({ wrId: 5000 + i, opcode: 'RDMA_WRITE', sgList: [{ lkey: client.mr.lkey, offset: i * 1024, length: 1024 }], remote: { stag: server.mr.rkey, taggedOffset: 2 * MiB + i * 1024 } });
    work.push({ wrId: 6000 + i, opcode: 'ATOMIC_FETCH_ADD', remote: { stag: server.mr.rkey, taggedOffset: 3 * MiB }, atomic: { add: 1n } });
    work.push({ wrId: 7000 + i, opcode: 'RDMA_READ', sgList: [{ lkey: client.mr.lkey, offset: MiB + i * 1024, length: 1024 }], remote: { stag: server.mr.rkey, taggedOffset: 2 * MiB + i * 1024 } });
  }
  for (const wr of work) client.qp.postSend(wr);
  try {
    const done = await completions(client.cq, work.length, 5000);
    process.stdout.write(`round ${round} ok ${done.length}\n`);
  } catch (e) {
    const r = (client.qp as any).requester; const resp = (server.qp as any).responder;
    const q = r.queue.slice(r.head, r.head + 6).map((w: any) => ({ wrId: w.wr.wrId, kind: w.kind, firstPsn: w.firstPsn, started: w.started, done: w.done, received: w.received, requested: w.requested, counted: w.counted }));
    console.log(`round ${round} STALL`, String(e), { head: r.head, txIndex: r.txIndex, txPacket: r.txPacket, nextPsn: r.nextPsn, sentEnd: r.sentEnd, lastAcked: r.lastAcked, readsOutstanding: r.readsOutstanding, timer: r.timer !== undefined, rnr: r.rnrTimer !== undefined, readRewoundTo: r.readRewoundTo, state: client.qp.state, sstate: server.qp.state }, q, { expected: resp.expectedPsn, nakSent: resp.nakSent, inProgress: resp.inProgress, resources: resp.resources.map((x: any) => x && [x.kind, x.psn, x.packets]) }, client.qp.stats, server.qp.stats);
    process.exit(1);
  }
  await pair.close();
}
