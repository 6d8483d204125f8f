// The systemd unit the appliance image installs: systemd itself verifies it, and its hardening
// is scored by `systemd-analyze security` (offline; --threshold counts in tenths), which must rate it OK.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFile } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const UNIT = fileURLToPath(new URL('../../firmware/kbtp-appliance.service', import.meta.url));

function run(command: string, args: string[]): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    execFile(command, args, { timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : 1, output: stdout + stderr });
    });
  });
}

test('systemd verifies the unit; its exposure score is at most 3 (OK)', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'kbtp-unit-'));
  try {
    const copy = join(dir, 'kbtp-appliance.service');
    copyFileSync(UNIT, copy);
    const verify = await run('systemd-analyze', ['verify', copy]);
    assert.is(verify.code, 0, verify.output);
    assert.is(verify.output.trim(), '', `systemd-analyze verify complained:\n${verify.output}`);
    const security = await run('systemd-analyze', ['security', '--offline=true', '--threshold=30', copy]);
    assert.is(security.code, 0, security.output);
    assert.match(security.output, /Overall exposure level for kbtp-appliance\.service: [0-2]\.\d/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the unit restarts on failure but not on configuration errors, and checks readiness', () => {
  const unit = readFileSync(UNIT, 'utf8');
  for (const line of [
    'Restart=on-failure',
    'RestartPreventExitStatus=2',
    'NoNewPrivileges=yes',
    'PrivateTmp=yes',
    'ProtectSystem=strict',
    'ReadWritePaths=/var/lib/kbtp',
    'ExecReload=/bin/kill -HUP $MAINPID',
  ]) {
    assert.ok(unit.split('\n').includes(line), `missing ${line}`);
  }
  assert.match(unit, /^ExecStartPost=.*\/readyz/m);
  assert.match(unit, /^ExecStart=\/usr\/bin\/node \/usr\/lib\/kbtp\/dist\/host\/cli\.js appliance --config \/etc\/kbtp\/kbtp\.json/m);
});

test.run();
