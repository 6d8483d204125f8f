// The appliance daemon under a failing target worker: the cause is logged and the process
// drains and exits 1 for its supervisor (the worker took the shared listening socket with it).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { connect } from '../../host/kbtp/initiator.ts';
import { startDaemon } from './daemon.ts';

test('a target worker that fails ends the appliance with status 1 and its cause in the log', async () => {
  process.env.KBTP_TEST_FAULT = 'worker:default';
  const daemon = await startDaemon();
  delete process.env.KBTP_TEST_FAULT;
  try {
    const address = await daemon.kbtp;
    const session = await connect(address, { tenant: 'default' }).catch(() => undefined);
    const code = await daemon.exited;
    assert.is(code, 1, daemon.stderr());
    assert.match(daemon.stderr(), /injected worker fault \(KBTP_TEST_FAULT\)/);
    assert.match(daemon.stderr(), /exiting 1 for the supervisor to restart the node/);
    await session?.close(500).catch(() => undefined);
  } finally {
    await daemon.stop();
  }
});

test.run();
