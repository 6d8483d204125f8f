// What bench/profile/callgrind-load.ts runs under valgrind: a target served in this process and
// one session over an in-memory LinkedChannel pair, a registered buffer, and LOADs (or STOREs,
// `--op store`) of one block chained one after another (each completion issues the next),
// `--warm` of them and then `--loads` more; then the process exits. No timing: callgrind counts
// instructions.
//
// With `--bench` the requests are issued by kbtp bench's own workload (host/bench/workload.ts
// runPhase, a LOAD-only or STORE-only phase of `--sessions` sessions x 1 in flight, as `kbtp
// bench --spawn --sessions N --in-flight 1` runs it): the client then includes the bench's
// per-request work (the check of each loaded block, the stamp of each stored one, the latency
// record), as in make compare's rows. The target is configured as `kbtp bench --spawn` configures
// it (inline STOREs up to 1 MiB). `--in-flight N` (with --bench) runs make compare's pipelined
// rows: each session posts N requests at a time through loadMany/storeMany (kbtp bench --batch).
//
// With `--initiator-root DIR` the initiator's modules (session, its RNIC, its end of the link)
// are imported from a copy of dist/ in DIR instead of from this build, so that the code each side
// runs is a function of its own in callgrind's output and the perf map (a file name under DIR or
// not). That is also what the deployment has: two processes, each with its own copy of the RNIC
// code, whose inline caches see one side's objects only.
//
//   node dist/bench/profile/load-loop.js --warm 20000 --loads 5000 [--op load|store] [--bench [--sessions N] [--in-flight N]] [--size 16384] [--crc] [--initiator-root DIR]
import { parseArgs } from 'node:util';
import { resolveTargetSettings } from '../../host/kbtp/server/target-config.ts';
import { InProcessTarget } from '../../host/kbtp/server/in-process.ts';
import { LinkedChannel } from '../../host/rnic/linked-channel.ts';
import { SPAWNED_MAX_INLINE } from '../../host/bench/spawn.ts';
import type * as Initiator from '../../host/kbtp/initiator.ts';
import type * as Workload from '../../host/bench/workload.ts';

const USAGE = `usage: node dist/bench/profile/load-loop.js --warm N --loads N [--op load|store] [--bench [--sessions N] [--in-flight N]] [--size OCTETS] [--crc] [--initiator-root DIR]
  Chained LOADs or STOREs of one block (both sides in this process), for instruction counting; see bench/profile/callgrind-load.ts.`;

