// The appliance's drain, run as a program of its own by drain.test.ts: a whole appliance in the
// shared test process changed what V8 learned about code other tests then measured (test/sram's
// allocation test saw 26 collections), so this scenario gets a process to itself.
//
// SIGTERM's drain() must refuse new requests (SHUTTING_DOWN) in the same tick as /readyz turns to
// "draining", even while a scheduled job is still running and drain() waits for it. Prints one
// line and exits 0 when it holds; prints what happened instead and exits 1.
import { fileURLToPath } from 'node:url';
import { Appliance } from '../../firmware/appliance.ts';
import { resolveApplianceSettings } from '../../firmware/appliance-config.ts';
import { createLogger } from '../../firmware/logger.ts';
import { WarningLog } from '../../firmware/warnings.ts';
import { KbtpStatusError } from '../../host/kbtp/errors.ts';
import { connect } from '../../host/kbtp/initiator.ts';

async function main(): Promise<string | undefined> {
  const settings = resolveApplianceSettings({
    listen: '127.0.0.1:0',
    workers: 1,
    pool: { blockSize: 4096, blockCount: 256, handleCount: 1024, maxInline: 1024 },
    tenants: [{ name: 'default', open: true, quota: 64 }],
    management: { listen: '127.0.0.1:0' },
  });
  const lines: string[] = [];
  const appliance = new Appliance(settings, createLogger({ level: 'info', format: 'text', write: (line) => lines.push(line) }), new WarningLog());
  await appliance.startTarget(10_000);
  const address = appliance.kbtpAddress;
  if (address === null) return 'the target does not listen';
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
    if (appliance.state !== 'draining') return `state after drain(): ${appliance.state}, expected draining`;
    const refused = await session.allocStore(2n, new TextEncoder().encode('after')).then(
      () => 'stored',
      (error: unknown) => error,
    );
    if (!(refused instanceof KbtpStatusError && refused.statusName === 'SHUTTING_DOWN')) {
      return `a STORE after drain() while a job ran: got ${String(refused)}, expected SHUTTING_DOWN\n${lines.join('\n')}`;
    }
    releaseJob();
    await session.close();
    if ((await drained) !== true) return 'drain() did not report a clean drain';
    return undefined;
  } finally {
    releaseJob();
    await appliance.close();
  }
}

// Only as a program: a test runner that imports every file of the folder must not run it.
if (process.argv[1] === fileURLToPath(import.meta.url)) {
  // A drain that never ends must fail the test, not hang the suite.
  setTimeout(() => {
    process.stderr.write('drain scenario: no verdict within 60 s\n');
    process.exit(1);
  }, 60_000).unref();
  main().then(
    (failure) => {
      if (failure === undefined) {
        process.stdout.write('drain: SHUTTING_DOWN while a scheduled job was still running\n');
        process.exit(0);
      }
      process.stderr.write(`${failure}\n`);
      process.exit(1);
    },
    (error: unknown) => {
      process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
      process.exit(1);
    },
  );
}
