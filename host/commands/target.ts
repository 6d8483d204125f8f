// `kbtp target`: the cache node. Reads the config file (if any), applies flags over it, starts
// the engine and the worker threads, and reports statistics until SIGINT/SIGTERM, then drains.
import type { Command } from '../cli.ts';
import { parseCommandLine } from './command-line.ts';
import {
  loadTargetSettings,
  parseListen,
  ConfigError,
  describeSettings,
  checkBusyPoll,
  engineConfigFor,
  setDurable,
  parseBytes,
  type TargetSettings,
} from '../kbtp/server/target-config.ts';
import { TierCapacityError } from '../tier/capacity.ts';
import { TierConfigMismatchError } from '../tier/recovery.ts';
import { crc32cImplementation } from '../tier/checksum.ts';
import { startTarget } from '../kbtp/server/target.ts';
import { EngineConfigError, resolveEngineConfig } from '../engine/config.ts';
import { computeLayout } from '../engine/layout.ts';
import { SramConfigError, loadSramConfig } from '../sram/index.ts';
import type { StatsSnapshot } from '../kbtp/server/stats.ts';
import type { RunningTarget } from '../kbtp/server/target.ts';
import { MAX_BUSY_POLL_US } from '../rnic/busy-poll.ts';
import { CPU_WAKE_LATENCY_CHOICES, parseCpuWakeLatencyUs } from '../util/cpu-latency.ts';

const HELP = `usage: kbtp target [options]

Runs a KBTP target (cache node) on the RDMAP binding over TCP. With no options it serves a
256 MiB pool of 64 KiB blocks to one open tenant ("default") on 127.0.0.1:7117.

options:
  --config FILE          JSON configuration (see docs/PROTOCOL.md); flags override it
  --check-config FILE    validate FILE (with the flags given), print the effective configuration
                         (secrets masked) and exit: 0 when it is valid, 2 when not
  --listen HOST:PORT     address to listen on (default 127.0.0.1:7117)
  --transport iwarp|roce RDMA binding: iwarp = RDMAP/MPA over TCP (default), roce = IB RC over
                         RoCEv2 (UDP; the TCP port carries connection setup only; unmasked rings)
                         RoCE's UDP socket batches packets per system call (sendmmsg/recvmmsg,
                         GSO/GRO) where koffi loads, else node:dgram; $KBTP_ROCE_UDP=batched|dgram
                         picks one (auto: the default)
  --workers N            worker threads serving connections (default 2)
  --block-size BYTES     block size (default 65536; e.g. 16K, 1M)
  --blocks N             blocks in the pool (default 4096)
  --credits N            requests a session may have outstanding (default 64)
  --max-inline BYTES     largest STORE sent inside its request (default 8192, at most the block size;
                         e.g. 256K). A larger STORE costs a second round trip: the target pulls its
                         data by RDMA Read, about half the STOREs per second at 16 KiB and 256 KiB,
                         a fifth to a third fewer at 1 MiB (docs/BENCH.md). The price is address
                         space: the target keeps 2 x credits receives of this size for each session
                         it may hold (8192 at the defaults: 2 GiB of the engine's 4 GiB at 256K; a
                         page is used once data lands in it); with a large value lower --credits or
                         session.maxSessions (config file)
  --sram-model FILE      model the RNIC's on-chip SRAM cache with this config (docs/SRAM.md)
  --loopback-congestion-control NAME|host
                         iwarp on a loopback address: the TCP congestion control of its connections
                         (default host: the system's, net.ipv4.tcp_congestion_control). BBR paces
                         loopback connections from a timer, the two CPUs then deliver segments out
                         of order and the sender retransmits them; reno doubled 256 KiB and 1 MiB
                         STOREs at 8 in flight but halved 16 sessions x 1 (docs/BENCH.md, session 13)
  --busy-poll-us N       iwarp: workers keep looking for their sockets' next bytes for N us after
                         each write instead of sleeping (0 = off; at most 10000): lower latency
                         when each polling thread has a CPU of its own, more CPU and system calls
                         (docs/BENCH.md); overrides $KBTP_BUSY_POLL_US. Neither given: 200 where
                         the kernel has no cpuidle driver (idle CPUs halt whatever
                         --cpu-wake-latency-us asks), else off
  --cpu-wake-latency-us N|off
                         while the node serves traffic, ask the kernel to keep idle CPUs within N us
                         of waking (PM QoS on /dev/cpu_dma_latency; root only). The default, 0, makes
                         idle CPUs poll instead of halting: a 16 KiB request at one in flight answered
                         2-3x sooner on a VM whose halted vCPUs wake slowly, for CPUs that spin while
                         busy (held only while busy, dropped after 2 s idle; docs/BENCH.md, session 15).
                         Not placed where the kernel has no cpuidle driver (it would change nothing).
                         off: no request
  --data-dir DIR         keep sealed blocks on a durable tier in DIR/tier (docs/TIER.md): they survive
                         restarts, kill -9 and power loss; the target recovers them before it listens.
                         Tenants without an "eviction" in the config get "demote"; an explicit one is kept
  --durable-capacity N   hard cap of the durable tier in octets, e.g. 1073741824 or 64GiB
                         (default: four times the pool)
  --no-durable           DRAM only, even when the config file names a data directory (refused while a
                         tenant says "eviction": "demote", which needs the tier)
  --stats-interval SECS  print statistics every SECS seconds (default 0: only at exit)
  -v, --verbose          log every session (open, refused, GOODBYE, disconnect) and every connection
                         that fails before its session exists (bad MPA, timeouts, refusals), with the reason
  -h, --help             show this help

Refusals, timeouts and handshake failures are always counted (in the statistics); SIGUSR2 prints
the statistics and a pool audit as one JSON line on standard output.

exit codes: 0 after a clean shutdown, 2 for a configuration error, 1 otherwise, including a
worker thread that failed (the node drains and exits so that its supervisor restarts it).`;

