// Runs a program as a script would: stdin in, stdout and stderr out, the exit code (-1 when a
// signal ended it).
import { spawn } from 'node:child_process';

export interface ProgramRun {
  code: number;
  stdout: Buffer;
  stderr: string;
}

export function runProgram(command: string, args: string[], input?: Uint8Array, env: Record<string, string> = {}): Promise<ProgramRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { env: { ...process.env, ...env } });
    const out: Buffer[] = [];
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? -1, stdout: Buffer.concat(out), stderr: err }));
    // A program may end without reading its input (a usage error, --help): the pipe's EPIPE is no error of the run.
    child.stdin.on('error', () => undefined);
    if (input === undefined) child.stdin.end();
    else child.stdin.end(input);
  });
}
