// One thread's share of the engine's sessions and request contexts. Each thread owns a disjoint
// slice of both areas, so handing them out needs no cross-thread coordination.
import * as S from '../../assembly/struct-offsets.ts';
import { maxRequestSize } from './layout.ts';
import type { Engine } from './engine.ts';
import { EXIT_FAILURE, KbtpError, UsageError } from '../errors.ts';

export interface SessionOptions {
  tenant: number;
  capabilities: number;
  credits: number;
}

export interface TierRequest {
  kind: number;
  /** Handle index from the table's base handle. */
  index: number;
  generation: number;
  blockOffset: bigint;
  dataLength: number;
  /** Tenant address whose quota is full (ACTION_EVICT). */
  evictTenant: number;
  /** Address of the staging block holding a seal's data (0: the data is in the pool block). */
  staging: number;
}

/** An RDMA Write or Read a program asked for (ACTION_DATA); `remoteOffset` is a number when it fits 2^53. */
export interface DataOperation {
  kind: number;
  length: number;
  local: number;
  stag: number;
  remoteOffset: number | bigint;
}

/** A thread's fixed table of sessions or request contexts is full (code KBTP_CONFIG: the engine config sizes it). */
export class ArenaExhaustedError extends KbtpError {
  constructor(what: string, capacity: number, setting: string) {
    super('KBTP_CONFIG', `all ${capacity} ${what} of this thread are in use; raise ${setting} in the engine config`, EXIT_FAILURE);
  }
}

/** A stack of free indices that never allocates after construction. */
class FreeList {
  private readonly free: Int32Array;
  private top: number;
  constructor(capacity: number) {
    this.free = new Int32Array(capacity);
    for (let i = 0; i < capacity; i++) this.free[i] = capacity - 1 - i;
    this.top = capacity;
  }
  take(): number {
    if (this.top === 0) return -1;
    this.top -= 1;
    return this.free[this.top] ?? -1;
  }
  give(index: number): void {
    this.free[this.top] = index;
    this.top += 1;
  }
}

export class ThreadArena {
  private readonly sessionBase: number;
  private readonly requestBase: number;
  private readonly sessions: FreeList;
  private readonly requests: FreeList;
  readonly maxMessage: number;

  constructor(
    readonly engine: Engine,
    readonly thread: number,
  ) {
    const { config, layout } = engine;
    if (!Number.isInteger(thread) || thread < 0 || thread >= config.threads) {
      throw new UsageError(`thread ${thread} is outside the engine's ${config.threads} threads`);
    }
    this.sessionBase = layout.sessions + S.SESSION_SIZE * config.sessionsPerThread * thread;
    this.requestBase = layout.requests + layout.requestSize * config.requestsPerThread * thread;
    this.sessions = new FreeList(config.sessionsPerThread);
    this.requests = new FreeList(config.requestsPerThread);
    this.maxMessage = maxRequestSize(config.maxInline);
  }

  openSession(options: SessionOptions): number {
    const index = this.sessions.take();
    if (index < 0) throw new ArenaExhaustedError('sessions', this.engine.config.sessionsPerThread, 'sessionsPerThread');
    return this.openSessionAt(index, options);
  }

  /**
   * Session `index` of this slice, initialised. For callers that hand out the slice's sessions
   * and contexts themselves (several threads sharing one slice through their own claims); they
   * never mix this with openSession() or acquireRequest().
   */
  openSessionAt(index: number, options: SessionOptions): number {
    if (!Number.isInteger(index) || index < 0 || index >= this.engine.config.sessionsPerThread) {
      throw new UsageError(`session ${index} is outside the ${this.engine.config.sessionsPerThread} of this slice`);
    }
    const session = this.sessionBase + S.SESSION_SIZE * index;
    const view = this.engine.view;
    view.setUint32(session + S.SESSION_TENANT, this.engine.tenantAddress(options.tenant), true);
    view.setUint32(session + S.SESSION_CAPABILITIES, options.capabilities, true);
    view.setUint32(session + S.SESSION_CREDITS, options.credits, true);
    view.setUint32(session + S.SESSION_OUTSTANDING, 0, true);
    view.setUint32(session + S.SESSION_DRAINING, 0, true);
    return session;
  }

  closeSession(session: number): void {
    this.sessions.give((session - this.sessionBase) / S.SESSION_SIZE);
  }

