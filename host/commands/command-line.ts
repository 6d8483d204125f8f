// The preamble every `kbtp` command (and every benchmark script) shares: parse the options, answer
// -h/--help with the usage, and refuse an unknown or malformed option with its message and the
// usage, so that each program behaves the same way at its door.
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { EXIT_OK, EXIT_USAGE } from '../errors.ts';

type Options = NonNullable<ParseArgsConfig['options']>;

/** Every command takes -h/--help. */
export const HELP_OPTION = { help: { type: 'boolean', short: 'h' } } as const satisfies Options;

export type CommandLine<O extends Options> = ReturnType<
  typeof parseArgs<{ args: string[]; options: O & typeof HELP_OPTION; allowPositionals: boolean; strict: true }>
>;

/**
 * Parses `argv` for `program` (as its messages name it, e.g. "kbtp sram dereg"). Returns the
 * values and positionals, or the exit code the command returns at once: 0 after printing `usage`
 * for --help, 2 after printing the parse error and `usage` to standard error.
 */
export function parseCommandLine<O extends Options>(
  program: string,
  usage: string,
  argv: string[],
  options: O,
  { allowPositionals = false }: { allowPositionals?: boolean } = {},
): CommandLine<O> | number {
  let parsed: CommandLine<O>;
  try {
    parsed = parseArgs({ args: argv, options: { ...options, ...HELP_OPTION }, allowPositionals, strict: true });
  } catch (error) {
    console.error(`${program}: ${(error as Error).message}\n\n${usage}`);
    return EXIT_USAGE;
  }
  if ((parsed.values as { help?: boolean }).help === true) {
    console.log(usage);
    return EXIT_OK;
  }
  return parsed;
}
