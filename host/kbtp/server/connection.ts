// One initiator's connection to the target: the session state machine of kbtp-v1 sections 7 and
// 11 over an RDMAP stream. Requests land by the RNIC straight in engine request contexts; the
// engine's programs decide everything; this class only carries out what they ask (RDMA Write,
// RDMA Read, Send of the COMPLETION), admits the session, grants STags and watches one-sided
// tickets for the Ticket Timeout. It runs in a session slot (slots.ts) claimed before it was
// made, and whatever ends it (GOODBYE, a disconnect, a timeout, an internal error) gives back
// everything it held: handle locks, credits, blocks and quota of requests in flight, its tenant's
// session count and its slot.
import * as K from '../../../assembly/kbtp-constants.ts';
import * as S from '../../../assembly/struct-offsets.ts';
import type { Engine } from '../../engine/engine.ts';
import type { ThreadArena } from '../../engine/arena.ts';
import {
  Access,
  QueuePair,
  WcStatus,
  type Rnic,
  type ProtectionDomain,
  type MemoryRegion,
  type AnyQueuePair,
  type CompletionQueue,
  type WorkCompletion,
  type DisconnectInfo,
  type SendOpcode,
  type Sge,
} from '../../rnic/verbs.ts';
import type { DataOperation } from '../../engine/arena.ts';
import type { TargetSettings, TenantSettings } from './target-config.ts';
import { decodeHello, encodeHelloAck, refusal, type HelloAck } from '../wire/hello.ts';
import { MessageFormatError, encodeCompletion } from '../wire/messages.ts';
import { admit, type Admission } from './auth.ts';
import type { SecretVerifier } from './secret-hash.ts';
import type { RefusalReason, TargetStats, TimeoutStage } from './stats.ts';
import { SessionTickets, type LateReclaims } from './tickets.ts';
import type { SessionSlots } from './slots.ts';
import type { TierClient } from './tier-client.ts';
import type { Demoter } from '../../engine/demotion.ts';
import { InternalError } from '../../errors.ts';

// Work request ids: a request context address (64-aligned) plus what the work request is for.
const WR_RECV = 0;
const WR_COMPLETION = 1;
const WR_DATA = 2;
const WR_CONTROL = 3;
const WR_KIND_MASK = 63;
/** How long a request waiting for a staging block waits before it tries again (see settle()). */
const STAGING_RETRY_MS = 1;

/** What every connection of one worker thread shares. */
export interface WorkerContext {
  engine: Engine;
  arena: ThreadArena;
  rnic: Rnic;
  settings: TargetSettings;
  stats: TargetStats;
  /** Tickets of ended sessions whose slot was not filled yet; reclaimed when it is. */
  lateReclaims: LateReclaims;
  /** The node's session slots and per-tenant session counts, shared by all workers. */
  slots: SessionSlots;
  /** Checks credentials against scrypt hashes on libuv's pool; remembers the ones that passed. */
  verifier: SecretVerifier;
  /** For the tests of the failure paths only (KBTP_TEST_FAULT): where to throw. */
  fault?: { kind: 'connection' | 'worker'; tenant: string };
  /** The durable tier in the main thread, when the target has one. */
  tier: TierClient | undefined;
  demoter: Demoter;
  log(line: string): void;
}

/** 'admitting': HELLO received, its credential being verified (off the event loop). */
type State = 'hello' | 'admitting' | 'open' | 'draining' | 'closed';

interface MutableSge {
  lkey: number;
  offset: number;
  length: number;
}

/**
 * The work requests of one request context, built once and rewritten in place for every request
 * it carries: a context has at most one receive, one data operation and one COMPLETION posted at
 * a time, and the QP is done with each before the context is reused.
 */
/**
 * Where an inline STORE may be steered to its block without MPA CRC (work.ts steerAt): its header
 * and Data Descriptor, and the record descriptor a STORE may carry. Its data then goes straight to
 * the block from the first segment on, and nothing of it is copied out of the context (issue 16).
 */
const STEER_AT = K.HEADER_SIZE + 2 * K.DESCRIPTOR_SIZE;

class ContextRequests {
  readonly recvSge: MutableSge = { lkey: 0, offset: 0, length: 0 };
  /** The receive as posted: the context's message area. */
  readonly postedList: readonly Sge[] = [this.recvSge];
  /** After steer(): the octets already in the context, then the STORE's block (see TargetConnection.steer). */
  readonly prefixSge: MutableSge = { lkey: 0, offset: 0, length: 0 };
  readonly blockSge: MutableSge = { lkey: 0, offset: 0, length: 0 };
  readonly steeredList: readonly Sge[] = [this.prefixSge, this.blockSge];
  readonly recv: { wrId: number; sgList: readonly Sge[]; steer: (received: number) => void; steerAt: number };
  readonly completionSge: MutableSge = { lkey: 0, offset: 0, length: K.COMPLETION_SIZE };
  readonly completion: { wrId: number; opcode: SendOpcode; invalidateStag: number; sgList: Sge[] };
  readonly dataSge: MutableSge = { lkey: 0, offset: 0, length: 0 };
  readonly remote = { stag: 0, taggedOffset: 0 as number | bigint };
  readonly data: { wrId: number; opcode: SendOpcode; signaled: boolean; sgList: Sge[]; remote: { stag: number; taggedOffset: number | bigint } };