  setDraining(session: number, draining: boolean): void {
    this.engine.view.setUint32(session + S.SESSION_DRAINING, draining ? 1 : 0, true);
  }

  outstanding(session: number): number {
    return this.engine.view.getUint32(session + S.SESSION_OUTSTANDING, true);
  }

  /** A request context for `session`, ready to receive a message at messageAddress(). */
  acquireRequest(session: number): number {
    const index = this.requests.take();
    if (index < 0) throw new ArenaExhaustedError('request contexts', this.engine.config.requestsPerThread, 'requestsPerThread');
    return this.requestAt(index, session);
  }

  /** Request context `index` of this slice, reset for `session` (see openSessionAt). */
  requestAt(index: number, session: number): number {
    if (!Number.isInteger(index) || index < 0 || index >= this.engine.config.requestsPerThread) {
      throw new UsageError(`request context ${index} is outside the ${this.engine.config.requestsPerThread} of this slice`);
    }
    const request = this.requestBase + this.engine.layout.requestSize * index;
    this.engine.view.setUint32(request + S.REQUEST_SESSION, session, true);
    this.engine.view.setUint32(request + S.REQUEST_STATE, S.REQUEST_STATE_NEW, true);
    return request;
  }

  releaseRequest(request: number): void {
    this.requests.give((request - this.requestBase) / this.engine.layout.requestSize);
  }

  /** The thread's request contexts as one range (for registering them with the RNIC once). */
  get requestArea(): { address: number; bytes: number } {
    return { address: this.requestBase, bytes: this.engine.layout.requestSize * this.engine.config.requestsPerThread };
  }

  /** Gives a context posted before its session existed (the HELLO phase) to that session. */
  assignSession(request: number, session: number): void {
    this.engine.view.setUint32(request + S.REQUEST_SESSION, session, true);
  }

  /** Where the transport places an arriving message (a posted receive of maxMessage octets). */
  messageAddress(request: number): number {
    return request + S.REQUEST_MESSAGE;
  }

  /** Marks a message of `length` octets as arrived in the context and makes it runnable. */
  arrived(request: number, length: number): void {
    if (length > this.maxMessage) throw new UsageError(`message of ${length} octets exceeds the ${this.maxMessage}-octet receive`);
    const view = this.engine.view;
    view.setUint32(request + S.REQUEST_LENGTH, length, true);
    // A STORE placeInline() let through on its first segment keeps its state: run() finishes it.
    if (view.getUint32(request + S.REQUEST_STATE, true) !== S.REQUEST_STATE_PLACING) view.setUint32(request + S.REQUEST_STATE, S.REQUEST_STATE_NEW, true);
  }

  /**
   * The first `received` octets of a message that has more are in the context: when it is an
   * inline STORE that passes its checks now, the engine holds its credit and handle and this
   * returns the address where the rest of the message belongs (its block), with
   * `placingLength()` octets to come; 0 when the message should go on into the context.
   */
  placeInline(request: number, received: number): number {
    // Unsigned: a block at 2 GiB and above comes back from wasm as a negative i32.
    return this.engine.exports.placeInline(this.engine.address, request, received) >>> 0;
  }

  /** Octets of a PLACING request's message still to come after placeInline(). */
  placingLength(request: number): number {
    return this.engine.view.getUint32(request + S.REQUEST_OP_LENGTH, true);
  }

  /** The request passed placeInline() and waits for the rest of its message. */
  placing(request: number): boolean {
    return this.engine.view.getUint32(request + S.REQUEST_STATE, true) === S.REQUEST_STATE_PLACING;
  }

  /** Copies a message into the context (for callers whose transport did not place it there). */
  place(request: number, message: Uint8Array): void {
    if (message.length > this.maxMessage) {
      throw new UsageError(`message of ${message.length} octets exceeds the ${this.maxMessage}-octet receive`);
    }
    this.engine.bytes.set(message, this.messageAddress(request));
    this.arrived(request, message.length);
  }

  /** Runs or resumes the request's program; returns an ACTION_* code. */
  run(request: number): number {
    return this.engine.exports.run(this.engine.address, request);
  }