const { values } = parseArgs({
  options: {
    warm: { type: 'string', default: '20000' },
    loads: { type: 'string', default: '5000' },
    size: { type: 'string', default: '16384' },
    op: { type: 'string', default: 'load' },
    bench: { type: 'boolean', default: false },
    sessions: { type: 'string', default: '1' },
    'in-flight': { type: 'string', default: '1' },
    crc: { type: 'boolean', default: false },
    'initiator-root': { type: 'string' },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  console.log(USAGE);
  process.exit(0);
}
const count = (name: string, text: string, min: number): number => {
  const n = Number(text);
  if (!Number.isInteger(n) || n < min) {
    console.error(`--${name} must be an integer >= ${min} (got '${text}')\n${USAGE}`);
    process.exit(2);
  }
  return n;
};
const warm = count('warm', values.warm, 0);
const loads = count('loads', values.loads, 1);
const size = count('size', values.size, 1);
const sessionCount = count('sessions', values.sessions, 1);
const inFlight = count('in-flight', values['in-flight'], 1);
const op = values.op;
if (op !== 'load' && op !== 'store') {
  console.error(`--op must be load or store (got '${op}')\n${USAGE}`);
  process.exit(2);
}
if ((sessionCount > 1 || inFlight > 1) && !values.bench) {
  console.error(`--sessions and --in-flight need --bench\n${USAGE}`);
  process.exit(2);
}

/** The two halves of the link: each side's end from its own copy of the code when there are two. */
interface LinkEnd {
  peer: unknown;
}

async function linkPair(initiatorRoot: string | undefined): Promise<[LinkedChannel, LinkedChannel]> {
  if (initiatorRoot === undefined) return LinkedChannel.pair();
  const copy = (await import(`${initiatorRoot}/host/rnic/linked-channel.js`)) as { LinkedChannel: typeof LinkedChannel };
  // Each end from its side's module (each brackets its deliveries in its own module's turn, as a
  // socket channel would in its own process); joined to each other as pair() joins two ends.
  // The ends left over are never used (destroying one would close its former peer).
  const [targetEnd] = LinkedChannel.pair();
  const [, initiatorEnd] = copy.LinkedChannel.pair();
  (targetEnd as unknown as LinkEnd).peer = initiatorEnd;
  (initiatorEnd as unknown as LinkEnd).peer = targetEnd;
  return [targetEnd, initiatorEnd];
}

const initiatorRoot = values['initiator-root'];
const initiator = (
  initiatorRoot === undefined ? await import('../../host/kbtp/initiator.ts') : await import(`${initiatorRoot}/host/kbtp/initiator.js`)
) as typeof Initiator;

const blockCount = 16 + sessionCount * inFlight;
const settings = resolveTargetSettings({
  listen: '127.0.0.1:0',
  workers: 1,
  // As spawnTarget (host/bench/spawn.ts) sizes a kbtp bench target: a STORE of a block goes inline.
  pool: { blockSize: size, blockCount, handleCount: blockCount * 4, maxInline: Math.min(SPAWNED_MAX_INLINE, size) },
  session: { credits: Math.max(8, inFlight) },
  tenants: [{ name: 'local', open: true, quota: blockCount }],
} as never);
const target = new InProcessTarget(settings);
const sessions: Initiator.KbtpSession[] = [];
for (let i = 0; i < sessionCount; i++) {
  const [targetEnd, initiatorEnd] = await linkPair(initiatorRoot);
  const served = target.serve(targetEnd);
  // A pipeline of --in-flight, as kbtp bench opens its sessions.
  sessions.push(await initiator.connectChannel(initiatorEnd, { tenant: 'local', pipeline: values.bench ? inFlight : 8, crc: values.crc }));
  await served;
}
const session = sessions[0]!;

/** N requests through kbtp bench's workload (a --count run: prefill, the requests, cleanup). */
async function benchRun(n: number): Promise<void> {
  const workload = (
    initiatorRoot === undefined ? await import('../../host/bench/workload.ts') : await import(`${initiatorRoot}/host/bench/workload.js`)
  ) as typeof Workload;
  const result = await workload.runPhase({
    sessions,
    size,
    phase: [{ op: op as 'load' | 'store', weight: 1 }],
    inFlight,
    keysPerSession: inFlight,
    firstHandle: session.hello.storeFirst,
    count: n,
    // As make compare runs more than one in flight (bench/compare/compare.ts): loadMany/storeMany.
    batched: inFlight > 1,
  });
  for (const entry of result.ops) {
    if (entry.errorCount > 0 || entry.corrupt > 0) throw new Error(`${entry.op}: ${entry.firstProblem ?? 'failed'}`);
  }
}

const into = new Uint8Array(size);
const handle = session.hello.storeFirst;
if (!values.bench) {
  session.registerLoadBuffer(into);
  // A sealed block cannot be stored again (SEALED): sealed for LOADs only, as kbtp bench seals.
  await session.allocStore(handle, new Uint8Array(size).fill(0x5a), { seal: op === 'load' });
  if (op === 'store') into.fill(0x5a);
}

function chain(n: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let left = n;
    const done = (error?: Error): void => {
      if (error !== undefined) return reject(error);
      if (--left > 0) issue();
      else resolve();
    };
    const issue = op === 'load' ? (): void => session.loadInto(handle, into, done) : (): void => session.storeFrom(handle, into, done);
    issue();
  });
}
const run = values.bench ? benchRun : chain;

if (warm > 0) {
  if (values.bench) {
    // In two phases: the first phase's end (its cleanup's FREEs) and the next one's start (its
    // prefill's ALLOC_STOREs) deoptimize hot functions compiled without feedback for those paths
    // (turn finish, settle, answered, readBuffer, placeTagged: "insufficient type feedback"), and
    // they were optimized again only thousands of requests into the next phase: inside the
    // counted requests of the longer run and not the shorter's. After a second phase the code
    // has seen both.
    await run(Math.ceil(warm / 2));
    await run(Math.floor(warm / 2));
  } else await run(warm);
}
// A full collection before counting (node --expose-gc): otherwise a major GC's incremental marking
// could be running in one run's counted requests and not in the other's, and its write barriers alone
// added ~10,000 instructions per LOAD to one run (Builtins_RecordWriteSaveFP).
(globalThis as { gc?: () => void }).gc?.();
await run(loads);
if (!values.bench && (into[0] !== 0x5a || into[size - 1] !== 0x5a)) throw new Error('the loaded block is not the stored one');
// Straight out: closing adds instructions that would not cancel between two runs' counts exactly.
process.exit(0);