  constructor(request: number, steer: (request: number, received: number) => void) {
    this.recv = { wrId: request | WR_RECV, sgList: this.postedList, steer: (received) => steer(request, received), steerAt: STEER_AT };
    this.completion = { wrId: request | WR_COMPLETION, opcode: 'SEND', invalidateStag: 0, sgList: [this.completionSge] };
    this.data = { wrId: request | WR_DATA, opcode: 'RDMA_WRITE', signaled: true, sgList: [this.dataSge], remote: this.remote };
  }
}

export class TargetConnection {
  private state: State = 'hello';
  private readonly contexts: number[] = [];
  /**
   * Each context's work requests, by the context's place among this connection's (its contexts
   * are consecutive in the arena: contextOf() turns an address into that place). An array, not a
   * Map by address: three lookups per LOAD (issue 16).
   */
  private readonly requests: ContextRequests[] = [];
  private firstContext = 0;
  private readonly contextSize: number;
  private readonly operation: DataOperation = { kind: 0, length: 0, local: 0, stag: 0, remoteOffset: 0 };
  private readonly onCompletionBound = (completion: WorkCompletion): void => this.onCompletionGuarded(completion);
  private readonly steerBound = (request: number, received: number): void => this.steer(request, received);
  private stopNotify: (() => void) | undefined;
  /** Contexts between arrival and the completion of their COMPLETION Send. */
  private busy = 0;
  private session = 0;
  /** The admitted tenant's name, for the per-tenant session count. */
  private tenantName: string | undefined;
  /** The tenant's settings the session was admitted under, to tell after a reload whether it still is. */
  private admittedAs: TenantSettings | undefined;
  private tenantAddress = 0;
  private readonly grantedRegions: MemoryRegion[] = [];
  /** One-sided tickets this session took (DIRECT_ALLOC sessions only). */
  private tickets: SessionTickets | undefined;
  private readonly retries: number[] = [];
  private retryScheduled = false;
  private readonly control = new Uint8Array(256);
  private readonly controlRegion: MemoryRegion;
  /** The pool, for local access: source of RDMA Writes, sink of RDMA Reads. */
  private readonly poolRegion: MemoryRegion;
  /** This thread's request contexts: receive buffers and COMPLETION sources. */
  private readonly requestRegion: MemoryRegion;
  private disconnected = false;
  private cleanedUp = false;
  /** An internal error ended the connection: the bookkeeping is not trusted, the engine's request states are. */
  private failed = false;
  private reconciled = false;
  /** The tenant whose session count this connection holds, or -1. */
  private countedTenant = -1;
  private helloTimer: NodeJS.Timeout | undefined;
  /**
   * When a message last arrived (for the idle-session timeout), as the sweep saw it: a request
   * only counts (`arrivals`) and the sweep that finds the count changed takes the time. A clock
   * read per request allocated (V8 boxes every `Date.now()`: 16 octets, issue 16); the price is
   * that a timeout runs from the first sweep after the event, at most one sweep period (a
   * quarter of the shortest timeout) later than from the event itself.
   */
  private lastActivity = Date.now();
  private arrivals = 0;
  private arrivalsSwept = 0;
  /**
   * STORE data awaited from the initiator (RDMA Read Requests out with it, inline STOREs whose rest
   * goes to their held block); progress (one completed or the first began) counted, timed by the sweep as above.
   */
  private readsOutstanding = 0;
  private readProgressAt = 0;
  private readProgress = 0;
  private readProgressSwept = 0;
  private faultArmed = false;
  /** Requests whose tier step is out with the main thread: its answer settles them, whatever happened meanwhile. */
  private readonly awaitingTier = new Set<number>();
  /** MPA setup finished (the RTR arrived); failures before that are the worker's to count. */
  private handshakeDone = false;
  readonly label: string;

  /**
   * `pd` is this connection's own protection domain: the STags granted to the session live in it,
   * so no other session's QP can use them (kbtp-v1 section 11), even on the same RNIC.
   */
  constructor(
    private readonly ctx: WorkerContext,
    private readonly slot: number,
    private readonly pd: ProtectionDomain,
    private readonly qp: AnyQueuePair,
    private readonly cq: CompletionQueue,
    peer: string,
    private readonly onClosed: () => void,
  ) {
    this.label = `${peer} qp ${qp.qpNumber}`;
    const { rnic, engine, arena } = ctx;
    this.contextSize = engine.layout.requestSize;
    const buffer = engine.memory.buffer;
    this.controlRegion = rnic.registerMemory(pd, this.control, { access: Access.LocalWrite });
    // The staging blocks follow the pool: sealing requests of a durable target read into them.
    this.poolRegion = rnic.registerMemory(pd, buffer, {
      access: Access.LocalWrite,
      offset: engine.layout.pool,
      length: engine.layout.poolBytes + engine.layout.stagingBytes,
    });
    this.requestRegion = rnic.registerMemory(pd, buffer, { access: Access.LocalWrite, offset: arena.requestArea.address, length: arena.requestArea.bytes });
  }

