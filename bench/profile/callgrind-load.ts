// Instructions per LOAD (or STORE, --op store), by side and by function: bench/profile/load-loop.ts
// (a target and a session in one process over an in-memory link, requests of one block chained;
// with --bench issued by kbtp bench's own workload, its check of each loaded block included) run twice under
// `valgrind --tool=callgrind`, with `--base` and with `--base + --loads` measured LOADs after the
// same warm-up; the difference of the two runs over `--loads` is what one LOAD costs in the steady
// state, start-up and JIT compilation cancelling out. JIT code is named from node's perf map.
// Instruction counts do not depend on the machine's load, where time per request moves by 30 %
// between runs (docs/notes/2026-12-02/issue-16-session10.md): judge small changes here.
//
// The initiator's code is loaded from a copy of dist/ (.cache/profile/initiator/), so each side's
// JavaScript is told apart by file; builtins and the runtime go to the sides in proportion to what
// their calls from each side's JavaScript cost (see callgrind-file.ts). 'link' is the in-memory
// stream joining the two (it stands in for the sockets: each end copies what it delivers once).
//
//   make bench-build && nice -n 19 node dist/bench/profile/callgrind-load.js [--loads 20000] [--top 40]
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { attribute, named, NO_JS_CALLER, parseCallgrind, PerfMap, perOperation, type CallgrindProfile } from './callgrind-file.ts';

const USAGE = `usage: node dist/bench/profile/callgrind-load.js [options]
  Instructions per LOAD (or STORE) of one block (both sides in one process), by side and by function,
  from two callgrind runs. Needs valgrind (Debian: apt-get install valgrind). Run it niced: a run takes minutes.
  --op OP       load (default) or store (a STORE of a registered buffer: inline up to 1 MiB)
  --bench       requests issued by kbtp bench's workload (host/bench/workload.ts, 1 in flight per
                session, every loaded block checked), its functions the side 'bench'; default: a bare
                chain of loadInto/storeFrom calls (side 'loop')
  --sessions N  sessions, requests spread over them as kbtp bench --sessions N does (--bench only; default 1)
  --in-flight N requests in flight per session, posted N at a time by loadMany/storeMany as make
                compare's pipelined rows run (kbtp bench --batch; --bench only; default 1)
  --warm N      requests before counting starts (default 20000: the hot path optimized)
  --base N      requests of the shorter run (default 5000)
  --loads N     requests the longer run does more; the per-request figures are the difference / N (default 20000)
  --size N      block size and request size in octets (default 16384)
  --crc         negotiate MPA CRCs (default off, as make compare runs)
  --shared      one copy of the code for both sides (no split by side)
  --top N       functions to list (default 40)
  --keep DIR    keep the callgrind outputs and perf maps in DIR
  --from DIR    no runs: read what --keep DIR kept (the same --base and --loads)
  --help        this text`;

const { values } = parseArgs({
  options: {
    warm: { type: 'string', default: '20000' },
    base: { type: 'string', default: '5000' },
    loads: { type: 'string', default: '20000' },
    size: { type: 'string', default: '16384' },
    op: { type: 'string', default: 'load' },
    bench: { type: 'boolean', default: false },
    sessions: { type: 'string', default: '1' },
    'in-flight': { type: 'string', default: '1' },
    crc: { type: 'boolean', default: false },
    shared: { type: 'boolean', default: false },
    top: { type: 'string', default: '40' },
    keep: { type: 'string' },
    from: { type: 'string' },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  console.log(USAGE);
  process.exit(0);
}
function count(name: string, text: string, min: number): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < min) {
    console.error(`--${name} must be an integer >= ${min} (got '${text}')\n\n${USAGE}`);
    process.exit(2);
  }
  return n;
}
const warm = count('warm', values.warm, 0);
const base = count('base', values.base, 1);
const loads = count('loads', values.loads, 1);
const size = count('size', values.size, 1);
const top = count('top', values.top, 0);
const sessions = count('sessions', values.sessions, 1);
const inFlight = count('in-flight', values['in-flight'], 1);
const op = values.op;
if (op !== 'load' && op !== 'store') {
  console.error(`--op must be load or store (got '${op}')\n\n${USAGE}`);
  process.exit(2);
}
if (sessions > 1 && !values.bench) {
  console.error(`--sessions needs --bench\n\n${USAGE}`);
  process.exit(2);
}
const OP = op.toUpperCase();

const from = values.from !== undefined ? resolve(values.from) : undefined;
if (from === undefined && spawnSync('valgrind', ['--version']).status !== 0) {
  console.error('callgrind-load: valgrind is not installed (Debian/Ubuntu: apt-get install valgrind)');
  process.exit(1);
}

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../../..');
const loop = join(here, 'load-loop.js');
if (!existsSync(loop)) {
  console.error(`callgrind-load: ${loop} is missing; run make bench-build first`);
  process.exit(1);
}
const work = values.keep !== undefined ? resolve(values.keep) : join(root, '.cache/profile');
if (from === undefined) mkdirSync(work, { recursive: true });

/** The initiator's copy of the build: inside the checkout, so that its packages resolve as the original's do. */
const INITIATOR_COPY = '.cache/profile/initiator';
let initiatorRoot: string | undefined;
if (!values.shared) {
  initiatorRoot = join(root, INITIATOR_COPY);
  if (from === undefined) {
    rmSync(initiatorRoot, { recursive: true, force: true });
    for (const part of ['host', 'assembly']) cpSync(join(root, 'dist', part), join(initiatorRoot, part), { recursive: true });
  }
}