function describe(stats: StatsSnapshot): string {
  const lines = [
    `sessions: ${stats.sessionsOpen} open, ${stats.sessionsTotal} total, ${stats.sessionsRefused} refused;` +
      ` data moved ${(stats.dataBytes / 2 ** 20).toFixed(1)} MiB; tickets reclaimed ${stats.ticketsReclaimed}`,
  ];
  for (const [opcode, byStatus] of Object.entries(stats.requests)) {
    lines.push(
      `  ${opcode.padEnd(11)} ${Object.entries(byStatus)
        .map(([status, count]) => `${status} ${count}`)
        .join(', ')}`,
    );
  }
  const counted = (label: string, record: Record<string, number>): void => {
    const entries = Object.entries(record);
    if (entries.length > 0) lines.push(`  ${label.padEnd(11)} ${entries.map(([key, count]) => `${key} ${count}`).join(', ')}`);
  };
  counted('refused', stats.refusals);
  counted('timed out', stats.timeouts);
  counted('setup fail', stats.setupFailures);
  if (stats.internalErrors > 0) lines.push(`  internal errors ${stats.internalErrors} (each ended its connection only; run with -v for the cause)`);
  for (const report of stats.sram ?? []) lines.push(`  sram ${report}`);
  const d = stats.durable;
  if (d !== undefined) {
    lines.push(
      `  durable: ${d.blocksDurable} blocks, ${(d.bytesUsed / 2 ** 20).toFixed(1)} of ${(d.capacityBytes / 2 ** 20).toFixed(0)} MiB;` +
        ` demotions ${d.demotions}, promotions ${d.promotions}, drops ${d.drops}; fsyncs ${d.fsyncs} for ${d.groupCommits} group commits` +
        ` (${d.groupCommits > 0 ? (d.batchRecords / d.groupCommits).toFixed(1) : '0'} records each, at most ${d.batchLargest});` +
        ` checksum failures ${d.checksumFailures}, tier errors ${d.tierErrors}`,
    );
  }
  return lines.join('\n');
}

