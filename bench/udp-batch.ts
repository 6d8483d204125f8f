// What batching UDP system calls buys a RoCE link, measured without the RC layer (bench/
// udp-pairs.ts): 4112-octet datagrams through (a) node:dgram and (b) BatchedUdpSocket
// (sendmmsg + GSO, recvmmsg + GRO). Prints CPU seconds per GiB (both ends, every thread of this
// process, user and system: the load-robust figure) and wall-clock Gbit/s, A/B interleaved.
//
//   node --import tsx bench/udp-batch.ts [--mib 128] [--runs 3]

import { parseCommandLine } from '../host/commands/command-line.ts';
import { batchedPair, dgramPair, pump, ROCE_PACKET, type UdpPair } from './udp-pairs.ts';

const parsed = parseCommandLine('bench/udp-batch', 'usage: node --import tsx bench/udp-batch.ts [--mib 128] [--runs 3]', process.argv.slice(2), {
  mib: { type: 'string', default: '128' },
  runs: { type: 'string', default: '3' },
});
if (typeof parsed === 'number') process.exit(parsed);
const totalBytes = Number(parsed.values.mib) * 2 ** 20;
const runs = Number(parsed.values.runs);
if (!(totalBytes > 0) || !(runs > 0)) {
  console.error('bench/udp-batch: --mib and --runs must be positive numbers');
  process.exit(2);
}

interface Result {
  user: number;
  system: number;
  gbps: number;
  lost: number;
}

async function measure(open: () => Promise<UdpPair>): Promise<Result> {
  const count = Math.ceil(totalBytes / ROCE_PACKET);
  const warm = await open();
  await pump(warm, Math.min(count, 4096)); // JIT, socket buffers
  await warm.close();
  const pair = await open();
  const cpu = process.cpuUsage();
  const started = process.hrtime.bigint();
  const received = await pump(pair, count);
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const used = process.cpuUsage(cpu);
  await pair.close();
  const gib = (received * ROCE_PACKET) / 2 ** 30;
  return { user: used.user / 1e6 / gib, system: used.system / 1e6 / gib, gbps: (received * ROCE_PACKET * 8) / seconds / 1e9, lost: count - received };
}

const show = (name: string, result: Result): string =>
  `${name} ${(result.user + result.system).toFixed(2)} CPU-s/GiB (user ${result.user.toFixed(2)}, system ${result.system.toFixed(2)}) ${result.gbps.toFixed(2)} Gb/s` +
  (result.lost > 0 ? ` (${result.lost} lost)` : '');

async function main(): Promise<void> {
  for (let run = 1; run <= runs; run++) {
    const plain = await measure(dgramPair);
    const batched = await measure(batchedPair);
    const ratio = (plain.user + plain.system) / (batched.user + batched.system);
    console.log(`run ${run}: ${show('node:dgram', plain)}; ${show('batched', batched)}; CPU per GiB dgram/batched ${ratio.toFixed(2)}`);
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(`bench/udp-batch: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exit(1);
  },
);
