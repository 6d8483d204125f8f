// `kbtp bench` for real: phases against an in-process target with every loaded block checked, a
// wrong answer counted as an error rather than as speed, and the command line end to end.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type KbtpSession } from '../../host/kbtp/initiator.ts';
import type { RunningTarget } from '../../host/kbtp/server/target.ts';
import { spawnTarget, spawnedTargetSettings } from '../../host/bench/spawn.ts';
import { parseMix } from '../../host/bench/mix.ts';
import { runPhase } from '../../host/bench/workload.ts';
import { rowsOf } from '../../host/bench/report.ts';
import { BlockMaker } from '../../host/bench/blocks.ts';
import { ThreadCpu } from '../../host/bench/thread-cpu.ts';
import { turn } from '../../host/rnic/turn.ts';
import { kbtp as kbtpCli } from '../support/kbtp-cli.ts';

const scratch = mkdtempSync(join(tmpdir(), 'kbtp-bench-test-'));
let target: RunningTarget;
let sessions: KbtpSession[] = [];

test.before(async () => {
  target = await spawnTarget({ blockSize: 16 * 1024, blocks: 64, workers: 1, credits: 8, sessions: 2, log: () => undefined });
  for (let i = 0; i < 2; i++) sessions.push(await connect(`127.0.0.1:${target.port}`, { pipeline: 4 }));
});
test.after(async () => {
  await Promise.all(sessions.map((session) => session.close(500)));
  sessions = [];
  await target.stop(1000);
  rmSync(scratch, { recursive: true, force: true });
});

test('a weighted mix of every two-sided operation, counted, with no error', async () => {
  const [phase] = parseMix('load:4,store:2,alloc-store:1,free:1');
  const result = await runPhase({ sessions, size: 10_000, phase: phase ?? [], inFlight: 4, keysPerSession: 8, firstHandle: 0n, count: 2000 });
  const rows = rowsOf(result);
  const byOp = new Map(rows.map((row) => [row.op, row]));
  const total = rows.reduce((sum, row) => sum + row.ops, 0);
  assert.ok(total >= 2000 && total <= 2000 + 8, `${total} requests counted`);
  for (const op of ['load', 'store', 'alloc-store', 'free'] as const) {
    const row = byOp.get(op);
    assert.ok(row !== undefined && row.ops > 0, `${op} ran`);
    assert.equal(row?.errors, {}, `${op} errors`);
    assert.ok((row?.p50Us ?? 0) > 0 && (row?.p99Us ?? 0) >= (row?.p50Us ?? 0), `${op} latency`);
  }
  assert.is(byOp.get('load')?.corrupt, 0);
  // Everything the phase bound was freed again: a second phase starts from an empty pool.
  const stats = await target.stats();
  assert.is(stats.internalErrors, 0);
  const audit = target.audit();
  assert.is(audit.bound, 0, 'the phase cleans up after itself');
});

test("CPU per request by thread: the spawned target's worker is told apart from the client", async () => {
  assert.is(target.threadIds.length, 1);
  const worker = target.threadIds[0] ?? 0;
  assert.ok(worker > 0 && worker !== process.pid, `worker thread id ${worker}`);
  const threadCpu = ThreadCpu.open(target.threadIds);
  if (threadCpu === undefined) return; // no /proc/self/task/TID/schedstat here: the figures are absent
  const [phase] = parseMix('load');
  const result = await runPhase({ sessions, size: 16 * 1024, phase: phase ?? [], inFlight: 2, keysPerSession: 2, firstHandle: 0n, count: 2000, threadCpu });
  const cpu = result.cpu;
  assert.ok(cpu !== undefined, 'a sampler gives the phase CPU figures');
  assert.ok(cpu.requests >= 2000, `${cpu.requests} requests`);
  // Both sides do real work per request (a read and a write each at least); one thread is at most one core.
  assert.ok(cpu.clientUsPerOp > 0 && (cpu.targetUsPerOp ?? 0) > 0, JSON.stringify(cpu));
  assert.ok(cpu.clientBusy > 0 && cpu.clientBusy <= 1.05, `client busy ${cpu.clientBusy}`);
  assert.ok((cpu.targetBusy ?? 0) > 0 && (cpu.targetBusy ?? 0) <= 1.05, `target busy ${cpu.targetBusy}`);
  assert.equal(rowsOf(result)[0]?.cpu, cpu);
});

