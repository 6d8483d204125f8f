// RC connection setup the way rdma-core's ibv_rc_pingpong does it (roce.md §8.1), so a kbtp RC QP
// can be either end of the Linux tool: over a TCP side channel the client writes its 52-octet
// destination message, the server reads it, moves its QP to RTR/RTS, answers with its own, the
// client answers "done\0" and both close the socket. Unlike kbtp's own setup (setup.ts) nothing
// stays open afterwards: the QP lives until it is destroyed or its retries run out, as in the tool.
// The QP attributes are rc_pingpong's: path MTU from `-m` (default 1024), max_dest_rd_atomic and
// max_rd_atomic 1, min_rnr_timer 12, timeout 14, retry_cnt 7, rnr_retry 7.

import net from 'node:net';
import { randomInt } from 'node:crypto';
import { RnicError } from '../errors.ts';
import { ipv4MappedGid, parseIpv4, ROCE_UDP_PORT } from '../wire/roce-frame.ts';
import type { RoceEndpoint } from './endpoint.ts';
import { decodePingpong, encodePingpong, PINGPONG_DONE, PINGPONG_MESSAGE_LENGTH, type PingpongDestination } from './pingpong-format.ts';
import type { PathMtu, RcPathParameters, RcQueuePair } from './queue-pair.ts';

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
    socket = await connectSocket(server.host, server.port, timeoutMs);
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
  const gid = remote.gid;
  if (gid.subarray(0, 10).some((octet) => octet !== 0) || gid[10] !== 0xff || gid[11] !== 0xff) {
    // An all-zero GID is what rc_pingpong sends without -g: IB LID routing, impossible on RoCE.
    throw new RnicError(
      'EPROTO',
      `the peer's GID ${Buffer.from(gid).toString('hex')} is not an IPv4-mapped RoCEv2 GID (run ibv_rc_pingpong with -g <RoCEv2 GID index>)`,
    );
  }
  const path: RcPathParameters = {
    peer: { address: Array.from(gid.subarray(12, 16)).join('.'), port: ROCE_UDP_PORT },
    destQpNumber: remote.qpNumber,
    sendPsn,
    receivePsn: remote.psn,
    pathMtu: options.pathMtu ?? 1024,
    ird: 1,
    ord: 1,
    timeout: 14,
    retryCount: 7,
    rnrRetry: 7,
    minRnrTimer: 12,
  };
  endpoint.attach(qp);
  qp.once('disconnected', () => setTimeout(() => endpoint.detach(qp), 0));
  qp.activate(endpoint.link, path);
}

function connectSocket(host: string, port: number, timeoutMs: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new RnicError('ETIMEDOUT', `side channel to ${host}:${port} not connected within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.setNoDelay(true);
      resolve(socket);
    });
    socket.once('error', (error) => {
      clearTimeout(timer);
      reject(new RnicError('ECONNREFUSED', `side channel to ${host}:${port} failed: ${error.message}`));
    });
  });
}

/** Reads exact octet counts from a socket (the tool writes fixed-size messages, TCP may split them). */
class ExactReader {
  private buffered = Buffer.alloc(0);
  private ended: string | undefined;
  private wake: (() => void) | undefined;

  constructor(socket: net.Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.buffered = Buffer.concat([this.buffered, chunk]);
      this.wake?.();
    });
    socket.on('end', () => this.end('the peer closed the side channel'));
    socket.on('error', (error) => this.end(`side channel: ${error.message}`));
    socket.on('close', () => this.end('the side channel closed'));
  }

  async read(length: number, timeoutMs: number, what: string): Promise<Uint8Array> {
    const deadline = Date.now() + timeoutMs;
    while (this.buffered.length < length) {
      if (this.ended !== undefined) throw new RnicError('ECONNRESET', `${what}: ${this.ended} after ${this.buffered.length} of ${length} octets`);
      const remaining = deadline - Date.now();
      if (remaining <= 0) throw new RnicError('ETIMEDOUT', `${what} within ${timeoutMs} ms (${this.buffered.length} of ${length} octets)`);
      let timer: NodeJS.Timeout | undefined;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        timer = setTimeout(resolve, remaining);
      });
      clearTimeout(timer);
      this.wake = undefined;
    }
    const message = new Uint8Array(this.buffered.subarray(0, length));
    this.buffered = this.buffered.subarray(length);
    return message;
  }

  private end(reason: string): void {
    this.ended ??= reason;
    this.wake?.();
  }
}
