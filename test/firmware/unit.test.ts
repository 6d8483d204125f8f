// The systemd unit the appliance image installs: systemd itself verifies it, and its hardening
// is scored by `systemd-analyze security` (offline; --threshold counts in tenths), which must rate it OK.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { execFile, spawn } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startDaemon, get, longJournals } from './daemon.ts';

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

test("the unit's readiness probe waits while the node recovers its tier and exits 0 once it is ready", async () => {
  const unit = readFileSync(UNIT, 'utf8');
  const script = /^ExecStartPost=\/usr\/bin\/node -e "(.*)"$/m.exec(unit)?.[1];
  assert.ok(script !== undefined && !script.includes('"') && !script.includes('%') && !script.includes('$'), 'one double-quoted argument systemd passes as is');
  // A journal that takes a while to replay, so the probe starts against a node that is not ready.
  const dataDir = mkdtempSync(join(tmpdir(), 'kbtp-unit-'));
  longJournals(dataDir, 3);
  const daemon = await startDaemon({ dataDir });
  try {
    const probe = await new Promise<{ code: number | null; readyAfter: boolean }>((resolve) => {
      const child = spawn(process.execPath, ['-e', script], { env: { ...process.env, KBTP_READYZ: `${daemon.management}/readyz` }, stdio: 'ignore' });
      const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
      child.on('close', (code) => {
        clearTimeout(timer);
        resolve({ code, readyAfter: /durable tier recovered/.test(daemon.stderr()) });
      });
    });
    assert.equal(probe, { code: 0, readyAfter: true }, daemon.stderr());
    assert.is((await get(`${daemon.management}/readyz`)).status, 200);
  } finally {
    assert.is(await daemon.stop(), 0, daemon.stderr());
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test.run();
