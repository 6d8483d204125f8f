// The byte pipe under one RDMAP stream. A channel writes framed bytes out (ByteSink) and feeds
// received bytes to whichever consumer currently owns the stream: first the MPA handshake,
// then the FPDU receiver. SocketChannel wraps a TCP socket whose every read lands in a buffer
// the consumer picks for that read, which is how tagged payload reaches registered memory
// without an intermediate copy.

import { readvSync } from 'node:fs';
import net from 'node:net';
import type { ByteSink, WriteDone } from './transmit.ts';
import { turn, type TurnParticipant } from './turn.ts';
import { RnicError } from './errors.ts';
import { HandleWriter, WRITE_DONE, WRITE_QUEUED, writeError } from './handle-writer.ts';
import { busyPoll, type ReadyReader } from './busy-poll.ts';
import { EAGAIN, readSocket } from './socket-read.ts';
import { errnoName } from '../util/libc.ts';
import { isLoopback, useLoopbackCongestionControl, widenReceiveWindow } from './socket-window.ts';

/** Something that takes bytes from the stream. */
export interface StreamConsumer {
  /** The buffer the next read fills (must not be empty). */
  readBuffer(): Uint8Array;
  /** `length` octets were written into the last buffer returned by readBuffer(). */
  commit(length: number): void;
  /** Octets received but not meant for this consumer (they belong to the next one). */
  leftover?(): Uint8Array;
  /**
   * Buffers for one vectored read (readv) continuing the stream after a read that filled its
   * buffer, or undefined; a channel that can read into several buffers at once asks.
   */
  readVector?(): Uint8Array[] | undefined;
  /** `length` octets were read into the buffers of the last readVector(), in order. */
  commitVector?(length: number): void;
}

export interface ChannelEvents {
  /** The peer closed its sending side (TCP FIN). */
  onEnd(): void;
  /** The channel is fully closed; `error` when it failed (reset, write error). */
  onClose(error: Error | undefined): void;
}

export interface StreamChannel extends ByteSink {
  setConsumer(consumer: StreamConsumer): void;
  setEvents(events: ChannelEvents): void;
  /** Sends everything queued, then FIN; destroys the channel if the peer does not close in time. */
  end(lingerMs?: number): void;
  /** Closes at once, dropping unsent bytes. */
  destroy(): void;
  readonly closed: boolean;
  readonly remoteAddress: string | undefined;
  readonly remotePort: number | undefined;
  readonly localAddress: string | undefined;
  readonly localPort: number | undefined;
}

const DEFAULT_LINGER_MS = 2000;
/** Vectored reads in a row after one of libuv's (each takes up to 8 FPDUs: 512 KiB). */
const READ_AHEAD_ROUNDS = 4;
/**
 * The receive window an initiator's connection can offer from its start (socket-window.ts): a
 * LOAD's block arrives as one RDMA Write, and at 1 MiB blocks the target's connection was
 * window-limited for 8-72 ms of its first requests and then paced by BBR (issue 16). The block
 * size is known only after HELLO; 2 MiB holds two 1 MiB blocks. A limit, not memory.
 */
const INITIATOR_RECEIVE_WINDOW = 2 * 2 ** 20;

function vectorLength(vector: readonly Uint8Array[]): number {
  let length = 0;
  for (let i = 0; i < vector.length; i++) length += vector[i]!.length;
  return length;
}

/** What a write into a channel that is already closed completes with. */
export const closedError = (): RnicError => new RnicError('ECONNRESET', 'connection closed');

/**
 * Completes a write into a closed channel with `closedError()`, later (never inside the write).
 * A function of its own: a closure over `done` inside `write()` makes V8 allocate a context for
 * `done` on every call, closed or not (issue 16: about 60 octets per message).
 */
export function failWriteLater(done: WriteDone | undefined): void {
  if (done !== undefined) queueMicrotask(() => done(closedError()));
}
/** Socket failures are Errors; anything else thrown on the way is said as a reset with its text. */
const asError = (value: unknown): Error => (value instanceof Error ? value : new RnicError('ECONNRESET', String(value)));
const EMPTY_CHUNK = new Uint8Array(0);
const EMPTY_WRITE: readonly Uint8Array[] = [EMPTY_CHUNK];