  /** Posts the receives (before the initiator may send HELLO) and starts serving. */
  start(): void {
    const receives = 2 * this.ctx.settings.session.credits;
    for (let i = 0; i < receives; i++) {
      // The slot's own contexts: no other connection of any worker can hold them.
      const request = this.ctx.arena.requestAt(this.slot * receives + i, 0);
      if (i === 0) this.firstContext = request;
      else if (request !== this.firstContext + i * this.contextSize)
        throw new InternalError(`request context ${i} of a connection is not next to the one before it`);
      this.contexts.push(request);
      const wrs = new ContextRequests(request, this.steerBound);
      const offset = request - this.ctx.arena.requestArea.address;
      wrs.recvSge.lkey = this.requestRegion.stag;
      wrs.recvSge.offset = offset + S.REQUEST_MESSAGE;
      wrs.recvSge.length = this.ctx.arena.maxMessage;
      wrs.prefixSge.lkey = this.requestRegion.stag;
      wrs.prefixSge.offset = offset + S.REQUEST_MESSAGE;
      wrs.blockSge.lkey = this.poolRegion.stag;
      wrs.completionSge.lkey = this.requestRegion.stag;
      wrs.completionSge.offset = offset + S.REQUEST_COMPLETION;
      wrs.dataSge.lkey = this.poolRegion.stag;
      this.requests.push(wrs);
      this.postReceive(request);
    }
    this.ctx.stats.sessionOpened();
    void this.qp.whenDisconnected().then((info) => this.onDisconnected(info));
    // Completions are drained from the CQ's notification at the end of each turn: no promise, no array.
    this.stopNotify = this.cq.onNotify(() => this.drainCompletions());
    this.cq.requestNotify();
  }

  /** The stream is up: the initiator now has helloMs to send its HELLO. */
  established(): void {
    if (this.state !== 'hello' || this.disconnected) return;
    this.handshakeDone = true;
    this.helloTimer = setTimeout(() => {
      if (this.state !== 'hello' || this.disconnected) return;
      this.timedOut('hello', `no HELLO within ${this.ctx.settings.timeouts.helloMs} ms`);
    }, this.ctx.settings.timeouts.helloMs);
    this.helloTimer.unref();
  }

  /** Closes the connection for a stage that took too long; counted always, logged at -v. */
  private timedOut(stage: TimeoutStage, why: string): void {
    this.ctx.stats.timedOut(stage);
    this.ctx.log(`${this.label}: ${why}; closing`);
    this.state = 'closed';
    this.qp.disconnect();
  }

  /** Called by the worker's sweep: the idle-session and RDMA Read timeouts. */
  checkTimeouts(now: number): void {
    if (this.disconnected || (this.state !== 'open' && this.state !== 'draining')) return;
    const { idleSessionMs, rdmaReadMs } = this.ctx.settings.timeouts;
    if (this.arrivals !== this.arrivalsSwept) {
      this.arrivalsSwept = this.arrivals;
      this.lastActivity = now;
    }
    if (this.readProgress !== this.readProgressSwept) {
      this.readProgressSwept = this.readProgress;
      this.readProgressAt = now;
    }
    if (this.readsOutstanding > 0 && now - this.readProgressAt > rdmaReadMs) {
      // Flushing the Read ends its request through the engine: nothing it held stays held.
      this.timedOut('rdma-read', `the initiator delivered no STORE data (an RDMA Read Request, or an inline STORE's rest) for ${rdmaReadMs} ms`);
    } else if (idleSessionMs > 0 && this.busy === 0 && this.retries.length === 0 && now - this.lastActivity > idleSessionMs) {
      this.timedOut('idle-session', `session idle for ${idleSessionMs} ms`);
    }
  }

  /** Ends a connection whose handshake failed (already counted by the caller). */
  close(): void {
    this.state = 'closed';
    this.qp.disconnect();
  }

  /** Ends the connection after an internal error; what its requests held is released once the QP has flushed. */
  abort(reason: string): void {
    if (this.cleanedUp) return;
    this.failed = true;
    this.state = 'closed';
    this.ctx.log(`${this.label}: ${reason}; closing the connection`);
    this.qp.disconnect();
    queueMicrotask(() => this.maybeFinish());
  }

  private drainCompletions(): void {
    if (this.cleanedUp) return;
    while (this.cq.drain(this.onCompletionBound) > 0);
    this.maybeFinish();
    if (!this.cleanedUp) this.cq.requestNotify();
  }

