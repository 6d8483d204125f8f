// `kbtp bench --spawn`: a target started in this process (its workers are threads of their own,
// the benchmark's sessions run on the main thread), on a free loopback port, sized for the run.
import { engineConfigFor, resolveTargetSettings, type TargetSettings, type Transport } from '../kbtp/server/target-config.ts';
import { startTarget, type RunningTarget } from '../kbtp/server/target.ts';
import { EngineConfigError, resolveEngineConfig } from '../engine/config.ts';
import { computeLayout } from '../engine/layout.ts';

export interface SpawnOptions {
  blockSize: number;
  blocks: number;
  workers: number;
  credits: number;
  sessions: number;
  /** Trust the open tenant for DIRECT_LOAD / DIRECT_ALLOC. */
  directLoad?: boolean;
  directAlloc?: boolean;
  /**
   * Largest inline STORE payload. Default: min(blockSize, SPAWNED_MAX_INLINE), halved until the
   * engine fits its 4 GiB (spawnedMaxInline); one given here is kept, and a run it does not fit fails.
   */
  maxInline?: number;
  /** The target's CPU wake-latency request while busy (undefined: the target's default; null: none). */
  cpuWakeLatencyUs?: number | null;
  /** RDMA binding (default iwarp): roce serves IB RC over RoCEv2 on 127.0.0.1. */
  transport?: Transport;
  log?: (line: string) => void;
}

/**
 * The largest inline STORE of a spawned target: a whole block up to 1 MiB. A STORE that fits
 * goes out with its request and is answered in one round trip; one that does not is pulled by
 * RDMA Read, a second round trip, which made a 16 KiB STORE take twice a 16 KiB LOAD with the
 * 8 KiB of `kbtp target`'s default (issue 16, session 4). Up to session 20 this was 256 KiB: an
 * inline 1 MiB STORE then cost as much as the RDMA Read (the target copied it from the request
 * context into the block). Since an inline STORE's payload is read straight into its block
 * (session 10), inline is faster at 1 MiB too: interleaved, 1 MiB STOREs 3.2-3.7 -> 3.9-7.1 GB/s
 * at 1 x 1, 4.1-4.4 -> 4.8-5.9 at 16 x 1, 4.9-5.1 -> 5.1-6.7 at 1 x 8 (docs/BENCH.md, session 21).
 * It costs address space more than memory: each of the target's 2 x credits x sessions request
 * contexts has room for this much, touched only by a STORE that cannot go to its block (a spawned
 * 16-session 1 MiB run peaked 23 MB higher); where those contexts would not fit the engine's 4 GiB
 * (hundreds of sessions of 1 MiB blocks), spawnedTargetSettings halves it until they do.
 */
export const SPAWNED_MAX_INLINE = 1024 * 1024;
/**
 * The same over RoCE: 256 KiB, as before session 21. There a 1 MiB STORE pulled by RDMA Read was
 * faster than one sent inline: 2.55 against 1.71 GB/s at 1 x 1, 3.14 against 1.78 at 16 x 1
 * (session 21). Since session 22 an inline one is sent from the caller's buffer and its Send
 * packets are placed on the lean receive path, and the two are even (three interleaved rounds:
 * 2.54-2.65 inline against 2.45-2.64 by Read at 1 x 1, 2.91-3.05 against 3.02-3.19 at 16 x 1),
 * so nothing argues for a change.
 */
export const SPAWNED_MAX_INLINE_ROCE = 256 * 1024;
/** The smallest Max Inline spawnedMaxInline steps down to (kbtp target's own default). */
export const SPAWNED_MIN_INLINE = 8 * 1024;

/** `transport` as connect() and spawnTarget() take it: absent when not given (iwarp). */
export function transportOf(options: { transport?: Transport }): { transport?: Transport } {
  return options.transport !== undefined ? { transport: options.transport } : {};
}

/** The shared ring holds at least 2x the pool (ring order is a power of two). */
export async function spawnTarget(options: SpawnOptions): Promise<RunningTarget> {
  return startTarget(spawnedTargetSettings(options), { log: options.log ?? ((line) => console.error(line)) });
}

/** The settings spawnTarget starts a target with. */
export function spawnedTargetSettings(options: SpawnOptions): TargetSettings {
  const largest = options.transport === 'roce' ? SPAWNED_MAX_INLINE_ROCE : SPAWNED_MAX_INLINE;
  const settings = spawnedSettings(options, Math.min(options.maxInline ?? largest, options.blockSize));
  if (options.maxInline === undefined) settings.pool.maxInline = spawnedMaxInline(settings);
  return settings;
}

/**
 * The largest Max Inline, from the one in `settings` down by halves to SPAWNED_MIN_INLINE, with
 * which the engine fits its 32-bit memory: a run with many sessions of large blocks, whose request
 * contexts (2 x credits x sessions of Max Inline each) would not fit at 1 MiB, keeps inline STOREs
 * at a smaller size rather than failing. Below that floor the layout's own error stands.
 */
function spawnedMaxInline(settings: TargetSettings): number {
  let maxInline = settings.pool.maxInline;
  for (;;) {
    try {
      computeLayout(resolveEngineConfig(engineConfigFor({ ...settings, pool: { ...settings.pool, maxInline } })), 16);
      return maxInline;
    } catch (error) {
      if (!(error instanceof EngineConfigError) || maxInline / 2 < SPAWNED_MIN_INLINE) return maxInline;
      maxInline = Math.floor(maxInline / 2);
    }
  }
}

function spawnedSettings(options: SpawnOptions, maxInline: number): TargetSettings {
  const { blockSize, blocks } = options;
  return resolveTargetSettings({
    listen: '127.0.0.1:0',
    ...transportOf(options),
    workers: options.workers,
    pool: { blockSize, blockCount: blocks, handleCount: blocks * 4, maxInline },
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
}
