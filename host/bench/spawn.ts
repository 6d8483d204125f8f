// `kbtp bench --spawn`: a target started in this process (its workers are threads of their own,
// the benchmark's sessions run on the main thread), on a free loopback port, sized for the run.
import { resolveTargetSettings } from '../kbtp/server/target-config.ts';
import { startTarget, type RunningTarget } from '../kbtp/server/target.ts';

export interface SpawnOptions {
  blockSize: number;
  blocks: number;
  workers: number;
  credits: number;
  sessions: number;
  /** Trust the open tenant for DIRECT_LOAD / DIRECT_ALLOC. */
  directLoad?: boolean;
  directAlloc?: boolean;
  /** Largest inline STORE payload (default: min(blockSize, SPAWNED_MAX_INLINE)). */
  maxInline?: number;
  /** The target's CPU wake-latency request while busy (undefined: the target's default; null: none). */
  cpuWakeLatencyUs?: number | null;
  log?: (line: string) => void;
}

/**
 * The largest inline STORE of a spawned target: a whole block up to 256 KiB. A STORE that fits
 * goes out with its request and is answered in one round trip; one that does not is pulled by
 * RDMA Read, a second round trip, which made a 16 KiB STORE take twice a 16 KiB LOAD with the
 * 8 KiB of `kbtp target`'s default (issue 16, session 4). Inline costs the target a copy from the
 * request context into the block: at 256 KiB it still used less CPU and time than the RDMA Read
 * (docs/BENCH.md, session 4), at 1 MiB the two were even, so larger blocks keep the RDMA Read. It
 * also costs memory: each of the target's 2 x credits x sessions request contexts holds this much.
 */
export const SPAWNED_MAX_INLINE = 256 * 1024;

/** The shared ring holds at least 2x the pool (ring order is a power of two). */
export async function spawnTarget(options: SpawnOptions): Promise<RunningTarget> {
  const { blockSize, blocks } = options;
  const settings = resolveTargetSettings({
    listen: '127.0.0.1:0',
    workers: options.workers,
    pool: { blockSize, blockCount: blocks, handleCount: blocks * 4, maxInline: Math.min(options.maxInline ?? SPAWNED_MAX_INLINE, blockSize) },
    session: { credits: options.credits, maxSessions: Math.max(32, options.sessions + 4) },
    ...(options.cpuWakeLatencyUs !== undefined ? { cpuWakeLatencyUs: options.cpuWakeLatencyUs } : {}),
    tenants: [
      {
        name: 'default',
        open: true,
        quota: blocks,
        trust: { directLoad: options.directLoad === true, directAlloc: options.directAlloc === true },
      },
    ],
  });
  return startTarget(settings, { log: options.log ?? ((line) => console.error(line)) });
}
