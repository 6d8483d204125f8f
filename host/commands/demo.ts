// `kbtp demo`: an engine over one shared memory, driven by two worker threads. Thread 0 stores
// blocks (inline and through the read path), thread 1 loads them back, then frees them; the
// pool audit at the end shows that every block is accounted for.
import type { Worker } from 'node:worker_threads';
import type { Command } from '../cli.ts';
import { parseCommandLine } from './command-line.ts';
import { Engine } from '../engine/engine.ts';
import { auditPool } from '../engine/audit.ts';
import { spawnWorker } from '../util/spawn-worker.ts';
import type { DemoTask, DemoResult } from './demo-worker.ts';

const HELP = `usage: kbtp demo [--blocks N] [--block-size BYTES]

Creates a block engine (pool, block table and free-block ring in one shared WebAssembly
memory), stores a few blocks from one worker thread, loads and frees them from another, and
prints every completion and the final pool audit.

options:
  --blocks N          blocks in the pool (default 64)
  --block-size BYTES  block size, a multiple of 8 (default 4096)
  -h, --help          show this help`;

function ask(worker: Worker, tasks: DemoTask[]): Promise<DemoResult[]> {
  return new Promise((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
    worker.postMessage(tasks);
  });
}

function show(results: DemoResult[]): void {
  for (const r of results) {
    const data = r.data === undefined ? '' : `  data "${r.data}" sha256 ${r.sha256}`;
    console.log(
      `  thread ${r.thread}  ${r.op.padEnd(5)} handle ${String(r.handle).padStart(3)}  ${r.status.padEnd(12)}` +
        ` gen ${r.generation}  len ${String(r.dataLength).padStart(3)}  block 0x${r.blockOffset.toString(16)}${data}`,
    );
  }
}

export const command: Command = {
  summary: 'run the block engine with two worker threads and show what happens',
  async run(argv) {
    const parsed = parseCommandLine('kbtp demo', HELP, argv, {
      blocks: { type: 'string', default: '64' },
      'block-size': { type: 'string', default: '4096' },
    });
    if (typeof parsed === 'number') return parsed;
    const { values } = parsed;
    const blockCount = Number(values.blocks);
    const blockSize = Number(values['block-size']);
    const engine = Engine.create({ blockSize, blockCount, threads: 2 });
    const { layout, config } = engine;
    console.log(
      `engine: ${config.blockCount} blocks of ${config.blockSize} octets, ring N = ${2 ** config.ringOrder}` +
        ` (${config.ringMode}), ${config.handleCount} handles, ${(layout.totalBytes / 2 ** 20).toFixed(1)} MiB shared memory`,
    );
    const workers = [0, 1].map((thread) =>
      spawnWorker(new URL(`./demo-worker${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url), {
        workerData: { handoff: engine.handoff(), thread },
      }),
    );
    const [writer, reader] = workers as [Worker, Worker];
    try {
      const texts = ['the KV cache of tokens 0-511', 'tokens 512-1023', 'tokens 1024-1535'];
      console.log('thread 0 stores three blocks (ALLOC_STORE: inline, RDMA-read path, inline):');
      show(
        await ask(
          writer,
          texts.map((text, i) => ({ op: 'store', handle: BigInt(10 + i), text, viaRead: i === 1 })),
        ),
      );
      console.log('thread 1 loads them (LOAD: RDMA Write of the block, then COMPLETION):');
      show(
        await ask(
          reader,
          texts.map((_, i) => ({ op: 'load', handle: BigInt(10 + i), capacity: 256 })),
        ),
      );
      console.log('thread 0 tries to store handle 10 again (it is bound):');
      show(await ask(writer, [{ op: 'store', handle: 10n, text: 'again', viaRead: false }]));
      console.log('thread 1 frees handle 11, then loads it:');
      show(
        await ask(reader, [
          { op: 'free', handle: 11n },
          { op: 'load', handle: 11n, capacity: 256 },
        ]),
      );
      const audit = auditPool(engine);
      const counters = engine.readCounters(engine.sharedRing);
      console.log(`ring: Head ticket ${counters.headTicket}, Tail ticket ${counters.tailTicket}`);
      console.log(
        `audit: ${audit.bound} blocks bound, ${audit.inRings} in the ring, lost ${audit.lost.length}, doubled ${audit.doubled.length}` +
          (audit.ok ? ' - every block accounted for' : ` - PROBLEMS: ${audit.problems.join('; ')}`),
      );
      return audit.ok ? 0 : 1;
    } finally {
      await Promise.all(workers.map((worker) => worker.terminate()));
    }
  },
};
