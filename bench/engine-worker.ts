// One thread of bench/engine.ts: runs each measurement for a fixed time, starting together with
// the other threads, against the shared engine memory, once in WebAssembly and once in plain TS.
import { parentPort, workerData } from 'node:worker_threads';
import { Engine, type EngineHandoff } from '../host/engine/engine.ts';
import { JsEngine } from './engine-js.ts';

export interface BenchJob {
  handoff: EngineHandoff;
  kernels: WebAssembly.Module;
  thread: number;
  milliseconds: number;
  /** Int32Array: [0] start signal per round, [1] threads ready. */
  gate: SharedArrayBuffer;
  copySizes: number[];
  lookupTenant: number;
  lookupHandles: number;
}

interface Kernels {
  allocFreePairs(ring: number, pairs: number): number;
  lookups(engine: number, tenant: number, firstHandle: bigint, handles: number, count: number): number;
  copies(engine: number, blockOffset: bigint, source: number, length: number, count: number): void;
}

export interface BenchRound {
  name: string;
  implementation: 'wasm' | 'js';
  operations: number;
  seconds: number;
  bytes: number;
}

const job = workerData as BenchJob;
const engine = Engine.attach(job.handoff);
const kernels = new WebAssembly.Instance(job.kernels, { env: { memory: engine.memory } }).exports as unknown as Kernels;
const js = new JsEngine(engine);
const gate = new Int32Array(job.gate);
const ring = engine.sharedRing;
const blockSize = engine.config.blockSize;
// Each thread copies from its own source block into its own destination block.
const destination = BigInt(2 * job.thread * blockSize);
const source = engine.blockAddress(BigInt((2 * job.thread + 1) * blockSize));
let round = 0;

/** Waits until the main thread opens round `round`, so all threads measure at the same time. */
function startTogether(): void {
  round += 1;
  Atomics.add(gate, 1, 1);
  while (Atomics.load(gate, 0) < round) Atomics.wait(gate, 0, round - 1, 50);
}

function measure(name: string, implementation: 'wasm' | 'js', bytesPerOperation: number, batch: number, step: (count: number) => void): BenchRound {
  startTogether();
  const started = process.hrtime.bigint();
  const deadline = started + BigInt(job.milliseconds) * 1_000_000n;
  let operations = 0;
  let now = started;
  while (now < deadline) {
    step(batch);
    operations += batch;
    now = process.hrtime.bigint();
  }
  const seconds = Number(now - started) / 1e9;
  return { name, implementation, operations, seconds, bytes: operations * bytesPerOperation };
}

const rounds: BenchRound[] = [];
rounds.push(
  measure('ring', 'wasm', 0, 20_000, (n) => {
    if (kernels.allocFreePairs(ring.descriptor, n) !== 0) throw new Error('wasm ring ran dry');
  }),
);
rounds.push(
  measure('ring', 'js', 0, 2_000, (n) => {
    for (let i = 0; i < n; i++) {
      const blockOffset = js.allocate(ring, 0x40000000);
      if (blockOffset < 0n) throw new Error('js ring ran dry');
      js.release(ring, blockOffset);
    }
  }),
);
const tenant = engine.tenantAddress(job.lookupTenant);
rounds.push(
  measure('lookup', 'wasm', 0, 50_000, (n) => {
    if (kernels.lookups(engine.address, tenant, 0n, job.lookupHandles, n) !== n) throw new Error('wasm lookup failed a check');
  }),
);
let handle = 0;
rounds.push(
  measure('lookup', 'js', 0, 5_000, (n) => {
    for (let i = 0; i < n; i++) {
      if (js.lookupLoad(tenant, BigInt(handle), 0x10, 0, 0x7fffffff) !== 0) throw new Error('js lookup failed a check');
      handle = (handle + 1) % job.lookupHandles;
    }
  }),
);
for (const size of job.copySizes) {
  const batch = Math.max(1, Math.floor((64 << 20) / size / 16));
  rounds.push(measure(`copy-${size}`, 'wasm', size, batch, (n) => kernels.copies(engine.address, destination, source, size, n)));
  rounds.push(
    measure(`copy-${size}`, 'js', size, batch, (n) => {
      for (let i = 0; i < n; i++) js.copyIntoBlock(destination, source, size);
    }),
  );
}
parentPort?.postMessage(rounds);
