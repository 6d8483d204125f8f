// kbtp's RC QP as the server end of perftest's bandwidth tests over its TCP side channel (without
// -R), so ib_write_bw, ib_read_bw and ib_atomic_bw can run against kbtp memory. The client writes
// first in every exchange and the server answers (perftest src/perftest_communication.c:
// ctx_xchg_data, ctx_hand_shake); in order:
//   1. versions, 16 octets each (a client older than 5.70 refuses, so kbtp states the client's own);
//   2. cycle-buffer size and cache-line size, 4-octet big-endian each (check_sys_data: both sides
//      take the larger, so kbtp answers with the client's);
//   3. the MTU as ASCII decimal of the ibv_mtu code, 2 octets (check_mtu: the smaller wins);
//   4. the key messages (perftest-format.ts), after which kbtp's QP is at RTS; then the same
//      exchange again as the barrier after the client's RTR;
// and, after the client's run, two more key exchanges, the bandwidth report items (8 octets each:
// size, iterations, peak, average, message rate), the closing key exchange and "done\0" (perftest
// 6.06 as Debian 12 ships it), which kbtp answers in lock step until the client closes.

import type net from 'node:net';
import { randomInt } from 'node:crypto';
import { RnicError } from '../errors.ts';
import type { MemoryRegion } from '../memory.ts';
import { ipv4MappedGid, parseIpv4 } from '../wire/roce-frame.ts';
import type { RoceEndpoint } from './endpoint.ts';
import {
  decodePerftestKeys,
  decodePerftestVersion,
  encodePerftestKeys,
  PERFTEST_KEY_MESSAGE_LENGTH,
  PERFTEST_OLDEST_COMPATIBLE_VERSION,
  PERFTEST_VERSION_LENGTH,
  type PerftestDestination,
} from './perftest-format.ts';
import { PATH_MTUS, type PathMtu, type RcQueuePair } from './queue-pair.ts';
import { activateTowards, ExactReader } from './tool-side-channel.ts';

export const DEFAULT_STEP_TIMEOUT_MS = 30_000;
export const DEFAULT_RUN_TIMEOUT_MS = 300_000;

export interface PerftestServerOptions {
  /** The memory the client's Writes, Reads and atomics address (its rkey and start are advertised). */
  region: MemoryRegion;
  /** kbtp's responder resources, advertised as out_reads (the client's max_rd_atomic). Default 16. */
  outReads?: number;
  /** Largest path MTU kbtp offers (default 4096; the smaller of the two ends wins). */
  pathMtu?: PathMtu;
  /** Each setup exchange gives up after this long (default 30 s). */
  stepTimeoutMs?: number;
}

export interface PerftestServerSession {
  readonly clientVersion: string;
  readonly client: PerftestDestination;
  readonly local: PerftestDestination;
  readonly pathMtu: PathMtu;
  /**
   * Waits for the client's run to end and answers its closing exchanges until it closes the side
   * channel; resolves with the size of each item the client sent after its run.
   */
  finish(runTimeoutMs?: number): Promise<number[]>;
}

export async function acceptPerftest(
  endpoint: RoceEndpoint,
  qp: RcQueuePair,
  socket: net.Socket,
  options: PerftestServerOptions,
): Promise<PerftestServerSession> {
  const timeoutMs = options.stepTimeoutMs ?? DEFAULT_STEP_TIMEOUT_MS;
  const reader = new ExactReader(socket);
  socket.setNoDelay(true);
  qp.beginConnecting();
  try {
    const answer = (item: Uint8Array): void => {
      socket.write(item);
    };
    const { clientVersion, pathMtu } = await answerPerftestPreamble((length, what) => reader.read(length, timeoutMs, what), answer, options.pathMtu ?? 4096);
    const client = decodePerftestKeys(await reader.read(PERFTEST_KEY_MESSAGE_LENGTH, timeoutMs, 'the client did not send its keys'));
    const outReads = options.outReads ?? 16;
    const local = perftestDestination(endpoint, qp, options.region, outReads);
    activatePerftest(endpoint, qp, client, local, pathMtu);
    const keys = encodePerftestKeys(local);
    socket.write(keys);
    await reader.read(PERFTEST_KEY_MESSAGE_LENGTH, timeoutMs, 'the client did not send its keys again after RTR');
    socket.write(keys);
    return {
      clientVersion,
      client,
      local,
      pathMtu,
      finish: (runTimeoutMs = DEFAULT_RUN_TIMEOUT_MS) =>
        answerPerftestRun(
          (wait) => reader.readItem(wait, 'the client did not finish its run'),
          (item) => answer(answerAfterRun(item, keys)),
          runTimeoutMs,
          timeoutMs,
        ),
    };
  } catch (error) {
    socket.destroy();
    if (qp.state === 'connecting') qp.connectFailed({ reason: 'connection-lost', message: (error as Error).message });
    else qp.enterError({ reason: 'connection-lost', message: (error as Error).message });
    throw error;
  }
}

