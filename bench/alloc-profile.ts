// Where the request path allocates: the V8 sampling heap profiler (collected objects included)
// over N LOADs of 1 KiB through KbtpSession.load(h, { into }) against a target served in this
// process over an in-memory stream pair, octets per LOAD by allocating function (both sides).
//
//   make build && node dist/bench/alloc-profile.js [loads 20000] [rows 30]
import { Session } from 'node:inspector/promises';
import { resolveTargetSettings } from '../firmware/config.ts';
import { connectChannel } from '../host/kbtp/initiator.ts';
import { InProcessTarget } from '../host/kbtp/server/in-process.ts';
import { LinkedChannel } from '../host/rnic/linked-channel.ts';

interface ProfileNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: ProfileNode[];
}

const loads = Number(process.argv[2] ?? 20_000);
const rows = Number(process.argv[3] ?? 30);
const settings = resolveTargetSettings({
  listen: '127.0.0.1:0',
  workers: 1,
  pool: { blockSize: 1024, blockCount: 64, handleCount: 256, maxInline: 1024 },
  session: { credits: 8 },
  tenants: [{ name: 'default', open: true, quota: 64 }],
} as never);
const target = new InProcessTarget(settings);
const [targetEnd, initiatorEnd] = LinkedChannel.pair();
const served = target.serve(targetEnd);
const session = await connectChannel(initiatorEnd, {});
await served;
await session.allocStore(1n, new Uint8Array(1024).fill(7), { seal: true });
const into = new Uint8Array(1024);
for (let i = 0; i < 20_000; i++) await session.load(1n, { into }); // warm-up
const inspector = new Session();
inspector.connect();
await inspector.post('HeapProfiler.startSampling', {
  samplingInterval: 256,
  includeObjectsCollectedByMajorGC: true,
  includeObjectsCollectedByMinorGC: true,
} as never);
for (let i = 0; i < loads; i++) await session.load(1n, { into });
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
console.log(`${(total / loads).toFixed(0)} octets allocated per 1 KiB LOAD (initiator and target, sampled)`);
for (const [site, size] of [...bySite].sort((a, b) => b[1] - a[1]).slice(0, rows)) console.log(`${(size / loads).toFixed(1).padStart(8)}  ${site}`);
await session.close(500);
await target.stop();