/** A consumer used before anyone owns the stream: bytes that arrive then are held, bounded. */
class HoldingConsumer implements StreamConsumer {
  private readonly buffer = new Uint8Array(4096);
  held = 0;
  readBuffer(): Uint8Array {
    return this.held < this.buffer.length ? this.buffer.subarray(this.held) : this.buffer.subarray(this.buffer.length - 1);
  }
  commit(length: number): void {
    this.held = Math.min(this.buffer.length, this.held + length);
  }
  leftover(): Uint8Array {
    const out = this.buffer.slice(0, this.held);
    this.held = 0;
    return out;
  }
}

/** Hands a consumer that is being replaced its successor's bytes, if it kept any. */
function replayLeftover(previous: StreamConsumer, next: () => StreamConsumer): void {
  const early = previous.leftover?.();
  if (early !== undefined && early.length > 0) feed(next, early);
}

/** Feeds `bytes` to `consumer` through its own read buffers (a copy; used off the fast path). */
export function feed(channelConsumer: () => StreamConsumer, bytes: Uint8Array): void {
  let offset = 0;
  let idle = 0;
  while (offset < bytes.length) {
    const consumer = channelConsumer();
    const target = consumer.readBuffer();
    const length = Math.min(target.length, bytes.length - offset);
    if (length === 0) {
      if (++idle > 2) return; // a consumer that accepts nothing is dead; drop the rest
      continue;
    }
    idle = 0;
    target.set(bytes.subarray(offset, offset + length));
    offset += length;
    consumer.commit(length);
  }
}

/**
 * A TCP stream whose reads land in buffers its consumer picks, and whose writes are gathered
 * over an event-loop turn and leave in one system call (a writev of everything the turn
 * produced: several requests' RDMA Writes and COMPLETION Sends together).
 */
export class SocketChannel implements StreamChannel, TurnParticipant, ReadyReader {
  private consumer: StreamConsumer;
  private readonly holding = new HoldingConsumer();
  private events: ChannelEvents | undefined;
  private socket: net.Socket;
  private lingerTimer: NodeJS.Timeout | undefined;
  /** Who the buffer of the read in progress was chosen for (the consumer may change meanwhile). */
  private readOwner: StreamConsumer | undefined;
  private readTarget: Uint8Array | undefined;
  private isClosed = false;
  private closeError: Error | undefined;
  /** Chunks queued this turn, and the done callbacks of the messages they carry. */
  private readonly queued: Uint8Array[] = [];
  private queuedCount = 0;
  private queuedBytes = 0;
  /**
   * Done callbacks of messages written and not yet completed, oldest at `donesHead`, up to
   * `donesTail`. Written in place and compacted in place: `push` and a `splice` compaction
   * allocated about 110 octets per request (the splice's result array, the storage regrown after
   * it; issue 16, measured over a loopback TCP pair).
   */
  private readonly dones: Array<WriteDone | undefined> = [];
  private donesHead = 0;
  private donesTail = 0;
  /** Done callbacks queued this turn (the tail of `dones`). */
  private unbatched = 0;
  /** Done callbacks per batch written, oldest first (the socket completes writes in order). */
  private readonly batchSizes: number[] = [];
  private flushScheduled = false;
  private readonly batchWritten = (error?: Error | null): void => {
    busyPoll.writeSettled();
    this.completeBatch(error);
  };
  /** Writes to the socket's handle past the Writable stream; undefined where the runtime has no such handle. */
  private readonly direct: HandleWriter | undefined;
  /** The socket's descriptor for vectored reads (readAhead), or -1 where the handle has none. */
  private readonly fd: number;
  /** True while libuv's read callback runs (readReady). */
  private insideLibuvRead = false;
  /** Reads of this channel's socket: libuv's and the busy poll's (of which `polledReads`), and the vectored ones readAhead made. */
  reads = 0;
  polledReads = 0;
  vectorReads = 0;

