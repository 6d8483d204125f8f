// `make bench` part 1: the block engine. Allocate+free pairs, table lookups and block copies per
// second, in WebAssembly and in plain TypeScript over the same shared memory, with 1 and 2
// worker threads; and the heap growth of the request hot path. Writes bench/results/engine.json.
import { mkdirSync, writeFileSync, readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import * as K from '../assembly/kbtp-constants.ts';
import { ACTION_DATA_AND_SEND, ACTION_NONE } from '../assembly/struct-offsets.ts';
import { Engine } from '../host/engine/engine.ts';
import { ThreadArena } from '../host/engine/arena.ts';
import { encodeRequest } from '../host/kbtp/wire/messages.ts';
import { spawnWorker } from '../host/util/spawn-worker.ts';
import { compileRelease } from './asc-compile.ts';
import { checkoutRoot } from './checkout-root.ts';
import type { BenchJob, BenchRound } from './engine-worker.ts';

const root = checkoutRoot;
const COPY_SIZES = [16384, 262144, 1048576];
const MILLISECONDS = Number(process.env.KBTP_BENCH_MS ?? 700);
const LOOKUP_HANDLES = 4096;

async function compileKernels(): Promise<WebAssembly.Module> {
  const work = mkdtempSync(join(tmpdir(), 'kbtp-bench-'));
  try {
    const outFile = join(work, 'kernels.wasm');
    await compileRelease(join(root, 'bench/assembly/engine-kernels.ts'), outFile);
    return new WebAssembly.Module(readFileSync(outFile));
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

function setUpEngine(): Engine {
  const engine = Engine.create({
    blockSize: 1 << 20,
    blockCount: 16,
    ringOrder: Number(process.env.KBTP_BENCH_RING_ORDER ?? 4),
    handleCount: LOOKUP_HANDLES,
    threads: 3,
    maxInline: 4096,
  });
  // Bound, sealed entries so every lookup runs the whole check sequence and passes.
  const entry0 = engine.entryAddress(0n);
  for (let i = 0; i < LOOKUP_HANDLES; i++) engine.exports.entryBind(entry0 + 16 * i, 0n, 4096, 1);
  return engine;
}

async function runWorkers(engine: Engine, kernels: WebAssembly.Module, threads: number): Promise<BenchRound[][]> {
  const gate = new Int32Array(new SharedArrayBuffer(8));
  const rounds = 4 + 2 * COPY_SIZES.length;
  const results = Promise.all(
    Array.from(
      { length: threads },
      (_, index) =>
        new Promise<BenchRound[]>((resolve, reject) => {
          const job: BenchJob = {
            handoff: engine.handoff(),
            kernels,
            thread: index + 1,
            milliseconds: MILLISECONDS,
            gate: gate.buffer as SharedArrayBuffer,
            copySizes: COPY_SIZES,
            lookupTenant: 0,
            lookupHandles: LOOKUP_HANDLES,
          };
          const worker = spawnWorker(new URL(`./engine-worker${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url), { workerData: job });
          worker.once('message', (r: BenchRound[]) => {
            resolve(r);
            void worker.terminate();
          });
          worker.once('error', reject);
        }),
    ),
  );
  for (let round = 1; round <= rounds; round++) {
    while (Atomics.load(gate, 1) < threads * round) await new Promise((r) => setTimeout(r, 2));
    Atomics.store(gate, 0, round);
    Atomics.notify(gate, 0);
    process.stderr.write(`  ${threads} worker(s): measurement ${round}/${rounds}${process.stderr.isTTY ? '\r' : '\n'}`);
  }
  if (process.stderr.isTTY) process.stderr.write('\n');
  return results;
}

/** Heap growth per request through the real entry points (place is done once; run + complete per request). */
function hotPathHeapBytes(engine: Engine): number | undefined {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) return undefined;
  const arena = new ThreadArena(engine, 0);
  const session = arena.openSession({ tenant: 0, capabilities: 0, credits: 8 });
  const request = arena.acquireRequest(session);
  const message = encodeRequest({ opcode: K.OPCODE_LOAD, requestId: 1n, handle: 5n, descriptor: { stag: 0x100, taggedOffset: 0n, length: 8192 } });
  arena.place(request, message);
  const cycle = (): void => {
    arena.arrived(request, message.length);
    if (arena.run(request) !== ACTION_DATA_AND_SEND || arena.complete(request, true) !== ACTION_NONE) throw new Error('hot path loop misbehaved');
  };
  for (let i = 0; i < 100_000; i++) cycle();
  gc();
  const before = process.memoryUsage().heapUsed;
  const requests = 1_000_000;
  for (let i = 0; i < requests; i++) cycle();
  const after = process.memoryUsage().heapUsed;
  arena.releaseRequest(request);
  return Math.max(0, after - before) / requests;
}

interface Summary {
  workers: number;
  ring_pairs_per_s: { wasm: number; js: number };
  lookups_per_s: { wasm: number; js: number };
  copy_gbps: Record<string, { wasm: number; js: number }>;
}

function summarize(threads: number, perThread: BenchRound[][]): Summary {
  const total = (name: string, implementation: 'wasm' | 'js', unit: 'ops' | 'bytes'): number =>
    perThread
      .flatMap((rounds) => rounds.filter((r) => r.name === name && r.implementation === implementation))
      .reduce((sum, r) => sum + (unit === 'ops' ? r.operations : r.bytes) / r.seconds, 0);
  const copy: Record<string, { wasm: number; js: number }> = {};
  for (const size of COPY_SIZES) {
    copy[String(size)] = { wasm: total(`copy-${size}`, 'wasm', 'bytes') / 1e9, js: total(`copy-${size}`, 'js', 'bytes') / 1e9 };
  }
  return {
    workers: threads,
    ring_pairs_per_s: { wasm: total('ring', 'wasm', 'ops'), js: total('ring', 'js', 'ops') },
    lookups_per_s: { wasm: total('lookup', 'wasm', 'ops'), js: total('lookup', 'js', 'ops') },
    copy_gbps: copy,
  };
}

const format = (n: number): string => (n >= 1e6 ? `${(n / 1e6).toFixed(2)} M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)} k` : n.toFixed(2));

async function main(): Promise<void> {
  console.log(`kbtp engine benchmark (${MILLISECONDS} ms per measurement; KBTP_BENCH_MS to change)`);
  const kernels = await compileKernels();
  const summaries: Summary[] = [];
  for (const threads of [1, 2]) {
    const engine = setUpEngine();
    summaries.push(summarize(threads, await runWorkers(engine, kernels, threads)));
  }
  const rows: string[][] = [['measure', 'workers', 'wasm', 'plain TS', 'wasm / TS']];
  for (const s of summaries) {
    rows.push([
      'alloc+free pairs/s',
      String(s.workers),
      format(s.ring_pairs_per_s.wasm),
      format(s.ring_pairs_per_s.js),
      `${(s.ring_pairs_per_s.wasm / s.ring_pairs_per_s.js).toFixed(1)}x`,
    ]);
    rows.push([
      'LOAD lookups/s',
      String(s.workers),
      format(s.lookups_per_s.wasm),
      format(s.lookups_per_s.js),
      `${(s.lookups_per_s.wasm / s.lookups_per_s.js).toFixed(1)}x`,
    ]);
    for (const [size, gbps] of Object.entries(s.copy_gbps)) {
      rows.push([`copy ${Number(size) / 1024} KiB GB/s`, String(s.workers), gbps.wasm.toFixed(2), gbps.js.toFixed(2), `${(gbps.wasm / gbps.js).toFixed(2)}x`]);
    }
  }
  const widths = rows[0]?.map((_, column) => Math.max(...rows.map((row) => (row[column] ?? '').length))) ?? [];
  for (const row of rows) console.log(row.map((cell, column) => cell.padStart(widths[column] ?? 0)).join('  '));
  const heapBytes = hotPathHeapBytes(setUpEngine());
  console.log(
    heapBytes === undefined
      ? 'hot path heap growth: run node with --expose-gc to measure'
      : `hot path heap growth: ${heapBytes.toFixed(4)} bytes per request over 1,000,000 LOAD run()+complete() calls`,
  );
  const target = summaries.every((s) => s.ring_pairs_per_s.wasm >= 5 * s.ring_pairs_per_s.js);
  console.log(`target (wasm ring >= 5x plain TS): ${target ? 'met' : 'MISSED'}`);
  mkdirSync(join(root, 'bench/results'), { recursive: true });
  const out = join(root, 'bench/results/engine.json');
  writeFileSync(
    out,
    `${JSON.stringify(
      summaries.map((s) => ({ ...s, hot_path_heap_bytes_per_request: heapBytes ?? null })),
      null,
      2,
    )}\n`,
  );
  console.log(`wrote ${out}`);
}

await main();
