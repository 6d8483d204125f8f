// kbtp's CPU per request alone (issue 16), the way `make compare` measures it (cpu.ts), repeated:
// for work on the client or the target between quiet-machine runs of make compare. CPU time,
// unlike wall time, stays usable on a shared machine; the load average is printed with each run.
//
//   make bench-build && node dist/bench/compare/cpu-kbtp.js [--requests 10000] [--runs 3]
//        [--size 16K] [--sessions 16] [--in-flight 1] [--batch] [--mix load|store] [--max-inline N]
//
// --mix store measures STOREs; their target takes Max Inline as make compare's spawned target
// does (whole blocks up to 1 MiB) unless --max-inline says otherwise; LOADs run against `kbtp
// target`'s defaults, as make compare's CPU measure does.
import { loadavg } from 'node:os';
import { parseCommandLine } from '../../host/commands/command-line.ts';
import { parseInteger, parseSizes, UsageError } from '../../host/bench/options.ts';
import { SPAWNED_MAX_INLINE } from '../../host/bench/spawn.ts';
import { kbtpCpuPerOp } from './cpu.ts';
import { repoRoot, stopAll } from './tools.ts';

async function main(): Promise<number> {
  const parsed = parseCommandLine(
    'bench/compare/cpu-kbtp',
    'usage: node dist/bench/compare/cpu-kbtp.js [--requests 10000] [--runs 3] [--size 16K] [--sessions 16] [--in-flight 1] [--batch] [--mix load|store] [--max-inline N]',
    process.argv.slice(2),
    {
      requests: { type: 'string' },
      runs: { type: 'string' },
      size: { type: 'string' },
      sessions: { type: 'string' },
      'in-flight': { type: 'string' },
      batch: { type: 'boolean' },
      mix: { type: 'string' },
      'max-inline': { type: 'string' },
    },
  );
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const requests = parseInteger(values.requests, '--requests', 10_000, 100);
  const runs = parseInteger(values.runs, '--runs', 3, 1);
  const [size = 16 * 1024] = parseSizes(values.size ?? '16K', '--size');
  const sessions = parseInteger(values.sessions, '--sessions', 16, 1);
  const inFlight = parseInteger(values['in-flight'], '--in-flight', 1, 1);
  const extra = values.batch === true ? ['--batch'] : [];
  const mix = values.mix ?? 'load';
  if (mix !== 'load' && mix !== 'store') throw new UsageError(`--mix: "${mix}" is not load or store`);
  // LOADs run against `kbtp target`'s defaults, as make compare's CPU measure does.
  const maxInline =
    values['max-inline'] !== undefined || mix === 'store'
      ? parseInteger(values['max-inline'], '--max-inline', Math.min(size, SPAWNED_MAX_INLINE), 0)
      : undefined;
  console.log(
    `kbtp ${mix.toUpperCase()} of ${size} octets${maxInline === undefined ? '' : ` (Max Inline ${maxInline})`}, ${sessions} sessions x ${inFlight} in flight${extra.length > 0 ? ' (batched)' : ''}: CPU per request from /proc, difference of ${requests} and ${3 * requests} requests`,
  );
  for (let run = 1; run <= runs; run++) {
    const before = loadavg()[0]!.toFixed(2);
    const figure = await kbtpCpuPerOp(repoRoot, requests, { size, sessions, inFlight, extra, mix, maxInline });
    console.log(`run ${run}: client ${figure.client_us} us, target ${figure.server_us} us (load ${before} -> ${loadavg()[0]!.toFixed(2)})`);
  }
  return 0;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  async (error: unknown) => {
    await stopAll();
    console.error(`cpu-kbtp: ${error instanceof Error ? error.message : String(error)}`);
    process.exitCode = 1;
  },
);