  /**
   * Takes over a connected socket. The socket's handle moves to a new net.Socket created with
   * a per-read buffer callback (Node offers `onread` only at construction); bytes the old socket
   * had already buffered are replayed first.
   */
  constructor(socket: net.Socket) {
    this.consumer = this.holding;
    const onread = {
      buffer: () => this.nextReadBuffer(),
      callback: (length: number) => {
        this.insideLibuvRead = true;
        try {
          this.delivered(length, false);
        } finally {
          this.insideLibuvRead = false;
        }
        return true;
      },
    };
    const handle = (socket as unknown as { _handle: unknown })._handle;
    const buffered = socket.readableLength > 0 ? (socket.read() as Buffer | null) : null;
    if (handle !== null && handle !== undefined && !socket.destroyed) {
      (socket as unknown as { _handle: unknown })._handle = null;
      socket.destroy(); // releases the old wrapper (and its server's connection count) only
      this.socket = new net.Socket({ handle, readable: true, writable: true, onread } as net.SocketConstructorOpts);
    } else {
      this.socket = socket;
      socket.on('data', (chunk: Buffer) => this.guarded(() => feed(() => this.consumer, chunk)));
    }
    this.socket.setNoDelay(true);
    const fd = (this.socket as unknown as { _handle: { fd?: unknown } | null })._handle?.fd;
    this.fd = typeof fd === 'number' && fd >= 0 ? fd : -1;
    this.direct = HandleWriter.for(this.socket, (error) => {
      busyPoll.writeSettled(); // reported only for writes that were WRITE_QUEUED
      this.directWritten(error);
    });
    if (this.fd >= 0) busyPoll.watch(this.fd, this);
    this.socket.on('end', () => this.events?.onEnd());
    this.socket.on('error', (error) => {
      this.closeError ??= error;
    });
    this.socket.on('close', () => {
      this.isClosed = true;
      if (this.fd >= 0) busyPoll.unwatch(this.fd, this);
      if (this.lingerTimer !== undefined) clearTimeout(this.lingerTimer);
      this.events?.onClose(this.closeError);
    });
    if (buffered !== null && buffered.length > 0) queueMicrotask(() => this.guarded(() => feed(() => this.consumer, buffered)));
  }

  /**
   * What connect() did to the congestion control of a loopback connection: the one in effect,
   * or why it kept the host's (undefined: not loopback, or not asked).
   */
  congestionControl: string | Error | undefined;

