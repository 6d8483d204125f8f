// The target's work completions per request (issue 16): a LOAD's RDMA Write goes out unsignaled,
// ahead of its COMPLETION Send on the same stream, so the Send's completion alone says both were
// sent and releases the handle. Counted with an RNIC observer on an in-process target.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { resolveTargetSettings } from '../../host/kbtp/server/target-config.ts';
import { connectChannel } from '../../host/kbtp/initiator.ts';
import { InProcessTarget } from '../../host/kbtp/server/in-process.ts';
import { LinkedChannel } from '../../host/rnic/linked-channel.ts';
import { createRnic, type NicObserver } from '../../host/rnic/verbs.ts';

/** Counts the completions the target's RNIC writes. */
function completionCounter(): { observer: NicObserver; count: () => number } {
  let completions = 0;
  const nothing = (): void => undefined;
  const observer: NicObserver = {
    queuePairContext: nothing,
    memoryTranslation: nothing,
    completionQueue: () => {
      completions += 1;
    },
    eventQueue: nothing,
    registerRegion: nothing,
    deregisterRegion: nothing,
    queuePairCreated: nothing,
    queuePairDestroyed: nothing,
  };
  return { observer, count: () => completions };
}

async function openCounted(blockSize: number) {
  const settings = resolveTargetSettings({
    listen: '127.0.0.1:0',
    workers: 1,
    pool: { blockSize, blockCount: 16, handleCount: 64, maxInline: blockSize },
    session: { credits: 4 },
    tenants: [{ name: 'local', open: true, quota: 16 }],
  } as never);
  const target = new InProcessTarget(settings);
  const counter = completionCounter();
  target.context.rnic = createRnic({ name: 'target-counted', observer: counter.observer });
  const [targetEnd, initiatorEnd] = LinkedChannel.pair();
  const served = target.serve(targetEnd);
  const session = await connectChannel(initiatorEnd, { tenant: 'local', pipeline: 4 });
  await served;
  return { target, session, completions: counter.count };
}

test('a LOAD costs the target two work completions (its request, its COMPLETION Send), not three', async () => {
  const { target, session, completions } = await openCounted(4096);
  try {
    const block = new Uint8Array(4096).fill(5);
    await session.allocStore(3n, block);
    const into = new Uint8Array(4096);
    const before = completions();
    const loads = 50;
    for (let i = 0; i < loads; i++) {
      into.fill(0);
      await session.load(3n, { into, allowUnsealed: true });
      assert.equal(into, block, `load ${i} placed the block`);
    }
    assert.is(completions() - before, 2 * loads);
    // The handle was released at each Send's completion: a STORE to it and a LOAD of that succeed.
    const next = new Uint8Array(4096).fill(9);
    await session.store(3n, next);
    await session.load(3n, { into, allowUnsealed: true });
    assert.equal(into, next);
    assert.is(target.context.stats.snapshot().internalErrors, 0);
  } finally {
    await session.close(500);
  }
});

test.run();