test('ThreadCpu.between: per request and busy share from two samples', () => {
  const threadCpu = ThreadCpu.open([1]);
  if (threadCpu === undefined) return;
  const first = { at: 1000, clientNs: 5e6, targetNs: 1e6, otherNs: 2e6 };
  const last = { at: 1100, clientNs: 5e6 + 50e6, targetNs: 1e6 + 20e6, otherNs: 2e6 + 1e6 };
  assert.equal(threadCpu.between(first, last, 1000), {
    requests: 1000,
    clientUsPerOp: 50,
    otherUsPerOp: 1,
    clientBusy: 0.5,
    targetUsPerOp: 20,
    targetBusy: 0.2,
  });
  assert.is(threadCpu.between(first, last, 0), undefined, 'no request, no figure');
  assert.is(ThreadCpu.open([])?.between(first, last, 10)?.targetUsPerOp, undefined, 'no target thread, no target figure');
});

test('a spawned target takes a whole 16 KiB block inline, so a STORE is one round trip', () => {
  // With 8 KiB (kbtp target's default) a 16 KiB STORE was pulled by RDMA Read: twice a LOAD's latency.
  for (const session of sessions) assert.is(session.hello.maxInline, 16 * 1024);
});

test('a spawned target takes a whole 1 MiB block inline by default, and --max-inline sets it', async () => {
  // Since an inline STORE's payload is read straight into its block, a 1 MiB STORE sent with its
  // request beats one pulled by RDMA Read (spawn.ts); --max-inline gives the other choice.
  for (const [maxInline, expected] of [
    [undefined, 1024 * 1024],
    [64 * 1024, 64 * 1024],
    [0, 0],
  ] as const) {
    const spawned = await spawnTarget({
      blockSize: 1024 * 1024,
      blocks: 4,
      workers: 1,
      credits: 2,
      sessions: 1,
      ...(maxInline !== undefined ? { maxInline } : {}),
      log: () => undefined,
    });
    try {
      const session = await connect(`127.0.0.1:${spawned.port}`, { pipeline: 1 });
      try {
        assert.is(session.hello.maxInline, expected, `maxInline ${maxInline}`);
      } finally {
        await session.close(500);
      }
    } finally {
      await spawned.stop(1000);
    }
  }
});

test("a spawned target's default Max Inline steps down until the engine fits; one asked for is kept", async () => {
  const shape = { blockSize: 1024 * 1024, blocks: 16, workers: 1, credits: 8 };
  assert.is(spawnedTargetSettings({ ...shape, sessions: 16 }).pool.maxInline, 1024 * 1024);
  // 304 sessions x 2 x 8 credits of 1 MiB contexts is 4.75 GiB: over a 32-bit memory; at 512 KiB it fits.
  assert.is(spawnedTargetSettings({ ...shape, sessions: 300 }).pool.maxInline, 512 * 1024);
  assert.is(spawnedTargetSettings({ ...shape, sessions: 300, maxInline: 1024 * 1024 }).pool.maxInline, 1024 * 1024);
  // Over RoCE 1 MiB STOREs stay on RDMA Read: inline ones from many sessions overrun the target's UDP socket.
  assert.is(spawnedTargetSettings({ ...shape, sessions: 16, transport: 'roce' }).pool.maxInline, 256 * 1024);
  assert.is(spawnedTargetSettings({ ...shape, sessions: 16, transport: 'roce', maxInline: 1024 * 1024 }).pool.maxInline, 1024 * 1024);
  try {
    const started = await spawnTarget({ ...shape, sessions: 300, maxInline: 1024 * 1024, log: () => undefined });
    await started.stop(1000);
    assert.unreachable('a Max Inline that does not fit started a target');
  } catch (error) {
    assert.match(String(error), /request contexts take .* lower Max Inline/);
  }
});

test('a LOAD that returns other data is an error, not a fast answer', async () => {
  const session = sessions[0];
  if (session === undefined) throw new Error('no session');
  // A LOAD-only phase loads through loadInto (callbacks, no promise per request).
  const original = session.loadInto.bind(session);
  session.loadInto = (handle, into, done, options): void =>
    original(
      handle,
      into,
      (error, dataLength, generation) => {
        into[7] = (into[7] ?? 0) ^ 0x40; // one wrong bit
        done(error, dataLength, generation);
      },
      options,
    );
  try {
    const [phase] = parseMix('load');
    const result = await runPhase({ sessions: [session], size: 4096, phase: phase ?? [], inFlight: 2, keysPerSession: 4, firstHandle: 100n, count: 50 });
    const [row] = rowsOf(result);
    assert.is(row?.ops, 0, 'no wrong load counts as done');
    assert.is(row?.corrupt, 50);
    assert.is(row?.errors.CORRUPT, 50);
    assert.match(row?.firstError ?? '', /checksum/);
  } finally {
    session.loadInto = original;
  }
});

