// The appliance's drain, in process: SIGTERM's drain() must refuse new requests (SHUTTING_DOWN) in
// the same tick as /readyz turns to "draining", even while a scheduled job is still running and
// drain() waits for it. management.test.ts sees the same through a real process, but only when
// the machine is loaded enough for a job to be running at SIGTERM; here the job never ends until
// the test lets it.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Appliance } from '../../firmware/appliance.ts';
import { resolveApplianceSettings } from '../../firmware/appliance-config.ts';
import { createLogger } from '../../firmware/logger.ts';
import { WarningLog } from '../../firmware/warnings.ts';
import { connect } from '../../host/kbtp/initiator.ts';
import { KbtpStatusError } from '../../host/kbtp/errors.ts';
import { SMALL_POOL } from './daemon.ts';

test('drain: new requests get SHUTTING_DOWN at once, while a running job is still waited for', async () => {
  const settings = resolveApplianceSettings({
    listen: '127.0.0.1:0',
    workers: 1,
    pool: SMALL_POOL,
    tenants: [{ name: 'default', open: true, quota: 64 }],
    management: { listen: '127.0.0.1:0' },
  });
  const lines: string[] = [];
  const appliance = new Appliance(settings, createLogger({ level: 'info', format: 'text', write: (line) => lines.push(line) }), new WarningLog());
  await appliance.startTarget(10_000);
  const address = appliance.kbtpAddress;
  assert.ok(address !== null, 'the target listens');
  // A scheduled job that is still running: the scheduler's stop waits for it until released.
  let releaseJob = (): void => undefined;
  const scheduler = (appliance as unknown as { scheduler: { stop(graceMs: number): Promise<void> } }).scheduler;
  const stopScheduler = scheduler.stop.bind(scheduler);
  scheduler.stop = (graceMs) =>
    new Promise<void>((resolve) => {
      releaseJob = () => {
        scheduler.stop = stopScheduler;
        void stopScheduler(graceMs).then(resolve);
      };
    });
  const session = await connect(`${address.host}:${address.port}`, { tenant: 'default' });
  try {
    await session.allocStore(1n, new TextEncoder().encode('before the drain'));
    const drained = appliance.drain();
    assert.is(appliance.state, 'draining');
    const refused = await session.allocStore(2n, new TextEncoder().encode('after')).then(
      () => 'stored',
      (error: unknown) => error,
    );
    assert.ok(refused instanceof KbtpStatusError && refused.statusName === 'SHUTTING_DOWN', `got ${String(refused)}: ${lines.join('\n')}`);
    releaseJob();
    await session.close();
    assert.is(await drained, true);
  } finally {
    releaseJob();
    await appliance.close();
  }
});

test.run();
