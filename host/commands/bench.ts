// `kbtp bench`: measures a target with a mix of KBTP operations at several block sizes, or
// replays a Mooncake trace against it; prints a table (or JSON) and optionally an SVG chart.
import { writeFileSync } from 'node:fs';
import type { Command } from '../cli.ts';
import { parseCommandLine } from './command-line.ts';
import { transportOption } from './client-common.ts';
import { DEFAULT_PORT } from '../kbtp/address.ts';
import { parseTarget } from '../kbtp/initiator.ts';
import { KbtpStatusError } from '../kbtp/errors.ts';
import { parseMix } from '../bench/mix.ts';
import { parseInteger, parseNumber, parseSize, parseSizes, UsageError } from '../bench/options.ts';
import { CPU_WAKE_LATENCY_CHOICES, parseCpuWakeLatencyUs } from '../util/cpu-latency.ts';
import { chartRows, formatRows, formatSize, type BenchRow } from '../bench/report.ts';
import { runBench } from '../bench/run.ts';
import { replayTrace, formatReplay, chartReplay, type ReplayResult } from '../bench/trace.ts';
import type { Progress } from '../bench/workload.ts';

const HELP = `usage: kbtp bench [options]
       kbtp bench --trace FILE [options]

Measures a KBTP target: N sessions each keep M requests in flight over their own handles, for a
duration or a count, at each block size; every block loaded is checked against what was stored
(CRC-32 and a handle/version stamp), so a wrong answer counts as an error, never as speed.

target:
  --spawn                start a target in this process for each block size (loopback, open tenant)
  --workers N            worker threads of the spawned target (default 1)
  --cpu-wake-latency-us N|off
                         the spawned target's CPU wake-latency request while busy (default 0, as
                         kbtp target's: idle CPUs poll; off: none; docs/PROTOCOL.md)
  --max-inline SIZE      the spawned target's Max Inline: the largest STORE sent with its request;
                         larger ones are pulled by RDMA Read, a second round trip (default: the
                         block size, up to 1M, 256K over RoCE; 0: every STORE pulled)
  --target HOST:PORT     benchmark a running target instead (default 127.0.0.1:${DEFAULT_PORT}, or $KBTP_TARGET)
  --transport T          iwarp (default, or $KBTP_TRANSPORT) or roce: the sessions' RDMA binding, and
                         a spawned target's; a running target's must match (kbtp target --transport)
  --tenant NAME          tenant (default "default", or $KBTP_TENANT)
  --secret SECRET        the tenant's secret (default $KBTP_SECRET)
  --handle-base H        first handle used on a running target (default: its store range start);
                         the handles used are overwritten and freed

workload:
  --mix LIST             operations: load, store, alloc-store, free, direct-load, direct-alloc
                         "load,store" runs a phase per operation (default);
                         "load:3,store:1" runs one phase drawing operations with those weights
  --sizes LIST           block sizes (default: the target's block size; 16K,256K,1M with --spawn)
  --sessions N           sessions (default 1)
  --in-flight M          requests in flight per session (default 8)
  --keys K               handles per session (default: --in-flight)
  --batch                LOAD and STORE phases post each session's --in-flight requests
                         together with loadMany/storeMany (like redis-benchmark -P) instead
                         of independent loadInto()/storeFrom() calls; a request's latency is its batch's
  --duration SECS        measured time per phase (default 3)
  --count N              instead of a duration: requests per phase over all sessions
  --warmup SECS          unmeasured time before each timed phase (default 0.5; with
                         --spawn, 2 for each size's first phase of each operation: the new
                         target's code for it is still being compiled)

trace replay (--trace FILE, e.g. test/fixtures/traces/mooncake-conversation.jsonl):
  --block-size SIZE      octets per trace block (default 16K)
  --time-scale X         replay timestamps X times faster (default 0: as fast as possible)
  --capacity N           blocks the replay may keep; least recently used ones are freed
                         (default: unbounded, as many as the trace has distinct blocks)
  --requests N           replay only the first N requests
  --concurrency N        requests replayed at once per session (default 8)

output:
  --json                 print the results as JSON on standard output instead of the table
  --svg FILE             write an SVG chart
  -q, --quiet            no progress on standard error
  -h, --help             show this help

environment:
  KBTP_BUSY_POLL_US=N    after each socket write, keep looking for the answer instead of sleeping
                         for up to N us (this process's threads: the sessions and a spawned
                         target's workers; 0: off). Unset: 200 where the kernel has no cpuidle
                         driver (its idle CPUs halt whatever wake latency is asked), else off.
                         Lower latency for more CPU and system calls, and only with a CPU per
                         polling thread: docs/BENCH.md

A run cut short (an error, Ctrl-C) still prints the phases it finished.

exit codes: 0 success, 1 errors or wrong data seen (or the target failed), 2 usage error,
130 interrupted.`;

