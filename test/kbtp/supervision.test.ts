// Failures inside the target: an internal error on one connection releases everything its
// requests held; a worker that fails is reported with its cause and the node exits non-zero
// (never a live process with a closed listener, never exit 0 after a failure); a worker at its
// session limit refuses with a reason. The faults are injected with KBTP_TEST_FAULT.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startRig, testSettings, SECRETS } from '../support/rig.ts';
import { connect, TargetRefusedError } from '../../host/kbtp/initiator.ts';
import { resolveTargetSettings } from '../../host/kbtp/server/target-config.ts';
import { TargetProcess, LegitimateClient, RawPeer, connectPatiently, sleep } from './hostile-peers.ts';

test('an internal error on one connection releases its handle lock, credit, block and quota; other sessions go on', async () => {
  process.env.KBTP_TEST_FAULT = 'connection:beta';
  // One worker: the fault fires once per worker, and the sessions after it must meet a worker that already fired it.
  const rig = await startRig(testSettings({ workers: 1 }));
  delete process.env.KBTP_TEST_FAULT;
  try {
    const alpha = await rig.session('alpha');
    await alpha.allocStore(1n, new Uint8Array(3000).fill(1), { seal: true });
    const beta = await rig.session('beta');
    // 3000 octets are over Max Inline: the target reads them, and the fault strikes with the request mid-way.
    const failed = await beta.allocStore(64n, new Uint8Array(3000).fill(2), { seal: true }).then(
      () => undefined,
      (error: unknown) => error,
    );
    assert.instance(failed, Error, 'the faulted request does not succeed');
    for (let i = 0; ; i++) {
      const stats = await rig.target.stats();
      if (stats.internalErrors === 1 && stats.sessionsOpen === 1) break;
      if (i > 400) assert.unreachable(`the faulted connection was not cleaned up: ${JSON.stringify(stats)}`);
      await sleep(25);
    }
    assert.is(rig.target.slotsInUse(), 1);
    assert.ok(rig.target.audit().ok, 'no block lost');
    // The same handle can be stored (its exclusive lock is free), and the whole quota of 8 is there again.
    const again = await rig.session('beta');
    for (let handle = 64n; handle < 72n; handle++) await again.allocStore(handle, new Uint8Array(3000).fill(3), { seal: true });
    for (let handle = 64n; handle < 72n; handle++) await again.free(handle);
    assert.is(new TextDecoder().decode((await alpha.load(1n)).data.subarray(0, 1)), '\u0001', 'the other session was not touched');
    await alpha.free(1n);
  } finally {
    await rig.stop();
  }
});

test('a worker at its session limit refuses, with and without completed handshakes, while a legitimate client works on', async () => {
  const settings = testSettings({ workers: 1, session: { credits: 4, ticketTimeoutMs: 300, maxSessions: 4, maxSessionsPerWorker: 2 } });
  const rig = await startRig(settings);
  try {
    const legit = new LegitimateClient(await rig.session('alpha'), [0n, 1n], 3000);
    await rig.session('beta');
    const refused = await connect(rig.address, { tenant: 'alpha', secret: SECRETS.alpha }).then(
      () => undefined,
      (error: unknown) => error,
    );
    assert.instance(refused, TargetRefusedError);
    assert.match((refused as Error).message, /kbtp: this worker holds its limit of 2 sessions; try again later/);
    // An MPA Request alone is refused the same way, before it takes anything.
    const raw = await RawPeer.open(rig.target.port).then(
      () => undefined,
      (error: unknown) => error,
    );
    assert.match((raw as Error).message, /rejected/);
    const stats = await rig.target.stats();
    assert.equal(stats.refusals, { 'worker-full': 2 });
    assert.is(rig.target.slotsInUse(), 2, 'the refused connections hold no slot');
    const rounds = legit.rounds;
    while (legit.rounds < rounds + 3) await sleep(10);
    await legit.stop();
    assert.equal(legit.failures, []);
  } finally {
    await rig.stop();
  }
});

test('a worker that fails: its cause is reported, its sessions end, the pool stays whole, and the node exits 1', async () => {
  const config = {
    listen: '127.0.0.1:0',
    workers: 1,
    pool: { blockSize: 4096, blockCount: 16 },
    tenants: [
      { name: 'legit', secret: 'legit-secret', quota: 8, storeRange: { first: 0, count: 32 } },
      { name: 'faulty', secret: 'faulty-secret', quota: 8, storeRange: { first: 32, count: 32 } },
    ],
  };
  resolveTargetSettings(config); // the test's own config is valid
  const target = await TargetProcess.start(config, { KBTP_TEST_FAULT: 'worker:faulty' });
  const legit = await connectPatiently(target.address, 'legit', 'legit-secret');
  await legit.allocStore(3n, new Uint8Array(100).fill(7), { seal: true });
  await legit.allocStore(4n, new Uint8Array(3000).fill(7), { seal: false });
  const faulty = await connect(target.address, { tenant: 'faulty', secret: 'faulty-secret' }).catch(() => undefined);
  const code = await target.exited;
  assert.is(code, 1, `exit code; stderr: ${target.stderr}`);
  assert.match(target.stderr, /worker 1 failed: InternalError: injected worker fault \(KBTP_TEST_FAULT\)/);
  assert.match(target.stderr, /draining and exiting so that the supervisor restarts the node/);
  assert.match(target.output, /pool audit: 2 bound, 14 free, lost 0, doubled 0/, "the failed worker's sessions released what they held");
  await legit.close(500).catch(() => undefined);
  await faulty?.close(500).catch(() => undefined);
  await target.stop();
});

test.run();
