// Each of the target's workers holds a descriptor of its own for the shared listening socket
// (target.ts, host/util/descriptors.ts). With one descriptor number shared by all, the first
// worker to stop closed it for everyone and a later worker's close could hit whatever the process
// had opened under that number since: a libuv thread then aborted the process (SIGABRT within
// 20-80 start/stop rounds of a two-worker target in one process, as test/kbtp runs them). The
// check counts descriptors through /proc, not crashes, so it fails without the change every time.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startTarget } from '../../host/kbtp/server/target.ts';
import { testSettings } from '../support/rig.ts';
import { listeningDescriptors } from '../support/descriptors.ts';

test('three workers hold three descriptors of the listening socket, and stop closes all of them', async () => {
  const target = await startTarget(testSettings({ workers: 3 }), { log: () => undefined });
  const port = target.port;
  let stopped = false;
  try {
    const held = listeningDescriptors(port);
    assert.is(held.length, 3, `descriptors of the listening socket: ${held.join(', ')}`);
    await target.stop();
    stopped = true;
    assert.equal(listeningDescriptors(port), [], 'no descriptor of the listener outlives the target');
  } finally {
    if (!stopped) await target.stop();
  }
});

test('one worker holds the one descriptor it opened', async () => {
  const target = await startTarget(testSettings({ workers: 1 }), { log: () => undefined });
  try {
    assert.is(listeningDescriptors(target.port).length, 1);
  } finally {
    await target.stop();
  }
});

test.run();
