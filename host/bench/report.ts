// What `kbtp bench` reports: one row per operation and block size, as a text table, as JSON and
// as an SVG chart (throughput and p99 latency).
import { formatTable } from '../report/table.ts';
import { barChart } from '../report/svg.ts';
import { OP_LABELS, type OpName } from './mix.ts';
import type { PhaseResult } from './workload.ts';
import type { PhaseCpu } from './thread-cpu.ts';

export interface BenchRow {
  op: OpName;
  /** The phase the row was measured in ("LOAD", or e.g. "DIRECT_ALLOC" for its FREEs). */
  phase: string;
  /** Octets per block. */
  size: number;
  sessions: number;
  inFlight: number;
  /** Requests that succeeded in the measured window. */
  ops: number;
  seconds: number;
  opsPerSec: number;
  bytesPerSec: number;
  /** Decimal gigabytes (1e9 octets) per second. */
  gbPerSec: number;
  p50Us: number;
  p99Us: number;
  p999Us: number;
  meanUs: number;
  maxUs: number;
  /** Failed requests by KBTP status (and TRANSPORT, CORRUPT). */
  errors: Record<string, number>;
  /** Loads whose data was not what was stored. */
  corrupt: number;
  firstError?: string;
  /**
   * CPU per request of the row's phase by thread (all its operations together), and how busy each
   * side was: client = the main thread, target = a spawned target's workers, other = the rest.
   */
  cpu?: PhaseCpu;
}

const round = (value: number, digits = 3): number => (Number.isFinite(value) ? +value.toFixed(digits) : value);

export function rowsOf(result: PhaseResult, phase = ''): BenchRow[] {
  return result.ops.map((stats) => {
    const h = stats.histogram;
    const row: BenchRow = {
      op: stats.op,
      phase: phase || OP_LABELS[stats.op],
      size: result.size,
      sessions: result.sessions,
      inFlight: result.inFlight,
      ops: stats.count,
      seconds: round(result.seconds),
      opsPerSec: round(stats.count / result.seconds, 1),
      bytesPerSec: Math.round(stats.bytes / result.seconds),
      gbPerSec: round(stats.bytes / result.seconds / 1e9, 4),
      p50Us: round(h.percentileNs(0.5) / 1e3, 1),
      p99Us: round(h.percentileNs(0.99) / 1e3, 1),
      p999Us: round(h.percentileNs(0.999) / 1e3, 1),
      meanUs: round(h.meanNs / 1e3, 1),
      maxUs: round(h.maxNs / 1e3, 1),
      errors: Object.fromEntries(stats.errors),
      corrupt: stats.corrupt,
    };
    if (stats.firstProblem !== undefined) row.firstError = stats.firstProblem;
    if (result.cpu !== undefined) row.cpu = result.cpu;
    return row;
  });
}

export function formatSize(octets: number): string {
  if (octets >= 2 ** 20 && octets % 2 ** 20 === 0) return `${octets / 2 ** 20} MiB`;
  if (octets >= 1024 && octets % 1024 === 0) return `${octets / 1024} KiB`;
  return `${octets} B`;
}

function errorText(row: BenchRow): string {
  const entries = Object.entries(row.errors);
  return entries.length === 0 ? '0' : entries.map(([name, count]) => `${count} ${name}`).join(', ');
}

/** "client / target (client busy / target busy)", the target's parts only when it ran in this process. */
function cpuText(cpu: PhaseCpu | undefined): string {
  if (cpu === undefined) return '-';
  if (cpu.targetUsPerOp === undefined) return `${cpu.clientUsPerOp} (${cpu.clientBusy})`;
  return `${cpu.clientUsPerOp} / ${cpu.targetUsPerOp} (${cpu.clientBusy} / ${cpu.targetBusy})`;
}

export function formatRows(title: string, rows: readonly BenchRow[]): string {
  return formatTable({
    title,
    columns: ['op', 'size', 'sessions', 'in flight', 'ops', 'ops/s', 'GB/s', 'p50 us', 'p99 us', 'p99.9 us', 'CPU us/req client/target (busy)', 'errors'],
    rows: rows.map((row) => [
      row.phase === OP_LABELS[row.op] ? row.phase : `${OP_LABELS[row.op]} (in ${row.phase})`,
      formatSize(row.size),
      row.sessions,
      row.inFlight,
      row.ops,
      row.opsPerSec,
      row.gbPerSec,
      row.p50Us,
      row.p99Us,
      row.p999Us,
      cpuText(row.cpu),
      errorText(row),
    ]),
  });
}

/** Two bar charts stacked in one SVG document: GB/s and p99 latency, grouped by block size. */
export function chartRows(title: string, rows: readonly BenchRow[]): string {
  const sizes = [...new Set(rows.map((row) => row.size))].sort((a, b) => a - b);
  const ops = [...new Set(rows.map((row) => row.op))];
  const series = (pick: (row: BenchRow) => number) =>
    ops.map((op) => ({
      name: OP_LABELS[op],
      values: sizes.map((size) => {
        const row = rows.find((r) => r.op === op && r.size === size);
        return row === undefined ? 0 : pick(row);
      }),
    }));
  const groups = sizes.map(formatSize);
  const throughput = barChart({ title: `${title}: throughput`, yLabel: 'GB/s', groups, series: series((row) => row.gbPerSec) });
  const latency = barChart({ title: `${title}: p99 latency`, yLabel: 'microseconds', groups, series: series((row) => row.p99Us) });
  return stack([throughput, latency]);
}

/** Nests complete SVG documents one under the other in a new document. */
export function stack(documents: readonly string[]): string {
  let y = 0;
  let width = 0;
  const parts: string[] = [];
  for (const document of documents) {
    const w = Number(/width="([0-9.]+)"/.exec(document)?.[1] ?? 800);
    const h = Number(/height="([0-9.]+)"/.exec(document)?.[1] ?? 440);
    parts.push(document.replace(/^<svg /, `<svg x="0" y="${y}" `));
    y += h;
    width = Math.max(width, w);
  }
  return [`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${y}" viewBox="0 0 ${width} ${y}">`, ...parts, '</svg>', ''].join('\n');
}
