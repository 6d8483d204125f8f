// The durable tier (docs/TIER.md): persistent STORE (sealed, answered after the tier's group
// commit) against volatile STORE (DRAM only) with 16 sessions (in a client process of their own,
// bench/tier-load.ts) at 256 KiB and 1 MiB, fio writing
// the same sizes to the same file system with an fdatasync every 8 writes in the same run,
// recovery of a 100,000-block index, and the p99 of a LOAD that promotes a block from the tier.
// Steady state on both sides: the clients store and free their blocks in warm-up passes before the
// measured pass (enough for 4,096 STOREs, at least two: the target's JavaScript compiled by V8, its
// memory touched), and fio overwrites a file it laid out first, so that neither measures the first
// touch of fresh memory (on a virtual machine that costs more than the write itself) nor V8's
// compiler at work (docs/TIER.md). Both rows, persistent and volatile, are warmed up alike.
// The sessions keep the same bytes in flight at every size (64 MiB: 16 requests each at 256 KiB, 4 at
// 1 MiB; BYTES_IN_FLIGHT in bench/tier-store-run.ts), persistent and volatile alike; until session 9
// it was 4 requests each at every size, a quarter of the bytes at 256 KiB.
// Each run stores 1 GiB (--mib) in its measured pass: 1,024 STOREs at 1 MiB, 4,096 at 256 KiB
// (session 5's 256 MiB gave 256 STOREs at 1 MiB, too few to be steady: /proc's 10 ms ticks were
// ~40 us per STORE per thread, and V8 was still compiling). Each figure is the median of RUNS
// runs, the three kinds interleaved so that a change of load during the run shifts them alike;
// the CPU time of the target and of the clients per STORE is printed with them.
// Writes bench/results/tier.json:
//   { fio_write_gbps, rows: [{ size, sessions, in_flight_per_session, persistent_store_gbps, volatile_store_gbps }],
//     recovery: { blocks, seconds }, promotion_p99_us }
// fio comes from Debian; the bench installs it when it is missing (apt-get).
//
//   node dist/bench/tier.js [--mib N] [--dir PATH] [--output path]
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseCommandLine } from '../host/commands/command-line.ts';
import { resolveTargetSettings } from '../host/kbtp/server/target-config.ts';
import { BYTES_IN_FLIGHT, SESSIONS, storeRun, WARMUP_STORES, type StoreRun } from './tier-store-run.ts';
import { startTarget } from '../host/kbtp/server/target.ts';
import { connect } from '../host/kbtp/initiator.ts';
import { DurableTier } from '../host/tier/tier.ts';
import { crc32cImplementation } from '../host/tier/checksum.ts';
import { checkoutRoot } from './checkout-root.ts';

const parsed = parseCommandLine(
  'bench/tier',
  'usage: node dist/bench/tier.js [--mib 1024 (MiB stored per row and run; fio writes as much)] [--dir PATH (default .cache/bench-tier)] [--output FILE (default bench/results/tier.json)] [--sizes 262144,1048576 (the rows; fewer to split a run under the bench lock)]',
  process.argv.slice(2),
  { mib: { type: 'string', default: '1024' }, dir: { type: 'string' }, output: { type: 'string' }, sizes: { type: 'string', default: '262144,1048576' } },
);
if (typeof parsed === 'number') process.exit(parsed);
const { values } = parsed;
const root = checkoutRoot;
const output = values.output ?? path.join(root, 'bench', 'results', 'tier.json');
const base = values.dir ?? path.join(root, '.cache', 'bench-tier');
const bytesPerRow = Number(values.mib) * 2 ** 20;
const SIZES = values.sizes.split(',').map(Number);
if (SIZES.some((size) => !Number.isInteger(size) || size < 4096)) {
  console.error('bench/tier: --sizes takes block sizes in octets (at least 4096), separated by commas');
  process.exit(2);
}
/** Runs of each kind per size; the medians are reported. */
const RUNS = 3;

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? 0;
}

/** Installs a Debian package (apt-get, updating the lists once if the install fails). */
function aptInstall(name: string): void {
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const install = (): void => {
    execFileSync('apt-get', ['install', '-y', '--no-install-recommends', name], { stdio: 'inherit', env });
  };
  try {
    install();
  } catch {
    execFileSync('apt-get', ['update'], { stdio: 'inherit', env });
    install();
  }
}

function ensureFio(): string {
  const found = spawnSync('sh', ['-c', 'command -v fio'], { encoding: 'utf8' }).stdout.trim();
  if (found !== '') return found;
  console.error('bench/tier: fio is missing; installing it from Debian (apt-get install fio)');
  aptInstall('fio');
  return 'fio';
}

/**
 * The tier checksums every sealed octet; with Debian's libisal2 it does so with ISA-L at tens of
 * GB/s instead of @node-rs/crc32's few (host/tier/checksum.ts, docs/TIER.md). A cache node is
 * expected to have it, so the bench installs it as it installs fio; if that fails the bench goes
 * on with @node-rs/crc32 and says so.
 */