export const PERFTEST_DONE = new TextEncoder().encode('done\0');

/** This side's key message: kbtp's QP, a random first PSN, the region's rkey and start, its GID. */
export function perftestDestination(endpoint: RoceEndpoint, qp: RcQueuePair, region: MemoryRegion, outReads: number): PerftestDestination {
  return {
    lid: 0,
    outReads,
    qpNumber: qp.qpNumber,
    psn: randomInt(0x1000000),
    rkey: region.stag,
    virtualAddress: region.taggedOffsetBase,
    gid: ipv4MappedGid(parseIpv4(endpoint.local.address)),
    srqNumber: 0,
  };
}

/**
 * RTR + RTS towards the peer's keys with perftest's attributes (timeout 14, retry count 7, RNR
 * retry 7: DEF_QP_TIME, DEF_RETRY_COUNT); kbtp's outstanding Reads/atomics are bounded by the
 * peer's out_reads, its responder resources by its own.
 */
export function activatePerftest(endpoint: RoceEndpoint, qp: RcQueuePair, peer: PerftestDestination, local: PerftestDestination, pathMtu: PathMtu): void {
  activateTowards(
    endpoint,
    qp,
    peer,
    {
      sendPsn: local.psn,
      pathMtu,
      ird: local.outReads,
      ord: Math.max(1, Math.min(peer.outReads, 16)),
      timeout: 14,
      retryCount: 7,
      rnrRetry: 7,
      minRnrTimer: 12,
    },
    'run perftest with -x <RoCEv2 GID index>',
  );
}

/**
 * The server's side of the client's first items, the same over TCP and over RDMA CM: `read`
 * returns the client's next item of `length` octets, `answer` sends one. The client's version
 * (refused when older than perftest can talk to) and its cycle-buffer and cache-line sizes are
 * answered with its own (both sides take the larger), its MTU with the smaller of both ends.
 */
export async function answerPerftestPreamble(
  read: (length: number, what: string) => Promise<Uint8Array>,
  answer: (item: Uint8Array) => void,
  ownMtu: PathMtu,
): Promise<{ clientVersion: string; pathMtu: PathMtu }> {
  const versionField = await read(PERFTEST_VERSION_LENGTH, 'the client did not send its version');
  const clientVersion = decodePerftestVersion(versionField);
  if (!(Number.parseFloat(clientVersion) >= PERFTEST_OLDEST_COMPATIBLE_VERSION)) {
    throw new RnicError('EPROTO', `perftest client version "${clientVersion}" is older than ${PERFTEST_OLDEST_COMPATIBLE_VERSION} (or not a version)`);
  }
  answer(versionField);
  for (const what of ['cycle-buffer size', 'cache-line size']) answer(await read(4, `the client did not send its ${what}`));
  const mtuField = await read(2, 'the client did not send its MTU');
  const clientMtu = PATH_MTUS[Number.parseInt(new TextDecoder().decode(mtuField.subarray(0, mtuField.indexOf(0) < 0 ? 2 : mtuField.indexOf(0))), 10) - 1];
  if (clientMtu === undefined) throw new RnicError('EPROTO', `perftest client MTU field "${Buffer.from(mtuField).toString('hex')}" is no ibv_mtu code`);
  const pathMtu = Math.min(clientMtu, ownMtu) as PathMtu;
  answer(new TextEncoder().encode(`${PATH_MTUS.indexOf(pathMtu) + 1}\0`));
  return { clientVersion, pathMtu };
}

/**
 * Answers what the client sends after its run until it ends the exchange (`next` resolves
 * undefined); the first item comes when its run is over, the rest follow in lock step. Resolves
 * with the size of each item.
 */
export async function answerPerftestRun(
  next: (waitMs: number) => Promise<Uint8Array | undefined>,
  answerItem: (item: Uint8Array) => void,
  runTimeoutMs: number,
  stepTimeoutMs: number,
): Promise<number[]> {
  const items: number[] = [];
  for (let wait = runTimeoutMs; ; wait = stepTimeoutMs) {
    const item = await next(wait);
    if (item === undefined) return items;
    items.push(item.length);
    answerItem(item);
  }
}

/**
 * kbtp's answer to one item the client sends after its run: its keys to a key message (one as
 * long as `keys`), "done" to "done", and zeros to a report item (kbtp measured nothing; a
 * half-duplex client ignores them).
 */
export function answerAfterRun(item: Uint8Array, keys: Uint8Array): Uint8Array {
  if (item.length === keys.length) return keys;
  if (Buffer.compare(item, PERFTEST_DONE) === 0) return PERFTEST_DONE;
  return new Uint8Array(item.length);
}
