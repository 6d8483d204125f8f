// The target's CPU wake-latency request (host/kbtp/server/wake-latency.ts): placed when the process
// is busy, kept through short pauses, dropped after WAKE_IDLE_MS without a busy sample, never
// retried once the device refused it; configured by `cpuWakeLatencyUs` and
// `kbtp target --cpu-wake-latency-us`; and a real target places it while it serves requests and
// drops it when it stops.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { descriptorsOpenOn } from '../support/descriptors.ts';
import { join } from 'node:path';
import { WakeLatencyHolder, WAKE_IDLE_MS, WAKE_SAMPLE_MS } from '../../host/kbtp/server/wake-latency.ts';
import { ConfigError, describeSettings } from '../../host/kbtp/server/target-config.ts';
import { startTarget } from '../../host/kbtp/server/target.ts';
import { spawnTarget } from '../../host/bench/spawn.ts';
import { connect } from '../../host/kbtp/initiator.ts';
import { testSettings } from '../support/rig.ts';
import { kbtp } from '../support/kbtp-cli.ts';

const dir = mkdtempSync(join(tmpdir(), 'kbtp-wake-latency-'));
let devices = 0;
function device(): string {
  const path = join(dir, `device-${devices++}`);
  writeFileSync(path, '');
  return path;
}

/** A cpuidle driver file naming `driver`, as /sys/devices/system/cpu/cpuidle/current_driver does. */
function idleDriver(driver: string): string {
  const path = join(dir, `current_driver-${devices++}`);
  writeFileSync(path, `${driver}\n`);
  return path;
}

/** A holder on a fake clock and CPU: `step(cpuMs)` advances one sample period with that much CPU used. */
function rig(options: { device?: string; driver?: string } = {}) {
  let nowMs = 0;
  let cpuUs = 0;
  const logged: string[] = [];
  const path = options.device ?? device();
  const holder = new WakeLatencyHolder({
    latencyUs: 0,
    device: path,
    idleDriverFile: idleDriver(options.driver ?? 'haltpoll'),
    log: (line) => logged.push(line),
    nowMs: () => nowMs,
    cpuMicroseconds: () => cpuUs,
  });
  holder.start();
  const step = (cpuMs: number): void => {
    nowMs += WAKE_SAMPLE_MS;
    cpuUs += cpuMs * 1000;
    holder.sample();
  };
  return { holder, step, logged, path };
}

test('busy places the request at once; idle keeps it for WAKE_IDLE_MS, then drops it; busy again places it again', () => {
  const { holder, step, path } = rig();
  try {
    step(0);
    step(0.5); // 0.5 % of a CPU: idle
    assert.is(holder.report().held, false);
    assert.is(descriptorsOpenOn(path), 0);
    step(5);
    assert.is(holder.report().held, true);
    assert.equal([...readFileSync(path)], [0, 0, 0, 0]);
    assert.is(descriptorsOpenOn(path), 1);
    const idleSamples = WAKE_IDLE_MS / WAKE_SAMPLE_MS;
    for (let i = 1; i < idleSamples; i++) step(0);
    assert.is(holder.report().held, true, 'a pause shorter than WAKE_IDLE_MS keeps it');
    step(0);
    assert.is(holder.report().held, false);
    assert.is(descriptorsOpenOn(path), 0);
    step(20);
    const report = holder.report();
    assert.is(report.held, true);
    assert.is(report.holds, 2);
    assert.is(report.heldMs, WAKE_IDLE_MS, 'the first spell, and the second just begun');
    assert.is(report.problem, undefined);
  } finally {
    holder.stop();
  }
  assert.is(holder.report().held, false);
  assert.is(descriptorsOpenOn(path), 0, 'stop drops it');
});

test('a device that refuses is said once and not tried again; the holder keeps working otherwise', () => {
  const { holder, step, logged } = rig({ device: join(dir, 'missing', 'device') });
  try {
    for (let i = 0; i < 5; i++) step(50);
    assert.is(logged.length, 1);
    assert.match(logged[0] ?? '', /cannot request a CPU wake latency on .*missing\/device \(ENOENT\).*--cpu-wake-latency-us off/);
    const report = holder.report();
    assert.is(report.held, false);
    assert.is(report.holds, 0);
    assert.match(report.problem ?? '', /ENOENT/);
  } finally {
    holder.stop();
  }
});

test('a kernel without a cpuidle driver: no request placed (it would change nothing), said once, the reason reported', () => {
  const { holder, step, logged, path } = rig({ driver: 'none' });
  try {
    for (let i = 0; i < 5; i++) step(50);
    assert.is(logged.length, 1);
    assert.match(logged[0] ?? '', /no CPU wake-latency request placed: this kernel idles its CPUs without a cpuidle driver .*--cpu-wake-latency-us off/);
    const report = holder.report();
    assert.is(report.held, false);
    assert.is(report.holds, 0);
    assert.match(report.problem ?? '', /without a cpuidle driver/);
    assert.is(readFileSync(path).length, 0, 'the device was never written');
    assert.is(descriptorsOpenOn(path), 0);
  } finally {
    holder.stop();
  }
});