  /**
   * Connects to `host:port`; the socket reads through per-read buffers from the start. Over
   * loopback the socket gets `loopbackCongestionControl` (null: the host's; socket-window.ts).
   */
  static connect(host: string, port: number, timeoutMs: number, loopbackCongestionControl: string | null = null): Promise<SocketChannel> {
    return new Promise((resolve, reject) => {
      const socket = net.connect({ host, port });
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new RnicError('ETIMEDOUT', `TCP connect to ${host}:${port} timed out after ${timeoutMs} ms`));
      }, timeoutMs);
      socket.once('error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
      socket.once('connect', () => {
        clearTimeout(timer);
        socket.removeAllListeners('error');
        socket.pause();
        const channel = new SocketChannel(socket);
        // Not on the target's accepted sockets: those inherit their listener's (worker.ts).
        if (channel.fd >= 0) {
          widenReceiveWindow(channel.fd, INITIATOR_RECEIVE_WINDOW);
          // Best effort, as the window: without it the connection keeps the host's congestion control.
          if (isLoopback(host) && loopbackCongestionControl !== null)
            channel.congestionControl = useLoopbackCongestionControl(channel.fd, loopbackCongestionControl);
        }
        resolve(channel);
      });
    });
  }

  private nextReadBuffer(): Uint8Array {
    let owner = this.consumer;
    let buffer = owner.readBuffer();
    if (buffer.length === 0) {
      owner = this.holding;
      buffer = owner.readBuffer();
    }
    this.readOwner = owner;
    this.readTarget = buffer;
    return buffer;
  }

  /**
   * The busy poll found the descriptor ready (ReadyReader): one read into the buffer the consumer
   * picks, delivered as libuv's would be. Only inside this channel's own libuv read callback:
   * Node hands libuv the buffer for the next read when that callback returns (onread's buffer
   * function), so a read made there is followed by a fresh pick, where a read made anywhere else
   * would leave libuv holding a buffer whose place in the stream has been filled (libuv's next
   * read would land there: the next bytes over the last ones, or over a block already placed).
   * Returns whether it read; nothing waiting after all, or the end of the stream, is left to
   * libuv (which reads the end again and reports it); a failure ends the channel with its errno,
   * as libuv's read would have (this read took the error from the socket).
   */
  readReady(): boolean {
    if (!this.insideLibuvRead || this.isClosed || this.socket.destroyed || this.fd < 0) return false;
    const buffer = this.nextReadBuffer();
    let length: number;
    try {
      length = readSocket(this.fd, buffer);
    } catch {
      return false; // no read call in this thread: libuv reads as usual
    }
    if (length > 0) {
      this.polledReads++;
      this.delivered(length, true);
      return true;
    }
    if (length < 0 && length !== -EAGAIN) {
      this.closeError ??= new RnicError('ECONNRESET', `read from the connection failed: ${errnoName(-length)}`);
      this.destroy();
    }
    return false;
  }

  private delivered(length: number, byPoll: boolean): void {
    // What the bytes cause (completions, new sends) settles when the delivery ends: one writev.
    busyPoll.received(byPoll);
    turn.enter();
    try {
      this.reads++;
      const owner = this.readOwner;
      if (owner === this.consumer) {
        owner.commit(length);
        // A read that filled its buffer may have left more waiting: read on, several FPDUs at once.
        if (length === this.readTarget?.length && owner.readVector !== undefined && this.fd >= 0) this.readAhead(owner);
      } else if (this.readTarget !== undefined) {
        this.deliverLate(this.readTarget, length);
      }
    } catch (error) {
      this.closeError ??= asError(error);
      this.destroy();
    } finally {
      turn.leave();
    }
  }

  /**
   * The buffer of a read was picked for a consumer that has since handed the stream on: its bytes
   * go to the new one. A method of its own: the closure it makes, inside delivered(), made V8
   * allocate a context for `this` on every delivery wherever delivered() ran unoptimized (session
   * 18: 40 octets per read in test/rnic/busy-poll after a test that deoptimized it).
   */
  private deliverLate(buffer: Uint8Array, length: number): void {
    feed(() => this.consumer, buffer.slice(0, length));
  }

  /**
   * Reads what the consumer plans into several buffers in one system call (readv on the
   * socket's descriptor, synchronously, between two of libuv's reads of it): large payloads go
   * straight to their destination with the framing between them apart, one read for what took
   * one per FPDU (issue 16: a 256 KiB STORE took 6 reads on the target). libuv's next read
   * carries on after it: the descriptor is non-blocking and read in order by this thread only.
   * Nothing waiting (EAGAIN) or a failure ends the read-ahead; the socket's own read reports a
   * failure or the end of the stream.
   *
   * With one request in flight that next read of libuv's finds nothing (EAGAIN): libuv reads
   * again after every read that filled its buffer, as the header's did, and a read callback can
   * stop it only by readStop and readStart, which cost epoll_ctl calls instead. So a 256 KiB
   * STORE costs the target three reads (header, this readv, the empty one) where Redis makes
   * one. Reading as Redis does, the whole message at once into a staging buffer and then a copy
   * into the block, cost more than the two calls it saves (issue 16, session 14: target CPU per
   * STORE up 1.3-14.5 us, lower Gbit/s in 6 of 7 interleaved pairs).
   */
  private readAhead(owner: StreamConsumer): void {
    for (let round = 0; round < READ_AHEAD_ROUNDS && owner === this.consumer; round++) {
      const vector = owner.readVector!();
      if (vector === undefined) return;
      let length: number;
      try {
        length = readvSync(this.fd, vector);
      } catch {
        owner.commitVector!(0);
        return;
      }
      this.vectorReads++;
      owner.commitVector!(length);
      if (length < vectorLength(vector)) return;
    }
  }

  /**
   * Runs a consumer call. Consumers report protocol errors themselves; anything escaping is a
   * bug that must only cost this connection, never the process.
   */
  private guarded(body: () => void): void {
    try {
      body();
    } catch (error) {
      this.closeError ??= asError(error);
      this.destroy();
    }
  }

  setConsumer(consumer: StreamConsumer): void {
    const previous = this.consumer;
    this.consumer = consumer;
    replayLeftover(previous, () => this.consumer);
    if (previous !== this.holding) replayLeftover(this.holding, () => this.consumer);
  }

  setEvents(events: ChannelEvents): void {
    this.events = events;
    if (this.isClosed) queueMicrotask(() => events.onClose(this.closeError));
  }

  write(chunks: readonly Uint8Array[], count: number, done: WriteDone | undefined): void {
    if (this.isClosed || this.socket.destroyed || this.socket.writableEnded) {
      failWriteLater(done);
      return;
    }
    for (let i = 0; i < count; i++) {
      const chunk = chunks[i]!;
      this.queued[this.queuedCount++] = chunk;
      this.queuedBytes += chunk.length;
    }
    if (this.donesTail === this.dones.length) this.dones.push(done);
    else this.dones[this.donesTail] = done;
    this.donesTail++;
    this.unbatched++;
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      turn.flushLater(this);
    }
  }

  /** Writes what the turn queued (TurnParticipant): one write, or one writev through cork. */
  endTurn(): void {
    this.flushScheduled = false;
    const count = this.queuedCount;
    const batch = this.unbatched;
    if (count === 0 && batch === 0) return;
    this.unbatched = 0;
    this.queuedCount = 0;
    this.queuedBytes = 0;
    const socket = this.socket;
    if (socket.destroyed || socket.writableEnded) {
      for (let i = 0; i < count; i++) this.queued[i] = EMPTY_CHUNK;
      this.batchSizes.push(batch);
      queueMicrotask(() => this.completeBatch(closedError()));
      return;
    }
    this.batchSizes.push(batch);
    const direct = this.direct;
    if (direct !== undefined) {
      // A batch of dones without bytes still completes behind the writes before it: an empty write keeps its place.
      const status = count === 0 ? direct.write(EMPTY_WRITE, 1) : direct.write(this.queued, count);
      for (let i = 0; i < count; i++) this.queued[i] = EMPTY_CHUNK;
      // Queued: libuv completes it (batchWritten) behind any earlier queued write, in order.
      if (status === WRITE_QUEUED) {
        busyPoll.writeQueued(); // no spin while libuv must finish this write
        return;
      }
      if (status === WRITE_DONE) {
        busyPoll.activity();
        this.completeBatch(undefined);
        return;
      }
      this.directWritten(writeError(status));
      return;
    }
    // The stream completes every write later (batchWritten), so a turn that writes this way never spins.
    busyPoll.writeQueued();
    try {
      if (count === 1) {
        socket.write(this.queued[0]!, this.batchWritten);
      } else {
        socket.cork();
        for (let i = 0; i < count - 1; i++) socket.write(this.queued[i]!);
        socket.write(count > 0 ? this.queued[count - 1]! : EMPTY_CHUNK, this.batchWritten);
        socket.uncork();
      }
    } catch (error) {
      this.closeError ??= asError(error);
      this.destroy();
    }
    // The socket holds its own references now; drop ours so the chunks can be collected.
    for (let i = 0; i < count; i++) this.queued[i] = EMPTY_CHUNK;
  }

  /** A direct write finished: as completeBatch, and a failed write ends the stream as the Writable's would. */
  private directWritten(error: Error | undefined): void {
    if (error !== undefined) this.closeError ??= error;
    this.completeBatch(error);
    if (error !== undefined) this.destroy();
  }

  /** The socket took (or failed) the oldest batch: its messages complete, in order. */
  private completeBatch(error: Error | null | undefined): void {
    const size = this.batchSizes.shift() ?? 0;
    turn.enter();
    try {
      for (let i = 0; i < size; i++) {
        const done = this.dones[this.donesHead];
        this.dones[this.donesHead++] = undefined;
        if (done !== undefined) done(error ?? undefined);
      }
      if (this.donesHead === this.donesTail) {
        this.donesHead = 0;
        this.donesTail = 0;
      } else if (this.donesHead > 256 && this.donesHead * 2 > this.donesTail) {
        // Writes keep overlapping: move the waiting ones to the front, keeping the storage.
        const dones = this.dones;
        const waiting = this.donesTail - this.donesHead;
        for (let i = 0; i < waiting; i++) dones[i] = dones[this.donesHead + i];
        for (let i = waiting; i < this.donesTail; i++) dones[i] = undefined;
        this.donesHead = 0;
        this.donesTail = waiting;
      }
    } catch (failure) {
      this.closeError ??= asError(failure);
      this.destroy();
    } finally {
      turn.leave();
    }
  }

  get pendingBytes(): number {
    return this.socket.writableLength + (this.direct?.queuedBytes ?? 0) + this.queuedBytes;
  }

  end(lingerMs = DEFAULT_LINGER_MS): void {
    if (this.isClosed) return;
    this.endTurn(); // what this turn queued (a Terminate, a last COMPLETION) leaves before the FIN
    if (!this.socket.writableEnded) this.socket.end();
    if (this.lingerTimer === undefined) {
      this.lingerTimer = setTimeout(() => this.socket.destroy(), lingerMs);
      this.lingerTimer.unref();
    }
  }

  destroy(): void {
    if (!this.socket.destroyed) this.socket.destroy();
  }

  get closed(): boolean {
    return this.isClosed;
  }
  get remoteAddress(): string | undefined {
    return this.socket.remoteAddress;
  }
  get remotePort(): number | undefined {
    return this.socket.remotePort;
  }
  get localAddress(): string | undefined {
    return this.socket.localAddress;
  }
  get localPort(): number | undefined {
    return this.socket.localPort;
  }
}

