// Every `kbtp` command answers at its door the same way (host/commands/command-line.ts):
// -h/--help prints its usage and exits 0; an unknown option or a missing value exits 2 with the
// parser's message and the usage. Run in-process through cli.ts's main(), with the console captured.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { main } from '../../host/cli.ts';

const COMMANDS: Array<{ argv: string[]; usage: RegExp }> = [
  { argv: ['target'], usage: /^usage: kbtp target/ },
  { argv: ['appliance'], usage: /^usage: kbtp appliance/ },
  { argv: ['tenant'], usage: /^usage: kbtp tenant/ },
  { argv: ['info'], usage: /^usage: kbtp info/ },
  { argv: ['put'], usage: /^usage: kbtp put/ },
  { argv: ['get'], usage: /^usage: kbtp get/ },
  { argv: ['free'], usage: /^usage: kbtp free/ },
  { argv: ['demo'], usage: /^usage: kbtp demo/ },
  { argv: ['bench'], usage: /^usage: kbtp bench/ },
  { argv: ['sram', 'dereg'], usage: /^usage: kbtp sram dereg/ },
];

/** Runs `kbtp ...argv` in this process; what it printed to stdout and stderr, and its exit code. */
async function run(argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const { log, error } = console;
  let stdout = '';
  let stderr = '';
  console.log = (...parts: unknown[]) => {
    stdout += `${parts.join(' ')}\n`;
  };
  console.error = (...parts: unknown[]) => {
    stderr += `${parts.join(' ')}\n`;
  };
  try {
    return { code: await main(argv), stdout, stderr };
  } finally {
    console.log = log;
    console.error = error;
  }
}

test('-h and --help print the usage to stdout and exit 0, for every command', async () => {
  for (const { argv, usage } of COMMANDS) {
    for (const flag of ['--help', '-h']) {
      const { code, stdout, stderr } = await run([...argv, flag]);
      const name = [...argv, flag].join(' ');
      assert.is(code, 0, name);
      assert.match(stdout, usage, name);
      assert.is(stderr, '', name);
    }
  }
});

test('an unknown option exits 2 naming it, with the usage, for every command', async () => {
  for (const { argv, usage } of COMMANDS) {
    const { code, stdout, stderr } = await run([...argv, '--no-such-option']);
    const name = argv.join(' ');
    assert.is(code, 2, name);
    assert.is(stdout, '', name);
    assert.ok(stderr.startsWith(`kbtp ${name}: Unknown option '--no-such-option'`), `${name}: ${stderr.slice(0, 120)}`);
    assert.match(stderr.split('\n\n').slice(1).join('\n\n'), usage, name);
  }
});

test('an option without its value exits 2 the same way', async () => {
  const { code, stderr } = await run(['target', '--listen']);
  assert.is(code, 2);
  assert.match(stderr, /^kbtp target: Option '--listen <value>' argument missing/);
  const client = await run(['get', '1', '--target']);
  assert.is(client.code, 2);
  assert.match(client.stderr, /^kbtp get: Option '--target <value>' argument missing/);
});

test.run();
