// Passive RC connection setup: a TCP side-channel listener yielding one RcConnectionRequest per
// valid request, through `next()` or a callback (the RoCE counterpart of verbs.ts's Listener).

import net from 'node:net';
import { RnicError } from '../errors.ts';
import type { RoceEndpoint } from './endpoint.ts';
import { receiveRcRequest, type RcConnectionRequest, type RcSetupOptions } from './setup.ts';

export interface RcListenOptions extends RcSetupOptions {
  host?: string;
  port?: number;
  /** An already listening server to take side-channel connections from. */
  server?: net.Server;
  backlog?: number;
  /**
   * Side channels waiting for their setup message at most; past it the oldest is closed, so
   * peers that connect and say nothing cannot crowd out one that completes at once.
   */
  maxPending?: number;
  /** Told about each side-channel connection that failed before it became a request. */
  onSetupFailure?: (error: Error, peer: string) => void;
}

export class RcListener {
  private server: net.Server | undefined;
  private readonly queue: RcConnectionRequest[] = [];
  private readonly waiting: Array<{ resolve: (request: RcConnectionRequest) => void; reject: (error: Error) => void }> = [];
  private closed = false;
  private readonly pending = new Set<net.Socket>();
  private readonly evicted = new WeakSet<net.Socket>();
  readonly failures: string[] = [];

  constructor(
    private readonly endpoint: RoceEndpoint,
    private readonly options: RcListenOptions,
    private readonly onRequest: ((request: RcConnectionRequest) => void) | undefined,
  ) {}

  async start(): Promise<void> {
    const own = this.options.server === undefined;
    const server = this.options.server ?? net.createServer({ pauseOnConnect: true });
    this.server = server;
    server.on('connection', (socket: net.Socket) => this.incoming(socket));
    if (!own) return;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.options.port ?? 0, this.options.host ?? '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
  }

  get port(): number {
    const address = this.server?.address();
    return typeof address === 'object' && address !== null ? address.port : 0;
  }

  next(): Promise<RcConnectionRequest> {
    const queued = this.queue.shift();
    if (queued !== undefined) return Promise.resolve(queued);
    if (this.closed) return Promise.reject(new RnicError('ENOTCONN', 'listener is closed'));
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const waiter of this.waiting.splice(0)) waiter.reject(new RnicError('ENOTCONN', 'listener closed'));
    for (const request of this.queue.splice(0)) request.reject();
    // Stop accepting; established side channels belong to their QPs and stay open (the server's
    // close callback would wait for all of them).
    if (this.options.server === undefined) this.server?.close();
  }

  private incoming(socket: net.Socket): void {
    if (this.closed) {
      socket.destroy();
      return;
    }
    const peer = `${socket.remoteAddress ?? '?'}:${socket.remotePort ?? '?'}`;
    const limit = this.options.maxPending;
    if (limit !== undefined && this.pending.size >= limit) {
      const oldest = this.pending.values().next().value;
      if (oldest !== undefined) {
        this.pending.delete(oldest);
        this.evicted.add(oldest);
        oldest.destroy();
      }
    }
    this.pending.add(socket);
    receiveRcRequest(this.endpoint, socket, this.options)
      .then((request) => {
        this.pending.delete(socket);
        this.deliver(request);
      })
      .catch((caught: unknown) => {
        this.pending.delete(socket);
        const error = this.evicted.has(socket)
          ? new RnicError('ENOMEM', `closed to make room: ${limit} connections were waiting for their RC setup message`)
          : caught instanceof Error ? caught : new Error(String(caught));
        this.recordFailure(error.message);
        this.options.onSetupFailure?.(error, peer);
      });
  }

  private deliver(request: RcConnectionRequest): void {
    if (this.closed) return request.reject();
    if (this.onRequest !== undefined) {
      try {
        this.onRequest(request);
      } catch (error) {
        this.recordFailure(`request handler threw: ${error instanceof Error ? error.message : String(error)}`);
        request.reject();
      }
      return;
    }
    const waiter = this.waiting.shift();
    if (waiter !== undefined) return waiter.resolve(request);
    if (this.queue.length >= (this.options.backlog ?? 128)) {
      request.reject();
      this.recordFailure('backlog full: connection request rejected');
      return;
    }
    this.queue.push(request);
  }

  private recordFailure(message: string): void {
    this.failures.push(message);
    if (this.failures.length > 64) this.failures.shift();
  }
}