function progressPrinter(quiet: boolean): (label: string, progress: Progress) => void {
  if (quiet) return () => undefined;
  const tty = process.stderr.isTTY === true;
  return (label, progress) => {
    const seconds = progress.elapsedMs / 1000;
    const rate = progress.completed / Math.max(1e-3, seconds);
    const done =
      progress.plannedMs !== undefined
        ? `${seconds.toFixed(1)}/${(progress.plannedMs / 1000).toFixed(1)} s`
        : `${progress.completed}/${progress.planned ?? '?'} requests`;
    const line = `  ${label}: ${done}, ${progress.completed} done (${rate.toFixed(0)}/s), ${(progress.bytes / 1e9).toFixed(2)} GB, ${progress.errors} errors`;
    process.stderr.write(tty ? `\r${line.padEnd(100)}` : `${line}\n`);
  };
}

function endProgress(quiet: boolean): void {
  if (!quiet && process.stderr.isTTY === true) process.stderr.write(`${'\r'.padEnd(101)}\r`);
}

export const command: Command = {
  summary: 'benchmark a target (ops/s, GB/s, latency percentiles) or replay a KV-cache trace',
  async run(argv) {
    const parsed = parseCommandLine('kbtp bench', HELP, argv, {
      spawn: { type: 'boolean' },
      workers: { type: 'string' },
      'cpu-wake-latency-us': { type: 'string' },
      'max-inline': { type: 'string' },
      target: { type: 'string' },
      transport: { type: 'string' },
      tenant: { type: 'string' },
      secret: { type: 'string' },
      'handle-base': { type: 'string' },
      mix: { type: 'string' },
      sizes: { type: 'string' },
      sessions: { type: 'string' },
      'in-flight': { type: 'string' },
      keys: { type: 'string' },
      batch: { type: 'boolean' },
      duration: { type: 'string' },
      count: { type: 'string' },
      warmup: { type: 'string' },
      trace: { type: 'string' },
      'block-size': { type: 'string' },
      'time-scale': { type: 'string' },
      capacity: { type: 'string' },
      requests: { type: 'string' },
      concurrency: { type: 'string' },
      json: { type: 'boolean' },
      svg: { type: 'string' },
      quiet: { type: 'boolean', short: 'q' },
    });
    if (typeof parsed === 'number') return parsed;
    const { values } = parsed;
    const quiet = values.quiet === true;
    const log = (line: string): void => {
      if (!quiet) console.error(line);
    };
    const rows: BenchRow[] = [];
    let title = 'kbtp bench';
    // The phases finished so far, printed whatever ends the run; reported once.
    let reported = false;
    const report = (): void => {
      if (reported || rows.length === 0) return;
      reported = true;
      if (values.json === true) console.log(JSON.stringify({ rows }, null, 2));
      else console.log(formatRows(title, rows));
      for (const row of rows) if (row.firstError !== undefined) console.error(`kbtp bench: ${row.op} ${formatSize(row.size)}: first error: ${row.firstError}`);
    };
    const interrupted = (): void => {
      endProgress(quiet);
      console.error('kbtp bench: interrupted; the phases finished so far:');
      report();
      process.exit(130);
    };
    process.once('SIGINT', interrupted);
    try {
      if (values.spawn === true && values.target !== undefined) throw new UsageError('give either --spawn or --target, not both');
      const target = values.spawn === true ? undefined : (values.target ?? process.env.KBTP_TARGET ?? `127.0.0.1:${DEFAULT_PORT}`);
      if (target !== undefined) parseTarget(target);
      const tenant = values.tenant ?? process.env.KBTP_TENANT ?? 'default';
      const secret = values.secret ?? process.env.KBTP_SECRET ?? '';
      const workers = parseInteger(values.workers, '--workers', 1);
      const wakeText = values['cpu-wake-latency-us'];
      if (wakeText !== undefined && target !== undefined)
        throw new UsageError('--cpu-wake-latency-us sets a spawned target: give --spawn, or set it on the running target');
      const cpuWakeLatencyUs = wakeText === undefined ? undefined : parseCpuWakeLatencyUs(wakeText);
      if (wakeText !== undefined && cpuWakeLatencyUs === undefined)
        throw new UsageError(`--cpu-wake-latency-us: "${wakeText}" is not a wake latency: give ${CPU_WAKE_LATENCY_CHOICES}`);
      const wake = cpuWakeLatencyUs !== undefined ? { cpuWakeLatencyUs } : {};
      if (values['max-inline'] !== undefined && target !== undefined)
        throw new UsageError('--max-inline sets a spawned target: give --spawn, or set it on the running target (kbtp target --max-inline)');
      const inline =
        values['max-inline'] === undefined ? {} : { maxInline: values['max-inline'] === '0' ? 0 : parseSize(values['max-inline'], '--max-inline') };
      const transport = transportOption(values.transport);
      const sessions = parseInteger(values.sessions, '--sessions', 1);
      if (values.duration !== undefined && values.count !== undefined) throw new UsageError('give either --duration or --count, not both');

      if (values.trace !== undefined) {
        for (const flag of ['mix', 'sizes', 'in-flight', 'keys', 'batch', 'duration', 'count', 'warmup', 'handle-base'] as const) {
          if (values[flag] !== undefined) throw new UsageError(`--${flag} does not apply to a trace replay`);
        }
        const result: ReplayResult = await replayTrace({
          path: values.trace,
          ...(target !== undefined ? { target } : {}),
          tenant,
          secret,
          workers,
          ...wake,
          ...inline,
          transport,
          sessions,
          blockSize: values['block-size'] === undefined ? 16 * 1024 : parseSize(values['block-size'], '--block-size'),
          timeScale: parseNumber(values['time-scale'], '--time-scale', 0),
          ...(values.capacity !== undefined ? { capacity: parseInteger(values.capacity, '--capacity', 1) } : {}),
          ...(values.requests !== undefined ? { requests: parseInteger(values.requests, '--requests', 1) } : {}),
          concurrency: parseInteger(values.concurrency, '--concurrency', 8),
          ...(quiet ? {} : { onProgress: progressPrinter(false) }),
          log,
        });
        endProgress(quiet);
        if (values.json === true) console.log(JSON.stringify(result, null, 2));
        else console.log(formatReplay(result));
        if (values.svg !== undefined) writeFileSync(values.svg, chartReplay(result));
        return result.corrupt > 0 || Object.keys(result.errors).length > 0 ? 1 : 0;
      }

      for (const flag of ['block-size', 'time-scale', 'capacity', 'requests', 'concurrency'] as const) {
        if (values[flag] !== undefined) throw new UsageError(`--${flag} applies only to a trace replay (--trace FILE)`);
      }
      const inFlight = parseInteger(values['in-flight'], '--in-flight', 8);
      const keys = parseInteger(values.keys, '--keys', inFlight);
      if (keys < inFlight) throw new UsageError(`--keys ${keys} is fewer than --in-flight ${inFlight}: each request in flight needs a handle of its own`);
      let handleBase: bigint | undefined;
      if (values['handle-base'] !== undefined) {
        if (!/^(0x[0-9a-fA-F]+|[0-9]+)$/.test(values['handle-base'])) throw new UsageError(`--handle-base: "${values['handle-base']}" is not a handle`);
        handleBase = BigInt(values['handle-base']);
      }
      const config = {
        ...(target !== undefined ? { target } : {}),
        tenant,
        secret,
        workers,
        ...wake,
        ...inline,
        transport,
        sizes: values.sizes !== undefined ? parseSizes(values.sizes, '--sizes') : target === undefined ? parseSizes('16K,256K,1M', '--sizes') : [],
        phases: parseMix(values.mix ?? 'load,store'),
        sessions,
        inFlight,
        keysPerSession: keys,
        batched: values.batch === true,
        ...(values.count !== undefined
          ? { count: parseInteger(values.count, '--count', 1) }
          : { durationMs: parseNumber(values.duration, '--duration', 3, 0.001) * 1000 }),
        warmupMs: parseNumber(values.warmup, '--warmup', 0.5) * 1000,
        // A target spawned per size is still being compiled for a second or two (host/bench/run.ts):
        // without an explicit --warmup its first phase of each operation waits 2 s before measuring.
        ...(target === undefined && values.warmup === undefined ? { firstWarmupMs: 2000 } : {}),
        ...(handleBase !== undefined ? { handleBase } : {}),
        ...(quiet ? {} : { onProgress: progressPrinter(false) }),
        log,
      };
      log(
        `kbtp bench: ${target === undefined ? `spawned target (${workers} worker${workers === 1 ? '' : 's'}) per size` : `target ${target}`}${transport === 'roce' ? ' over RoCE' : ''}, ` +
          `${sessions} session${sessions === 1 ? '' : 's'} x ${inFlight} in flight${values.batch === true ? ' (batched)' : ''}, sizes ${config.sizes.length === 0 ? "the target's block size" : config.sizes.map(formatSize).join(', ')}`,
      );
      title = `kbtp bench (${target === undefined ? `spawned, ${workers} worker${workers === 1 ? '' : 's'}` : target}${transport === 'roce' ? ', RoCE' : ''}, ${sessions} session${sessions === 1 ? '' : 's'} x ${inFlight} in flight)`;
      await runBench(config, rows);
      endProgress(quiet);
      if (values.json === true) {
        reported = true;
        console.log(
          JSON.stringify(
            { target: target ?? 'spawned', transport, workers: target === undefined ? workers : undefined, sessions, inFlight, keysPerSession: keys, rows },
            null,
            2,
          ),
        );
        for (const row of rows)
          if (row.firstError !== undefined) console.error(`kbtp bench: ${row.op} ${formatSize(row.size)}: first error: ${row.firstError}`);
      } else {
        report();
      }
      const failed = rows.flatMap((row) => Object.entries(row.errors).map(([status, count]) => `${count} ${status} (${row.phase} ${formatSize(row.size)})`));
      if (failed.length > 0) console.error(`kbtp bench: errors: ${failed.join(', ')}`);
      if (values.svg !== undefined) writeFileSync(values.svg, chartRows(title, rows));
      return rows.some((row) => row.corrupt > 0 || Object.keys(row.errors).length > 0) ? 1 : 0;
    } catch (error) {
      endProgress(quiet);
      if (rows.length > 0 && !reported) {
        console.error('kbtp bench: the run was cut short; the phases it finished:');
        report();
      }
      if (error instanceof UsageError) {
        console.error(`kbtp bench: ${error.message}`);
        return 2;
      }
      if (error instanceof KbtpStatusError) {
        console.error(`kbtp bench: the target answered ${error.message}`);
        return 1;
      }
      console.error(`kbtp bench: ${error instanceof Error ? error.message : String(error)}`);
      return 1;
    } finally {
      process.off('SIGINT', interrupted);
    }
  },
};