  private onCompletionGuarded(completion: WorkCompletion): void {
    try {
      this.onCompletion(completion);
    } catch (error) {
      // A fault while serving one connection ends that connection only.
      this.ctx.stats.internalError();
      this.abort(`internal error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    }
  }

  private postReceive(request: number): void {
    if (this.disconnected) return;
    const wrs = this.contextOf(request);
    wrs.recv.sgList = wrs.postedList;
    this.qp.postRecv(wrs.recv);
  }

  /** The work requests of the context at address `request` (one of this connection's). */
  private contextOf(request: number): ContextRequests {
    const wrs = this.requests[(request - this.firstContext) / this.contextSize];
    if (wrs === undefined) throw new InternalError(`request context ${request} is not one of this connection's`);
    return wrs;
  }

  /**
   * The RNIC placed a message's first `received` octets in the context and more are coming: an
   * inline STORE the engine lets through now (placeInline) has the rest of its data placed by the
   * RNIC straight into its block, instead of into the context and then copied by the engine
   * (issue 16: that copy was an eighth of the target's CPU per 256 KiB STORE at 16 sessions).
   * From here the request holds its credit and handle: it counts as busy until it is settled.
   */
  private steer(request: number, received: number): void {
    if (this.state !== 'open' || this.disconnected) return;
    try {
      const { arena, engine } = this.ctx;
      const block = arena.placeInline(request, received);
      if (block === 0) return;
      this.busy += 1;
      // The handle is held until the rest arrives: a sender that stalls is timed like an unanswered Read.
      this.awaitStoreData();
      const wrs = this.contextOf(request);
      wrs.prefixSge.length = received;
      wrs.blockSge.offset = block - engine.layout.pool;
      wrs.blockSge.length = arena.placingLength(request);
      wrs.recv.sgList = wrs.steeredList;
    } catch (error) {
      this.ctx.stats.internalError();
      this.abort(`internal error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    }
  }

  private onCompletion(completion: WorkCompletion): void {
    if (this.reconciled) return; // reconcile() settled every request from the engine's states
    const id = Number(completion.wrId);
    const kind = id & WR_KIND_MASK;
    const request = id - kind;
    if (completion.status !== WcStatus.Success) {
      // The stream is failing (a Terminate, a reset, a flush): release what the request holds.
      if (kind === WR_RECV) {
        // A STORE whose data was going straight to its block never arrived whole.
        if (this.ctx.arena.placing(request)) {
          this.storeDataSettled();
          this.ctx.arena.complete(request, false);
          this.busy -= 1;
        }
      } else if (kind === WR_DATA) this.dataDone(request, false);
      else if (kind === WR_COMPLETION) {
        // A LOAD's unsignaled Write went out before this Send but is not known done: release its handle.
        if (this.loadWriteOut(request)) this.dataDone(request, false);
        this.busy -= 1;
      }
      return;
    }
    switch (kind) {
      case WR_RECV:
        this.arrived(request, completion.byteLength);
        return;
      case WR_DATA:
        this.dataDone(request, true);
        return;
      case WR_COMPLETION:
        // A LOAD's Write is unsignaled: the COMPLETION Send behind it on the stream is sent, so is the Write.
        if (this.loadWriteOut(request)) this.dataDone(request, true);
        this.busy -= 1;
        if (this.state === 'open') this.postReceive(request);
        return;
      case WR_CONTROL:
        if (this.state === 'closed') this.qp.disconnect();
        return;
    }
  }

  private arrived(request: number, length: number): void {
    this.ctx.stats.bytesIn(length);
    this.arrivals++;
    if (this.state === 'hello') {
      this.hello(request, length);
      return;
    }
    // A STORE placed on its way (steer) holds credit and handle and counts as busy already.
    const placing = this.ctx.arena.placing(request);
    if (this.state !== 'open' && !placing) return; // after GOODBYE the initiator sends nothing more
    if (!placing) this.busy += 1;
    else this.storeDataSettled();
    this.ctx.stats.arrived(request);
    this.ctx.arena.arrived(request, length);
    this.settle(request, this.ctx.arena.run(request));
  }

  /** A STORE's data is now awaited from the initiator (an RDMA Read Request went out, or steer() sent its rest to its block). */
  private awaitStoreData(): void {
    if (this.readsOutstanding++ === 0) this.readProgress++;
  }

  /** Awaited STORE data arrived whole, or never will: it is no longer awaited. */
  private storeDataSettled(): void {
    this.readsOutstanding -= 1;
    this.readProgress++;
  }

  /** Carries out what the engine's program asked for. */
  private settle(request: number, action: number): void {
    switch (action) {
      case S.ACTION_SEND:
        this.postCompletion(request);
        return;
      case S.ACTION_DATA: {
        const wrs = this.dataRequest(request, true);
        if (wrs !== undefined) this.qp.postSend(wrs.data);
        return;
      }
      case S.ACTION_DATA_AND_SEND: {
        // LOAD: the Write and the COMPLETION go out together; the Send is delivered after the data is
        // placed. The Write is unsignaled: the Send's completion says both were sent (issue 16: one
        // work completion fewer per LOAD, and its drain, dispatch and engine call).
        const wrs = this.dataRequest(request, false);
        if (wrs === undefined) {
          this.busy -= 1; // the stream is gone: no COMPLETION will be posted or confirmed
          return;
        }
        const completion = this.completionRequest(request, wrs);
        if (completion === undefined) return;
        // The iWARP QP frames both at once when it can (issue 16: a third of the target's send-side work per LOAD).
        if (this.qp instanceof QueuePair) this.qp.postWriteThenSend(wrs.data, completion);
        else {
          this.qp.postSend(wrs.data);
          this.qp.postSend(completion);
        }
        return;
      }
      case S.ACTION_RETRY:
        this.retries.push(request);
        if (!this.retryScheduled) {
          this.retryScheduled = true;
          // Every staging block holds a seal in flight: none frees before a group commit ends, so
          // try again in a millisecond rather than at every turn (which spun the worker meanwhile).
          // Other retries (a busy handle, an unfilled ring slot) run at the next turn.
          if (this.ctx.arena.waitsForStaging(request)) setTimeout(() => this.runRetries(), STAGING_RETRY_MS);
          else setImmediate(() => this.runRetries());
        }
        return;
      case S.ACTION_GOODBYE:
        this.busy -= 1;
        this.state = 'draining';
        this.ctx.log(`${this.label}: GOODBYE`);
        this.maybeFinish();
        return;
      case S.ACTION_NONE:
        this.busy -= 1;
        return;
      case S.ACTION_PERSIST:
      case S.ACTION_RESERVE:
      case S.ACTION_FETCH:
        this.askTier(request, action);
        return;
      case S.ACTION_EVICT: {
        // Under `demote`, at the quota: the tenant's least recently used sealed resident block goes first.
        const { arena, engine, demoter, stats } = this.ctx;
        if (demoter.demoteOne(engine.tenantIndexOf(arena.tierRequest(request).evictTenant))) stats.demoted();
        else arena.noEviction(request);
        this.settle(request, arena.run(request));
        return;
      }
    }
  }

  /** Hands a tier step to the main thread; the request (and its handle) waits for the answer. */
  private askTier(request: number, action: number): void {
    const { arena, tier } = this.ctx;
    const t = arena.tierRequest(request);
    if (tier === undefined) throw new InternalError(`engine asked for a durable tier (action ${action}) that this target does not have`);
    this.awaitingTier.add(request);
    const ask =
      action === S.ACTION_RESERVE
        ? tier.ask({ op: 'reserve', index: t.index, generation: t.generation })
        : action === S.ACTION_FETCH
          ? tier.ask({ op: 'fetch', index: t.index, blockOffset: t.blockOffset })
          : t.kind === S.TIER_SEAL
            ? tier.ask({ op: 'seal', index: t.index, generation: t.generation, blockOffset: t.blockOffset, dataLength: t.dataLength, staging: t.staging })
            : tier.ask({
                op: 'unbind',
                index: t.index,
                generation: t.generation,
                why: t.kind === S.TIER_UNBIND_LOST ? 'lost' : t.kind === S.TIER_UNBIND_UNDO ? 'undo' : 'free',
              });
    void ask.then((answer) => {
      this.awaitingTier.delete(request);
      try {
        let next: number;
        if (action === S.ACTION_PERSIST) next = arena.persisted(request, answer.ok);
        else if (action === S.ACTION_RESERVE) next = answer.ok ? arena.run(request) : arena.fail(request, K.STATUS_TIER_ERROR);
        else {
          if (answer.outcome === S.FETCH_OK) this.ctx.stats.promoted();
          next = arena.fetched(request, answer.outcome);
        }
        this.settle(request, next);
      } catch (error) {
        this.ctx.stats.internalError();
        this.abort(`internal error after a tier step: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
      }
      this.maybeFinish();
    });
  }

  private postCompletion(request: number): void {
    const wr = this.completionRequest(request, this.contextOf(request));
    if (wr !== undefined) this.qp.postSend(wr);
  }

  /**
   * Counts the request's COMPLETION and stamps its handle's use, then readies the context's Send of
   * it; undefined when the stream is gone (the request is no longer busy then).
   */
  private completionRequest(request: number, wrs: ContextRequests): ContextRequests['completion'] | undefined {
    const { arena, engine } = this.ctx;
    const opcode = engine.view.getUint8(request + S.REQUEST_MESSAGE + K.HEADER_OPCODE);
    const status = engine.view.getUint16(request + S.REQUEST_COMPLETION + K.HEADER_STATUS, false);
    this.ctx.stats.completed(opcode, status, request);
    // The handle's last use, for least-recently-used demotion and drops.
    const entry = engine.view.getUint32(request + S.REQUEST_ENTRY, true);
    if (status === K.STATUS_SUCCESS && entry !== 0 && opcode !== K.OPCODE_FREE) engine.stamp(engine.entryIndex(entry));
    if (this.disconnected) {
      this.busy -= 1;
      return;
    }
    const invalidateStag = arena.invalidateStag(request);
    const wr = wrs.completion;
    wr.opcode = invalidateStag !== 0 ? 'SEND_WITH_INV' : 'SEND';
    wr.invalidateStag = invalidateStag;
    return wr;
  }

  /**
   * Readies the context's RDMA Write or Read the program described, for posting; undefined when the
   * stream is already gone (the data operation has failed then). `signaled` false: no completion
   * unless it fails (a LOAD's Write, followed by its COMPLETION Send).
   */
  private dataRequest(request: number, signaled: boolean): ContextRequests | undefined {
    if (this.disconnected) {
      this.dataDone(request, false);
      return undefined;
    }
    const op = this.ctx.arena.readDataOperation(request, this.operation);
    this.ctx.stats.dataMoved(op.length);
    if (op.kind !== S.OP_WRITE_TO_INITIATOR) this.awaitStoreData();
    const wrs = this.contextOf(request);
    wrs.data.opcode = op.kind === S.OP_WRITE_TO_INITIATOR ? 'RDMA_WRITE' : 'RDMA_READ';
    wrs.data.signaled = signaled || op.kind !== S.OP_WRITE_TO_INITIATOR;
    wrs.dataSge.offset = op.local - this.ctx.engine.layout.pool;
    wrs.dataSge.length = op.length;
    wrs.remote.stag = op.stag;
    wrs.remote.taggedOffset = op.remoteOffset;
    return wrs;
  }

  /** A LOAD whose unsignaled Write and COMPLETION are out, its handle still held (the engine's DATA_SENT). */
  private loadWriteOut(request: number): boolean {
    return this.ctx.engine.view.getUint32(request + S.REQUEST_STATE, true) === S.REQUEST_STATE_DATA_SENT;
  }

  /** The data operation finished (or failed): the program completes the request. */
  private dataDone(request: number, ok: boolean): void {
    const { view } = this.ctx.engine;
    if (view.getUint32(request + S.REQUEST_OP_KIND, true) !== S.OP_WRITE_TO_INITIATOR) this.storeDataSettled();
    if (this.faultArmed) {
      // KBTP_TEST_FAULT=connection:<tenant>: fail with the request's handle locked and its credit taken.
      this.faultArmed = false;
      throw new InternalError('injected connection fault (KBTP_TEST_FAULT)');
    }
    // A LOAD's COMPLETION went out with its Write: completing it only releases the handle.
    const completionSent = view.getUint32(request + S.REQUEST_STATE, true) === S.REQUEST_STATE_DATA_SENT;
    const action = this.ctx.arena.complete(request, ok);
    if (completionSent) return;
    this.settle(request, action);
  }

  private runRetries(): void {
    this.retryScheduled = false;
    const waiting = this.retries.splice(0);
    for (const request of waiting) this.settle(request, this.ctx.arena.run(request));
    this.maybeFinish();
  }

  // --- session setup -------------------------------------------------------------------------

  private sendControl(bytes: Uint8Array, closeAfter: boolean): void {
    this.control.set(bytes);
    if (closeAfter) this.state = 'closed';
    this.qp.postSend({ wrId: WR_CONTROL, opcode: 'SEND', sgList: [{ lkey: this.controlRegion.stag, offset: 0, length: bytes.length }] });
  }

  private refuse(requestId: bigint, status: number, reason: string, kind: RefusalReason): void {
    this.ctx.log(`${this.label}: session refused (${reason})`);
    this.ctx.stats.refused(kind);
    this.sendControl(encodeHelloAck(refusal(requestId, status)), true);
  }

  private hello(request: number, length: number): void {
    const { engine, settings } = this.ctx;
    const bytes = engine.bytes.subarray(request + S.REQUEST_MESSAGE, request + S.REQUEST_MESSAGE + length);
    clearTimeout(this.helloTimer);
    if (length < K.HEADER_SIZE) {
      this.ctx.stats.refused('not-hello');
      this.ctx.log(`${this.label}: ${length}-octet message before HELLO; closing`);
      this.state = 'closed';
      this.qp.disconnect();
      return;
    }
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const requestId = view.getBigUint64(K.HEADER_REQUEST_ID, false);
    if (bytes[K.HEADER_OPCODE] !== K.OPCODE_HELLO) {
      // kbtp-v1 section 11: INVALID_REQUEST with nothing disclosed, then close.
      const completion = encodeCompletion({
        version: K.KBTP_VERSION,
        requestOpcode: bytes[K.HEADER_OPCODE] ?? 0,
        requestId,
        handle: view.getBigUint64(K.HEADER_HANDLE, false),
        generation: 0,
        status: K.STATUS_INVALID_REQUEST,
        dataLength: 0,
        blockOffset: 0n,
      });
      this.ctx.log(`${this.label}: opcode 0x${(bytes[K.HEADER_OPCODE] ?? 0).toString(16)} before HELLO; closing`);
      this.ctx.stats.refused('not-hello');
      this.sendControl(completion, true);
      return;
    }
    let hello;
    try {
      hello = decodeHello(bytes);
    } catch (error) {
      this.refuse(requestId, K.STATUS_INVALID_REQUEST, error instanceof MessageFormatError ? error.message : String(error), 'bad-hello');
      return;
    }
    if (hello.version === 0) {
      this.refuse(requestId, K.STATUS_VERSION_MISMATCH, 'HELLO version 0', 'version');
      return;
    }
    this.state = 'admitting';
    admit(settings.tenants, hello.tenant, hello.credential, hello.capabilities, this.ctx.verifier, settings.durable !== undefined).then(
      (admission) => {
        if (this.state === 'admitting') this.admitted(request, requestId, admission);
      },
      (error: unknown) => {
        this.ctx.log(`${this.label}: admission failed: ${error instanceof Error ? error.message : String(error)}`);
        this.ctx.stats.internalError();
        this.qp.disconnect();
      },
    );
  }

  /** The credential was checked: refuse, or open the session and send HELLO_ACK. */
  private admitted(request: number, requestId: bigint, admission: Admission): void {
    const { engine, arena, settings } = this.ctx;
    if (!admission.ok) {
      this.refuse(requestId, admission.status, admission.reason, 'auth');
      return;
    }
    if (!this.ctx.slots.enterTenant(admission.tenantIndex, admission.tenant.maxSessions)) {
      // kbtp-v1 has no status of its own for this; TOO_MANY_REQUESTS says "not now, too many" (docs/PROTOCOL.md).
      this.refuse(
        requestId,
        K.STATUS_TOO_MANY_REQUESTS,
        `tenant '${admission.tenant.name}' has its limit of ${admission.tenant.maxSessions} sessions`,
        'tenant-full',
      );
      return;
    }
    this.countedTenant = admission.tenantIndex;
    const credits = settings.session.credits;
    this.session = arena.openSessionAt(this.slot, { tenant: admission.tenantIndex, capabilities: admission.capabilities, credits });
    this.tenantAddress = engine.tenantAddress(admission.tenantIndex);
    for (const context of this.contexts) arena.assignSession(context, this.session);
    const { config, layout } = engine;
    const tenantConfig = config.tenants[admission.tenantIndex];
    const ack: HelloAck = {
      ...refusal(requestId, K.STATUS_SUCCESS),
      capabilities: admission.capabilities,
      blockSize: config.blockSize,
      blockCount: config.blockCount,
      targetCredits: credits,
      sharedRingOrder: config.ringOrder,
      maxInline: config.maxInline,
      quota: admission.tenant.quota,
      ticketTimeoutMs: settings.session.ticketTimeoutMs,
      tableBaseHandle: config.handleBase,
      tableHandleCount: BigInt(config.handleCount),
      storeFirst: admission.tenant.storeRange.first,
      storeCount: admission.tenant.storeRange.count,
    };
    const buffer = engine.memory.buffer;
    if ((admission.capabilities & K.CAP_DIRECT_LOAD) !== 0) {
      // Read-only views of the table and pool, valid for this session only.
      const table = this.grant(buffer, layout.table, S.ENTRY_SIZE * config.handleCount, Access.RemoteRead, 0n);
      const pool = this.grant(buffer, layout.pool, layout.poolBytes, Access.RemoteRead, 0n);
      ack.tableStag = table.stag;
      ack.tableOffset = 0n;
      ack.poolStag = pool.stag;
    }
    if ((admission.capabilities & K.CAP_DIRECT_ALLOC) !== 0 && tenantConfig?.partition !== undefined) {
      const ring = engine.partitionRing(tenantConfig.partition);
      const firstOffset = ring.firstBlock * config.blockSize;
      // Same tagged-offset base as the pool: a Block Offset read from a slot is the Write's TO.
      const partitionRegion = this.grant(
        buffer,
        layout.pool + firstOffset,
        ring.blocks * config.blockSize,
        Access.LocalWrite | Access.RemoteWrite,
        BigInt(firstOffset),
      );
      // Verbs require local write with remote atomic (and remote write) access.
      const ringRegion = this.grant(
        buffer,
        ring.head,
        ring.slots - ring.head + S.SLOT_SIZE * 2 ** ring.order,
        Access.LocalWrite | Access.RemoteRead | Access.RemoteAtomic,
        0n,
      );
      const tickets = new SessionTickets(this.ctx, ring, partitionRegion, this.tenantAddress, this.label);
      this.tickets = tickets;
      ringRegion.onRemoteAtomic = (offset, original) => {
        if (offset !== 0) return;
        tickets.take(Number(BigInt.asUintN(64, original) >> 32n));
      };
      ack.partitionStag = partitionRegion.stag;
      ack.ringStag = ringRegion.stag;
      ack.partitionRingOrder = ring.order;
      ack.ringOffset = BigInt(ring.slots - ring.head);
      ack.headOffset = 0n;
    }
    this.state = 'open';
    this.tenantName = admission.tenant.name;
    this.admittedAs = admission.tenant;
    this.ctx.stats.tenantSessionOpened(admission.tenant.name);
    this.lastActivity = Date.now();
    this.ctx.log(`${this.label}: session of tenant '${admission.tenant.name}' open (capabilities 0x${admission.capabilities.toString(16)})`);
    const fault = this.ctx.fault;
    if (fault !== undefined && fault.tenant === admission.tenant.name) {
      delete this.ctx.fault; // once per worker: the sessions after it show the node recovered
      if (fault.kind === 'connection') this.faultArmed = true;
      // KBTP_TEST_FAULT=worker:<tenant>: a throw nobody catches, as a bug outside any connection would be.
      else
        setImmediate(() => {
          throw new InternalError('injected worker fault (KBTP_TEST_FAULT)');
        });
    }
    this.sendControl(encodeHelloAck(ack), false);
    this.postReceive(request);
  }

  private grant(buffer: ArrayBufferLike, offset: number, length: number, access: number, taggedOffsetBase: bigint): MemoryRegion {
    const region = this.ctx.rnic.registerMemory(this.pd, buffer, { access, offset, length, taggedOffsetBase });
    this.grantedRegions.push(region);
    return region;
  }

  // --- the end of the session ------------------------------------------------------------------

  /** Starts draining: requests in flight finish, new ones get SHUTTING_DOWN. */
  drain(): void {
    if (this.session !== 0) this.ctx.arena.setDraining(this.session, true);
  }

  /**
   * After a configuration reload: the session goes on only if its tenant is still there with the
   * same credential, trust and engine slot (quota and ranges live in the engine and apply as they are).
   */
  reconsiderTenant(tenants: readonly TenantSettings[]): void {
    const was = this.admittedAs;
    if (was === undefined || this.state === 'closed') return;
    const now = tenants.find((tenant) => tenant.name === was.name);
    const same =
      now !== undefined &&
      now.secret === was.secret &&
      now.secretHash === was.secretHash &&
      now.open === was.open &&
      now.trust.directLoad === was.trust.directLoad &&
      now.trust.directAlloc === was.trust.directAlloc &&
      (now.slot ?? tenants.indexOf(now)) === this.countedTenant;
    if (same) {
      this.admittedAs = now;
      return;
    }
    this.ctx.log(`${this.label}: tenant '${was.name}' ${now === undefined ? 'was removed' : 'changed its credential or trust'}; ending the session`);
    this.qp.disconnect();
  }

  get open(): boolean {
    return this.state === 'open';
  }

  private onDisconnected(info: DisconnectInfo): void {
    // Gone between the handshake and HELLO without a timeout or refusal: garbage, a reset, a close.
    if (this.state === 'hello' && this.handshakeDone) this.ctx.stats.setupFailed('closed-before-hello');
    this.disconnected = true;
    if (this.state !== 'closed') this.state = 'closed';
    this.ctx.log(`${this.label}: disconnected (${info.reason}: ${info.message})`);
    // kbtp-v1 section 7 step 4: the session's STags stop resolving at once.
    for (const region of this.grantedRegions) this.ctx.rnic.deregisterMemory(region);
    this.grantedRegions.length = 0;
    this.tickets?.check(true);
    this.maybeFinish();
    // The CQ may have nothing more to say: finish once this turn is over.
    queueMicrotask(() => this.maybeFinish());
  }

  private maybeFinish(): void {
    if (this.state === 'draining' && this.busy === 0 && !this.disconnected) {
      this.state = 'closed';
      this.qp.disconnect();
      return;
    }
    if (!this.disconnected || this.cleanedUp) return;
    // After an internal error: once every flushed completion is out of the CQ, no work request
    // refers to a context any more, and the engine's own request states say what is still held.
    if (this.failed && !this.reconciled && this.cq.size === 0) this.reconcile();
    if (this.busy > 0 || this.retries.length > 0) return;
    this.cleanedUp = true;
    clearTimeout(this.helloTimer);
    this.tickets?.stop();
    const { rnic } = this.ctx;
    this.contexts.length = 0;
    if (this.tenantName !== undefined) this.ctx.stats.tenantSessionClosed(this.tenantName);
    if (this.countedTenant >= 0) this.ctx.slots.leaveTenant(this.countedTenant);
    this.ctx.slots.release(this.slot);
    for (const region of [this.controlRegion, this.poolRegion, this.requestRegion]) rnic.deregisterMemory(region);
    this.qp.destroy();
    this.ctx.stats.sessionClosed();
    this.stopNotify?.();
    this.requests.length = 0;
    this.onClosed();
  }

  /**
   * Releases what the requests of a failed connection hold, from the engine's request states: a
   * data operation that will never finish fails (its lock, credit, block and quota come back),
   * a request waiting for a handle or a ring slot runs to its end as after any disconnect.
   */
  private reconcile(): void {
    this.reconciled = true;
    const { arena, engine } = this.ctx;
    const waiting = new Set(this.retries);
    for (const request of this.contexts) {
      if (this.awaitingTier.has(request)) continue; // counted below; the tier's answer settles it
      const state = engine.view.getUint32(request + S.REQUEST_STATE, true);
      if (state === S.REQUEST_STATE_DATA || state === S.REQUEST_STATE_DATA_SENT || state === S.REQUEST_STATE_PLACING) arena.complete(request, false);
      else if (
        (state === S.REQUEST_STATE_CREDITED ||
          state === S.REQUEST_STATE_WAIT_SLOT ||
          state === S.REQUEST_STATE_FETCH_SLOT ||
          state === S.REQUEST_STATE_PLACE_SLOT) &&
        !waiting.has(request)
      )
        this.retries.push(request);
    }
    this.readsOutstanding = 0;
    this.busy = this.retries.length + this.awaitingTier.size; // each settles once more
    if (this.retries.length > 0 && !this.retryScheduled) {
      this.retryScheduled = true;
      setImmediate(() => this.runRetries());
    }
  }
}