/**
 * What the in-process channels (MemoryChannel here, LinkedChannel) share: the events they report,
 * closing once (onClose after the current turn, as a socket's would come) and a fixed name in
 * place of addresses.
 */
export abstract class InProcessChannel {
  protected events: ChannelEvents | undefined;
  protected isClosed = false;
  readonly localAddress: string;
  readonly remotePort = 0;
  readonly localPort = 0;

  constructor(readonly remoteAddress: string) {
    this.localAddress = remoteAddress;
  }

  setEvents(events: ChannelEvents): void {
    this.events = events;
    if (this.isClosed) queueMicrotask(() => events.onClose(undefined));
  }

  protected close(): void {
    if (this.isClosed) return;
    this.isClosed = true;
    const events = this.events;
    queueMicrotask(() => events?.onClose(undefined));
  }

  get closed(): boolean {
    return this.isClosed;
  }
}

/**
 * An in-memory channel: everything written is kept in `written` (and passed to `onWrite`).
 * Tests and the fuzzer drive a QP through it without sockets.
 */
export class MemoryChannel extends InProcessChannel implements StreamChannel {
  private consumer: StreamConsumer | undefined;
  readonly written: Uint8Array[] = [];
  writtenBytes = 0;
  /** Keep at most this many written octets (older ones are dropped) so fuzzing stays bounded. */
  constructor(
    private readonly retain = Infinity,
    private readonly onWrite?: (chunks: Uint8Array[]) => void,
  ) {
    super('memory');
  }
  endCalled = false;