test('cpuWakeLatencyUs: 0 by default, a number kept, null for no request, anything else a configuration error', () => {
  assert.is(testSettings().cpuWakeLatencyUs, 0);
  assert.is(testSettings({ cpuWakeLatencyUs: 20 }).cpuWakeLatencyUs, 20);
  assert.is(testSettings({ cpuWakeLatencyUs: null }).cpuWakeLatencyUs, null);
  assert.match(describeSettings(testSettings({ cpuWakeLatencyUs: null })), /"cpuWakeLatencyUs": "off \(no request\)"/);
  for (const bad of [-1, 1_000_001, 2.5, '0', true]) {
    assert.throws(
      () => testSettings({ cpuWakeLatencyUs: bad }),
      (error: unknown) => error instanceof ConfigError && /cpuWakeLatencyUs/.test(error.message) && /or null for no request/.test(error.message),
      String(bad),
    );
  }
});

test('kbtp target --cpu-wake-latency-us: a number or off; anything else says what to give', async () => {
  const shown = (out: Buffer) => (JSON.parse(out.toString()) as { cpuWakeLatencyUs: unknown }).cpuWakeLatencyUs;
  const config = join(dir, 'target.json');
  writeFileSync(config, JSON.stringify({ listen: '127.0.0.1:0' }));
  const plain = await kbtp(['target', '--check-config', config]);
  assert.is(plain.code, 0, plain.stderr);
  assert.is(shown(plain.stdout), 0);
  const off = await kbtp(['target', '--check-config', config, '--cpu-wake-latency-us', 'off']);
  assert.is(shown(off.stdout), 'off (no request)');
  const some = await kbtp(['target', '--check-config', config, '--cpu-wake-latency-us', '10']);
  assert.is(shown(some.stdout), 10);
  for (const bad of ['fast', '-3', '2000000']) {
    const refused = await kbtp(['target', '--check-config', config, '--cpu-wake-latency-us', bad]);
    assert.is(refused.code, 2, bad);
    assert.match(refused.stderr, /--cpu-wake-latency-us/);
  }
  const help = await kbtp(['target', '--help']);
  assert.match(help.stdout.toString() + help.stderr, /--cpu-wake-latency-us N\|off/);
});

test('a target places the request while it serves requests and drops it when it stops', async () => {
  const path = device();
  const target = await startTarget(testSettings({ transport: 'iwarp', workers: 1 }), {
    log: () => undefined,
    cpuLatencyDevice: path,
    cpuIdleDriverFile: idleDriver('haltpoll'),
  });
  try {
    assert.is(target.wakeLatency()?.held, false, 'an idle node holds nothing');
    const session = await connect(`127.0.0.1:${target.port}`, { tenant: 'open', secret: '', transport: 'iwarp' });
    try {
      await session.allocStore(192n, new Uint8Array(4096).fill(3), { seal: true });
      const deadline = Date.now() + 20_000;
      while (target.wakeLatency()?.held !== true && Date.now() < deadline) {
        for (let i = 0; i < 200; i++) await session.load(192n);
      }
      assert.is(target.wakeLatency()?.held, true, 'held while busy');
      assert.equal([...readFileSync(path)], [0, 0, 0, 0]);
      assert.is(descriptorsOpenOn(path), 1);
    } finally {
      await session.close(500);
    }
  } finally {
    await target.stop(1000);
  }
  assert.is(target.wakeLatency()?.held, false);
  assert.is(descriptorsOpenOn(path), 0);
  assert.ok((target.wakeLatency()?.holds ?? 0) >= 1);
});

test('configured off, a target makes no request', async () => {
  const path = device();
  const target = await startTarget(testSettings({ transport: 'iwarp', workers: 1, cpuWakeLatencyUs: null }), { log: () => undefined, cpuLatencyDevice: path });
  try {
    assert.is(target.wakeLatency(), undefined);
  } finally {
    await target.stop(1000);
  }
  assert.is(readFileSync(path).length, 0);
});

test('kbtp bench --spawn passes its setting to the target it spawns (absent: the default)', async () => {
  const spawned = (cpuWakeLatencyUs?: number | null) =>
    spawnTarget({
      blockSize: 4096,
      blocks: 8,
      workers: 1,
      credits: 4,
      sessions: 1,
      log: () => undefined,
      ...(cpuWakeLatencyUs !== undefined ? { cpuWakeLatencyUs } : {}),
    });
  for (const [given, expected] of [
    [undefined, 0],
    [25, 25],
    [null, undefined],
  ] as const) {
    const target = await spawned(given);
    try {
      assert.is(target.wakeLatency()?.requestUs, expected, String(given));
    } finally {
      await target.stop(500);
    }
  }
});

test.after(() => rmSync(dir, { recursive: true, force: true }));
test.run();