function ensureIsal(): void {
  if (process.platform !== 'linux') return;
  if (spawnSync('sh', ['-c', 'ldconfig -p | grep -q libisal.so.2']).status === 0) return;
  console.error('bench/tier: libisal.so.2 is missing; installing it from Debian (apt-get install libisal2)');
  try {
    aptInstall('libisal2');
  } catch (error) {
    console.error(`bench/tier: could not install libisal2 (${error instanceof Error ? error.message : String(error)}); CRC32C by @node-rs/crc32`);
  }
}

/**
 * fio: sequential writes of `size` octets with an fdatasync every 8 writes, in `dir`: Gbit/s, and
 * fio's own CPU time per MiB written (its usr + sys share of the job's run time), to set beside the
 * STOREs' CPU per MiB.
 */
function fioWrite(fio: string, dir: string, size: number): { gbps: number; cpuUsPerMiB: number } {
  const result = execFileSync(
    fio,
    [
      '--name=tier',
      `--directory=${dir}`,
      '--rw=write',
      `--bs=${size}`,
      `--size=${bytesPerRow}`,
      '--fdatasync=8',
      '--ioengine=psync',
      '--numjobs=1',
      '--end_fsync=1',
      '--overwrite=1',
      '--output-format=json',
    ],
    { encoding: 'utf8' },
  );
  const job = (JSON.parse(result) as { jobs: Array<{ write: { bw_bytes: number; io_bytes: number }; usr_cpu: number; sys_cpu: number; job_runtime: number }> })
    .jobs[0];
  for (const name of fs.readdirSync(dir)) if (name.startsWith('tier.')) fs.rmSync(path.join(dir, name));
  if (job === undefined) return { gbps: 0, cpuUsPerMiB: Number.NaN };
  const cpuMicros = ((job.usr_cpu + job.sys_cpu) / 100) * job.job_runtime * 1000;
  return { gbps: (job.write.bw_bytes * 8) / 1e9, cpuUsPerMiB: cpuMicros / (job.write.io_bytes / 2 ** 20) };
}

/** CPU microseconds per MiB stored, target + clients (main thread of the target in brackets). */
function perMiB(run: StoreRun | undefined, size: number): string {
  if (run === undefined) return '-';
  const scale = 2 ** 20 / size;
  return `${((run.targetCpuUs + run.clientCpuUs) * scale).toFixed(0)} us (${(run.targetCpuUs * scale).toFixed(0)} + ${(run.clientCpuUs * scale).toFixed(0)}; main thread ${(run.mainThreadCpuUs * scale).toFixed(0)})`;
}

/** Writes a tier of 100,000 small sealed blocks, then times opening it (index recovery). */
async function recoverySeconds(dir: string, blocks: number): Promise<number> {
  const options = { directory: dir, capacityBytes: blocks * 4096 + (64 << 20), blockSize: 4096, handleBase: 0n, handleCount: blocks, tenants: [] };
  const tier = await DurableTier.open(options);
  const data = new Uint8Array(512).fill(7);
  for (let i = 0; i < blocks; i += 1000) {
    await Promise.all(Array.from({ length: Math.min(1000, blocks - i) }, (_, k) => tier.seal(i + k, 2, data)));
  }
  await tier.close();
  const started = process.hrtime.bigint();
  const again = await DurableTier.open(options);
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  if (again.recovery.blocksRecovered !== blocks) throw new Error(`recovered ${again.recovery.blocksRecovered} of ${blocks} blocks`);
  await again.close();
  return seconds;
}

/** p99 of a LOAD of a block on the tier alone (promotion), 256 KiB blocks, a quota far below the stored set. */
async function promotionP99Us(dataDir: string): Promise<number> {
  const size = 262144;
  const settings = resolveTargetSettings({
    listen: '127.0.0.1:0',
    workers: 2,
    pool: { blockSize: size, blockCount: 64, handleCount: 1024, maxInline: 0 },
    durable: { dataDir, capacity: '1GiB' },
    tenants: [{ name: 'default', open: true, quota: 16 }],
  });
  const target = await startTarget(settings, { log: () => undefined });
  try {
    const session = await connect(`127.0.0.1:${target.port}`, { tenant: 'default' });
    const data = new Uint8Array(size).fill(3);
    for (let i = 0; i < 400; i++) await session.allocStore(BigInt(i), data, { seal: true });
    const micros: number[] = [];
    // Oldest first: each is on the tier alone when loaded (the quota keeps the 16 most recent).
    for (let i = 0; i < 300; i++) {
      const started = process.hrtime.bigint();
      await session.load(BigInt(i));
      micros.push(Number(process.hrtime.bigint() - started) / 1e3);
    }
    const stats = await target.stats();
    if ((stats.durable?.promotions ?? 0) < 300) throw new Error(`only ${stats.durable?.promotions ?? 0} promotions`);
    await session.close(1000);
    micros.sort((a, b) => a - b);
    return micros[Math.floor(micros.length * 0.99)] ?? 0;
  } finally {
    await target.stop(1000);
  }
}