  setConsumer(consumer: StreamConsumer): void {
    const previous = this.consumer;
    this.consumer = consumer;
    if (previous !== undefined) replayLeftover(previous, () => consumer);
  }
  /** Delivers bytes as if read from the network. */
  receive(bytes: Uint8Array): void {
    const consumer = this.consumer;
    if (consumer === undefined || this.isClosed) return;
    feed(() => this.consumer ?? consumer, bytes);
  }
  /** The peer sent FIN. */
  receiveEnd(): void {
    this.events?.onEnd();
  }
  write(chunks: readonly Uint8Array[], count: number, done: WriteDone | undefined): void {
    if (this.isClosed) {
      if (done !== undefined) queueMicrotask(() => done(closedError()));
      return;
    }
    const copies = chunks.slice(0, count).map((chunk) => chunk.slice());
    for (const copy of copies) {
      this.written.push(copy);
      this.writtenBytes += copy.length;
    }
    while (this.writtenBytes > this.retain && this.written.length > 1) this.writtenBytes -= this.written.shift()!.length;
    this.onWrite?.(copies);
    if (done !== undefined) queueMicrotask(() => done());
  }
  get pendingBytes(): number {
    return 0;
  }
  /** Everything written so far, concatenated, and forgotten. */
  drain(): Uint8Array {
    const out = new Uint8Array(this.written.reduce((sum, chunk) => sum + chunk.length, 0));
    let offset = 0;
    for (const chunk of this.written) {
      out.set(chunk, offset);
      offset += chunk.length;
    }
    this.written.length = 0;
    this.writtenBytes = 0;
    return out;
  }
  end(): void {
    this.endCalled = true;
    this.close();
  }
  destroy(): void {
    this.close();
  }
}
