// make compare's Redis latency client (bench/compare/redis-latency.c and .ts): its output parser,
// the row figures, and the compiled client against a scripted RESP server on 127.0.0.1: every
// request of a pipelined multi-connection run answered and timed, latency to the reply's LAST
// octet (a reply sent in two halves 40 ms apart is timed from before the first to after the
// second), and every malformed answer a clear error.
import net from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { buildRedisLatency, latencyResult, parseRedisLatencyOutput, redisRowFigures } from '../../bench/compare/redis-latency.ts';
import type { RedisResult } from '../../bench/compare/tools.ts';
import { runProgram } from '../support/program.ts';

test('the output parser reads every test and its latencies into histograms', () => {
  const text =
    'test SET requests 3 elapsed_ns 3000000 cpu_ns 1500000\n10000 9000\n20000 20000\n30000 1000\ntest GET requests 2 elapsed_ns 1000 cpu_ns 900\n5 5\n7 6\n';
  const tests = parseRedisLatencyOutput(text);
  const set = tests.get('SET');
  assert.ok(set !== undefined);
  assert.is(set.requests, 3);
  assert.is(set.complete.count, 3);
  assert.is(set.complete.maxNs, 30_000);
  assert.is(set.firstRead.minNs, 1000);
  const row = latencyResult('set', 1000, 1, 1, set);
  assert.is(row.opsPerSec, 1000); // 3 requests in 3 ms
  assert.is(row.gbps, (1000 * 1000 * 8) / 1e9);
  assert.ok(Math.abs(row.p50Us - 20) < 20 / 64, `p50 ${row.p50Us}`);
  // The client's own CPU: 1.5 ms over 3 requests in 3 ms of wall time.
  assert.is(set.cpuNs, 1_500_000);
  assert.is(row.clientUsPerOp, 500);
  assert.is(row.clientBusy, 0.5);
  assert.is(tests.get('GET')?.complete.count, 2);
});

