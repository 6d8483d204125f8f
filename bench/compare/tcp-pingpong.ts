// The barest loopback request/answer exchange (tcp-pingpong.c), as make compare's kernel reference:
// at 1 in flight for the p99 target (a p99 / p50 the bare exchange cannot keep within 2x on this
// machine is the platform's, not kbtp's or Redis's; docs/BENCH.md, session 7), and with several
// requests in flight per batch for the pipelined rows' GB/s (session 14 of 2026-12-02).
import { buildC, run } from './tools.ts';

export interface PingPongResult {
  size: number;
  /** Requests per batch: 1, or the --in-flight given. */
  inFlight: number;
  requests: number;
  /** Gbit/s of answers over the measured exchange; only the pipelined output states its time. */
  gbps?: number;
  p50Us: number;
  p90Us: number;
  p99Us: number;
  p999Us: number;
}

const PERCENTILES = 'p50_us ([\\d.]+) p90_us ([\\d.]+) p99_us ([\\d.]+) p999_us ([\\d.]+)';
const ONE = new RegExp(`^size (\\d+) requests (\\d+) ${PERCENTILES}$`);
const PIPELINED = new RegExp(`^size (\\d+) in_flight (\\d+) requests (\\d+) seconds ([\\d.]+) ${PERCENTILES}$`);

/**
 * Parses tcp-pingpong's one line: "size S requests N p50_us A p90_us B p99_us C p999_us D", or
 * with --in-flight K > 1 "size S in_flight K requests N seconds T p50_us A ...".
 */
export function parsePingPongOutput(output: string): PingPongResult {
  const line = output.trim();
  const one = ONE.exec(line);
  if (one !== null) {
    const [size, requests, p50Us, p90Us, p99Us, p999Us] = one.slice(1).map(Number) as [number, number, number, number, number, number];
    return { size, inFlight: 1, requests, p50Us, p90Us, p99Us, p999Us };
  }
  const pipelined = PIPELINED.exec(line);
  if (pipelined === null)
    throw new Error(`tcp-pingpong: expected 'size S requests N p50_us A p90_us B p99_us C p999_us D' (or 'size S in_flight K ...'), got '${line}'`);
  const [size, inFlight, requests, seconds, p50Us, p90Us, p99Us, p999Us] = pipelined.slice(1).map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const gbps = seconds > 0 ? +((requests * size * 8) / seconds / 1e9).toFixed(3) : Number.NaN;
  return { size, inFlight, requests, gbps, p50Us, p90Us, p99Us, p999Us };
}

/** About `seconds` of the exchange with `size`-octet answers, `inFlight` requests a batch, after a fifth as many unmeasured. */
export async function tcpPingPong(size: number, seconds: number, inFlight = 1): Promise<PingPongResult> {
  const binary = buildC('tcp-pingpong');
  // A guess of one request's share of a batch's time on loopback (20 us plus the copy), only to size the run.
  const guessUs = (20 + (size * inFlight) / 4096) / inFlight;
  const requests = Math.max(1000, Math.round((seconds * 1e6) / guessUs));
  const args = ['--size', String(size), '--requests', String(requests), '--warmup', String(Math.round(requests / 5))];
  if (inFlight !== 1) args.push('--in-flight', String(inFlight));
  return parsePingPongOutput(await run(binary, args, 120_000 + seconds * 10_000));
}
