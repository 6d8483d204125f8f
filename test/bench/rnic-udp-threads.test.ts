// bench/rnic.ts's two-thread UDP row (bench/rnic-udp-threads.ts, bench/rnic-udp-receiver.ts): the
// batched UDP pair with its receiver on a worker thread, the link-only counterpart of the RoCE
// two-thread rows. Presence, counts and thread ids only: throughput is a benchmark's, never
// asserted here.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadBatchedUdp } from '../../host/rnic/rc/batched-udp-libc.ts';
import { osThreadId } from '../../bench/rnic-counters.ts';
import { twoThreadUdpPair } from '../../bench/rnic-udp-threads.ts';
import { pump, ROCE_PACKET, udpPairRun, type UdpPair } from '../../bench/udp-pairs.ts';
import { runProgram } from '../support/program.ts';

const scratch = mkdtempSync(join(tmpdir(), 'kbtp-rnic-udp-threads-'));
test.after(() => rmSync(scratch, { recursive: true, force: true }));
const batched = !(loadBatchedUdp() instanceof Error);

test('the two-thread pair moves every datagram of a run, run after run, and receives on another thread', async () => {
  if (!batched) return;
  const pair = await twoThreadUdpPair();
  try {
    assert.ok(pair.receiverThread !== undefined && pair.receiverThread !== osThreadId(), `receiver thread ${pair.receiverThread}`);
    // Two runs on one pair (the bench keeps it open across trials): the count starts over each time.
    for (const total of [1 << 20, 3 << 20]) assert.ok((await udpPairRun(pair, total)) > 0, `${total} octets moved`);
  } finally {
    await pair.close();
  }
});

interface RowJson {
  op: string;
  threads?: number;
  gbps: number;
  counters?: { cpuMsPerGiB?: { requesterThread: number; responderThread?: number } };
}

test('--rows udp adds the batched pair with its receiver on its own thread, CPU by thread with --counters', async () => {
  if (!batched) return;
  const output = join(scratch, 'rnic.json');
  const args = ['--import', 'tsx', 'bench/rnic.ts', '--rows', 'udp', '--sizes', '16384', '--mib-per-run', '1', '--trials', '1', '--counters'];
  const run = await runProgram(process.execPath, [...args, '--output', output]);
  assert.is(run.code, 0, run.stderr);
  const rows = JSON.parse(readFileSync(output, 'utf8')) as RowJson[];
  const oneThread = rows.find((row) => row.op === 'udp-batched' && row.threads === undefined);
  const twoThreads = rows.find((row) => row.op === 'udp-batched' && row.threads === 2);
  assert.ok(oneThread !== undefined && twoThreads !== undefined, 'both batched rows');
  assert.ok(twoThreads.gbps > 0);
  assert.ok((twoThreads.counters?.cpuMsPerGiB?.responderThread ?? 0) > 0, 'the receiver thread did the receiving');
  assert.match(run.stdout.toString(), /batched UDP pair, receiver on its own thread: /);
});

/** A pair that records each datagram's length and delivers it (and each credit) a microtask later. */
function recordingPair(lengths: number[]): UdpPair {
  let data = (): void => undefined;
  let credited = (): void => undefined;
  return {
    send: (datagram) => {
      lengths.push(datagram.length);
      queueMicrotask(() => data());
    },
    sendCredit: () => queueMicrotask(() => credited()),
    onData: (handler) => (data = handler),
    onCredit: (handler) => (credited = handler),
    close: async () => undefined,
  };
}

test("the pump's RoCE shapes: a Write's FIRST longer by its RETH, a Read's FIRST and LAST by their AETH, every packet of a short Write or Read (ONLY packets), per message of the size", async () => {
  const sizes = async (shape: Parameters<typeof pump>[2]): Promise<number[]> => {
    const lengths: number[] = [];
    assert.is(await pump(recordingPair(lengths), 12, shape), 12);
    return lengths;
  };
  const M = ROCE_PACKET;
  assert.equal(await sizes({ kind: 'uniform' }), new Array(12).fill(M));
  // 16 KiB messages: four packets each, a Write's all ONLY packets; a 68 KiB Write's 17 packets: one FIRST.
  assert.equal(await sizes({ kind: 'write', size: 16384 }), new Array(12).fill(M + 16));
  assert.equal(await sizes({ kind: 'write', size: 17 * 4096 }), [M + 16, ...new Array(11).fill(M)]);
  // A short Read's responses are ONLY packets, each with its AETH; a 36 KiB one's 9: FIRST, 7 MIDDLE, LAST.
  assert.equal(await sizes({ kind: 'read', size: 16384 }), new Array(12).fill(M + 4));
  assert.equal(await sizes({ kind: 'read', size: 9 * 4096 }), [M + 4, M, M, M, M, M, M, M, M + 4, M + 4, M, M]);
  // One-packet Reads are ONLY responses, each with its AETH.
  assert.equal(await sizes({ kind: 'read', size: 4096 }), new Array(12).fill(M + 4));
});

test('--rows udp,threads adds the two-thread pair in the sizes of RC Writes and Reads, each against two-thread iWARP', async () => {
  if (!batched) return;
  const output = join(scratch, 'rnic-shaped.json');
  const args = ['--import', 'tsx', 'bench/rnic.ts', '--rows', 'udp,threads', '--sizes', '16384', '--mib-per-run', '1', '--trials', '1'];
  const run = await runProgram(process.execPath, [...args, '--output', output]);
  assert.is(run.code, 0, run.stderr);
  const rows = JSON.parse(readFileSync(output, 'utf8')) as Array<RowJson & { shape?: string; shapeOfIwarpTwoThreads?: number }>;
  for (const op of ['write', 'read']) {
    const shaped = rows.find((row) => row.op === 'udp-batched' && row.shape === op);
    assert.ok(shaped !== undefined && shaped.gbps > 0 && (shaped.shapeOfIwarpTwoThreads ?? 0) > 0, `the ${op}-shaped row`);
  }
  assert.match(run.stdout.toString(), /UDP alone in RoCE's packet sizes/);
});

test.run();