/**
 * Runs a LOAD-only chain of `count` requests (1 in flight) on the second session with
 * `loadInto` wrapped by `wrap` and `onCheck` called before each block check; asserts every
 * request counted and none corrupt.
 */
async function loadChainWith(
  firstHandle: bigint,
  count: number,
  wrap: (original: KbtpSession['loadInto']) => KbtpSession['loadInto'],
  onCheck: () => void,
): Promise<void> {
  const session = sessions[1];
  if (session === undefined) throw new Error('no session');
  const original = session.loadInto.bind(session);
  session.loadInto = wrap(original);
  const check = BlockMaker.prototype.check;
  BlockMaker.prototype.check = function (this: BlockMaker, data, expected, handle) {
    onCheck();
    return check.call(this, data, expected, handle);
  };
  try {
    const [phase] = parseMix('load');
    const result = await runPhase({ sessions: [session], size: 4096, phase: phase ?? [], inFlight: 1, keysPerSession: 1, firstHandle, count });
    const [row] = rowsOf(result);
    assert.is(row?.ops, count);
    assert.is(row?.corrupt, 0);
  } finally {
    session.loadInto = original;
    BlockMaker.prototype.check = check;
  }
}

test('a LOAD chain writes its next request before it checks the block it loaded', async () => {
  // The check (a memcmp of the whole block) is the benchmark's work, not the request's: it runs
  // while the next request is on the wire, not between an answer and the next request.
  let issued = 0;
  const seen: number[] = [];
  const count = 20;
  await loadChainWith(
    60n,
    count,
    (original) => (handle, into, done, options) => {
      issued += 1;
      original(handle, into, done, options);
    },
    () => seen.push(issued),
  );
  // Answer i (from 0) is checked when request i + 1 has been issued (the last when none follows).
  assert.equal(
    seen,
    Array.from({ length: count }, (_, i) => Math.min(i + 2, count)),
  );
});

test('a LOAD chain checks each block at the end of the turn that delivered it, not in a later microtask', async () => {
  // Until session 9 the check was a promise reaction: a microtask checkpoint per request on the
  // client. It runs as a participant of the delivering turn now, behind the next request's write.
  let checks = 0;
  const checkedAtTurnEnd: number[] = [];
  const atTurnEnd = { endTurn: (): void => void checkedAtTurnEnd.push(checks) };
  const count = 20;
  await loadChainWith(
    70n,
    count,
    (original) => (handle, into, done, options) =>
      original(
        handle,
        into,
        (error, dataLength, generation) => {
          done(error, dataLength, generation);
          turn.flushLater(atTurnEnd); // enlisted behind whatever done() enlisted
        },
        options,
      ),
    () => {
      checks += 1;
    },
  );
  // At the end of the turn that delivered answer i (from 0), answers 0..i are checked.
  assert.equal(
    checkedAtTurnEnd,
    Array.from({ length: count }, (_, i) => i + 1),
  );
});

test('batched LOAD and STORE phases (loadMany/storeMany): every request counted and checked', async () => {
  for (const mix of ['store', 'load']) {
    const [phase] = parseMix(mix);
    const result = await runPhase({ sessions, size: 12_000, phase: phase ?? [], inFlight: 4, keysPerSession: 4, firstHandle: 200n, count: 400, batched: true });
    const [row] = rowsOf(result);
    assert.is(row?.op, mix);
    assert.is(row?.ops, 400, `${mix}: every request of every batch counted`);
    assert.equal(row?.errors, {});
    assert.is(row?.corrupt, 0);
  }
});

test('a batched LOAD that returns other data is an error, not a fast answer', async () => {
  const session = sessions[0];
  if (session === undefined) throw new Error('no session');
  const original = session.loadMany.bind(session);
  session.loadMany = async (handles, into, options): Promise<void> => {
    await original(handles, into, options);
    into[1]![9] = (into[1]![9] ?? 0) ^ 0x01; // one wrong bit in the second block of each batch
  };
  try {
    const [phase] = parseMix('load');
    const result = await runPhase({
      sessions: [session],
      size: 4096,
      phase: phase ?? [],
      inFlight: 2,
      keysPerSession: 2,
      firstHandle: 120n,
      count: 40,
      batched: true,
    });
    const [row] = rowsOf(result);
    assert.is(row?.ops, 20, 'the intact half counts');
    assert.is(row?.corrupt, 20);
    assert.match(row?.firstError ?? '', /checksum/);
  } finally {
    session.loadMany = original;
  }
});

async function kbtp(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const run = await kbtpCli(args);
  return { code: run.code, stdout: run.stdout.toString(), stderr: run.stderr };
}

