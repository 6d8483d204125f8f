// bench/compare/threads.sh (a make compare row's threads, kbtp against Redis): its help and its
// usage errors, which come before it starts anything. The measurement itself is a benchmark, run
// under the benchmark lock (docs/BENCH.md, "Session 8"), never here.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runProgram } from '../support/program.ts';

const script = 'bench/compare/threads.sh';

test('--help explains the options and what is measured', async () => {
  const run = await runProgram('bash', [script, '--help']);
  assert.is(run.code, 0, run.stderr);
  assert.match(run.stdout.toString(), /--size 16384\] \[--op load\|store\] \[--sessions 16\] \[--seconds 4\]/);
  assert.match(run.stdout.toString(), /voluntary \/ involuntary context/);
  assert.match(run.stdout.toString(), /timer interrupts, IPIs and timer \/ network softirqs per request/);
});

test('bad options are usage errors (status 2) that say what is wrong', async () => {
  for (const [args, message] of [
    [['--bogus'], /unknown option --bogus/],
    [['--seconds', '3'], /--seconds 3: at least 4/],
    [['--seconds', 'x'], /--seconds x: at least 4/],
    [['--sessions', '0'], /'0' is not a positive integer/],
    [['--size', '16K'], /'16K' is not a positive integer/],
    [['--op', 'fetch'], /--op fetch: write load or store/],
  ] as const) {
    const run = await runProgram('bash', [script, ...args]);
    assert.is(run.code, 2, `${args.join(' ')}: ${run.stderr}`);
    assert.match(run.stderr, message);
  }
});

test.run();