/** One JSON line for scripts and tests (SIGUSR2): the counters, the slots in use, memory, and a pool audit. */
async function statusLine(target: RunningTarget): Promise<string> {
  const stats = await target.stats();
  const audit = target.audit();
  return JSON.stringify({
    status: {
      ...stats,
      slotsInUse: target.slotsInUse(),
      cpuWakeLatency: target.wakeLatency() ?? null,
      rssBytes: process.memoryUsage().rss,
      audit: {
        ok: audit.ok,
        bound: audit.bound,
        inRings: audit.inRings,
        lost: audit.lost.length,
        doubled: audit.doubled.length,
        problems: audit.problems.length,
      },
    },
  });
}

export const command: Command = {
  summary: 'run a KBTP target (the cache node) on 127.0.0.1:7117 by default',
  async run(argv) {
    const parsed = parseCommandLine('kbtp target', HELP, argv, {
      config: { type: 'string' },
      'check-config': { type: 'string' },
      listen: { type: 'string' },
      transport: { type: 'string' },
      workers: { type: 'string' },
      'block-size': { type: 'string' },
      blocks: { type: 'string' },
      credits: { type: 'string' },
      'max-inline': { type: 'string' },
      'sram-model': { type: 'string' },
      'busy-poll-us': { type: 'string' },
      'cpu-wake-latency-us': { type: 'string' },
      'loopback-congestion-control': { type: 'string' },
      'stats-interval': { type: 'string' },
      'data-dir': { type: 'string' },
      'durable-capacity': { type: 'string' },
      'no-durable': { type: 'boolean' },
      verbose: { type: 'boolean', short: 'v' },
    });
    if (typeof parsed === 'number') return parsed;
    const { values } = parsed;
    if (values.config !== undefined && values['check-config'] !== undefined) {
      console.error(`kbtp target: give either --config or --check-config, not both\n\n${HELP}`);
      return 2;
    }
    const configFile = values['check-config'] ?? values.config;
    let settings: TargetSettings;
    try {
      settings = loadTargetSettings(configFile);
      const integer = (flag: string, value: string | undefined, min: number): number | undefined => {
        if (value === undefined) return undefined;
        const n = Number(value);
        if (!Number.isSafeInteger(n) || n < min)
          throw new ConfigError(`--${flag}`, `"${value}" is not an integer >= ${min}`, `e.g. --${flag} ${Math.max(min, 2)}`);
        return n;
      };
      if (values.listen !== undefined) settings.listen = parseListen(values.listen, '--listen');
      if (values.transport !== undefined) {
        if (values.transport !== 'iwarp' && values.transport !== 'roce')
          throw new ConfigError('--transport', `"${values.transport}" is not a transport`, 'use --transport iwarp or --transport roce');
        settings.transport = values.transport;
      }
      settings.workers = integer('workers', values.workers, 1) ?? settings.workers;
      const blockSize = values['block-size'] === undefined ? undefined : parseBytes(values['block-size'], '--block-size');
      if (blockSize !== undefined && blockSize < 8) throw new ConfigError('--block-size', `${blockSize} is less than 8 octets`, 'e.g. --block-size 64K');
      const blocks = integer('blocks', values.blocks, 1);
      if (blockSize !== undefined) settings.pool.blockSize = blockSize;
      if (blocks !== undefined) {
        // The default open tenant follows the pool when only the size changes on the command line.
        if (configFile === undefined && settings.tenants[0] !== undefined) settings.tenants[0].quota = blocks;
        settings.pool.blockCount = blocks;
        if (configFile === undefined) {
          settings.pool.handleCount = blocks * 4;
          const all = { first: 0n, count: BigInt(blocks * 4) };
          if (settings.tenants[0] !== undefined) settings.tenants[0] = { ...settings.tenants[0], storeRange: all, loadScope: all };
        }
      }
      if (values['max-inline'] !== undefined) {
        const maxInline = values['max-inline'] === '0' ? 0 : parseBytes(values['max-inline'], '--max-inline');
        if (maxInline > settings.pool.blockSize)
          throw new ConfigError(
            '--max-inline',
            `${maxInline} is more than the block size (${settings.pool.blockSize})`,
            'give at most the block size (0: every STORE by RDMA Read)',
          );
        settings.pool.maxInline = maxInline;
      } else if (blockSize !== undefined) settings.pool.maxInline = Math.min(settings.pool.maxInline, blockSize);
      settings.session.credits = integer('credits', values.credits, 1) ?? settings.session.credits;
      if (values['sram-model'] !== undefined) settings.sramModel = values['sram-model'];
      const congestion = values['loopback-congestion-control'];
      if (congestion !== undefined) {
        if (!/^[a-z0-9_-]{1,15}$/.test(congestion))
          throw new ConfigError('--loopback-congestion-control', `"${congestion}" is not a congestion control's name`, 'e.g. reno, cubic, or host');
        settings.loopbackCongestionControl = congestion === 'host' ? null : congestion;
      }
      const busyPollUs = integer('busy-poll-us', values['busy-poll-us'], 0);
      if (busyPollUs !== undefined) {
        if (busyPollUs > MAX_BUSY_POLL_US)
          throw new ConfigError('--busy-poll-us', `${busyPollUs} is more than ${MAX_BUSY_POLL_US}`, 'give 0 (off) to 10000 microseconds');
        settings.busyPollUs = busyPollUs;
      }
      checkBusyPoll(settings.transport, settings.busyPollUs, values['busy-poll-us'] !== undefined ? '--busy-poll-us' : 'busyPollUs');
      const wakeLatency = values['cpu-wake-latency-us'];
      if (wakeLatency !== undefined) {
        const us = parseCpuWakeLatencyUs(wakeLatency);
        if (us === undefined) throw new ConfigError('--cpu-wake-latency-us', `"${wakeLatency}" is not a wake latency`, `give ${CPU_WAKE_LATENCY_CHOICES}`);
        settings.cpuWakeLatencyUs = us;
      }
      if (values['no-durable'] === true && (values['data-dir'] !== undefined || values['durable-capacity'] !== undefined)) {
        throw new ConfigError('--no-durable', 'contradicts --data-dir/--durable-capacity', 'give one or the other');
      }
      const capacity = values['durable-capacity'] === undefined ? undefined : parseBytes(values['durable-capacity'], '--durable-capacity');
      if (values['no-durable'] === true) setDurable(settings, null);
      else if (values['data-dir'] !== undefined) setDurable(settings, values['data-dir'], capacity);
      else if (capacity !== undefined) {
        if (settings.durable === undefined) throw new ConfigError('--durable-capacity', 'needs a durable tier', 'give --data-dir DIR as well');
        settings.durable.capacityBytes = capacity;
      }
      if (values['check-config'] !== undefined) {
        // The rules that span several settings (overlapping ranges, quota sums, memory size) live in the engine's config.
        computeLayout(resolveEngineConfig(engineConfigFor(settings)), 16);
        if (settings.sramModel !== undefined) loadSramConfig(settings.sramModel);
        console.log(describeSettings(settings));
        console.error(`kbtp target: ${values['check-config']}: configuration is valid`);
        return 0;
      }
    } catch (error) {
      if (error instanceof ConfigError || error instanceof EngineConfigError || error instanceof SramConfigError) {
        const where = configFile !== undefined && !(error instanceof ConfigError && error.field === configFile) ? ` in ${configFile}` : '';
        console.error(`kbtp target: configuration error${where}: ${error.message}`);
        return 2;
      }
      throw error;
    }
    let target;
    try {
      target = await startTarget(settings, { verbose: values.verbose === true, log: (line) => console.error(line) });
    } catch (error) {
      if (
        error instanceof EngineConfigError ||
        error instanceof SramConfigError ||
        error instanceof TierCapacityError ||
        error instanceof TierConfigMismatchError
      ) {
        console.error(`kbtp target: configuration error: ${error.message}`);
        return 2;
      }
      console.error(`kbtp target: cannot start: ${error instanceof Error ? error.message : String(error)}`);
      return 1;
    }
    const { pool } = settings;
    // Bound before the first line: whoever waits for "listening" reads the lines after it at once.
    const checksum = settings.durable === undefined ? '' : crc32cImplementation();
    console.log(
      `kbtp target listening on ${target.host}:${target.port} (${settings.transport === 'roce' ? 'IB RC over RoCEv2, setup over TCP' : 'RDMAP/MPA over TCP'}, ${settings.workers} workers)`,
    );
    console.log(
      `pool: ${pool.blockCount} blocks of ${pool.blockSize} octets (${((pool.blockCount * pool.blockSize) / 2 ** 20).toFixed(pool.blockCount * pool.blockSize < 2 ** 24 ? 2 : 0)} MiB),` +
        ` handles ${pool.handleBase}..${pool.handleBase + BigInt(pool.handleCount) - 1n}, max inline ${pool.maxInline} octets, tenants: ${settings.tenants.map((t) => t.name).join(', ')}`,
    );
    const recovery = target.recovery;
    if (recovery !== undefined && settings.durable !== undefined) {
      console.log(
        `durable tier: ${settings.durable.dataDir}/tier, capacity ${(settings.durable.capacityBytes / 2 ** 20).toFixed(0)} MiB, CRC32C by ${checksum}; ` +
          (recovery.fresh
            ? 'new, empty'
            : `recovered ${recovery.blocksRecovered} sealed blocks in ${recovery.seconds.toFixed(3)} s ` +
              `(records dropped ${recovery.recordsDropped}, torn tail ${recovery.tornBytes} octets, checksum failures ${recovery.checksumFailures}` +
              `${recovery.blocksOverCapacity > 0 ? `, ${recovery.blocksOverCapacity} over the capacity or a Durable Quota, left out` : ''}` +
              `${recovery.blocksDiscarded > 0 ? `, ${recovery.blocksDiscarded} not recovered after a bad journal record` : ''})`),
      );
    }
    console.log(`try: kbtp info --target ${target.host}:${target.port}${settings.transport === 'roce' ? ' --transport roce' : ''}   (Ctrl-C to stop)`);
    const interval = Number(values['stats-interval'] ?? 0);
    const timer =
      interval > 0
        ? setInterval(() => {
            void target.stats().then((s) => console.log(describe(s)));
          }, interval * 1000)
        : undefined;
    const onStatus = (): void => {
      void statusLine(target).then((line) => console.log(line));
    };
    process.on('SIGUSR2', onStatus);
    // A worker failure also ends the wait: the process must not linger, nor exit 0.
    const failure = await new Promise<Error | undefined>((resolve) => {
      process.once('SIGINT', () => resolve(undefined));
      process.once('SIGTERM', () => resolve(undefined));
      void target.failure.then(resolve);
    });
    if (timer !== undefined) clearInterval(timer);
    process.off('SIGUSR2', onStatus);
    console.error(
      failure === undefined ? 'kbtp target: draining...' : 'kbtp target: a worker failed; draining and exiting so that the supervisor restarts the node',
    );
    const final = await target.stop();
    const audit = target.audit();
    console.log(describe(final));
    console.log(`pool audit: ${audit.bound} bound, ${audit.inRings} free, lost ${audit.lost.length}, doubled ${audit.doubled.length}`);
    return audit.ok && failure === undefined ? 0 : 1;
  },
};
