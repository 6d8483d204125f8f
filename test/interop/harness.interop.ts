// The harness's own promises: the peer's exit status comes back, and a guest that does not finish
// is killed after its timeout with its log kept.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, readFileSync } from 'node:fs';
import { Guest, runGuest } from './guest.ts';

test("the peer script's exit status and output come back; the guest powers off", async () => {
  const result = await runGuest({ name: 'harness-exit', peerScript: 'rdma link show siw0/1\necho "peer says hi"\nexit 7' });
  assert.is(result.exitStatus, 7);
  assert.is(result.guestFailure, null);
  assert.not.ok(result.timedOut);
  assert.match(result.log, /link siw0\/1 state ACTIVE/);
  assert.match(result.log, /peer says hi/);
  assert.is(result.qemuExitCode, 0, 'QEMU ended because the guest powered off');
});

test('a guest still running at its timeout is killed and its log is kept', async () => {
  const guest = await Guest.start({ name: 'harness-timeout', peerScript: 'sleep 600', timeoutMs: 1500 });
  const result = await guest.exited;
  assert.ok(result.timedOut);
  assert.is(result.exitStatus, null);
  assert.ok(existsSync(result.logPath));
  assert.match(readFileSync(result.logPath, 'utf8'), /guest still running after 1500 ms: killed/);
});

test.run();
