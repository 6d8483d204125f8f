// The durable tier (docs/TIER.md): persistent STORE (sealed, answered after the tier's group
// commit) against volatile STORE (DRAM only) with 16 sessions (in a client process of their own,
// bench/tier-load.ts) at 256 KiB and 1 MiB, fio writing
// the same sizes to the same file system with an fdatasync every 8 writes in the same run,
// recovery of a 100,000-block index, and the p99 of a LOAD that promotes a block from the tier.
// Writes bench/results/tier.json:
//   { fio_write_gbps, rows: [{ size, sessions, persistent_store_gbps, volatile_store_gbps }],
//     recovery: { blocks, seconds }, promotion_p99_us }
// fio comes from Debian; the bench installs it when it is missing (apt-get).
//
//   node dist/bench/tier.js [--mib N] [--dir PATH] [--output path]
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseCommandLine } from '../host/commands/command-line.ts';
import { resolveTargetSettings, type TargetSettings } from '../firmware/config.ts';
import { startTarget } from '../host/kbtp/server/target.ts';
import { connect } from '../host/kbtp/initiator.ts';
import { DurableTier } from '../host/tier/tier.ts';

const parsed = parseCommandLine(
  'bench/tier',
  'usage: node dist/bench/tier.js [--mib 256 (MiB stored per row)] [--dir PATH (default .cache/bench-tier)] [--output FILE (default bench/results/tier.json)]',
  process.argv.slice(2),
  { mib: { type: 'string', default: '256' }, dir: { type: 'string' }, output: { type: 'string' } },
);
if (typeof parsed === 'number') process.exit(parsed);
const { values } = parsed;
const here = path.dirname(fileURLToPath(import.meta.url));
const root = here.endsWith(path.join('dist', 'bench')) ? path.join(here, '..', '..') : path.join(here, '..');
const output = values.output ?? path.join(root, 'bench', 'results', 'tier.json');
const base = values.dir ?? path.join(root, '.cache', 'bench-tier');
const bytesPerRow = Number(values.mib) * 2 ** 20;
const SESSIONS = 16;
const SIZES = [262144, 1048576];

function ensureFio(): string {
  const found = spawnSync('sh', ['-c', 'command -v fio'], { encoding: 'utf8' }).stdout.trim();
  if (found !== '') return found;
  console.error('bench/tier: fio is missing; installing it from Debian (apt-get install fio)');
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const install = (): void => {
    execFileSync('apt-get', ['install', '-y', '--no-install-recommends', 'fio'], { stdio: 'inherit', env });
  };
  try {
    install();
  } catch {
    execFileSync('apt-get', ['update'], { stdio: 'inherit', env });
    install();
  }
  return 'fio';
}

/** fio: sequential writes of `size` octets with an fdatasync every 8 writes, in `dir`. */
function fioWriteGbps(fio: string, dir: string, size: number): number {
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
      '--output-format=json',
    ],
    { encoding: 'utf8' },
  );
  const job = (JSON.parse(result) as { jobs: Array<{ write: { bw_bytes: number } }> }).jobs[0];
  for (const name of fs.readdirSync(dir)) if (name.startsWith('tier.')) fs.rmSync(path.join(dir, name));
  return ((job?.write.bw_bytes ?? 0) * 8) / 1e9;
}

function settingsFor(size: number, blocks: number, dataDir: string | undefined): TargetSettings {
  return resolveTargetSettings({
    listen: '127.0.0.1:0',
    workers: 2,
    pool: { blockSize: size, blockCount: blocks, handleCount: blocks * 4, maxInline: 0 },
    session: { credits: 16, maxSessions: 64 },
    ...(dataDir === undefined ? {} : { durable: { dataDir, capacity: 4 * blocks * size + 256 * 2 ** 20 } }),
  });
}

/** Requests in flight per session. */
const PIPELINE = 4;
const loadScript = fileURLToPath(new URL(`./tier-load${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url));

/** 16 sessions (in a client process of their own, bench/tier-load.ts) store `bytesPerRow` of sealed blocks of `size` octets; returns Gbit/s. */
async function storeGbps(size: number, dataDir: string | undefined): Promise<number> {
  const blocks = Math.max(SESSIONS, Math.ceil(bytesPerRow / size));
  const target = await startTarget(settingsFor(size, blocks, dataDir), { log: () => undefined });
  try {
    const perSession = Math.floor(blocks / SESSIONS);
    const loader = loadScript.endsWith('.ts') ? ['--import', 'tsx', loadScript] : [loadScript];
    const child = spawn(process.execPath, [...loader, `127.0.0.1:${target.port}`, String(size), String(perSession), String(SESSIONS), String(PIPELINE)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    if (code !== 0) throw new Error(`bench/tier-load exited with ${code}: ${out}`);
    const { seconds, bytes } = JSON.parse(out.trim().split('\n').at(-1) ?? '{}') as { seconds: number; bytes: number };
    return (bytes * 8) / seconds / 1e9;
  } finally {
    await target.stop(1000);
  }
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
  const fresh = (name: string): string => {
    const dir = path.join(base, name);
    fs.rmSync(dir, { recursive: true, force: true });
    fs.mkdirSync(dir, { recursive: true });
    return dir;
  };
  const rows = [];
  const fioBySize: Record<number, number> = {};
  for (const size of SIZES) {
    fioBySize[size] = fioWriteGbps(fio, fresh('fio'), size);
    const persistent = await storeGbps(size, fresh(`persistent-${size}`));
    const volatile = await storeGbps(size, undefined);
    rows.push({ size, sessions: SESSIONS, persistent_store_gbps: +persistent.toFixed(3), volatile_store_gbps: +volatile.toFixed(3) });
    console.log(
      `size ${size}: fio ${fioBySize[size]?.toFixed(3)} Gbit/s, persistent STORE ${persistent.toFixed(3)}, volatile STORE ${volatile.toFixed(3)} Gbit/s (16 sessions)`,
    );
  }
  const recovery = { blocks: 100_000, seconds: +(await recoverySeconds(fresh('recovery'), 100_000)).toFixed(3) };
  console.log(`recovery of a ${recovery.blocks}-block index: ${recovery.seconds} s`);
  const promotion = +(await promotionP99Us(fresh('promotion'))).toFixed(1);
  console.log(`promotion (LOAD of a block on the tier alone, 256 KiB) p99: ${promotion} us`);
  // The shape has one fio figure: the 1 MiB run (the 256 KiB one is printed above and in docs/TIER.md).
  const result = { fio_write_gbps: +(fioBySize[1048576] ?? 0).toFixed(3), rows, recovery, promotion_p99_us: promotion };
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