function sideOf(name: string): string | undefined {
  if (!name.startsWith('JS:') && !name.startsWith('Script:')) return undefined;
  if (name.includes('/linked-channel.js')) return name.includes(`/${INITIATOR_COPY}/`) ? 'link (initiator end)' : 'link (target end)';
  // The loop's own callbacks: the application calling the initiator.
  if (name.includes('/dist/bench/')) return 'loop';
  // kbtp bench's workload (--bench): the application calling the initiator, on the client's thread.
  if (name.includes('/host/bench/')) return 'bench';
  if (initiatorRoot !== undefined && name.includes(`/${INITIATOR_COPY}/`)) return 'initiator';
  if (name.includes('/dist/')) return initiatorRoot === undefined ? 'kbtp' : 'target';
  return 'node';
}

async function run(measured: number): Promise<CallgrindProfile> {
  if (from !== undefined) {
    const map = new PerfMap(readFileSync(join(from, `perf.${measured}.map`), 'utf8'));
    return named(parseCallgrind(readFileSync(join(from, `callgrind.${measured}.out`), 'utf8')), map);
  }
  const out = join(work, `callgrind.${measured}.out`);
  const args = [
    '--tool=callgrind',
    '--compress-strings=no',
    '--compress-pos=no',
    `--callgrind-out-file=${out}`,
    process.execPath,
    '--perf-basic-prof',
    // No background compilation or GC threads: optimized code is installed at the same point of
    // every run. With them, how long the hot path ran in baseline code and generic inline caches
    // depended on thread timing under valgrind, by up to 9,000 instructions per LOAD between runs.
    '--single-threaded',
    // Fixed seeds: a random hash seed made start-up's prime search differ between runs by ~20M instructions.
    '--hash-seed=1',
    '--random-seed=1',
    '--expose-gc',
    // V8's memory reducer starts a full GC on a timer of wall time, which valgrind stretches ~50x:
    // its incremental marking fell into the counted requests (every pointer store through the
    // marking barrier, Builtins_RecordWriteSaveFP ~5,000 instructions per LOAD), where the same
    // loop run natively does no mark-compact at all (--trace-gc).
    '--no-memory-reducer',
    loop,
    '--warm',
    String(warm),
    '--loads',
    String(measured),
    '--size',
    String(size),
    '--op',
    op,
  ];
  if (values.bench) args.push('--bench', '--sessions', String(sessions), '--in-flight', String(inFlight));
  if (values.crc) args.push('--crc');
  if (initiatorRoot !== undefined) args.push('--initiator-root', initiatorRoot);
  const started = Date.now();
  process.stderr.write(`callgrind: ${warm} + ${measured} ${OP}s ... `);
  const child = spawn('valgrind', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  child.stderr.on('data', (chunk: Buffer) => {
    log += chunk.toString();
  });
  const status = await new Promise<number | null>((done) => child.on('close', done));
  if (status !== 0) {
    console.error(`\ncallgrind-load: the run failed (status ${status}):\n${log.slice(-3000)}`);
    process.exit(1);
  }
  process.stderr.write(`${((Date.now() - started) / 1000).toFixed(0)} s\n`);
  // valgrind runs node in its own process: the perf map carries that pid.
  const mapFile = `/tmp/perf-${child.pid}.map`;
  const map = new PerfMap(existsSync(mapFile) ? readFileSync(mapFile, 'utf8') : '');
  if (values.keep !== undefined) cpSync(mapFile, join(work, `perf.${measured}.map`));
  rmSync(mapFile, { force: true });
  const profile = named(parseCallgrind(readFileSync(out, 'utf8')), map);
  if (values.keep === undefined) rmSync(out, { force: true });
  return profile;
}

const a = await run(base);
const b = await run(base + loads);
const { total, bySide, jsBySide, byFunction } = attribute(perOperation(a, b, loads), { sideOf });

const n = (v: number): string => Math.round(v).toLocaleString('en-US').padStart(9);
console.log(
  `Instructions per ${OP} of ${size} octets (callgrind, ${warm} warm-up ${OP}s, runs of ${base} and ${base + loads}; ` +
    `${values.bench ? `kbtp bench's workload, ${sessions} session${sessions > 1 ? 's' : ''} x ${inFlight} in flight${inFlight > 1 ? ' (batched)' : ''}` : 'a bare chain'}; MPA CRC ${values.crc ? 'on' : 'off'})`,
);
console.log(`${n(total)}  all`);
const sides = [...bySide.entries()].sort((x, y) => y[1] - x[1]);
for (const [side, v] of sides) {
  const own = jsBySide.get(side);
  console.log(`${n(v)}  ${side}${own !== undefined ? `  (its JavaScript ${Math.round(own).toLocaleString('en-US')}, what that called the rest)` : ''}`);
}
if (bySide.has(NO_JS_CALLER)) console.log(`  (${NO_JS_CALLER}: the event loop, the microtask runner, GC and the JIT compiler)`);
console.log(`\nTop ${top} functions, own instructions per ${OP} (side, or 'shared' for code that is not JavaScript):`);
for (const [name, v] of [...byFunction.entries()].sort((x, y) => y[1] - x[1]).slice(0, top)) {
  console.log(`${n(v)}  ${name.replace(/file:\/\/\S*?\/(dist|\.cache\/profile\/initiator)\//, '')}`);
}
