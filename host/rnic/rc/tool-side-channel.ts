// What the out-of-band setups of the Linux test tools (ibv_rc_pingpong, perftest) share: a TCP
// side channel that carries fixed-size messages (read exactly, however TCP splits them), and
// bringing an RC QP to RTS towards a peer named by its GID, QP number and first PSN.

import net from 'node:net';
import { RnicError } from '../errors.ts';
import { ROCE_UDP_PORT } from '../wire/roce-frame.ts';
import type { RoceEndpoint } from './endpoint.ts';
import type { RcPathParameters, RcQueuePair } from './queue-pair.ts';

export interface ToolPeer {
  /** 16 octets; must be IPv4-mapped (RoCEv2 over IPv4). */
  gid: Uint8Array;
  qpNumber: number;
  psn: number;
}

/** The address an IPv4-mapped GID names, or a clear refusal (`hint` says how to fix the tool's call). */
export function gidToIpv4(gid: Uint8Array, hint: string): string {
  if (gid.length !== 16 || gid.subarray(0, 10).some((octet) => octet !== 0) || gid[10] !== 0xff || gid[11] !== 0xff) {
    throw new RnicError('EPROTO', `the peer's GID ${Buffer.from(gid).toString('hex')} is not an IPv4-mapped RoCEv2 GID (${hint})`);
  }
  return Array.from(gid.subarray(12, 16)).join('.');
}

/** RTR + RTS towards `peer` with the tool's attributes; the QP is detached from the port when it ends. */
export function activateTowards(
  endpoint: RoceEndpoint,
  qp: RcQueuePair,
  peer: ToolPeer,
  path: Omit<RcPathParameters, 'peer' | 'destQpNumber' | 'receivePsn'>,
  hint: string,
): void {
  const address = gidToIpv4(peer.gid, hint);
  endpoint.attach(qp);
  qp.once('disconnected', () => setTimeout(() => endpoint.detach(qp), 0));
  qp.activate(endpoint.link, { ...path, peer: { address, port: ROCE_UDP_PORT }, destQpNumber: peer.qpNumber, receivePsn: peer.psn });
}

export function connectSideChannel(host: string, port: number, timeoutMs: number): Promise<net.Socket> {
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

/** Reads exact octet counts from a socket (the tools write fixed-size messages; TCP may split them). */
export class ExactReader {
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

  /** True once the peer closed and everything it sent was read. */
  get finished(): boolean {
    return this.ended !== undefined && this.buffered.length === 0;
  }

  async read(length: number, timeoutMs: number, what: string): Promise<Uint8Array> {
    await this.waitFor(length, timeoutMs, what);
    const message = new Uint8Array(this.buffered.subarray(0, length));
    this.buffered = this.buffered.subarray(length);
    return message;
  }

  /**
   * Whatever arrives next (at least one octet), or undefined once the peer closed: for lock-step
   * exchanges whose item sizes this side does not need to know (each item is answered before the
   * peer writes the next, so one read is one item).
   */
  async readItem(timeoutMs: number, what: string): Promise<Uint8Array | undefined> {
    try {
      await this.waitFor(1, timeoutMs, what);
    } catch (error) {
      if (this.finished) return undefined;
      throw error;
    }
    const item = new Uint8Array(this.buffered);
    this.buffered = Buffer.alloc(0);
    return item;
  }

  private async waitFor(length: number, timeoutMs: number, what: string): Promise<void> {
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
  }

  private end(reason: string): void {
    this.ended ??= reason;
    this.wake?.();
  }
}
