// Compiles an AssemblyScript entry (a benchmark's kernels, a test's deliberately broken engine)
// the way `make wasm` compiles the engine: the options come from asconfig.json's shared options
// and its release target, so what is measured or tested is built like what ships.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import asc from 'assemblyscript/asc';
import { checkoutRoot } from './checkout-root.ts';

interface AsconfigOptions {
  runtime?: string;
  importMemory?: boolean;
  sharedMemory?: boolean;
  initialMemory?: number;
  maximumMemory?: number;
  enable?: string[];
  use?: string[];
  optimizeLevel?: number;
  shrinkLevel?: number;
  noAssert?: boolean;
}

interface Asconfig {
  options: AsconfigOptions;
  targets: { release: AsconfigOptions };
}

/** asconfig.json's release build as command-line flags (file names and bindings left out). */
export function releaseCompilerFlags(asconfigPath = join(checkoutRoot, 'asconfig.json')): string[] {
  const config = JSON.parse(readFileSync(asconfigPath, 'utf8')) as Asconfig;
  const options = { ...config.options, ...config.targets.release };
  const flags: string[] = [];
  if (options.runtime !== undefined) flags.push('--runtime', options.runtime);
  if (options.importMemory === true) flags.push('--importMemory');
  if (options.sharedMemory === true) flags.push('--sharedMemory');
  if (options.initialMemory !== undefined) flags.push('--initialMemory', String(options.initialMemory));
  if (options.maximumMemory !== undefined) flags.push('--maximumMemory', String(options.maximumMemory));
  if (options.enable !== undefined && options.enable.length > 0) flags.push('--enable', options.enable.join(','));
  for (const use of options.use ?? []) flags.push('--use', use);
  if (options.noAssert === true) flags.push('--noAssert');
  if (options.optimizeLevel !== undefined) flags.push(`-O${options.optimizeLevel}`);
  if (options.shrinkLevel !== undefined && options.shrinkLevel > 0) flags.push('--shrinkLevel', String(options.shrinkLevel));
  return flags;
}

/** Compiles `entry` to `outFile` with the release flags; throws with the compiler's output on failure. */
export async function compileRelease(entry: string, outFile: string, asconfigPath?: string): Promise<void> {
  const { error, stderr } = await asc.main([entry, '--outFile', outFile, ...releaseCompilerFlags(asconfigPath)]);
  if (error !== null) throw new Error(`compiling ${entry} failed: ${error.message}\n${String(stderr)}`);
}
