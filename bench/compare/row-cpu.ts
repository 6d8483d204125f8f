// make compare's line of CPU per request on all four sides of one row (issue 16, session 8).
import type { CompareRow } from './compare.ts';

/**
 * The 16 KiB LOAD x16 row's CPU per request on all four sides, measured in the row itself: the
 * CPU target above compares kbtp bench with redis-benchmark (hiredis), while redis_gbps mostly
 * comes from redis-latency, a leaner client; where both threads of a system are busy, GB/s follows
 * the busier side's CPU per request (docs/BENCH.md, session 8). Undefined without the figures.
 */
export function rowCpuLine(rows: readonly CompareRow[]): string | undefined {
  const row = rows.find((candidate) => candidate.op === 'load' && candidate.size === 16 * 1024 && candidate.sessions === 16);
  const kbtp = row?.kbtp_cpu;
  if (row === undefined || kbtp === undefined || kbtp.target_us === null || row.redis_server_cpu === undefined || row.redis_client_cpu === undefined)
    return undefined;
  return (
    `CPU per request in the LOAD 16 KiB x16 row itself (busy share): kbtp client ${kbtp.client_us} us (${kbtp.client_busy}), target ${kbtp.target_us} us (${kbtp.target_busy}); ` +
    `redis-latency ${row.redis_client_cpu.us} us (${row.redis_client_cpu.busy}), redis-server ${row.redis_server_cpu.us} us (${row.redis_server_cpu.busy})`
  );
}
