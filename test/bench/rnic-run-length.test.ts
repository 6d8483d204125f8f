// bench/rnic.ts --threads-mib-per-run (bench/rnic-run-length.ts): the two-thread rows move their
// own octets per trial, 1 GiB unless told otherwise, and a quick --mib-per-run keeps them quick.
// Lengths and flags only: the throughput is a benchmark's, never asserted here.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runLengths } from '../../bench/rnic-run-length.ts';
import { runProgram } from '../support/program.ts';

const scratch = mkdtempSync(join(tmpdir(), 'kbtp-rnic-run-length-'));
test.after(() => rmSync(scratch, { recursive: true, force: true }));
const MiB = 2 ** 20;

test('by default one-thread trials move 128 MiB and two-thread trials 1 GiB', () => {
  assert.equal(runLengths(undefined, undefined), { bytesPerRun: 128 * MiB, threadsBytesPerRun: 1024 * MiB });
});

test('a --mib-per-run given sets both unless --threads-mib-per-run is given too', () => {
  assert.equal(runLengths('1', undefined), { bytesPerRun: MiB, threadsBytesPerRun: MiB });
  assert.equal(runLengths('1', '3'), { bytesPerRun: MiB, threadsBytesPerRun: 3 * MiB });
  assert.equal(runLengths(undefined, '512'), { bytesPerRun: 128 * MiB, threadsBytesPerRun: 512 * MiB });
  assert.equal(runLengths('0.5', undefined), { bytesPerRun: MiB / 2, threadsBytesPerRun: MiB / 2 });
});

test('lengths that are not positive numbers are refused, naming the flag', () => {
  assert.match(runLengths('0', undefined) as string, /--mib-per-run 0/);
  assert.match(runLengths('x', '2') as string, /--mib-per-run x/);
  assert.match(runLengths('1', '-2') as string, /--threads-mib-per-run -2/);
  assert.match(runLengths(undefined, 'lots') as string, /--threads-mib-per-run lots/);
});

test('--help names the flag; a bad value is a usage error (status 2)', async () => {
  const help = await runProgram(process.execPath, ['--import', 'tsx', 'bench/rnic.ts', '--help']);
  assert.is(help.code, 0, help.stderr);
  assert.match(help.stdout.toString(), /\[--threads-mib-per-run 1024\]/);
  const bad = await runProgram(process.execPath, ['--import', 'tsx', 'bench/rnic.ts', '--threads-mib-per-run', '0']);
  assert.is(bad.code, 2, bad.stderr);
  assert.match(bad.stderr, /--threads-mib-per-run 0: a positive number/);
});

interface RowJson {
  transport: string;
  tcpCongestionControl?: string;
  threads?: number;
  bytes: number;
  trials: number;
  counters?: { bytes: number };
}

test('a short run: the two-thread rows move --threads-mib-per-run per trial, the others --mib-per-run', async () => {
  const output = join(scratch, 'rnic.json');
  const args = ['--rows', 'roce,threads', '--ops', 'write', '--sizes', '16384', '--mib-per-run', '1', '--threads-mib-per-run', '3', '--trials', '2'];
  const run = await runProgram(process.execPath, ['--import', 'tsx', 'bench/rnic.ts', ...args, '--counters', '--output', output]);
  assert.is(run.code, 0, run.stderr);
  const rows = JSON.parse(readFileSync(output, 'utf8')) as RowJson[];
  const twoThreads = rows.filter((row) => row.threads === 2);
  const oneThread = rows.filter((row) => row.threads === undefined);
  assert.is(twoThreads.length, 2, 'iWARP and RoCE with the responder on its own thread');
  assert.is(oneThread.length, 1, 'RoCE on one thread');
  for (const row of twoThreads) {
    assert.is(row.bytes, 3 * MiB, `${row.transport}, two threads`);
    // What the counters summed is what the trials moved: two of 3 MiB.
    assert.is(row.counters?.bytes, 2 * 3 * MiB, `${row.transport}, two threads, counted`);
  }
  assert.is(oneThread[0]!.bytes, MiB);
  assert.is(oneThread[0]!.counters?.bytes, 2 * MiB);
  // iWARP rows say which TCP congestion control their sockets ran under (BBR's pacing decides their mode); RoCE rows do not.
  assert.equal(
    rows.map((row) => row.transport),
    ['roce', 'iwarp', 'roce'],
  );
  assert.is(rows[0]!.tcpCongestionControl, undefined);
  assert.is(rows[2]!.tcpCongestionControl, undefined);
  const congestion = rows[1]!.tcpCongestionControl;
  assert.ok(congestion !== undefined && /^([a-z][a-z0-9_]*(\/[a-z][a-z0-9_]*)?|unknown)$/.test(congestion), `iWARP row: ${congestion}`);
  if (congestion !== 'unknown') assert.match(run.stdout.toString(), `iWARP runs over loopback TCP with congestion control ${congestion} (host default `);
});

test.run();
