// The passive side shared by both bindings: a TCP listener (its own or a shared one) whose
// connections each run a setup exchange (an MPA Request for iWARP, an RC setup message for
// RoCE) and become requests to accept or reject, through `next()` or a callback. Connections
// still waiting for their first message are bounded (`maxPending`), the queue of unanswered
// requests too (`backlog`), and every failure is recorded and reported.

import net from 'node:net';
import { RnicError } from './errors.ts';

export interface SetupListenOptions {
  /** Address to bind (default 127.0.0.1). */
  host?: string;
  /** Port (0 = any free port). Ignored with `server`. */
  port?: number;
  /** Requests queued for `next()` before new ones are rejected (default 128). */
  backlog?: number;
  /**
   * Connections waiting for their first setup message at most; past it the oldest is closed,
   * so peers that connect and say nothing cannot hold the descriptors a real initiator needs.
   */
  maxPending?: number;
  /** Told about each connection that failed before it became a request. */
  onSetupFailure?: (error: Error, peer: string) => void;
  /** Use this already listening server (e.g. one sharing a listening handle across workers). */
  server?: net.Server;
}

/** What a listener hands out: a request that can still be rejected. */
export interface PendingRequest {
  readonly pending: boolean;
  reject(): void;
}

export class SetupListener<Request extends PendingRequest> {
  private server: net.Server | undefined;
  private readonly queue: Request[] = [];
  /** Sockets waiting for their setup message, oldest first (a Set keeps insertion order). */
  private readonly pending = new Set<net.Socket>();
  private readonly evicted = new WeakSet<net.Socket>();
  private readonly waiting: Array<{ resolve: (request: Request) => void; reject: (error: Error) => void }> = [];
  private closed = false;
  private readonly closeHandlers: Array<() => void> = [];
  private readonly ownServer: boolean;
  /** Setup failures of incoming connections (bad first message, timeout), newest last, bounded. */
  readonly failures: string[] = [];

  constructor(
    private readonly options: SetupListenOptions,
    /** Reads the connection's setup message; rejects when it is missing or wrong. */
    private readonly receive: (socket: net.Socket) => Promise<Request>,
    private readonly onRequest: ((request: Request) => void) | undefined,
    /** What the first message is called, for errors ("MPA Request"). */
    private readonly firstMessage: string,
    /** Whether close() waits for the server's connections (an iWARP stream is its connection). */
    private readonly closeWaitsForConnections: boolean,
  ) {
    this.ownServer = options.server === undefined;
  }

  async start(): Promise<void> {
    const server = this.options.server ?? net.createServer({ pauseOnConnect: true });
    this.server = server;
    server.on('connection', (socket: net.Socket) => this.incoming(socket));
    if (!this.ownServer) return;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.options.port ?? 0, this.options.host ?? '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    server.on('error', (error) => this.recordFailure(`listener error: ${error.message}`));
  }

  get port(): number {
    const address = this.server?.address();
    return typeof address === 'object' && address !== null ? address.port : 0;
  }

  get address(): string {
    const address = this.server?.address();
    return typeof address === 'object' && address !== null ? address.address : '';
  }

  /** The next connection request (in arrival order). */
  next(): Promise<Request> {
    const queued = this.queue.shift();
    if (queued !== undefined) return Promise.resolve(queued);
    if (this.closed) return Promise.reject(new RnicError('ENOTCONN', 'listener is closed'));
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<Request> {
    while (!this.closed) {
      try {
        yield await this.next();
      } catch {
        return;
      }
    }
  }

  onClose(handler: () => void): void {
    this.closeHandlers.push(handler);
  }

  /** Stops listening; requests not yet accepted are rejected. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const waiter of this.waiting.splice(0)) waiter.reject(new RnicError('ENOTCONN', 'listener closed'));
    for (const request of this.queue.splice(0)) if (request.pending) request.reject();
    const server = this.server;
    if (server !== undefined && this.ownServer) {
      if (this.closeWaitsForConnections) await new Promise<void>((resolve) => server.close(() => resolve()));
      else server.close();
    }
    for (const handler of this.closeHandlers) handler();
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
    this.receive(socket)
      .then((request) => {
        this.pending.delete(socket);
        this.deliver(request);
      })
      .catch((caught: unknown) => {
        this.pending.delete(socket);
        const error = this.evicted.has(socket)
          ? new RnicError('ENOMEM', `closed to make room: ${limit} connections were waiting for their ${this.firstMessage}`)
          : caught instanceof Error
            ? caught
            : new RnicError('EPROTO', String(caught));
        this.recordFailure(error.message);
        this.options.onSetupFailure?.(error, peer);
      });
  }

  private deliver(request: Request): void {
    if (this.closed) {
      request.reject();
      return;
    }
    if (this.onRequest !== undefined) {
      try {
        this.onRequest(request);
      } catch (error) {
        this.recordFailure(`request handler threw: ${error instanceof Error ? error.message : String(error)}`);
        if (request.pending) request.reject();
      }
      return;
    }
    const waiter = this.waiting.shift();
    if (waiter !== undefined) {
      waiter.resolve(request);
      return;
    }
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
