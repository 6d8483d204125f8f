// `kbtp sram`: help, JSON output shapes, charts written, and clear refusals of bad input.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { command } from '../../host/commands/sram.ts';

const dir = mkdtempSync(join(tmpdir(), 'kbtp-sram-cli-'));
const CLI = fileURLToPath(new URL('../../host/cli.ts', import.meta.url));

/** Runs the command in-process, capturing what it prints. */
async function run(argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const log = console.log;
  const error = console.error;
  const write = process.stderr.write;
  console.log = (...args: unknown[]) => void out.push(args.join(' '));
  console.error = (...args: unknown[]) => void err.push(args.join(' '));
  process.stderr.write = ((chunk: string | Uint8Array) => {
    err.push(String(chunk));
    return true;
  }) as typeof process.stderr.write;
  try {
    const code = await command.run(argv);
    return { code, stdout: out.join('\n'), stderr: err.join('\n') };
  } finally {
    console.log = log;
    console.error = error;
    process.stderr.write = write;
  }
}

test('kbtp sram --help lists the five experiments', async () => {
  const { code, stdout } = await run(['--help']);
  assert.is(code, 0);
  for (const name of ['dereg', 'qp-sweep', 'policies', 'kbtp-vs-per-block-mr', 'block-tier']) assert.match(stdout, new RegExp(`\\n  ${name} `));
  assert.is((await run([])).code, 2, 'no experiment named is a usage error');
});

test('every experiment has --help', async () => {
  for (const name of ['dereg', 'qp-sweep', 'policies', 'kbtp-vs-per-block-mr', 'block-tier']) {
    const { code, stdout } = await run([name, '--help']);
    assert.is(code, 0, name);
    assert.match(stdout, new RegExp(`^usage: kbtp sram ${name} \\[options\\]`));
    assert.match(stdout, /--out <dir>/);
    assert.match(stdout, /--json/);
  }
});

test("dereg --json prints exactly the issue's shape and writes its chart", async () => {
  const out = join(dir, 'dereg');
  const { code, stdout, stderr } = await run(['dereg', '--json', '--lines', '256', '--operations', '20000', '--warmup', '5000', '--out', out]);
  assert.is(code, 0, stderr);
  const json = JSON.parse(stdout) as Record<string, Record<string, number>>;
  assert.equal(Object.keys(json), ['victim_translation_miss_rate', 'victim_throughput']);
  for (const key of ['victim_translation_miss_rate', 'victim_throughput']) {
    assert.equal(Object.keys(json[key]!), ['alone', 'register', 'dereg']);
    for (const value of Object.values(json[key]!)) assert.type(value, 'number');
  }
  assert.ok(json.victim_translation_miss_rate!.dereg! > 2 * json.victim_translation_miss_rate!.alone!);
  assert.match(stderr, /\[sram dereg\] 3\/3 dereg/, 'progress goes to stderr');
  const svg = readFileSync(join(out, 'dereg.svg'), 'utf8');
  assert.match(svg, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
  assert.match(svg, /<\/svg>\n$/);
  assert.not.match(svg, /NaN|Infinity|undefined/);
});

test('the table form and every chart of the quick experiments', async () => {
  const out = join(dir, 'all');
  const runs: string[][] = [
    ['qp-sweep', '--lines', '128', '--qps', '16,64,512', '--messages', '3000'],
    ['policies', '--lines', '128', '--operations', '3000', '--warmup', '3000'],
    ['kbtp-vs-per-block-mr', '--lines', '128', '--requests', '200', '--pool-blocks', '500'],
    ['block-tier', '--capacities', '100,1000,unlimited', '--requests', '500', '--ways', '4'],
    ['dereg', '--lines', '128', '--operations', '3000', '--warmup', '1000', '--sweep'],
  ];
  for (const argv of runs) {
    const { code, stdout, stderr } = await run([...argv, '--out', out, '--quiet']);
    assert.is(code, 0, `${argv[0]}: ${stderr}`);
    assert.is(stderr, '', `${argv[0]}: --quiet leaves stderr empty`);
    assert.match(stdout, /\n-+ {2}-+/, `${argv[0]} prints a table`);
    assert.match(stdout, /chart/);
  }
  const charts = readdirSync(out).sort();
  assert.equal(charts, [
    'block-tier.svg',
    'dereg-sweep.svg',
    'dereg.svg',
    'kbtp-vs-per-block-mr-misses.svg',
    'kbtp-vs-per-block-mr.svg',
    'policies.svg',
    'qp-sweep-hit-rate.svg',
    'qp-sweep.svg',
  ]);
  for (const chart of charts) assert.not.match(readFileSync(join(out, chart), 'utf8'), /NaN|Infinity|undefined/, chart);
});

test('bad input is refused with a message that says what to fix', async () => {
  const cases: Array<[string[], RegExp]> = [
    [['nope'], /unknown experiment 'nope'/],
    [['dereg', '--bogus'], /Unknown option '--bogus'/],
    [['dereg', '--lines', '0'], /--lines must be a whole number from 1 to/],
    [['dereg', '--lines=-5'], /--lines must be a whole number from 1 to/],
    [['dereg', '--interval', 'often'], /--interval must be a whole number from 1 to/],
    [['qp-sweep', '--qps', '10,x'], /--qps must be a comma-separated list of whole numbers >= 1 \(bad item "x"\)/],
    [['dereg', '--config', join(dir, 'missing.json')], /missing\.json: cannot read the SRAM model config/],
    [['block-tier', '--trace', join(dir, 'none.jsonl')], /cannot read trace .*none\.jsonl/],
    [['dereg', '--seed=-1'], /--seed must be a whole number/],
  ];
  writeFileSync(join(dir, 'bad.json'), '{"lines": 100, "associativity": 8}');
  cases.push([['dereg', '--config', join(dir, 'bad.json')], /bad\.json: .*not a multiple of associativity 8/]);
  for (const [argv, message] of cases) {
    const { code, stderr } = await run([...argv, '--out', join(dir, 'unused'), '--quiet']);
    assert.is(code, 2, argv.join(' '));
    assert.match(stderr, message, argv.join(' '));
  }
  assert.not.ok(existsSync(join(dir, 'unused')), 'nothing written on a usage error');
});

test('--config sets the model the experiment uses', async () => {
  const config = join(dir, 'model.json');
  writeFileSync(config, JSON.stringify({ lines: 64, policy: 'hw-assisted' }));
  const { code, stdout } = await run(['qp-sweep', '--config', config, '--qps', '8', '--messages', '1000', '--out', dir, '--quiet', '--json']);
  assert.is(code, 0);
  const json = JSON.parse(stdout) as { lines: number; policy: string };
  assert.is(json.lines, 64);
  assert.is(json.policy, 'hw-assisted');
});

test('registered in the kbtp dispatcher', () => {
  const result = spawnSync(process.execPath, ['--import', 'tsx', CLI, 'sram', '--help'], { encoding: 'utf8' });
  assert.is(result.status, 0, result.stderr);
  assert.match(result.stdout, /^usage: kbtp sram <experiment>/);
});

test.after(() => rmSync(dir, { recursive: true, force: true }));

test.run();