test('kbtp bench --spawn --json --svg: a row per operation and size, data checked, chart written', async () => {
  const svg = join(scratch, 'bench.svg');
  const run = await kbtp([
    'bench',
    '--spawn',
    '--sizes',
    '4K,64K',
    '--sessions',
    '2',
    '--in-flight',
    '2',
    // A count, not a duration: on a loaded machine a short window can close before the first
    // answer of a freshly compiled process arrives.
    '--count',
    '100',
    '--json',
    '--svg',
    svg,
  ]);
  assert.is(run.code, 0, run.stderr);
  const report = JSON.parse(run.stdout) as {
    rows: Array<{ op: string; size: number; ops: number; gbPerSec: number; corrupt: number; errors: object; p999Us: number }>;
  };
  assert.equal(
    report.rows.map((row) => `${row.op}@${row.size}`),
    ['load@4096', 'store@4096', 'load@65536', 'store@65536'],
  );
  for (const row of report.rows) {
    assert.ok(row.ops > 0 && row.gbPerSec > 0, `${row.op}@${row.size} moved data`);
    assert.is(row.corrupt, 0);
    assert.equal(row.errors, {});
    assert.ok(row.p999Us > 0);
  }
  assert.match(run.stderr, /LOAD 4 KiB/, 'progress on standard error');
  assert.ok(existsSync(svg));
  const chart = readFileSync(svg, 'utf8');
  assert.match(chart, /^<svg/);
  assert.match(chart, /throughput/);
  assert.match(chart, /p99 latency/);
});

test('kbtp bench --transport roce: the sessions and the spawned target speak RoCE, every block checked', async () => {
  const run = await kbtp(['bench', '--spawn', '--transport', 'roce', '--sizes', '16K', '--sessions', '2', '--in-flight', '2', '--count', '200', '--json']);
  assert.is(run.code, 0, run.stderr);
  const report = JSON.parse(run.stdout) as { transport: string; rows: Array<{ op: string; ops: number; corrupt: number; errors: object }> };
  assert.is(report.transport, 'roce');
  assert.equal(
    report.rows.map((row) => row.op),
    ['load', 'store'],
  );
  for (const row of report.rows) {
    assert.ok(row.ops > 0, `${row.op} moved data`);
    assert.is(row.corrupt, 0);
    assert.equal(row.errors, {});
  }
  assert.match(run.stderr, /over RoCE/);
});

test('bad options get a message and exit code 2', async () => {
  const sizes = await kbtp(['bench', '--spawn', '--sizes', '12X']);
  assert.is(sizes.code, 2);
  assert.match(sizes.stderr, /"12X" is not a size/);
  const keys = await kbtp(['bench', '--spawn', '--keys', '1', '--in-flight', '4']);
  assert.is(keys.code, 2);
  assert.match(keys.stderr, /each request in flight needs a handle/);
  const both = await kbtp(['bench', '--spawn', '--target', '127.0.0.1:1']);
  assert.is(both.code, 2);
  const traceOnly = await kbtp(['bench', '--spawn', '--capacity', '5']);
  assert.is(traceOnly.code, 2);
  assert.match(traceOnly.stderr, /only to a trace replay/);
  for (const bad of ['soon', '-1', '1000001']) {
    const wake = await kbtp(['bench', '--spawn', '--cpu-wake-latency-us', bad]);
    assert.is(wake.code, 2, bad);
    assert.match(wake.stderr, /--cpu-wake-latency-us/);
  }
  const wakeOfRunning = await kbtp(['bench', '--target', '127.0.0.1:1', '--cpu-wake-latency-us', 'off']);
  assert.is(wakeOfRunning.code, 2);
  assert.match(wakeOfRunning.stderr, /sets a spawned target/);
  const inline = await kbtp(['bench', '--spawn', '--max-inline', 'lots']);
  assert.is(inline.code, 2);
  assert.match(inline.stderr, /--max-inline: "lots" is not a size/);
  const inlineOfRunning = await kbtp(['bench', '--target', '127.0.0.1:1', '--max-inline', '1M']);
  assert.is(inlineOfRunning.code, 2);
  assert.match(inlineOfRunning.stderr, /--max-inline sets a spawned target/);
  const transport = await kbtp(['bench', '--spawn', '--transport', 'rdma']);
  assert.is(transport.code, 2);
  assert.match(transport.stderr, /--transport rdma: use iwarp or roce/);
  const help = await kbtp(['bench', '--help']);
  assert.is(help.code, 0);
  assert.match(help.stdout, /--trace FILE/);
  assert.match(help.stdout, /--cpu-wake-latency-us N\|off/);
  assert.match(help.stdout, /--max-inline SIZE/);
  assert.match(help.stdout, /--transport T/);
});

test.run();
