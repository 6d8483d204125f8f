// Concurrency: atomics stay atomic against another thread using the same shared memory, and 64
// connections run at once on one listener, each with its own data.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { Worker } from 'node:worker_threads';
import { spawnWorker } from '../../host/util/spawn-worker.ts';
import { completions, connectedPair, makeSide, pattern } from '../support/rnic.ts';
import { createRnic } from '../../host/rnic/verbs.ts';

/**
 * Resolves once the worker has flagged itself running. A worker loads tsx before the module, which
 * takes seconds on a loaded machine (a 10 s limit failed at load 9): the wait ends as soon as the
 * worker runs, fails or exits, and only a worker stuck for two minutes counts as not starting.
 */
async function workerRunning(worker: Worker, control: Int32Array): Promise<void> {
  let failure: Error | undefined;
  const onError = (error: Error): void => {
    failure = error;
  };
  const onExit = (code: number): void => {
    failure ??= new Error(`the atomics worker exited with code ${code} before it ran`);
  };
  worker.on('error', onError);
  worker.on('exit', onExit);
  const deadline = Date.now() + 120_000;
  try {
    while (Atomics.load(control, 1) === 0) {
      if (failure !== undefined) throw failure;
      if (Date.now() > deadline) throw new Error('the atomics worker did not start within 120 s');
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  } finally {
    worker.off('error', onError);
    worker.off('exit', onExit);
  }
}

test("remote FetchAdds (plain and masked) interleave atomically with a worker thread's Atomics.add", async () => {
  const pair = await connectedPair({ size: 1 << 16 });
  const { client, server } = pair;
  const buffer = server.memory.buffer as SharedArrayBuffer;
  const worker = spawnWorker(new URL('../support/atomic-worker.ts', import.meta.url), { workerData: { buffer } });
  const control = new Int32Array(buffer, 64, 2);
  try {
    await workerRunning(worker, control);
  } catch (error) {
    // Nothing of this test may keep the runner alive after it fails.
    await worker.terminate();
    await pair.close();
    throw error;
  }
  const rounds = 20;
  const perRound = 200;
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < perRound; i++) {
      client.qp.postSend({ wrId: i, opcode: 'ATOMIC_FETCH_ADD', remote: { stag: server.mr.rkey, taggedOffset: 0 }, atomic: { add: 1n }, signaled: false });
      // High 32-bit field only: the worker increments the low field of the same word meanwhile.
      client.qp.postSend({
        wrId: i,
        opcode: 'ATOMIC_FETCH_ADD',
        remote: { stag: server.mr.rkey, taggedOffset: 8 },
        atomic: { add: 1n << 32n, addMask: 0x8000000080000000n },
        signaled: i === perRound - 1,
      });
    }
    await completions(client.cq, 1, 20_000);
  }
  Atomics.store(control, 0, 1);
  const workerAdds = await new Promise<number>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  await worker.terminate();
  const words = new BigUint64Array(buffer, 0, 2);
  const remote = BigInt(rounds * perRound);
  assert.ok(workerAdds > 0);
  assert.is(words[0], remote + BigInt(workerAdds), 'no add lost on word 0');
  assert.is(words[1]! >> 32n, remote, 'every masked add reached the high field');
  assert.is(words[1]! & 0xffffffffn, BigInt(workerAdds), 'no worker add on the low field was lost');
  await pair.close();
});

test('64 concurrent loopback connections, each writing, sending and reading its own data', async () => {
  const server = createRnic({ name: 'target' });
  const listener = await server.listen({ host: '127.0.0.1', port: 0 });
  const count = 64;
  const size = 64 * 1024;
  const serverSides = Array.from({ length: count }, () => makeSide(server, { size: 2 * size }));
  let next = 0;
  const accepting = (async () => {
    const summaries = [];
    for (let i = 0; i < count; i++) {
      const request = await listener.next();
      const index = request.privateData[0]!;
      const side = serverSides[index]!;
      side.qp.postRecv({ wrId: index, sgList: [{ lkey: side.mr.lkey, offset: size, length: 64 }] });
      summaries.push(request.accept(side.qp));
      next++;
    }
    return Promise.all(summaries);
  })();
  const clientRnic = createRnic({ name: 'initiators' });
  const clients = Array.from({ length: count }, () => makeSide(clientRnic, { size: 2 * size }));
  await Promise.all(clients.map((side, i) => clientRnic.connect(side.qp, { host: '127.0.0.1', port: listener.port, privateData: new Uint8Array([i]) })));
  await accepting;
  assert.is(next, count);
  await Promise.all(
    clients.map(async (side, i) => {
      const target = serverSides[i]!;
      const data = pattern(size, i + 1);
      side.memory.set(data, 0);
      side.qp.postSend({
        wrId: 1,
        opcode: 'RDMA_WRITE',
        sgList: [{ lkey: side.mr.lkey, offset: 0, length: size }],
        remote: { stag: target.mr.rkey, taggedOffset: 0 },
      });
      side.qp.postSend({ wrId: 2, opcode: 'SEND', sgList: [{ lkey: side.mr.lkey, offset: 0, length: 64 }] });
      side.qp.postSend({
        wrId: 3,
        opcode: 'RDMA_READ',
        sgList: [{ lkey: side.mr.lkey, offset: size, length: size }],
        remote: { stag: target.mr.rkey, taggedOffset: 0 },
      });
      const local = await completions(side.cq, 3, 20_000);
      assert.ok(local.every((c) => c.status === 0));
      const [received] = await completions(target.cq, 1, 20_000);
      assert.is(received!.wrId, i);
      assert.is(Buffer.compare(Buffer.from(target.memory.subarray(0, size)), Buffer.from(data)), 0);
      assert.is(Buffer.compare(Buffer.from(side.memory.subarray(size, 2 * size)), Buffer.from(data)), 0);
    }),
  );
  assert.is(server.queuePairCount, count);
  await clientRnic.close();
  await server.close();
});

test.run();
