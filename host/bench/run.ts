// One `kbtp bench` run over block sizes: for each size, a target (spawned for that size, or the
// one given), N sessions, and a phase per entry of the mix. Used by the command and by
// bench/compare.
import { UsageError } from '../errors.ts';
import * as K from '../../assembly/kbtp-constants.ts';
import { connect, type KbtpSession } from '../kbtp/initiator.ts';
import type { RunningTarget } from '../kbtp/server/target.ts';
import { OP_LABELS, usesDirect, type Phase } from './mix.ts';
import { rowsOf, formatSize, type BenchRow } from './report.ts';
import { spawnTarget, transportOf } from './spawn.ts';
import type { Transport } from '../kbtp/server/target-config.ts';
import { runPhase, type Progress } from './workload.ts';
import { ThreadCpu } from './thread-cpu.ts';

export interface BenchConfig {
  /** host:port of a running target, or undefined to spawn one per block size. */
  target?: string;
  tenant?: string;
  secret?: string;
  /** Worker threads of a spawned target. */
  workers: number;
  /** A spawned target's CPU wake-latency request while busy (undefined: the target's default; null: none). */
  cpuWakeLatencyUs?: number | null;
  /** A spawned target's Max Inline (undefined: spawn.ts's default). */
  maxInline?: number;
  /** RDMA binding of the sessions and of a spawned target (default iwarp). */
  transport?: Transport;
  /** Block sizes; empty: the block size of the target (a running target only). */
  sizes: readonly number[];
  phases: readonly Phase[];
  sessions: number;
  inFlight: number;
  keysPerSession: number;
  /** LOAD-only and STORE-only phases use loadMany/storeMany (see PhaseOptions.batched). */
  batched?: boolean;
  durationMs?: number;
  count?: number;
  warmupMs: number;
  /**
   * The warm-up of each phase that runs an operation not yet run at this block size, when longer
   * than `warmupMs`: a target spawned for the size (and, for the first size, this process's client
   * code) is still compiled and collected by V8's helper threads for a second or two, which landed
   * in the first phase's window (make compare, issue 16: 26-33 us per request of those threads in a
   * 16 KiB LOAD window after 0.5 s, under 1 after 2.5 s). A phase of another operation runs code
   * of both sides the phases before it did not (a 1 MiB STORE: the initiator's RDMA Read
   * responder, the target's Read and its placement), compiled, and deoptimized where the earlier
   * phase's code meets new shapes, in its own window: after 0.5 s that took 37-53 us per request
   * of those threads and tripled the 1 MiB STORE's p99 (issue 16, session 15).
   */
  firstWarmupMs?: number;
  /** First handle used (default: the start of the session's store range). */
  handleBase?: bigint;
  onProgress?: (label: string, progress: Progress) => void;
  log?: (line: string) => void;
}

export class BenchConfigError extends UsageError {}

/**
 * The warm-up of each phase run in order against one target: `firstWarmupMs` (when longer) for a
 * phase with an operation no phase before it ran, `warmupMs` for the others (BenchConfig).
 */
export function phaseWarmups(phases: readonly Phase[], warmupMs: number, firstWarmupMs = 0): number[] {
  const ran = new Set<string>();
  return phases.map((phase) => {
    const fresh = phase.some((item) => !ran.has(item.op));
    for (const item of phase) ran.add(item.op);
    return fresh ? Math.max(warmupMs, firstWarmupMs) : warmupMs;
  });
}

function phaseLabel(phase: Phase): string {
  return phase.map((item) => (phase.length > 1 ? `${OP_LABELS[item.op]}:${item.weight}` : OP_LABELS[item.op])).join('+');
}

async function openSessions(address: string, config: BenchConfig): Promise<KbtpSession[]> {
  const direct = usesDirect(config.phases);
  const capabilities = (direct.load ? K.CAP_DIRECT_LOAD : 0) | (direct.alloc ? K.CAP_DIRECT_ALLOC : 0);
  const sessions: KbtpSession[] = [];
  try {
    for (let i = 0; i < config.sessions; i++) {
      sessions.push(
        await connect(address, {
          tenant: config.tenant ?? 'default',
          secret: config.secret ?? '',
          capabilities,
          pipeline: config.inFlight,
          ...transportOf(config),
        }),
      );
    }
  } catch (error) {
    await Promise.all(sessions.map((session) => session.close(500).catch(() => undefined)));
    throw error;
  }
  const first = sessions[0];
  if (first !== undefined && (first.hello.capabilities & capabilities) !== capabilities) {
    await Promise.all(sessions.map((session) => session.close(500).catch(() => undefined)));
    throw new BenchConfigError(
      `the target did not grant ${direct.load ? 'DIRECT_LOAD ' : ''}${direct.alloc ? 'DIRECT_ALLOC ' : ''}to tenant '${config.tenant ?? 'default'}'; ` +
        'use a tenant trusted for direct mode, or drop direct-load/direct-alloc from the mix',
    );
  }
  return sessions;
}

