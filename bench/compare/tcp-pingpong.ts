// The barest loopback request/answer exchange at one request in flight (tcp-pingpong.c), as make
// compare's reference for the p99 target: a p99 / p50 the bare exchange cannot keep within 2x on
// this machine is the platform's, not kbtp's or Redis's (docs/BENCH.md, session 7).
import { buildC, run } from './tools.ts';

export interface PingPongResult {
  size: number;
  requests: number;
  p50Us: number;
  p90Us: number;
  p99Us: number;
  p999Us: number;
}

/** Parses tcp-pingpong's one line: "size S requests N p50_us A p90_us B p99_us C p999_us D". */
export function parsePingPongOutput(output: string): PingPongResult {
  const line = output.trim();
  const match = /^size (\d+) requests (\d+) p50_us ([\d.]+) p90_us ([\d.]+) p99_us ([\d.]+) p999_us ([\d.]+)$/.exec(line);
  if (match === null) throw new Error(`tcp-pingpong: expected 'size S requests N p50_us A p90_us B p99_us C p999_us D', got '${line}'`);
  const [size, requests, p50Us, p90Us, p99Us, p999Us] = match.slice(1).map(Number) as [number, number, number, number, number, number];
  return { size, requests, p50Us, p90Us, p99Us, p999Us };
}

/** About `seconds` of the exchange with `size`-octet answers, after a fifth as many unmeasured. */
export async function tcpPingPong(size: number, seconds: number): Promise<PingPongResult> {
  const binary = buildC('tcp-pingpong');
  // A guess of one exchange's time on loopback (20 us plus the copy), only to size the run.
  const guessUs = 20 + size / 4096;
  const requests = Math.max(1000, Math.round((seconds * 1e6) / guessUs));
  const args = ['--size', String(size), '--requests', String(requests), '--warmup', String(Math.round(requests / 5))];
  return parsePingPongOutput(await run(binary, args, 120_000 + seconds * 10_000));
}