async function main(): Promise<void> {
  fs.mkdirSync(base, { recursive: true });
  const fio = ensureFio();
  ensureIsal();
  console.log(`CRC32C of the tier: ${crc32cImplementation()}`);
  const fresh = (name: string): string => {
    const dir = path.join(base, name);
    fs.rmSync(dir, { recursive: true, force: true });
    fs.mkdirSync(dir, { recursive: true });
    return dir;
  };
  const rows = [];
  const fioBySize: Record<number, number> = {};
  for (const size of SIZES) {
    const fios: number[] = [];
    const persistents: StoreRun[] = [];
    const volatiles: StoreRun[] = [];
    for (let run = 0; run < RUNS; run++) {
      const fioRun = fioWrite(fio, fresh('fio'), size);
      fios.push(fioRun.gbps);
      persistents.push(await storeRun(size, bytesPerRow, fresh(`persistent-${size}`)));
      volatiles.push(await storeRun(size, bytesPerRow, undefined));
      const [f, p, v] = [fios.at(-1) ?? 0, persistents.at(-1), volatiles.at(-1)];
      if (run === 0)
        console.log(
          `  size ${size}: each STORE row measures one pass after ${p?.warmupPasses} warm-up passes (each stores and frees every block once; at least ${WARMUP_STORES} STOREs, at least 2 passes), ${p?.inFlight} requests in flight per session (${BYTES_IN_FLIGHT / 2 ** 20} MiB in all), persistent and volatile alike`,
        );
      console.log(
        `  size ${size} run ${run + 1}: fio ${f.toFixed(3)}, persistent ${p?.gbps.toFixed(3)}, volatile ${v?.gbps.toFixed(3)} Gbit/s` +
          ` (persistent/volatile ${((p?.gbps ?? 0) / (v?.gbps ?? 1)).toFixed(2)}, persistent/fio ${((p?.gbps ?? 0) / f).toFixed(2)});` +
          ` CPU per MiB, target + clients: persistent ${perMiB(p, size)}, volatile ${perMiB(v, size)}, fio ${fioRun.cpuUsPerMiB.toFixed(0)} us;` +
          ` load ${os.loadavg()[0]?.toFixed(1)}`,
      );
    }
    const f = median(fios);
    const p = median(persistents.map((r) => r.gbps));
    const v = median(volatiles.map((r) => r.gbps));
    fioBySize[size] = f;
    rows.push({
      size,
      sessions: SESSIONS,
      in_flight_per_session: persistents[0]?.inFlight,
      persistent_store_gbps: +p.toFixed(3),
      volatile_store_gbps: +v.toFixed(3),
    });
    const cpu = (runs: StoreRun[]): string =>
      `target ${median(runs.map((r) => r.targetCpuUs)).toFixed(0)} us (main thread ${median(runs.map((r) => r.mainThreadCpuUs)).toFixed(0)}), clients ${median(runs.map((r) => r.clientCpuUs)).toFixed(0)} us`;
    console.log(
      `size ${size}, 16 sessions, median of ${RUNS}: fio ${f.toFixed(3)} Gbit/s, persistent STORE ${p.toFixed(3)}, volatile STORE ${v.toFixed(3)} Gbit/s;` +
        ` persistent/fio ${(p / f).toFixed(2)}, persistent/volatile ${(p / v).toFixed(2)}; CPU per STORE: persistent ${cpu(persistents)}, volatile ${cpu(volatiles)}`,
    );
  }
  const recovery = { blocks: 100_000, seconds: +(await recoverySeconds(fresh('recovery'), 100_000)).toFixed(3) };
  console.log(`recovery of a ${recovery.blocks}-block index: ${recovery.seconds} s`);
  const promotion = +(await promotionP99Us(fresh('promotion'))).toFixed(1);
  console.log(`promotion (LOAD of a block on the tier alone, 256 KiB) p99: ${promotion} us`);
  // The shape has one fio figure: the 1 MiB run (the 256 KiB one is printed above and in docs/TIER.md),
  // or the last row's when --sizes leaves 1 MiB out.
  const result = { fio_write_gbps: +(fioBySize[1048576] ?? fioBySize[SIZES.at(-1) ?? 0] ?? 0).toFixed(3), rows, recovery, promotion_p99_us: promotion };
  fs.mkdirSync(path.dirname(output), { recursive: true });
  fs.writeFileSync(output, `${JSON.stringify(result, null, 2)}\n`);
  console.log(
    `wrote ${output}; load average ${os
      .loadavg()
      .map((n) => n.toFixed(2))
      .join(' ')}`,
  );
  fs.rmSync(base, { recursive: true, force: true });
}

await main();
