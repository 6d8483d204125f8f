// What bench/profile/callgrind-load.ts runs under valgrind: a target served in this process and
// one session over an in-memory LinkedChannel pair, a registered LOAD buffer, and LOADs of one
// block chained one after another (each completion issues the next), `--warm` of them and then
// `--loads` more; then the process exits. No timing: callgrind counts instructions.
//
// With `--initiator-root DIR` the initiator's modules (session, its RNIC, its end of the link)
// are imported from a copy of dist/ in DIR instead of from this build, so that the code each side
// runs is a function of its own in callgrind's output and the perf map (a file name under DIR or
// not). That is also what the deployment has: two processes, each with its own copy of the RNIC
// code, whose inline caches see one side's objects only.
//
//   node dist/bench/profile/load-loop.js --warm 20000 --loads 5000 [--size 16384] [--crc] [--initiator-root DIR]
import { parseArgs } from 'node:util';
import { resolveTargetSettings } from '../../host/kbtp/server/target-config.ts';
import { InProcessTarget } from '../../host/kbtp/server/in-process.ts';
import { LinkedChannel } from '../../host/rnic/linked-channel.ts';
import type * as Initiator from '../../host/kbtp/initiator.ts';

const USAGE = `usage: node dist/bench/profile/load-loop.js --warm N --loads N [--size OCTETS] [--crc] [--initiator-root DIR]
  Chained LOADs of one block (both sides in this process), for instruction counting; see bench/profile/callgrind-load.ts.`;

const { values } = parseArgs({
  options: {
    warm: { type: 'string', default: '20000' },
    loads: { type: 'string', default: '5000' },
    size: { type: 'string', default: '16384' },
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

const settings = resolveTargetSettings({
  listen: '127.0.0.1:0',
  workers: 1,
  pool: { blockSize: size, blockCount: 64, handleCount: 256, maxInline: 64 },
  session: { credits: 8 },
  tenants: [{ name: 'local', open: true, quota: 64 }],
} as never);
const target = new InProcessTarget(settings);
const [targetEnd, initiatorEnd] = await linkPair(initiatorRoot);
const served = target.serve(targetEnd);
const session = await initiator.connectChannel(initiatorEnd, { tenant: 'local', pipeline: 8, crc: values.crc });
await served;
const into = new Uint8Array(size);
session.registerLoadBuffer(into);
const handle = 1n;
await session.allocStore(handle, new Uint8Array(size).fill(0x5a), { seal: true });

function chain(n: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let left = n;
    const done = (error?: Error): void => {
      if (error !== undefined) return reject(error);
      if (--left > 0) session.loadInto(handle, into, done);
      else resolve();
    };
    session.loadInto(handle, into, done);
  });
}

if (warm > 0) await chain(warm);
// A full collection before counting (node --expose-gc): otherwise a major GC's incremental marking
// could be running in one run's counted LOADs and not in the other's, and its write barriers alone
// added ~10,000 instructions per LOAD to one run (Builtins_RecordWriteSaveFP).
(globalThis as { gc?: () => void }).gc?.();
await chain(loads);
if (into[0] !== 0x5a || into[size - 1] !== 0x5a) throw new Error('the loaded block is not the stored one');
// Straight out: closing adds instructions that would not cancel between two runs' counts exactly.
process.exit(0);