test('a short, garbled or inconsistent output is an error, never fewer latencies', () => {
  assert.throws(() => parseRedisLatencyOutput('test GET requests 3 elapsed_ns 100 cpu_ns 50\n1 1\n2 2\n'), /printed 2 of 3/);
  assert.throws(() => parseRedisLatencyOutput('test GET requests 2 elapsed_ns 100 cpu_ns 50\n1 1\nx 2\n'), /not a number/);
  assert.throws(() => parseRedisLatencyOutput('GET 2 100\n'), /expected 'test NAME/);
  // A client without the CPU field (an old binary) is an error, not a row without the figure.
  assert.throws(() => parseRedisLatencyOutput('test GET requests 1 elapsed_ns 100\n1 1\n'), /expected 'test NAME requests N elapsed_ns E cpu_ns C'/);
  assert.throws(() => parseRedisLatencyOutput('test GET requests 1 elapsed_ns 100 cpu_ns x\n1 1\n'), /the CPU time is not a number/);
  assert.throws(() => parseRedisLatencyOutput('test GET requests 1 elapsed_ns 100 cpu_ns 50\n5 9\n'), /read first after its reply had ended/);
  assert.throws(() => parseRedisLatencyOutput('test GET requests 0 elapsed_ns 100 cpu_ns 50\n'), /ran no requests/);
  assert.throws(
    () => parseRedisLatencyOutput('test GET requests 1 elapsed_ns 100 cpu_ns 50\n1 1\ntest GET requests 1 elapsed_ns 100 cpu_ns 50\n1 1\n'),
    /reported twice/,
  );
});

test("a row takes the complete reply's latency and the better client's GB/s", () => {
  const result = (gbps: number, p50Us: number, p99Us: number): RedisResult => ({
    op: 'get',
    size: 16384,
    clients: 1,
    pipeline: 1,
    requests: 100,
    opsPerSec: 1,
    gbps,
    p50Us,
    p99Us,
  });
  assert.equal(redisRowFigures(result(2.5, 40, 90), result(2.0, 55, 120)), {
    redis_gbps: 2.5,
    redis_p50_us: 55,
    redis_p99_us: 120,
    redis_benchmark_p50_us: 40,
    redis_benchmark_p99_us: 90,
  });
  assert.is(redisRowFigures(result(2.0, 40, 90), result(2.25, 55, 120)).redis_gbps, 2.25);
});

interface Script {
  /** The answer to one command (its arguments), as octets sent in order, with a pause before each part after the first. */
  answer(command: Buffer[]): { parts: Buffer[]; pauseMs: number };
}

interface ScriptedServer {
  port: number;
  commands: string[];
  close(): Promise<void>;
}

/** A RESP server on 127.0.0.1 that answers each command by `script`, in order per connection. */
async function scriptedServer(script: Script): Promise<ScriptedServer> {
  const commands: string[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    let pending = Buffer.alloc(0);
    let answering = Promise.resolve();
    socket.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      for (;;) {
        const parsed = parseCommand(pending);
        if (parsed === undefined) break;
        pending = pending.subarray(parsed.used);
        commands.push(parsed.args.map((arg) => (arg.length > 32 ? `<${arg.length} octets>` : arg.toString())).join(' '));
        const { parts, pauseMs } = script.answer(parsed.args);
        answering = answering.then(async () => {
          for (let i = 0; i < parts.length; i++) {
            if (i > 0) await new Promise((resolve) => setTimeout(resolve, pauseMs));
            if (!socket.destroyed) socket.write(parts[i] ?? Buffer.alloc(0));
          }
        });
      }
    });
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return {
    port: address.port,
    commands,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/** One RESP command (an array of bulk strings) from the front of `buffer`, or undefined if incomplete. */
function parseCommand(buffer: Buffer): { args: Buffer[]; used: number } | undefined {
  const lineEnd = (from: number): number => buffer.indexOf('\r\n', from);
  let at = lineEnd(0);
  if (at < 0) return undefined;
  const count = Number(buffer.subarray(1, at).toString());
  let position = at + 2;
  const args: Buffer[] = [];
  for (let i = 0; i < count; i++) {
    at = lineEnd(position);
    if (at < 0) return undefined;
    const length = Number(buffer.subarray(position + 1, at).toString());
    const start = at + 2;
    if (buffer.length < start + length + 2) return undefined;
    args.push(buffer.subarray(start, start + length));
    position = start + length + 2;
  }
  return { args, used: position };
}

async function runClient(port: number, args: string[]): Promise<{ code: number; out: string; err: string }> {
  const run = await runProgram(buildRedisLatency(), ['--port', String(port), ...args]);
  return { code: run.code, out: run.stdout.toString(), err: run.stderr };
}

/** A Redis of one key: SET stores, GET answers the value, each answer in one part. */
function honest(split?: { at: number; pauseMs: number }): Script {
  let value: Buffer | undefined;
  return {
    answer(command) {
      const name = command[0]?.toString();
      if (name === 'SET') {
        value = Buffer.from(command[2] ?? Buffer.alloc(0));
        return { parts: [Buffer.from('+OK\r\n')], pauseMs: 0 };
      }
      if (value === undefined) return { parts: [Buffer.from('$-1\r\n')], pauseMs: 0 };
      const reply = Buffer.concat([Buffer.from(`$${value.length}\r\n`), value, Buffer.from('\r\n')]);
      if (split === undefined) return { parts: [reply], pauseMs: 0 };
      return { parts: [reply.subarray(0, split.at), reply.subarray(split.at)], pauseMs: split.pauseMs };
    },
  };
}

test('pipelined over several connections: every request is sent, answered and timed once', async () => {
  const server = await scriptedServer(honest());
  try {
    // 10 requests over 2 connections x 3 in flight: batches of 3, 3, 3 and a last one of 1.
    const run = await runClient(server.port, ['--tests', 'set,get', '--size', '70000', '--clients', '2', '--pipeline', '3', '--requests', '10']);
    assert.is(run.code, 0, run.err);
    const tests = parseRedisLatencyOutput(run.out);
    assert.is(tests.get('SET')?.complete.count, 10);
    assert.is(tests.get('GET')?.complete.count, 10);
    // The client timed its own CPU over each test: some, and no more than the test's wall time.
    for (const name of ['SET', 'GET']) {
      const measured = tests.get(name);
      assert.ok(
        measured !== undefined && measured.cpuNs > 0 && measured.cpuNs <= measured.elapsedNs,
        `${name} cpu ${measured?.cpuNs} of ${measured?.elapsedNs} ns`,
      );
    }
    assert.is(server.commands.filter((command) => command === 'SET key:__rand_int__ <70000 octets>').length, 10);
    assert.is(server.commands.filter((command) => command === 'GET key:__rand_int__').length, 10);
    assert.is(server.commands.length, 20);
  } finally {
    await server.close();
  }
});

test("a GET alone stores its value first; latency runs to the reply's last octet, not its first read", async () => {
  // The reply's first 100 octets go at once, the rest 40 ms later: a first-read clock stops early.
  const server = await scriptedServer(honest({ at: 100, pauseMs: 40 }));
  try {
    const run = await runClient(server.port, ['--tests', 'get', '--size', '5000', '--requests', '3']);
    assert.is(run.code, 0, run.err);
    assert.is(server.commands[0], 'SET key:__rand_int__ <5000 octets>');
    const get = parseRedisLatencyOutput(run.out).get('GET');
    assert.ok(get !== undefined);
    assert.is(get.complete.count, 3);
    assert.ok(get.complete.minNs >= 40e6, `every GET timed to its last octet (shortest ${get.complete.minNs} ns)`);
  } finally {
    await server.close();
  }
});

for (const [what, reply, message] of [
  ['an error reply', '-ERR out of memory\r\n', /Redis answered an error: ERR out of memory/],
  ['a missing value', '$-1\r\n', /no value for the key/],
  ['a value of another length', '$3\r\nabc\r\n', /another length: \$3/],
  ['a simple string to GET', '+OK\r\n', /expected a bulk string/],
  ['a bulk string without its CRLF', '$4\r\nxxxxAB', /does not end in CRLF/],
  ['a garbled length', '$4x\r\nxxxx\r\n', /malformed bulk length/],
  ['a line without CR', '$4\nxxxx\r\n', /malformed reply line/],
] as const) {
  test(`${what} from the server is a clear error, exit status 1`, async () => {
    const server = await scriptedServer({
      answer: (command) => ({ parts: [Buffer.from(command[0]?.toString() === 'SET' ? '+OK\r\n' : reply)], pauseMs: 0 }),
    });
    try {
      const run = await runClient(server.port, ['--tests', 'set,get', '--size', '4', '--requests', '2']);
      assert.is(run.code, 1);
      assert.match(run.err, message);
    } finally {
      await server.close();
    }
  });
}

test('bad options are usage errors (status 2); --help explains', async () => {
  const bad = await runClient(1, ['--clients', '0']);
  assert.is(bad.code, 2);
  assert.match(bad.err, /--clients must be an integer from 1/);
  const help = await runClient(1, ['--help']);
  assert.is(help.code, 0);
  assert.match(help.err, /usage: redis-latency --port P/);
});

test.run();
