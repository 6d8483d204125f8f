// Runs the kbtp command line (host/cli.ts under tsx) as a script would: stdin in, stdout and
// stderr out, the exit code.
import { fileURLToPath } from 'node:url';
import { runProgram, type ProgramRun } from './program.ts';

export const cli = fileURLToPath(new URL('../../host/cli.ts', import.meta.url));

export function kbtp(args: string[], input?: Uint8Array, env: Record<string, string> = {}): Promise<ProgramRun> {
  return runProgram(process.execPath, ['--import', 'tsx', cli, ...args], input, env);
}