  /**
   * Reports the data operation of ACTION_DATA (returns ACTION_SEND or ACTION_NONE) or of
   * ACTION_DATA_AND_SEND (returns ACTION_NONE: its COMPLETION is already out) done or failed.
   */
  complete(request: number, ok: boolean): number {
    return this.engine.exports.complete(this.engine.address, request, ok ? 1 : 0);
  }

  /** Reports the tier's outcome of ACTION_PERSIST; returns ACTION_SEND. */
  persisted(request: number, ok: boolean): number {
    return this.engine.exports.persisted(this.engine.address, request, ok ? 1 : 0);
  }

  /** Reports ACTION_FETCH done (S.FETCH_OK), failed (FETCH_FAILED) or corrupt (FETCH_LOST); returns the LOAD's next action. */
  fetched(request: number, outcome: number): number {
    return this.engine.exports.fetched(this.engine.address, request, outcome);
  }

  /** What ACTION_PERSIST, ACTION_RESERVE, ACTION_FETCH or ACTION_EVICT asks of the tier. */
  tierRequest(request: number): TierRequest {
    const view = this.engine.view;
    const entry = view.getUint32(request + S.REQUEST_ENTRY, true);
    return {
      kind: view.getUint32(request + S.REQUEST_TIER, true),
      index: (entry - this.engine.layout.table) / S.ENTRY_SIZE,
      generation: view.getUint32(request + S.REQUEST_TIER_GENERATION, true),
      blockOffset: view.getBigUint64(request + S.REQUEST_BLOCK_OFFSET, true),
      dataLength: view.getUint32(request + S.REQUEST_DATA_LENGTH, true),
      evictTenant: view.getUint32(request + S.REQUEST_EVICT_TENANT, true),
      staging: view.getUint32(request + S.REQUEST_STAGING, true),
    };
  }

  /** Ends a request waiting to run again (after ACTION_RESERVE) with `status`; returns ACTION_SEND. */
  fail(request: number, status: number): number {
    return this.engine.exports.fail(this.engine.address, request, status);
  }

  /**
   * Whether the request's ACTION_RETRY waits for a staging block (every one holds a seal in flight,
   * so none frees before a group commit ends): such a retry need not run at the very next turn.
   */
  waitsForStaging(request: number): boolean {
    return this.engine.view.getUint32(request + S.REQUEST_STAGING_WAIT, true) !== 0;
  }

  /** After ACTION_EVICT found nothing to demote: the next run() answers NO_SPACE. */
  noEviction(request: number): void {
    this.engine.view.setUint32(request + S.REQUEST_NO_EVICT, 1, true);
  }

  /** The COMPLETION the program wrote (a view into shared memory, valid until the context is reused). */
  completion(request: number): Uint8Array {
    return new Uint8Array(this.engine.memory.buffer, request + S.REQUEST_COMPLETION, 40);
  }

  /** The data operation of ACTION_DATA. */
  dataOperation(request: number): DataOperation & { remoteOffset: bigint } {
    const op = this.readDataOperation(request, { kind: 0, length: 0, local: 0, stag: 0, remoteOffset: 0 });
    return { ...op, remoteOffset: BigInt(op.remoteOffset) };
  }

  /** The same, written into `out` (the hot path keeps one per connection: nothing allocated). */
  readDataOperation(request: number, out: DataOperation): DataOperation {
    const view = this.engine.view;
    out.kind = view.getUint32(request + S.REQUEST_OP_KIND, true);
    out.length = view.getUint32(request + S.REQUEST_OP_LENGTH, true);
    out.local = view.getUint32(request + S.REQUEST_OP_LOCAL, true);
    out.stag = view.getUint32(request + S.REQUEST_OP_STAG, true);
    // Two 32-bit reads: a BigInt only for an offset beyond 2^53 (getBigUint64 allocates one always).
    const low = view.getUint32(request + S.REQUEST_OP_REMOTE_OFFSET, true);
    const high = view.getUint32(request + S.REQUEST_OP_REMOTE_OFFSET + 4, true);
    out.remoteOffset = high < 0x200000 ? high * 0x1_0000_0000 + low : view.getBigUint64(request + S.REQUEST_OP_REMOTE_OFFSET, true);
    return out;
  }

  /** STag to invalidate with Send with Invalidate, or 0 for a plain Send. */
  invalidateStag(request: number): number {
    return this.engine.view.getUint32(request + S.REQUEST_INVALIDATE_STAG, true);
  }
}
