// One row of the durable tier's benchmark (bench/tier.ts) with the target's CPU time listed by
// thread, to see where a STORE's CPU goes: the main thread (the tier's group commit), the workers
// (the RNIC, CRC32C of seals, the staging -> pool copy), libuv's threads (the file writes and
// syncs) and V8's (garbage collection, compilation). Node 20 names every thread "node", so they
// are told apart by what they do: the workers have the most user time, libuv's threads almost
// only system time. Also prints the tier's group commits and fsyncs per record. With --perf FILE,
// perf records the target over the measured pass and the row ends with each thread's CPU per STORE
// by kind of work (bench/tier-profile.ts; run node with --perf-basic-prof to name JS frames).
//
//   node [--perf-basic-prof] dist/bench/tier-row.js [--size 262144] [--mib 1024] [--volatile] [--warmup N] [--perf FILE]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseCommandLine } from '../host/commands/command-line.ts';
import { CREDITS, storeRun } from './tier-store-run.ts';
import { TargetProfile } from './tier-profile.ts';
import { checkoutRoot } from './checkout-root.ts';

const parsed = parseCommandLine(
  'bench/tier-row',
  'usage: node dist/bench/tier-row.js [--size OCTETS (default 262144)] [--mib N (MiB stored, default 1024)] [--volatile (no durable tier)] [--dir PATH (default .cache/bench-tier-row)] [--warmup N (warm-up passes; default as bench/tier: enough for 4,096 STOREs, at least 2)] [--in-flight N (requests in flight per session, 1-16; default as bench/tier: 64 MiB in all, 16 at 256 KiB, 4 at 1 MiB)] [--perf FILE (perf record the target over the measured pass, print CPU per STORE by kind of work)]',
  process.argv.slice(2),
  {
    size: { type: 'string', default: '262144' },
    mib: { type: 'string', default: '1024' },
    volatile: { type: 'boolean', default: false },
    dir: { type: 'string' },
    warmup: { type: 'string' },
    'in-flight': { type: 'string' },
    perf: { type: 'string' },
  },
);
if (typeof parsed === 'number') process.exit(parsed);
const { values } = parsed;
const size = Number(values.size);
const mib = Number(values.mib);
const warmup = values.warmup === undefined ? undefined : Number(values.warmup);
const inFlight = values['in-flight'] === undefined ? undefined : Number(values['in-flight']);
if (
  !Number.isInteger(size) ||
  size < 4096 ||
  !Number.isFinite(mib) ||
  mib <= 0 ||
  (warmup !== undefined && !(Number.isInteger(warmup) && warmup >= 0)) ||
  (inFlight !== undefined && !(Number.isInteger(inFlight) && inFlight >= 1 && inFlight <= CREDITS))
) {
  console.error(
    `bench/tier-row: --size takes a block size in octets (at least 4096), --mib a positive number of MiB, --warmup a number of passes (0 or more), --in-flight a number of requests per session (1 to ${CREDITS}, the sessions' credits)`,
  );
  process.exit(2);
}
const root = checkoutRoot;
const dir = values.dir ?? path.join(root, '.cache', 'bench-tier-row');
fs.rmSync(dir, { recursive: true, force: true });
fs.mkdirSync(dir, { recursive: true });
try {
  const profile = values.perf === undefined ? undefined : new TargetProfile(values.perf);
  const run = await storeRun(size, mib * 2 ** 20, values.volatile ? undefined : dir, {
    threads: true,
    ...(warmup === undefined ? {} : { warmupPasses: warmup }),
    ...(inFlight === undefined ? {} : { inFlight }),
    ...(profile === undefined ? {} : { measuredPass: profile }),
  });
  const us = (n: number): string => n.toFixed(0);
  console.log(
    `${values.volatile ? 'volatile' : 'persistent'} STORE of ${size} octets x ${mib} MiB, 16 sessions x ${run.inFlight} in flight, after ${run.warmupPasses} warm-up passes: ${run.gbps.toFixed(3)} Gbit/s;` +
      ` CPU per STORE: target ${us(run.targetCpuUs)} us, clients ${us(run.clientCpuUs)} us; load ${os.loadavg()[0]?.toFixed(1)}`,
  );
  for (const thread of run.threads ?? [])
    console.log(
      `  ${thread.main ? 'main thread' : `thread ${thread.tid}`} (${thread.name}): ${us(thread.userUs)} us user + ${us(thread.systemUs)} us system per STORE, context switches ${thread.voluntary.toFixed(2)} + ${thread.involuntary.toFixed(2)} involuntary`,
    );
  console.log(
    `  the measured pass: ${run.seconds.toFixed(3)} s; its first session was done at ${run.firstSessionSeconds.toFixed(3)} s (${((100 * run.firstSessionSeconds) / run.seconds).toFixed(0)} %), the others after`,
  );
  for (const [index, worker] of (run.workers ?? []).entries())
    console.log(
      `  worker ${index + 1}: ${worker.sessions} sessions, ${worker.stores} STOREs, mean STORE ${us(worker.meanStoreUs)} us (request in to COMPLETION out)`,
    );
  const threads = run.threads ?? [];
  if (threads.length > 0) {
    const voluntary = threads.reduce((total, t) => total + t.voluntary, 0);
    const involuntary = threads.reduce((total, t) => total + t.involuntary, 0);
    console.log(`  context switches per STORE, all threads: ${voluntary.toFixed(2)} voluntary + ${involuntary.toFixed(2)} involuntary`);
  }
  const durable = run.durable;
  if (durable !== undefined && durable.batchRecords > 0)
    console.log(
      `  tier (whole run, warm-up included): ${durable.groupCommits} group commits, ${durable.batchRecords} records, ${(durable.fsyncs / durable.batchRecords).toFixed(2)} fsyncs per record, largest group ${durable.batchLargest}, groups by size [1, 2-3, 4-7, 8-15, 16-31, 32+]: ${durable.batchHistogram.join(', ')}`,
    );
  const groups = run.measuredGroups;
  if (groups !== undefined && groups.groupCommits > 0) {
    const wallMs = run.seconds * 1000;
    console.log(
      `  group commit over the measured pass: ${groups.groupCommits} groups of ${(groups.records / groups.groupCommits).toFixed(1)} records, syncs ${(groups.syncMilliseconds / groups.groupCommits).toFixed(2)} ms each,` +
        ` ${((wallMs - groups.syncMilliseconds) / groups.groupCommits).toFixed(2)} ms between them; syncs in flight ${((100 * groups.syncMilliseconds) / wallMs).toFixed(0)} % of the pass`,
    );
  }
  if (profile !== undefined) for (const line of profile.summary(run.stores, process.pid)) console.log(line);
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
