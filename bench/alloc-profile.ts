// Where the request path allocates: the V8 sampling heap profiler (collected objects included)
// over N requests of 1 KiB against a target served in this process over an in-memory stream
// pair, octets per request by allocating function (both sides: the initiator, the target and
// both RNICs). Three drives:
//   load    KbtpSession.load(h, { into }) / store(h, data), one awaited request at a time (3:1)
//   many    loadMany/storeMany with caller buffers, batches of 8 (3:1)
//   target  a bare initiator QP (bench/hot-path-driver.ts), 8 in flight, LOAD:STORE 3:1: what
//           remains is the target's (connection, RNIC transmit and receive, engine calls)
//   socket  the target drive over a TCP connection on 127.0.0.1 (SocketChannel at both ends):
//           what the socket channel and Node's net module add (both ends' share)
//   callback  loadInto/storeFrom, each completion issuing the next call
//
//   make bench-build && node dist/bench/alloc-profile.js [load|many|callback|target|socket] [requests 20000] [rows 30]
import { Session } from 'node:inspector/promises';
import { resolveTargetSettings } from '../host/kbtp/server/target-config.ts';
import { connectChannel } from '../host/kbtp/initiator.ts';
import { InProcessTarget } from '../host/kbtp/server/in-process.ts';
import { LinkedChannel } from '../host/rnic/linked-channel.ts';
import { HotPathDriver } from './hot-path-driver.ts';

interface ProfileNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: ProfileNode[];
}

const mode = process.argv[2] ?? 'load';
const requests = Number(process.argv[3] ?? 20_000);
const rows = Number(process.argv[4] ?? 30);
const BATCH = 8;

/** Runs `count` requests of the chosen drive; resolves when all are answered. */
type Drive = (count: number) => Promise<void>;

async function sessionDrive(how: 'many' | 'load' | 'callback'): Promise<{ drive: Drive; close: () => Promise<void> }> {
  const settings = resolveTargetSettings({
    listen: '127.0.0.1:0',
    workers: 1,
    pool: { blockSize: 1024, blockCount: 64, handleCount: 256, maxInline: 64 },
    session: { credits: BATCH },
    tenants: [{ name: 'default', open: true, quota: 64 }],
  } as never);
  const target = new InProcessTarget(settings);
  const [targetEnd, initiatorEnd] = LinkedChannel.pair();
  const served = target.serve(targetEnd);
  const session = await connectChannel(initiatorEnd, { pipeline: BATCH });
  await served;
  const handles = Array.from({ length: BATCH }, (_, i) => BigInt(i + 1));
  const blocks = handles.map((_, i) => new Uint8Array(1024).fill(i + 1));
  const into = handles.map(() => new Uint8Array(1024));
  for (let i = 0; i < BATCH; i++) await session.allocStore(handles[i]!, blocks[i]!);
  const options = { allowUnsealed: true };
  // callback: loadInto/storeFrom, each completion issuing the next call (no promise per call).
  const callbacks: Drive = (count) =>
    new Promise<void>((resolve, reject) => {
      let issued = 0;
      const next = (error: Error | undefined): void => {
        if (error !== undefined) return reject(error);
        if (issued === count) return resolve();
        issued += 1;
        if (issued % 4 === 0) session.storeFrom(handles[0]!, blocks[0]!, next);
        else session.loadInto(handles[0]!, into[0]!, next, options);
      };
      next(undefined);
    });
  const drive: Drive =
    how === 'callback'
      ? callbacks
      : how === 'many'
        ? async (count) => {
            for (let i = 0; i < count / BATCH; i++) {
              if (i % 4 === 3) await session.storeMany(handles, blocks);
              else await session.loadMany(handles, into, options);
            }
          }
        : async (count) => {
            const loadOptions = { into: into[0]!, allowUnsealed: true };
            for (let i = 0; i < count; i++) {
              if (i % 4 === 3) await session.store(handles[0]!, blocks[0]!);
              else await session.load(handles[0]!, loadOptions);
            }
          };
  return {
    drive,
    close: async () => {
      await session.close(500);
      await target.stop();
    },
  };
}

async function targetDrive(overTcp: boolean): Promise<{ drive: Drive; close: () => Promise<void> }> {
  const driver = overTcp ? await HotPathDriver.openOverTcp(1024, BATCH) : await HotPathDriver.open(1024, BATCH);
  return {
    drive: async (count) => {
      await driver.run(count, 4);
      if (driver.failures > 0) throw new Error(`the drive failed: ${driver.firstFailure}`);
    },
    close: () => driver.close(),
  };
}

const chosen =
  mode === 'target' || mode === 'socket'
    ? await targetDrive(mode === 'socket')
    : mode === 'many' || mode === 'load' || mode === 'callback'
      ? await sessionDrive(mode)
      : undefined;
if (chosen === undefined) throw new Error(`unknown drive '${mode}': load, callback, many, target or socket`);
await chosen.drive(20_000); // warm-up: compile, grow queues to their working size
const inspector = new Session();
inspector.connect();
await inspector.post('HeapProfiler.startSampling', {
  samplingInterval: 256,
  includeObjectsCollectedByMajorGC: true,
  includeObjectsCollectedByMinorGC: true,
} as never);
await chosen.drive(requests);
const { profile } = (await inspector.post('HeapProfiler.stopSampling')) as unknown as { profile: { head: ProfileNode } };
const bySite = new Map<string, number>();
let total = 0;
const walk = (node: ProfileNode, parent: string): void => {
  const frame = node.callFrame;
  // Built-ins (subarray, slice...) are charged to their caller.
  const site =
    frame.url === '' && parent !== ''
      ? `${parent} > ${frame.functionName}`
      : `${frame.functionName || '(anonymous)'} ${frame.url.replace(/.*\/(host|bench|node:)/, '$1')}:${frame.lineNumber + 1}`;
  if (node.selfSize > 0) {
    bySite.set(site, (bySite.get(site) ?? 0) + node.selfSize);
    total += node.selfSize;
  }
  for (const child of node.children) walk(child, site);
};
walk(profile.head, '');
console.log(`${mode}: ${(total / requests).toFixed(0)} octets allocated per 1 KiB request, LOAD:STORE 3:1 (every side, sampled)`);
for (const [site, size] of [...bySite].sort((a, b) => b[1] - a[1]).slice(0, rows)) console.log(`${(size / requests).toFixed(1).padStart(8)}  ${site}`);
await chosen.close();
