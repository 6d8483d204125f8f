// The platform references of make compare (bench/compare/tcp-pingpong.c and .ts, vcpu-stalls.c):
// the ping-pong's output parser, and both compiled programs run briefly: they answer every request
// and print ordered percentiles, and bad arguments are usage errors. No timing is asserted.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { parsePingPongOutput, tcpPingPong } from '../../bench/compare/tcp-pingpong.ts';
import { buildC } from '../../bench/compare/tools.ts';
import { runProgram } from '../support/program.ts';

test('the ping-pong parser reads its one line and refuses anything else', () => {
  assert.equal(parsePingPongOutput('size 16384 requests 1000 p50_us 21.8 p90_us 34.4 p99_us 80.7 p999_us 179.0\n'), {
    size: 16384,
    inFlight: 1,
    requests: 1000,
    p50Us: 21.8,
    p90Us: 34.4,
    p99Us: 80.7,
    p999Us: 179,
  });
  assert.equal(parsePingPongOutput('size 16384 in_flight 8 requests 80000 seconds 0.5 p50_us 34.3 p90_us 43.0 p99_us 86.7 p999_us 131.4\n'), {
    size: 16384,
    inFlight: 8,
    requests: 80000,
    gbps: 20.972,
    p50Us: 34.3,
    p90Us: 43,
    p99Us: 86.7,
    p999Us: 131.4,
  });
  assert.throws(() => parsePingPongOutput('size 16384 requests 1000 p50_us 21.8'), /expected 'size S requests N/);
  assert.throws(() => parsePingPongOutput('size 16384 in_flight 8 requests 1000 p50_us 21.8 p90_us 43.0 p99_us 86.7 p999_us 131.4'), /tcp-pingpong/);
  assert.throws(() => parsePingPongOutput(''), /tcp-pingpong/);
});

test('tcp-pingpong exchanges every request and prints ordered percentiles', async () => {
  const result = await tcpPingPong(4096, 0.02);
  assert.is(result.size, 4096);
  assert.ok(result.requests >= 1000);
  assert.ok(result.p50Us > 0 && result.p50Us <= result.p90Us && result.p90Us <= result.p99Us && result.p99Us <= result.p999Us, JSON.stringify(result));
});

test('tcp-pingpong with 8 in flight exchanges whole batches and states their time', async () => {
  const result = await tcpPingPong(4096, 0.02, 8);
  assert.is(result.size, 4096);
  assert.is(result.inFlight, 8);
  assert.ok(result.requests >= 800 && result.requests % 8 === 0, `${result.requests} requests`);
  assert.ok(result.gbps !== undefined && result.gbps > 0, JSON.stringify(result));
  assert.ok(result.p50Us > 0 && result.p50Us <= result.p99Us, JSON.stringify(result));
});

test('tcp-pingpong and vcpu-stalls refuse bad arguments as usage errors', async () => {
  for (const [name, args] of [
    ['tcp-pingpong', ['--size', '0']],
    ['tcp-pingpong', ['--requests', '5']],
    ['tcp-pingpong', ['--bogus']],
    ['tcp-pingpong', ['--in-flight', '0']],
    ['vcpu-stalls', ['--seconds', '0']],
    ['vcpu-stalls', ['--bogus', '1']],
  ] as const) {
    const run = await runProgram(buildC(name), [...args]);
    assert.is(run.code, 2, `${name} ${args.join(' ')}`);
    assert.match(run.stderr, /usage|--/);
  }
});

test('vcpu-stalls reports the gaps of a short busy loop', async () => {
  const run = await runProgram(buildC('vcpu-stalls'), ['--seconds', '0.1', '--threshold-us', '5']);
  assert.is(run.code, 0, run.stderr);
  assert.match(
    run.stdout.toString(),
    /^\d+ gaps over 5 us in 0\.1 s, [\d.]+ ms in all \([\d.]+ % of the time\); median gap [\d.]+ us; gaps of 20 us or more: \d+, median [\d.]+ ms apart, \d+ % of them within 2 % of that\n$/,
  );
});

test.run();
