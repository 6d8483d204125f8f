// bench/rnic.ts --counters (bench/rnic-counters.ts): what a RoCE row's runs add up to per side, the
// lines printed under the row, and a short run of the bench itself that keeps them in the row's
// JSON. Counts and their presence only: the throughput is a benchmark's, run under the benchmark
// lock (docs/BENCH.md), never asserted here.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { addCounters, counterLines, countersBetween, rowCounters, type RoceSideCounters } from '../../bench/rnic-counters.ts';
import { runProgram } from '../support/program.ts';

const scratch = mkdtempSync(join(tmpdir(), 'kbtp-rnic-counters-'));
test.after(() => rmSync(scratch, { recursive: true, force: true }));

const side = (scale: number): RoceSideCounters => ({
  packetsSent: 256 * scale,
  packetsResent: 2 * scale,
  packetsReceived: 4 * scale,
  acksSent: 0,
  acksReceived: 4 * scale,
  naksSent: 0,
  naksReceived: scale,
  duplicatesReceived: 0,
  earlyRetransmissions: scale,
  tailProbes: 0,
  earlyWaits: scale,
  earlyTimerFires: 3 * scale,
  timeouts: 0,
  ackTimerFires: 0,
  leanPackets: 0,
  pastGap: 0,
  sendCalls: 4 * scale,
  sendMessages: 8 * scale,
  datagramsSent: 256 * scale,
  readableEvents: 4 * scale,
  receiveCalls: 8 * scale,
  datagramsReceived: 4 * scale,
  datagramsInCheckedRuns: 3 * scale,
});

test('a run is the difference of two readings; a row sums its runs', () => {
  const run = countersBetween(side(1), side(3));
  assert.equal(run, side(2));
  assert.equal(addCounters(addCounters(undefined, run), side(1)), side(3));
});

test('a row keeps its totals and bytes, CPU per GiB by thread, and prints per MiB and per call', () => {
  const counters = rowCounters(2 * 2 ** 20, side(2), undefined, { requesterNs: 1e6, responderNs: 3e6, otherNs: 0 });
  assert.equal(counters.cpuMsPerGiB, { requesterThread: 512, responderThread: 1536, otherThreads: 0 });
  assert.is(counters.requester?.packetsSent, 512);
  assert.is(counters.responder, undefined);
  const lines = counterLines(counters);
  assert.is(lines.length, 3, lines.join('\n'));
  assert.match(lines[0]!, /requester 512, responder 1536, other 0/);
  // 512 packets over 2 MiB, 8 sendmmsg calls of 64 datagrams, 16 recvmmsg calls of half a datagram each.
  assert.match(lines[1]!, /packets out 256\.0 \(resent 2\.0\)/);
  assert.match(lines[1]!, /sendmmsg 4\.0 \(64\.0 datagrams, 32\.0 per GSO message\)/);
  assert.match(lines[1]!, /recvmmsg 8\.0 \(0\.5 datagrams\), wake-ups 4\.0 \(1\.0 datagrams\), ICRC checked in runs 3\.0/);
  assert.match(lines[2]!, /NAKs out 0, in 2; .*early timer 6 \(probed 0, waited 2, went back N 2\)/);
});

test('--help names --counters', async () => {
  const run = await runProgram(process.execPath, ['--import', 'tsx', 'bench/rnic.ts', '--help']);
  assert.is(run.code, 0, run.stderr);
  assert.match(run.stdout.toString(), /\[--counters\]/);
});

interface RowJson {
  op: string;
  transport: string;
  link?: string;
  threads?: number;
  counters?: {
    bytes: number;
    requester?: RoceSideCounters;
    responder?: RoceSideCounters;
    cpuMsPerGiB?: { requesterThread: number; responderThread?: number; otherThreads: number };
  };
}

test('a short run with --counters keeps each side counters in the RoCE rows and CPU by thread in every RDMA row', async () => {
  const output = join(scratch, 'rnic.json');
  const args = ['--import', 'tsx', 'bench/rnic.ts', '--rows', 'roce,threads', '--ops', 'write', '--sizes', '16384', '--mib-per-run', '1', '--trials', '2'];
  const run = await runProgram(process.execPath, [...args, '--counters', '--output', output]);
  assert.is(run.code, 0, run.stderr);
  const rows = JSON.parse(readFileSync(output, 'utf8')) as RowJson[];
  const oneThread = rows.find((row) => row.transport === 'roce' && row.threads === undefined);
  const twoThreads = rows.find((row) => row.transport === 'roce' && row.threads === 2);
  const iwarp = rows.find((row) => row.transport === 'iwarp' && row.threads === 2);
  for (const [name, row] of [
    ['one thread', oneThread],
    ['two threads', twoThreads],
  ] as const) {
    const counters = row?.counters;
    assert.ok(counters !== undefined, `${name}: counters kept`);
    assert.is(counters.bytes, 2 * 2 ** 20, `${name}: two runs of 1 MiB`);
    // Two runs of 64 Writes of 16 KiB, 4 packets each at path MTU 4096, and a closing Send each:
    // at least that many packets left and arrived (a retransmission adds, never removes).
    assert.ok((counters.requester?.packetsSent ?? 0) >= 2 * (64 * 4 + 1), `${name}: ${counters.requester?.packetsSent} packets sent`);
    assert.ok((counters.responder?.packetsReceived ?? 0) >= 2 * (64 * 4 + 1), `${name}: ${counters.responder?.packetsReceived} packets received`);
    // Every Write's last packet asks for an ACK: some came back.
    assert.ok((counters.responder?.acksSent ?? 0) > 0 && (counters.requester?.acksReceived ?? 0) > 0, `${name}: ACKs`);
    if (row?.link === 'batched') {
      assert.ok(
        (counters.requester?.sendCalls ?? 0) > 0 && (counters.requester?.datagramsSent ?? 0) >= (counters.requester?.packetsSent ?? 0) / 2,
        `${name}: sendmmsg`,
      );
      assert.ok((counters.responder?.receiveCalls ?? 0) > 0 && (counters.responder?.readableEvents ?? 0) > 0, `${name}: recvmmsg and wake-ups`);
    }
    assert.ok(counters.cpuMsPerGiB !== undefined && counters.cpuMsPerGiB.requesterThread > 0, `${name}: requester thread CPU`);
  }
  assert.is(oneThread?.counters?.cpuMsPerGiB?.responderThread, undefined, 'one thread: no responder thread of its own');
  assert.ok((twoThreads?.counters?.cpuMsPerGiB?.responderThread ?? 0) > 0, 'two threads: the responder thread did the placing');
  assert.ok(iwarp?.counters?.cpuMsPerGiB !== undefined && iwarp.counters.requester === undefined, 'iWARP: CPU by thread, no RC counters');
  assert.match(run.stdout.toString(), /requester per MiB: packets out/);

  const plain = join(scratch, 'plain.json');
  const without = await runProgram(process.execPath, [...args, '--output', plain]);
  assert.is(without.code, 0, without.stderr);
  const plainRows = JSON.parse(readFileSync(plain, 'utf8')) as RowJson[];
  assert.ok(plainRows.length > 0 && plainRows.every((row) => row.counters === undefined), 'no counters unless asked');
  assert.not.match(without.stdout.toString(), /per MiB: packets out/);
});

test.run();
