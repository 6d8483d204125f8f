// `kbtp bench --spawn`: a target started in this process (its workers are threads of their own,
// the benchmark's sessions run on the main thread), on a free loopback port, sized for the run.
import { resolveTargetSettings } from '../../firmware/config.ts';
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
  maxInline?: number;
  log?: (line: string) => void;
}

/** The shared ring holds at least 2x the pool (ring order is a power of two). */
export async function spawnTarget(options: SpawnOptions): Promise<RunningTarget> {
  const { blockSize, blocks } = options;
  const settings = resolveTargetSettings({
    listen: '127.0.0.1:0',
    workers: options.workers,
    pool: { blockSize, blockCount: blocks, handleCount: blocks * 4, maxInline: Math.min(options.maxInline ?? 8192, blockSize) },
    session: { credits: options.credits, maxSessions: Math.max(32, options.sessions + 4) },
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
