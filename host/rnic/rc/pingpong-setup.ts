// RC connection setup the way rdma-core's ibv_rc_pingpong does it (roce.md §8.1), so a kbtp RC QP
// can be either end of the Linux tool: over a TCP side channel the client writes its 52-octet
// destination message, the server reads it, moves its QP to RTR/RTS, answers with its own, the
// client answers "done\0" and both close the socket. Unlike kbtp's own setup (setup.ts) nothing
// stays open afterwards: the QP lives until it is destroyed or its retries run out, as in the tool.
// The QP attributes are rc_pingpong's: path MTU from `-m` (default 1024), max_dest_rd_atomic and
// max_rd_atomic 1, min_rnr_timer 12, timeout 14, retry_cnt 7, rnr_retry 7.

import type net from 'node:net';
import { randomInt } from 'node:crypto';
import { RnicError } from '../errors.ts';
import { ipv4MappedGid, parseIpv4 } from '../wire/roce-frame.ts';
import type { RoceEndpoint } from './endpoint.ts';
import { decodePingpong, encodePingpong, PINGPONG_DONE, PINGPONG_MESSAGE_LENGTH, type PingpongDestination } from './pingpong-format.ts';
import type { PathMtu, RcQueuePair } from './queue-pair.ts';
import { activateTowards, connectSideChannel, ExactReader } from './tool-side-channel.ts';

const DEFAULT_TIMEOUT_MS = 30_000;

export interface PingpongSetupOptions {
  /** `-m` of the peer tool; both ends must use the same (default 1024, rxe's active MTU). */
  pathMtu?: PathMtu;
  /** Side-channel steps (connect, each read) give up after this long. Default 30 s. */
  timeoutMs?: number;
  /** This side's first PSN (default random, as lrand48() & 0xffffff). */
  psn?: number;
}

export interface PingpongConnection {
  readonly local: PingpongDestination;
  readonly remote: PingpongDestination;
}

/** Active side (`ibv_rc_pingpong <server>`): exchanges destinations with host:port, then brings `qp` to RTS. */
export async function connectPingpong(
  endpoint: RoceEndpoint,
  qp: RcQueuePair,
  server: { host: string; port: number },
  options: PingpongSetupOptions = {},
): Promise<PingpongConnection> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const local = ownDestination(endpoint, qp, options);
  qp.beginConnecting();
  let socket: net.Socket | undefined;
  try {
    socket = await connectSideChannel(server.host, server.port, timeoutMs);
    const reader = new ExactReader(socket);
    socket.write(encodePingpong(local));
    const remote = decodePingpong(await reader.read(PINGPONG_MESSAGE_LENGTH, timeoutMs, 'the server did not send its destination'));
    socket.end(PINGPONG_DONE);
    activate(endpoint, qp, remote, local.psn, options);
    return { local, remote };
  } catch (error) {
    socket?.destroy();
    qp.connectFailed({ reason: 'connection-lost', message: (error as Error).message });
    throw error;
  }
}

/** Passive side (`ibv_rc_pingpong` without a server name) for a side-channel socket accepted elsewhere. */
export async function acceptPingpong(
  endpoint: RoceEndpoint,
  qp: RcQueuePair,
  socket: net.Socket,
  options: PingpongSetupOptions = {},
): Promise<PingpongConnection> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const local = ownDestination(endpoint, qp, options);
  qp.beginConnecting();
  const reader = new ExactReader(socket);
  try {
    const remote = decodePingpong(await reader.read(PINGPONG_MESSAGE_LENGTH, timeoutMs, 'the client did not send its destination'));
    // The server is at RTS before it answers: the client may send as soon as it has the answer.
    activate(endpoint, qp, remote, local.psn, options);
    socket.write(encodePingpong(local));
    const done = await reader.read(PINGPONG_DONE.length, timeoutMs, 'the client did not confirm with "done"');
    if (Buffer.compare(done, PINGPONG_DONE) !== 0)
      throw new RnicError('EPROTO', `the client confirmed with "${Buffer.from(done).toString('latin1')}", not "done"`);
    socket.end();
    return { local, remote };
  } catch (error) {
    socket.destroy();
    if (qp.state === 'connecting') qp.connectFailed({ reason: 'connection-lost', message: (error as Error).message });
    else qp.enterError({ reason: 'connection-lost', message: (error as Error).message });
    throw error;
  }
}

function ownDestination(endpoint: RoceEndpoint, qp: RcQueuePair, options: PingpongSetupOptions): PingpongDestination {
  return {
    lid: 0,
    qpNumber: qp.qpNumber,
    psn: options.psn ?? randomInt(0x1000000),
    gid: ipv4MappedGid(parseIpv4(endpoint.local.address)),
  };
}

function activate(endpoint: RoceEndpoint, qp: RcQueuePair, remote: PingpongDestination, sendPsn: number, options: PingpongSetupOptions): void {
  // An all-zero GID is what rc_pingpong sends without -g: IB LID routing, impossible on RoCE.
  activateTowards(
    endpoint,
    qp,
    remote,
    { sendPsn, pathMtu: options.pathMtu ?? 1024, ird: 1, ord: 1, timeout: 14, retryCount: 7, rnrRetry: 7, minRnrTimer: 12 },
    'run ibv_rc_pingpong with -g <RoCEv2 GID index>',
  );
}
