#!/usr/bin/env node
// The `kbtp` command. Each subcommand lives in host/commands/<name>.ts and is imported when it
// runs, so running one command does not load the others; `kbtp --help` imports them all for their
// one-line summaries.
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { exitCodeOf } from './errors.ts';

export interface Command {
  /** One line for `kbtp --help`. */
  readonly summary: string;
  /** Runs the command; resolves to the process exit code. */
  run(argv: string[]): Promise<number>;
}

const commands: Record<string, () => Promise<{ command: Command }>> = {
  target: () => import('./commands/target.ts'),
  appliance: () => import('./commands/appliance.ts'),
  tenant: () => import('./commands/tenant.ts'),
  info: () => import('./commands/info.ts'),
  put: () => import('./commands/put.ts'),
  get: () => import('./commands/get.ts'),
  free: () => import('./commands/free.ts'),
  demo: () => import('./commands/demo.ts'),
  sram: () => import('./commands/sram.ts'),
  bench: () => import('./commands/bench.ts'),
};

function usage(): string {
  return `usage: kbtp <command> [options]\n\ncommands: ${Object.keys(commands).join(', ')}\n\nRun 'kbtp --help' for what each does.`;
}

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    const lines = ['usage: kbtp <command> [options]', '', 'commands:'];
    for (const [commandName, load] of Object.entries(commands)) {
      const { command } = await load();
      lines.push(`  ${commandName.padEnd(12)} ${command.summary}`);
    }
    lines.push('', "Run 'kbtp <command> --help' for a command's options.");
    console.log(lines.join('\n'));
    return name === undefined ? 2 : 0;
  }
  const load = commands[name];
  if (load === undefined) {
    console.error(`kbtp: unknown command '${name}'\n\n${usage()}`);
    return 2;
  }
  const { command } = await load();
  return command.run(rest);
}

// Run when started as a program, also through a symlink such as node_modules/.bin/kbtp.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      // A command that did not handle an error itself: its KbtpError exit code (1 for anything else).
      console.error(`kbtp: ${error instanceof Error ? error.message : String(error)}`);
      process.exitCode = exitCodeOf(error);
    },
  );
}
