// kbtp's RC QP as the client end of perftest's bandwidth tests (the other end runs ib_write_bw,
// ib_read_bw or ib_atomic_bw as server): the same side-channel exchange as perftest-setup.ts from
// the side that writes first. kbtp states perftest version 6.06 (whose exchange this follows), a
// 4096-octet cycle buffer and 64-octet cache lines; the MTU is the smaller of both ends. After its
// own operations the caller runs finish(): two key barriers, five zero report items (kbtp does not
// report bandwidth), the closing keys and "done", each answered by the server, then the close.

import { RnicError } from '../errors.ts';
import type { MemoryRegion } from '../memory.ts';
import type { RoceEndpoint } from './endpoint.ts';
import { decodePerftestKeys, decodePerftestVersion, encodePerftestKeys, PERFTEST_VERSION_LENGTH, type PerftestDestination } from './perftest-format.ts';
import { activatePerftest, PERFTEST_DONE, perftestDestination } from './perftest-setup.ts';
import { PATH_MTUS, type PathMtu, type RcQueuePair } from './queue-pair.ts';
import { connectSideChannel, ExactReader } from './tool-side-channel.ts';

const CLIENT_VERSION = '6.06';
const CYCLE_BUFFER = 4096;
const CACHE_LINE = 64;
const REPORT_ITEMS = 5;
const DEFAULT_STEP_TIMEOUT_MS = 30_000;

export interface PerftestClientOptions {
  host: string;
  port: number;
  /** kbtp's own memory (advertised in the keys, as perftest does; the server does not use it). */
  region: MemoryRegion;
  /** Responder resources kbtp advertises (default 16). */
  outReads?: number;
  pathMtu?: PathMtu;
  stepTimeoutMs?: number;
}

export interface PerftestClientSession {
  readonly serverVersion: string;
  /** The server's QP, and the rkey and address of the buffer kbtp's operations target. */
  readonly server: PerftestDestination;
  readonly pathMtu: PathMtu;
  /** The closing exchanges; resolves once the server answered "done". */
  finish(): Promise<void>;
}

/**
 * The client's first items, the same over TCP and over RDMA CM: its version (kbtp states 6.06),
 * cycle-buffer and cache-line sizes, and its MTU; `exchange` sends one item and returns the
 * server's answer to it. Resolves with the server's version and the smaller MTU.
 */
export async function exchangePerftestPreamble(
  exchange: (item: Uint8Array, what: string) => Promise<Uint8Array>,
  ownMtu: PathMtu,
): Promise<{ serverVersion: string; pathMtu: PathMtu }> {
  const version = new Uint8Array(PERFTEST_VERSION_LENGTH);
  version.set(new TextEncoder().encode(CLIENT_VERSION));
  const serverVersion = decodePerftestVersion(await exchange(version, 'the version'));
  const word = (value: number): Uint8Array => {
    const bytes = new Uint8Array(4);
    new DataView(bytes.buffer).setUint32(0, value);
    return bytes;
  };
  await exchange(word(CYCLE_BUFFER), 'the cycle-buffer size');
  await exchange(word(CACHE_LINE), 'the cache-line size');
  const mtuAnswer = await exchange(new TextEncoder().encode(`${PATH_MTUS.indexOf(ownMtu) + 1}\0`), 'the MTU');
  const serverMtu = PATH_MTUS[Number.parseInt(new TextDecoder().decode(mtuAnswer.subarray(0, 1)), 10) - 1];
  if (serverMtu === undefined) throw new RnicError('EPROTO', `perftest server MTU field "${Buffer.from(mtuAnswer).toString('hex')}" is no ibv_mtu code`);
  return { serverVersion, pathMtu: Math.min(ownMtu, serverMtu) as PathMtu };
}

/**
 * The client's items after its run, the same over TCP and RDMA CM: two key barriers, the report
 * items (kbtp reports zeros: it measured nothing) and the closing keys.
 */
export async function exchangePerftestClosing(exchange: (item: Uint8Array, what: string) => Promise<Uint8Array>, keys: Uint8Array): Promise<void> {
  await exchange(keys, 'the first barrier after the run');
  await exchange(keys, 'the second barrier after the run');
  for (let i = 0; i < REPORT_ITEMS; i++) await exchange(new Uint8Array(8), `report item ${i + 1}`);
  await exchange(keys, 'the closing keys');
}

export async function connectPerftest(endpoint: RoceEndpoint, qp: RcQueuePair, options: PerftestClientOptions): Promise<PerftestClientSession> {
  const timeoutMs = options.stepTimeoutMs ?? DEFAULT_STEP_TIMEOUT_MS;
  qp.beginConnecting();
  let socket: Awaited<ReturnType<typeof connectSideChannel>> | undefined;
  try {
    socket = await connectSideChannel(options.host, options.port, timeoutMs);
    const open = socket;
    const reader = new ExactReader(open);
    const exchange = async (item: Uint8Array, what: string): Promise<Uint8Array> => {
      open.write(item);
      return reader.read(item.length, timeoutMs, `the server did not answer ${what}`);
    };
    const { serverVersion, pathMtu } = await exchangePerftestPreamble(exchange, options.pathMtu ?? 4096);
    const local = perftestDestination(endpoint, qp, options.region, options.outReads ?? 16);
    const keys = encodePerftestKeys(local);
    const server = decodePerftestKeys(await exchange(keys, 'the keys'));
    activatePerftest(endpoint, qp, server, local, pathMtu);
    // The barrier after both QPs reached RTR.
    await exchange(keys, 'the keys after RTR');
    return {
      serverVersion,
      server,
      pathMtu,
      finish: async () => {
        await exchangePerftestClosing(exchange, keys);
        await exchange(PERFTEST_DONE, '"done"');
        open.end();
      },
    };
  } catch (error) {
    socket?.destroy();
    if (qp.state === 'connecting') qp.connectFailed({ reason: 'connection-lost', message: (error as Error).message });
    else qp.enterError({ reason: 'connection-lost', message: (error as Error).message });
    throw error;
  }
}
