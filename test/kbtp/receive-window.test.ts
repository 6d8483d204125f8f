// The target's listening socket offers every connection a receive window for two of its largest
// messages from the start (target-config.ts initialReceiveWindow, host/rnic/socket-window.ts):
// without it a new connection's first 256 KiB STOREs waited for Linux's 64 KiB starting window
// and a BBR client paced the connection for good (issue 16). The buffer is read back from the
// kernel for the target's own listening descriptor (found through /proc: workers share this
// process's descriptors), so the check is a count, not a timing.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startTarget } from '../../host/kbtp/server/target.ts';
import { initialReceiveWindow } from '../../host/kbtp/server/target-config.ts';
import { LOOPBACK_CONGESTION_CONTROL, congestionControlOf, receiveBufferOf } from '../../host/rnic/socket-window.ts';
import { readFileSync } from 'node:fs';
import { connect } from '../../host/kbtp/initiator.ts';
import { SECRETS, testSettings } from '../support/rig.ts';
import { listeningDescriptors } from '../support/descriptors.ts';

/** This process's descriptor of the TCP socket listening on `port`. */
function listenerFd(port: number): number {
  const [fd] = listeningDescriptors(port);
  if (fd === undefined) throw new Error(`no listening socket on port ${port} in this process`);
  return fd;
}

test('the window every connection starts with: two of the largest messages, 1 to 8 MiB', () => {
  const pool = (blockSize: number, maxInline: number) => ({ pool: { blockSize, maxInline } }) as never;
  assert.is(initialReceiveWindow(pool(65536, 8192)), 2 ** 20);
  assert.is(initialReceiveWindow(pool(262144, 262144)), 2 ** 20);
  assert.is(initialReceiveWindow(pool(524288, 524288)), 2 * (524288 + 1024));
  assert.is(initialReceiveWindow(pool(2 ** 20, 262144)), 2 * 2 ** 20);
  assert.is(initialReceiveWindow(pool(2 ** 30, 8192)), 8 * 2 ** 20);
});

test("a target's listening socket holds the window for 256 KiB STOREs", async () => {
  const settings = testSettings({ workers: 2, pool: { blockSize: 262144, blockCount: 64, handleCount: 256, maxInline: 262144 } });
  const target = await startTarget(settings, { log: () => undefined });
  try {
    const options = receiveBufferOf(listenerFd(target.port));
    if (options instanceof Error) throw options;
    const window = initialReceiveWindow(settings);
    assert.ok(options.buffer >= window, `listening socket's receive buffer ${options.buffer}, window ${window}`);
    assert.is(options.lowWater, 1);
    // The host's congestion control unless configured (host/rnic/socket-window.ts).
    assert.is(congestionControlOf(listenerFd(target.port)), readFileSync('/proc/sys/net/ipv4/tcp_congestion_control', 'utf8').trim());
  } finally {
    await target.stop();
  }
});

test("loopback connections: the congestion control named on each end, the host's without one", async () => {
  const host = readFileSync('/proc/sys/net/ipv4/tcp_congestion_control', 'utf8').trim();
  const named = await startTarget(
    { ...testSettings({ transport: 'iwarp' }), loopbackCongestionControl: LOOPBACK_CONGESTION_CONTROL },
    { log: () => undefined },
  );
  const hosts = await startTarget(testSettings({ transport: 'iwarp' }), { log: () => undefined });
  try {
    assert.is(congestionControlOf(listenerFd(named.port)), LOOPBACK_CONGESTION_CONTROL);
    assert.is(congestionControlOf(listenerFd(hosts.port)), host);
    const session = await connect(`127.0.0.1:${named.port}`, {
      tenant: 'alpha',
      secret: SECRETS.alpha,
      transport: 'iwarp',
      loopbackCongestionControl: LOOPBACK_CONGESTION_CONTROL,
    });
    const kept = await connect(`127.0.0.1:${hosts.port}`, { tenant: 'alpha', secret: SECRETS.alpha, transport: 'iwarp' });
    try {
      assert.is(session.congestionControl, LOOPBACK_CONGESTION_CONTROL);
      assert.is(kept.congestionControl, undefined);
    } finally {
      await session.close();
      await kept.close();
    }
  } finally {
    await named.stop();
    await hosts.stop();
  }
});

test.run();