function checkFit(sessions: readonly KbtpSession[], size: number, config: BenchConfig, firstHandle: bigint): void {
  const hello = sessions[0]?.hello;
  if (hello === undefined) return;
  if (size > hello.blockSize)
    throw new BenchConfigError(`${formatSize(size)} blocks do not fit the target's ${hello.blockSize}-octet blocks; use --sizes up to ${hello.blockSize}`);
  const depth = Math.min(...sessions.map((session) => session.depth));
  if (config.inFlight > depth) {
    throw new BenchConfigError(`the target grants ${hello.targetCredits} credits per session, fewer than --in-flight ${config.inFlight}; lower --in-flight`);
  }
  const needed = BigInt(config.sessions * config.keysPerSession);
  if (needed > BigInt(hello.quota)) {
    throw new BenchConfigError(
      `${config.sessions} sessions x ${config.keysPerSession} handles need ${needed} blocks, over the tenant's quota of ${hello.quota}; lower --sessions or --keys`,
    );
  }
  const rangeEnd = hello.storeFirst + hello.storeCount;
  if (firstHandle < hello.storeFirst || firstHandle + needed > rangeEnd) {
    throw new BenchConfigError(
      `handles ${firstHandle}..${firstHandle + needed - 1n} are outside the tenant's store range ${hello.storeFirst}..${rangeEnd - 1n}; adjust --handle-base or --keys`,
    );
  }
}

/** The block size a running target grants (one short session to ask). */
async function targetBlockSize(config: BenchConfig): Promise<number> {
  if (config.target === undefined) throw new BenchConfigError('give --sizes for a spawned target');
  const session = await connect(config.target, { tenant: config.tenant ?? 'default', secret: config.secret ?? '', pipeline: 1, ...transportOf(config) });
  const size = session.hello.blockSize;
  await session.close(500).catch(() => undefined);
  return size;
}

/**
 * Runs every phase at every size; rows come back in the order they ran. Each finished phase is
 * pushed into `rows` at once, so a caller whose run is cut short (an error, Ctrl-C) still has them.
 */
export async function runBench(config: BenchConfig, rows: BenchRow[] = []): Promise<BenchRow[]> {
  const direct = usesDirect(config.phases);
  const sizes = config.sizes.length > 0 ? config.sizes : [await targetBlockSize(config)];
  for (const size of sizes) {
    let target: RunningTarget | undefined;
    let address = config.target;
    if (address === undefined) {
      // Room for every session's handles plus the ring's slack; credits cover the pipeline.
      target = await spawnTarget({
        blockSize: size,
        blocks: config.sessions * config.keysPerSession + 16,
        workers: config.workers,
        credits: Math.max(config.inFlight, 8),
        sessions: config.sessions,
        directLoad: direct.load,
        directAlloc: direct.alloc,
        ...(config.cpuWakeLatencyUs !== undefined ? { cpuWakeLatencyUs: config.cpuWakeLatencyUs } : {}),
        ...(config.maxInline !== undefined ? { maxInline: config.maxInline } : {}),
        ...transportOf(config),
        ...(config.log !== undefined ? { log: config.log } : {}),
      });
      address = `127.0.0.1:${target.port}`;
    }
    let sessions: KbtpSession[] = [];
    const threadCpu = ThreadCpu.open(target?.threadIds ?? []);
    try {
      sessions = await openSessions(address, config);
      const firstHandle = config.handleBase ?? sessions[0]?.hello.storeFirst ?? 0n;
      checkFit(sessions, size, config, firstHandle);
      const warmups = phaseWarmups(config.phases, config.warmupMs, config.firstWarmupMs);
      for (const [index, phase] of config.phases.entries()) {
        const label = `${phaseLabel(phase)} ${formatSize(size)}`;
        const result = await runPhase({
          sessions,
          size,
          phase,
          inFlight: config.inFlight,
          keysPerSession: config.keysPerSession,
          firstHandle,
          batched: config.batched === true,
          ...(config.durationMs !== undefined ? { durationMs: config.durationMs } : {}),
          ...(config.count !== undefined ? { count: config.count } : {}),
          warmupMs: warmups[index] ?? config.warmupMs,
          ...(threadCpu !== undefined ? { threadCpu } : {}),
          ...(config.onProgress !== undefined ? { onProgress: (progress: Progress) => config.onProgress?.(label, progress) } : {}),
        });
        rows.push(...rowsOf(result, phaseLabel(phase)));
      }
    } finally {
      await Promise.all(sessions.map((session) => session.close(1000).catch(() => undefined)));
      if (target !== undefined) await target.stop(1000);
    }
  }
  return rows;
}
