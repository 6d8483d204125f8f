// The PM QoS request itself: four octets of binary s32 on the device (any other length the kernel
// parses as hexadecimal text), held exactly while its descriptor is open, and a device that cannot
// be opened reported with what to do rather than thrown.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { descriptorsOpenOn } from '../support/descriptors.ts';
import { join } from 'node:path';
import {
  CpuLatencyRequest,
  cpuIdleDriver,
  currentCpuLatencyUs,
  CPU_LATENCY_DEVICE,
  MAX_CPU_LATENCY_US,
  noEffectReason,
  parseCpuWakeLatencyUs,
} from '../../host/util/cpu-latency.ts';

const dir = mkdtempSync(join(tmpdir(), 'kbtp-cpu-latency-'));

test('hold writes the latency as four octets of little-endian s32 and keeps the descriptor open; release closes it', () => {
  const device = join(dir, 'device-a');
  writeFileSync(device, '');
  const request = new CpuLatencyRequest(0x000f0304, device);
  assert.is(request.held, false);
  assert.is(request.hold(), undefined);
  assert.is(request.held, true);
  assert.equal([...readFileSync(device)], [4, 3, 15, 0]);
  assert.is(descriptorsOpenOn(device), 1);
  assert.is(request.hold(), undefined, 'a second hold is the same request');
  assert.is(descriptorsOpenOn(device), 1);
  request.release();
  assert.is(request.held, false);
  assert.is(descriptorsOpenOn(device), 0, 'the kernel drops a request when its descriptor closes');
  request.release();
  assert.is(descriptorsOpenOn(device), 0);
  assert.is(currentCpuLatencyUs(device), 0x000f0304);
});

test('the cpuidle driver is read from sysfs; "none" means a request changes nothing, any driver or no answer may honour it', () => {
  const file = join(dir, 'current_driver');
  writeFileSync(file, 'none\n');
  assert.is(cpuIdleDriver(file), 'none');
  assert.match(noEffectReason(cpuIdleDriver(file), file) ?? '', /without a cpuidle driver \(.*current_driver: none\)/);
  writeFileSync(file, 'haltpoll\n');
  assert.is(cpuIdleDriver(file), 'haltpoll');
  assert.is(noEffectReason(cpuIdleDriver(file), file), undefined);
  writeFileSync(file, '');
  assert.is(cpuIdleDriver(file), undefined);
  assert.is(cpuIdleDriver(join(dir, 'no-such-file')), undefined);
  assert.is(noEffectReason(undefined), undefined, 'a kernel that does not say is given the benefit of the doubt');
});

test('a device that cannot be opened is a problem naming the device and the error, not an exception', () => {
  const request = new CpuLatencyRequest(0, join(dir, 'no-such-dir', 'device'));
  const problem = request.hold();
  assert.ok(problem !== undefined);
  assert.is(problem.code, 'ENOENT');
  assert.match(problem.message, /no-such-dir\/device \(ENOENT\): this kernel offers no CPU latency requests/);
  assert.is(request.held, false);
  assert.is(currentCpuLatencyUs(join(dir, 'no-such-dir', 'device')), undefined);
});

test('latencies outside 0 to the maximum are refused', () => {
  for (const bad of [-1, MAX_CPU_LATENCY_US + 1, 2.5, Number.NaN]) assert.throws(() => new CpuLatencyRequest(bad, join(dir, 'x')), RangeError);
});

test("the command lines' N|off: microseconds up to the maximum, off as null, anything else undefined", () => {
  assert.is(parseCpuWakeLatencyUs('0'), 0);
  assert.is(parseCpuWakeLatencyUs('25'), 25);
  assert.is(parseCpuWakeLatencyUs(String(MAX_CPU_LATENCY_US)), MAX_CPU_LATENCY_US);
  assert.is(parseCpuWakeLatencyUs('off'), null);
  for (const bad of ['soon', '-1', '2.5', String(MAX_CPU_LATENCY_US + 1), 'OFF']) assert.is(parseCpuWakeLatencyUs(bad), undefined, bad);
});

// Only where the kernel offers requests and this process may make them (root): then the kernel's
// aggregate must honour ours while it is held. Another program's request may keep it at 0 after.
if (existsSync(CPU_LATENCY_DEVICE) && process.getuid?.() === 0) {
  test('the kernel honours a held request of 0', () => {
    const request = new CpuLatencyRequest(0);
    assert.is(request.hold(), undefined);
    try {
      assert.is(currentCpuLatencyUs(), 0);
    } finally {
      request.release();
    }
  });
}

test.after(() => rmSync(dir, { recursive: true, force: true }));
test.run();
