// A KBTP session with a target (host/kbtp/initiator.ts opens one): the HELLO exchange, request
// slots (a staging block and a request message each, registered once and reused), completions
// routed to their calls or batches, the two-sided calls (LOAD, STORE, ALLOC_STORE, FREE, BIND),
// batched calls (batch.ts) and the one-sided direct paths (direct.ts), each call within its
// { signal, timeoutMs } (call.ts), and GOODBYE. Every failure is a KbtpError (./errors.ts).
import * as K from '../../assembly/kbtp-constants.ts';
import {
  Access,
  WcStatus,
  wcStatusName,
  RnicError,
  type Rnic,
  type AnyQueuePair,
  type CompletionQueue,
  copyCompletion,
  type MemoryRegion,
  type WorkCompletion,
  type SendWorkRequest,
  type ReceiveWorkRequest,
  type ConnectionSummary,
  type RcConnectionSummary,
} from '../rnic/verbs.ts';
import { ViewCache } from '../rnic/view-cache.ts';
import { encodeRequest, decodeCompletion, writeBindAt, writeRequestAt, type Completion } from './wire/messages.ts';
import { Batch, type BatchHost } from './batch.ts';
import { RequestSlots, SLOT_ID_MARK } from './slots.ts';
import { callBackLater, SlotCall, type CallDone, type SlotCallHost } from './slot-call.ts';
import { Deadlines } from './deadlines.ts';
import { RecordPool } from './record-pool.ts';
import { LandingBuffers } from './landing.ts';
import { encodeHello, decodeHelloAck, type HelloAck } from './wire/hello.ts';
import { type KbtpError, KbtpStatusError, ProtocolError, SessionClosedError, TargetRefusedError, TransportError, UsageError } from './errors.ts';
import { bounded, checkTimeout, DEFAULT_CALL_TIMEOUT_MS, type CallOptions } from './call.ts';
import type { BlockInfo, ConnectOptions, LoadOptions, LoadResult, StoreOptions } from './session-types.ts';
import { ALL_ONES, directLoadConsistent, readBlock, readEntry, takeBlock, writeBlock, type DirectHost } from './direct.ts';
import type { TableEntry } from '../engine/table-entry.ts';

const RECV_SLOT = 128;
/** The options of a call that passed none: a default `{}` was an object per call. Never written. */
const NO_OPTIONS: Readonly<StoreOptions & LoadOptions> = Object.freeze({});
const CONTROL_SIZE = 256;
const RECV_BASE = 0x10000000;
/** Work request ids of the slots' request Sends (below RECV_BASE, above any post() id in use). */
const SLOT_SEND_BASE = 0x0f000000;

/** A peer's text, made safe to print: printable ASCII only, bounded. */
function printable(bytes: Uint8Array): string {
  return new TextDecoder().decode(bytes.subarray(0, 200)).replace(/[^\x20-\x7e]/g, '?');
}

/** A slot's request Send, built once and rewritten in place. */
interface SlotSend {
  wrId: number;
  opcode: 'SEND';
  signaled: false;
  sgList: Array<{ lkey: number; offset: number; length: number }>;
}

type Mutable<T> = { -readonly [P in keyof T]: T[P] };

interface Waiter {
  resolve(completion: WorkCompletion): void;
  reject(error: Error): void;
}

/** A session with a target: every KBTP call of the client library (connect() opens one). */
export class KbtpSession {
  private readonly pd;
  private readonly cq: CompletionQueue;
  private readonly qp: AnyQueuePair;
  private readonly transport: 'iwarp' | 'roce';
  private readonly receiveDepth: number;
  private readonly receiveBuffer: Uint8Array;
  private readonly receiveRegion: MemoryRegion;
  private readonly control = new Uint8Array(CONTROL_SIZE);
  private readonly controlRegion: MemoryRegion;
  private sendBuffer = new Uint8Array(0);
  private sendRegion: MemoryRegion | undefined;
  private dataBuffer = new Uint8Array(0);
  private dataRegion: MemoryRegion | undefined;
  private slotSize = 0;
  private messageSize = 0;
  private connectionCongestionControl: string | Error | undefined;
  private sendView = new DataView(new ArrayBuffer(0));
  private readonly receiveView: DataView;
  private readonly receiveWrs: ReceiveWorkRequest[] = [];
  /** Slot-routed requests (single calls and batches): the call each slot's request belongs to, the slot's request sequence. */
  private readonly slots = new RequestSlots((index) => this.postReceive(index));
  private readonly stagingViews: Uint8Array[] = [];
  /** Shorter views of the staging areas (a block shorter than the block size), kept: a view per LOAD was an allocation per call. */
  private stagingPrefixes = new ViewCache(new Uint8Array(0), 1);
  /** Every call's deadline, swept by one timer. */
  private readonly deadlines = new Deadlines();
  /** What batches and single calls use of the session. */
  private readonly slotHost: Mutable<BatchHost & SlotCallHost>;
  /** Finished single calls, reused. */
  private readonly callPool = new RecordPool<SlotCall>();
  /** Idle batch records (batch.ts), reused by loadMany/storeMany. */
  private readonly batchPool = new RecordPool<Batch>();
  private readonly directHost: DirectHost;
  /** Caller buffers LOADs land in directly (registerLoadBuffer). */
  private readonly landing: LandingBuffers;
  private readonly freeSlots: number[] = [];
  private readonly slotWaiters: Array<() => void> = [];
  private readonly pending = new Map<bigint, { resolve(c: Completion): void; reject(e: Error): void }>();
  private readonly sendWaiters = new Map<number, Waiter>();
  private readonly onCompletionBound = (completion: WorkCompletion): void => this.onCompletion(completion);
  /** Each slot's request Send, rewritten in place (unsignaled: the COMPLETION answers it; a failure flushes it). */
  private slotSends: SlotSend[] = [];
  /** The same with a second gather element: an inline STORE's data sent from a registered buffer (landing.ts claimSource). */
  private slotGatherSends: SlotSend[] = [];
  private nextRequestId = 1n;
  private nextWrId = 1;
  private helloWaiter: ((ack: HelloAck) => void) | undefined;
  private failure: KbtpError | undefined;
  private closing = false;
  private readonly callTimeoutMs: number;
  /** The target's HELLO_ACK: block size, credits, granted capabilities and STags. */
  hello!: HelloAck;

  constructor(
    private readonly rnic: Rnic,
    options: ConnectOptions,
  ) {
    this.callTimeoutMs = options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    this.pd = rnic.allocPd();
    this.landing = new LandingBuffers(rnic, this.pd);
    this.receiveDepth = Math.max(2, (options.pipeline ?? 32) + 2);
    this.cq = rnic.createCq({ depth: 4 * this.receiveDepth + 64 });
    this.transport = options.transport ?? 'iwarp';
    const queues = { pd: this.pd, sendCq: this.cq, recvCq: this.cq, maxRecvWr: this.receiveDepth, maxSendWr: 4 * this.receiveDepth + 16 };
    this.qp = this.transport === 'roce' ? rnic.createRcQp(queues) : rnic.createQp(queues);
    this.receiveBuffer = new Uint8Array(RECV_SLOT * this.receiveDepth);
    this.receiveView = new DataView(this.receiveBuffer.buffer);
    const session = this;
    // Plain data fields, kept current by open() and fail(): getters here put the object in
    // dictionary mode, and every load a call or batch made from it (several per request) was a
    // generic LoadIC in optimized code (issue 16).
    this.slotHost = {
      blockSize: 0,
      failure: undefined,
      deadlines: this.deadlines,
      claimSlot: () => this.freeSlots.pop() ?? -1,
      releaseSlot: (slot) => this.giveSlot(slot),
      waitForSlot: (resume) => {
        this.slotWaiters.push(resume);
      },
      stopWaiting: (resume) => {
        const index = this.slotWaiters.indexOf(resume);
        if (index >= 0) this.slotWaiters.splice(index, 1);
      },
      post: (slot, batch, opcode, flags, handle, buffer) => this.postBatched(slot, batch, opcode, flags, handle, buffer),
      send: (slot, call) => this.postCall(slot, call),
      staging: (slot, length) => this.stagingView(slot, length),
      landed: (slot) => this.landing.landed(slot),
      describeFailure: (handle, status) => this.describeFailure(handle, status),
      recycle: (call) => {
        this.callPool.give(call);
      },
      recycleBatch: (batch) => {
        this.batchPool.give(batch);
      },
    };
    this.directHost = {
      get hello() {
        return session.hello;
      },
      transport: this.transport,
      get dataBuffer() {
        return session.dataBuffer;
      },
      get dataStag() {
        return session.dataRegion?.stag ?? 0;
      },
      takeSlot: (signal) => this.takeSlot(signal),
      giveSlot: (slot) => this.giveSlot(slot),
      stagingOffset: (slot) => this.stagingOffset(slot),
      scratchOffset: (slot) => this.scratchOffset(slot),
      post: (wr) => this.post(wr),
      checkLength: (data) => this.checkLength(data),
    };
    this.receiveRegion = rnic.registerMemory(this.pd, this.receiveBuffer, { access: Access.LocalWrite });
    this.controlRegion = rnic.registerMemory(this.pd, this.control, { access: Access.LocalWrite });
  }

  /** Establishes the stream with `establish` and exchanges HELLO (called by connect() and connectChannel()). */
  async open(establish: (qp: AnyQueuePair) => Promise<ConnectionSummary | RcConnectionSummary>, where: string, options: ConnectOptions): Promise<void> {
    for (let i = 0; i < this.receiveDepth; i++) this.postReceive(i);
    // Completions are drained from the CQ's notification at the end of each turn: no promise per wake-up.
    this.cq.onNotify(() => this.drainCompletions());
    this.cq.requestNotify();
    void this.qp.whenDisconnected().then((info) => this.fail(new TransportError(`connection to the target lost (${info.reason}: ${info.message})`)));
    try {
      const established = await establish(this.qp);
      this.connectionCongestionControl = 'congestionControl' in established ? established.congestionControl : undefined;
    } catch (error) {
      // A target that refuses says why in the MPA Reject's private data (its session limits, a drain).
      const reason = this.qp.peerPrivateData;
      if (error instanceof RnicError && error.errno === 'ECONNREFUSED' && reason !== undefined && reason.length > 0) {
        throw new TargetRefusedError(`${where} refused the connection: ${printable(reason)}`, { cause: error });
      }
      throw new TransportError(`cannot connect to ${where}: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
    }
    const secret = new TextEncoder().encode(options.secret ?? '');
    const hello = encodeHello({
      version: K.KBTP_VERSION,
      requestId: 0n,
      capabilities: options.capabilities ?? 0,
      initiatorCredits: this.receiveDepth,
      tenant: options.tenant ?? 'default',
      credential: secret,
    });
    const ack = new Promise<HelloAck>((resolve, reject) => {
      this.helloWaiter = resolve;
      this.pending.set(0n, { resolve: () => undefined, reject });
    });
    this.control.set(hello);
    this.qp.postSend({ wrId: 0, opcode: 'SEND', sgList: [{ lkey: this.controlRegion.stag, offset: 0, length: hello.length }] });
    const answer = await ack;
    this.pending.delete(0n);
    if (answer.status !== K.STATUS_SUCCESS) {
      const tenant = options.tenant ?? 'default';
      const why: Record<number, string> = {
        [K.STATUS_AUTH_FAILED]: `the target refused the session of tenant '${tenant}' (unknown tenant or wrong secret)`,
        [K.STATUS_TOO_MANY_REQUESTS]: `tenant '${tenant}' already has as many sessions as the target allows it; try again later`,
        [K.STATUS_SHUTTING_DOWN]: 'the target is shutting down',
      };
      throw new KbtpStatusError(answer.status, why[answer.status] ?? `the target refused the session of tenant '${tenant}'`);
    }
    this.hello = answer;
    this.slotHost.blockSize = answer.blockSize;
    const depth = Math.min(this.receiveDepth - 2, answer.targetCredits);
    this.messageSize = K.HEADER_SIZE + 2 * K.DESCRIPTOR_SIZE + answer.maxInline;
    this.slotSize = Math.ceil(answer.blockSize / 64) * 64;
    this.sendBuffer = new Uint8Array(this.messageSize * depth);
    this.sendRegion = this.rnic.registerMemory(this.pd, this.sendBuffer, { access: Access.LocalWrite });
    this.dataBuffer = new Uint8Array(this.slotSize * depth + 64 * depth);
    this.stagingPrefixes = new ViewCache(this.dataBuffer, depth);
    this.dataRegion = this.rnic.registerMemory(this.pd, this.dataBuffer, { access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead });
    this.sendView = new DataView(this.sendBuffer.buffer);
    this.slots.open(depth);
    for (let slot = 0; slot < depth; slot++) {
      this.freeSlots.push(slot);
      this.stagingViews.push(this.dataBuffer.subarray(this.stagingOffset(slot), this.stagingOffset(slot) + answer.blockSize));
      this.slotSends.push({
        wrId: SLOT_SEND_BASE + slot,
        opcode: 'SEND',
        signaled: false,
        sgList: [{ lkey: this.sendRegion.stag, offset: slot * this.messageSize, length: 0 }],
      });
      this.slotGatherSends.push({
        wrId: SLOT_SEND_BASE + slot,
        opcode: 'SEND',
        signaled: false,
        sgList: [
          { lkey: this.sendRegion.stag, offset: slot * this.messageSize, length: 0 },
          { lkey: 0, offset: 0, length: 0 },
        ],
      });
    }
  }

  /**
   * iWARP over loopback: the TCP congestion control the connection was given (ConnectOptions
   * loopbackCongestionControl), or why it kept the host's; undefined elsewhere.
   */
  get congestionControl(): string | Error | undefined {
    return this.connectionCongestionControl;
  }

  /** Requests that may be in flight at once. */
  get depth(): number {
    return this.sendBuffer.length / Math.max(1, this.messageSize);
  }

  private postReceive(index: number): void {
    if (this.failure !== undefined) return;
    // Each receive buffer's work request is built once: it is posted again only after its completion, always the same.
    let wr = this.receiveWrs[index];
    if (wr === undefined) {
      wr = { wrId: RECV_BASE + index, sgList: [{ lkey: this.receiveRegion.stag, offset: index * RECV_SLOT, length: RECV_SLOT }] };
      this.receiveWrs[index] = wr;
    }
    this.qp.postRecv(wr);
  }

  private drainCompletions(): void {
    while (this.cq.drain(this.onCompletionBound) > 0);
    if (this.failure === undefined) this.cq.requestNotify();
  }

  private onCompletion(completion: WorkCompletion): void {
    const id = Number(completion.wrId);
    if (id >= RECV_BASE) {
      if (completion.status !== WcStatus.Success) return;
      const index = id - RECV_BASE;
      if (this.slots.route(this.receiveView, index, index * RECV_SLOT, completion.byteLength)) return;
      const bytes = this.receiveBuffer.slice(index * RECV_SLOT, index * RECV_SLOT + completion.byteLength);
      this.postReceive(index);
      this.deliver(bytes);
      return;
    }
    const waiter = this.sendWaiters.get(id);
    if (waiter === undefined) return;
    this.sendWaiters.delete(id);
    if (completion.status === WcStatus.Success)
      waiter.resolve(copyCompletion(completion)); // the CQ's record is reused
    else
      waiter.reject(
        new TransportError(`${completion.opcode} failed: ${wcStatusName(completion.status)}${completion.error === undefined ? '' : ` (${completion.error})`}`),
      );
  }

  /**
   * Writes a batch's request into its slot's message and posts it. LOAD: the block lands in
   * `buffer` itself when it is registered (landing.ts), else in the slot's staging area. STORE:
   * `buffer`'s data goes inline when it fits the target's Max Inline (one round trip, as a single
   * store() does), else it is staged for the target's RDMA Read.
   */
  private postBatched(slot: number, batch: Batch, opcode: number, flags: number, handle: bigint, buffer: Uint8Array): void {
    const at = slot * this.messageSize;
    const view = this.sendView;
    const idLow = this.slots.begin(slot, batch);
    const stag = this.dataRegion?.stag ?? 0;
    if (opcode === K.OPCODE_LOAD) {
      const landing = this.landing.claim(slot, buffer, this.hello.blockSize);
      this.postSlot(
        slot,
        landing === undefined
          ? writeRequestAt(view, at, opcode, flags, SLOT_ID_MARK, idLow, handle, 0, stag, this.stagingOffset(slot), this.hello.blockSize)
          : writeRequestAt(view, at, opcode, flags, SLOT_ID_MARK, idLow, handle, 0, landing.stag, 0, this.hello.blockSize),
      );
    } else {
      this.postStore(slot, at, opcode, flags, idLow, handle, 0, buffer);
    }
  }

  /**
   * A STORE's request and data: inline when it fits the target's Max Inline, else for the
   * target's RDMA Read; from the caller's buffer itself when it is registered (landing.ts
   * claimSource), else copied into the slot first.
   */
  private postStore(slot: number, at: number, opcode: number, flags: number, idLow: number, handle: bigint, generation: number, data: Uint8Array): void {
    const view = this.sendView;
    const source = this.landing.claimSource(slot, data);
    if (data.length <= this.hello.maxInline) {
      const length = writeRequestAt(view, at, opcode, flags | K.FLAG_INLINE, SLOT_ID_MARK, idLow, handle, generation, 0, 0, data.length);
      if (source !== undefined) {
        const send = this.slotGatherSends[slot]!;
        send.sgList[0]!.length = length;
        const dataSge = send.sgList[1]!;
        dataSge.lkey = source.stag;
        dataSge.length = data.length;
        this.qp.postSend(send);
        return;
      }
      this.sendBuffer.set(data, at + length);
      this.postSlot(slot, length + data.length);
      return;
    }
    if (source !== undefined) {
      this.postSlot(slot, writeRequestAt(view, at, opcode, flags, SLOT_ID_MARK, idLow, handle, generation, source.stag, 0, data.length));
      return;
    }
    // The target pulls the data with RDMA Read from the registered staging slot.
    this.stagingViews[slot]!.set(data);
    const stag = this.dataRegion?.stag ?? 0;
    this.postSlot(slot, writeRequestAt(view, at, opcode, flags, SLOT_ID_MARK, idLow, handle, generation, stag, this.stagingOffset(slot), data.length));
  }

  /** Writes a single call's request into its slot's message in place (staging or inlining its data) and posts it. */
  private postCall(slot: number, call: SlotCall): void {
    const at = slot * this.messageSize;
    const view = this.sendView;
    const idLow = this.slots.begin(slot, call);
    const { opcode, flags, handle, data } = call;
    const stag = this.dataRegion?.stag ?? 0;
    let length: number;
    if (opcode === K.OPCODE_BIND) {
      writeRequestAt(view, at, opcode, flags, SLOT_ID_MARK, idLow, handle, 0, 0, 0, 0);
      length = writeBindAt(view, at, call.ticket, call.bindLength, call.bindOffset);
    } else if (data === undefined) {
      // LOAD (the block lands in the caller's registered buffer, else in the slot's staging area) or FREE (header only).
      const landing = opcode === K.OPCODE_LOAD ? this.landing.claim(slot, call.into, this.hello.blockSize) : undefined;
      length =
        landing === undefined
          ? writeRequestAt(view, at, opcode, flags, SLOT_ID_MARK, idLow, handle, call.generation, stag, this.stagingOffset(slot), this.hello.blockSize)
          : writeRequestAt(view, at, opcode, flags, SLOT_ID_MARK, idLow, handle, call.generation, landing.stag, 0, this.hello.blockSize);
    } else {
      // storeRecord chose inline by the same rule postStore applies.
      this.postStore(slot, at, opcode, flags & ~K.FLAG_INLINE, idLow, handle, call.generation, data);
      return;
    }
    this.postSlot(slot, length);
  }

  /** Posts slot `slot`'s request message of `length` octets (the COMPLETION implies the Send arrived: the slot is reused only after it). */
  private postSlot(slot: number, length: number): void {
    const send = this.slotSends[slot]!;
    send.sgList[0]!.length = length;
    this.qp.postSend(send);
  }

  private deliver(bytes: Uint8Array): void {
    if (bytes[1] === K.OPCODE_HELLO_ACK && this.helloWaiter !== undefined) {
      const waiter = this.helloWaiter;
      this.helloWaiter = undefined;
      try {
        waiter(decodeHelloAck(bytes));
      } catch (error) {
        this.fail(new ProtocolError(`the target sent a malformed HELLO_ACK: ${error instanceof Error ? error.message : String(error)}`, { cause: error }));
      }
      return;
    }
    let completion: Completion;
    try {
      completion = decodeCompletion(bytes);
    } catch (error) {
      this.fail(new ProtocolError(`the target sent a malformed message: ${(error as Error).message}`, { cause: error }));
      return;
    }
    const pending = this.pending.get(completion.requestId);
    if (pending === undefined) return;
    this.pending.delete(completion.requestId);
    pending.resolve(completion);
  }

  private fail(error: KbtpError): void {
    if (this.failure !== undefined) return;
    this.failure = this.closing ? new SessionClosedError() : error;
    this.slotHost.failure = this.failure;
    for (const pending of this.pending.values()) pending.reject(this.failure);
    this.pending.clear();
    for (const waiter of this.sendWaiters.values()) waiter.reject(this.failure);
    this.sendWaiters.clear();
    for (const wake of this.slotWaiters.splice(0)) wake();
    this.slots.abortAll(this.failure);
    this.deadlines.close();
  }

  /** A free slot (staging buffer and request message); waits for one until `signal` fires. */
  private async takeSlot(signal: AbortSignal): Promise<number> {
    for (;;) {
      if (this.failure !== undefined) throw this.failure;
      signal.throwIfAborted();
      const slot = this.freeSlots.pop();
      if (slot !== undefined) return slot;
      await new Promise<void>((resolve) => {
        const wake = (): void => {
          signal.removeEventListener('abort', onAbort);
          resolve();
        };
        const onAbort = (): void => {
          const index = this.slotWaiters.indexOf(wake);
          if (index >= 0) this.slotWaiters.splice(index, 1);
          resolve();
        };
        this.slotWaiters.push(wake);
        signal.addEventListener('abort', onAbort, { once: true });
      });
    }
  }

  /** The time limit of a call about to start; throws why it cannot start (the session failed, a bad timeoutMs). */
  private admit(options: CallOptions): number {
    if (this.failure !== undefined) throw this.failure;
    return options.timeoutMs === undefined ? this.callTimeoutMs : checkTimeout(options.timeoutMs, 'timeoutMs');
  }

  /** Runs one call of this session that needs an AbortSignal of its own (the one-sided paths) within its { signal, timeoutMs }. */
  private call<T>(what: string, options: CallOptions, body: (signal: AbortSignal) => Promise<T>): Promise<T> {
    let timeoutMs: number;
    try {
      timeoutMs = this.admit(options);
    } catch (error) {
      return Promise.reject(error);
    }
    return bounded(what, { timeoutMs, deadlines: this.deadlines, ...(options.signal !== undefined ? { signal: options.signal } : {}) }, body);
  }

  /** A single-call record (reused) for `opcode` on `handle`. */
  private singleCall(opcode: number, handle: bigint, flags: number, generation: number | undefined): SlotCall {
    const call = this.callPool.take() ?? new SlotCall(this.slotHost);
    call.opcode = opcode;
    call.handle = handle;
    call.flags = flags;
    call.generation = generation ?? 0;
    call.data = undefined;
    call.into = undefined;
    return call;
  }

  /** Starts a single call within { signal, timeoutMs }: a rejected promise when it cannot start. */
  private startCall(call: SlotCall, options: CallOptions): Promise<BlockInfo> {
    const timeoutMs = this.admitCall(call, options);
    if (timeoutMs instanceof Error) return Promise.reject(timeoutMs);
    return call.start(timeoutMs, options.signal);
  }

  /** startCall for callback-style calls: `done` hears why a call cannot start after this returned. */
  private startCallWith(call: SlotCall, options: CallOptions, done: CallDone): void {
    const timeoutMs = this.admitCall(call, options);
    if (timeoutMs instanceof Error) callBackLater(done, timeoutMs);
    else call.startWith(done, timeoutMs, options.signal);
  }

  /** The call's time limit, or why it cannot start (the record is then given back). */
  private admitCall(call: SlotCall, options: CallOptions): number | Error {
    try {
      const timeoutMs = this.admit(options);
      if (call.data !== undefined) this.checkLength(call.data);
      return timeoutMs;
    } catch (error) {
      call.data = undefined;
      call.into = undefined;
      this.callPool.give(call);
      return error instanceof Error ? error : new UsageError(String(error));
    }
  }

  private giveSlot(slot: number): void {
    this.landing.release(slot);
    this.freeSlots.push(slot);
    this.slotWaiters.shift()?.();
  }

  /** A slot's staging area, or its first `length` octets. */
  private stagingView(slot: number, length: number | undefined): Uint8Array {
    const whole = this.stagingViews[slot]!;
    return length === undefined || length === whole.length ? whole : this.stagingPrefixes.view(this.stagingOffset(slot), length);
  }

  private stagingOffset(slot: number): number {
    return slot * this.slotSize;
  }

  /** Scratch octets of a slot for one-sided reads (entries, slots, FetchAdd results). */
  private scratchOffset(slot: number): number {
    return this.depth * this.slotSize + slot * 64;
  }

  private post(wr: Omit<SendWorkRequest, 'wrId'>): Promise<WorkCompletion> {
    if (this.failure !== undefined) return Promise.reject(this.failure);
    const wrId = this.nextWrId;
    this.nextWrId = this.nextWrId + 1 >= SLOT_SEND_BASE ? 1 : this.nextWrId + 1;
    return new Promise((resolve, reject) => {
      this.sendWaiters.set(wrId, { resolve, reject });
      try {
        this.qp.postSend({ ...wr, wrId });
      } catch (error) {
        // The QP left RTS between the failure check and now (the disconnect event follows).
        this.sendWaiters.delete(wrId);
        reject(new TransportError(`cannot send to the target: ${error instanceof Error ? error.message : String(error)}`, { cause: error }));
      }
    });
  }

  /** What a failed request's status means for its handle, with the numbers that explain it. */
  private describeFailure(handle: bigint, status: number): string {
    const { tableBaseHandle: base, tableHandleCount: count, storeFirst, storeCount } = this.hello;
    if (status === K.STATUS_OUT_OF_RANGE) {
      return `handle ${handle} is outside the target's table (handles ${base}..${base + count - 1n})`;
    }
    if (status === K.STATUS_ACCESS_DENIED) {
      return `handle ${handle} is outside this tenant's ${storeCount === 0n ? 'store range (it has none)' : `store range ${storeFirst}..${storeFirst + storeCount - 1n}`} or load scope`;
    }
    return `handle ${handle}`;
  }

  private checkLength(data: Uint8Array): void {
    if (data.length > this.hello.blockSize) {
      throw new KbtpStatusError(K.STATUS_LENGTH_ERROR, `${data.length} octets do not fit a ${this.hello.blockSize}-octet block`);
    }
  }

  /**
   * Block Load (draft 6.1): the target RDMA-writes the block into a registered buffer, then
   * completes. With `into`, the block is copied into that buffer (it must hold the block) and
   * `data` is a view of it: a caller that reuses its buffer then allocates nothing per load,
   * which matters for large blocks, where fresh memory costs more in page faults than the copy.
   */
  load(handle: bigint, options: LoadOptions = NO_OPTIONS): Promise<LoadResult> {
    const call = this.singleCall(K.OPCODE_LOAD, handle, options.allowUnsealed === true ? K.FLAG_ALLOW_UNSEALED : 0, options.generation);
    call.into = options.into;
    // A LOAD's call resolves with a LoadResult (slot-call.ts answered()).
    return this.startCall(call, options) as Promise<LoadResult>;
  }

  /**
   * load() without a promise or a result object, for callers that count every allocation (issue
   * 16): LOADs `handle` into `into` and calls `done(error, dataLength, generation)` from the
   * completion (never before loadInto returned). Errors, deadlines and signals as for load().
   */
  loadInto(handle: bigint, into: Uint8Array, done: CallDone, options: Omit<LoadOptions, 'into'> = NO_OPTIONS): void {
    const call = this.singleCall(K.OPCODE_LOAD, handle, options.allowUnsealed === true ? K.FLAG_ALLOW_UNSEALED : 0, options.generation);
    call.into = into;
    this.startCallWith(call, options, done);
  }

  /** store() without a promise or a result object, as loadInto is to load(). */
  storeFrom(handle: bigint, data: Uint8Array, done: CallDone, options: StoreOptions = NO_OPTIONS): void {
    this.startCallWith(this.storeRecord(K.OPCODE_STORE, handle, data, options), options, done);
  }

  /**
   * Registers `buffer` with the session so that LOADs into it (load({ into }), loadInto,
   * loadMany) land there directly: the target's RDMA Write is placed in it, with no copy out of a
   * staging area. Worth it for buffers reused for many LOADs, above all of large blocks. As with
   * any RDMA-registered memory, while a LOAD into the buffer is on the wire the target may write
   * it, also after the call timed out or was aborted (unregistered buffers are written only by a
   * live call). A buffer shorter than the block size is used as if unregistered. A STORE of the
   * buffer itself (store, allocStore, storeFrom, storeMany) is sent from it without a copy into a
   * request slot, inline or read by the target's RDMA Read: the buffer must not change until that
   * call settles.
   */
  registerLoadBuffer(buffer: Uint8Array): void {
    if (this.failure !== undefined) throw this.failure;
    this.landing.register(buffer);
  }

  /** Deregisters a buffer registerLoadBuffer registered; refused (UsageError) while a LOAD into it or a STORE from it waits for its answer. */
  deregisterLoadBuffer(buffer: Uint8Array): void {
    this.landing.deregister(buffer, this.failure !== undefined);
  }

  /** STORE or ALLOC_STORE of `data`: inline when it fits the target's inline limit, else RDMA-read (postStore). */
  private storeCall(opcode: number, handle: bigint, data: Uint8Array, options: StoreOptions): Promise<BlockInfo> {
    return this.startCall(this.storeRecord(opcode, handle, data, options), options);
  }

  private storeRecord(opcode: number, handle: bigint, data: Uint8Array, options: StoreOptions): SlotCall {
    const seal = options.seal === true ? K.FLAG_SEAL : 0;
    // Before HELLO completed or after a failure there is no session to store to: starting the call says so.
    const inline = this.hello !== undefined && data.length <= this.hello.maxInline ? K.FLAG_INLINE : 0;
    const call = this.singleCall(opcode, handle, inline | seal, options.generation);
    call.data = data;
    return call;
  }

  /** Block Mapped Store (draft 6.2) into a bound, unsealed handle. */
  store(handle: bigint, data: Uint8Array, options: StoreOptions = NO_OPTIONS): Promise<BlockInfo> {
    return this.storeCall(K.OPCODE_STORE, handle, data, options);
  }

  /**
   * LOADs `handles[i]` into `into[i]` for every i. The requests are posted together (one system
   * call while credits last; the rest follow as answers free slots) and settle one promise: no
   * promise or message object per request. `lengths[i]` receives each block's data length.
   * Rejects with BatchError naming every request whose status was not SUCCESS (the others did
   * complete), or with the session's failure. Within `timeoutMs` or until `signal` fires, like
   * every call: requests not yet posted then are not posted; those already sent keep their slots
   * until the target answers them.
   */
  loadMany(
    handles: readonly bigint[],
    into: readonly Uint8Array[],
    options: { allowUnsealed?: boolean; lengths?: Uint32Array } & CallOptions = NO_OPTIONS,
  ): Promise<void> {
    try {
      const timeoutMs = this.admit(options);
      if (into.length !== handles.length) throw new UsageError(`${handles.length} handles but ${into.length} buffers`);
      if (options.lengths !== undefined && options.lengths.length < handles.length) throw new UsageError('lengths is shorter than handles');
      const flags = options.allowUnsealed === true ? K.FLAG_ALLOW_UNSEALED : 0;
      return this.batchRecord().start(K.OPCODE_LOAD, flags, handles, into, options.lengths, options.signal, timeoutMs);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** STOREs `data[i]` into bound, unsealed `handles[i]` for every i, posted together as loadMany does. */
  storeMany(handles: readonly bigint[], data: readonly Uint8Array[], options: { seal?: boolean } & CallOptions = NO_OPTIONS): Promise<void> {
    try {
      const timeoutMs = this.admit(options);
      if (data.length !== handles.length) throw new UsageError(`${handles.length} handles but ${data.length} buffers`);
      // An index loop: for-of made an array iterator per call.
      for (let i = 0; i < data.length; i++) this.checkLength(data[i]!);
      const flags = options.seal === true ? K.FLAG_SEAL : 0;
      return this.batchRecord().start(K.OPCODE_STORE, flags, handles, data, undefined, options.signal, timeoutMs);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** An idle batch record: batches reuse theirs once ended with nothing on the wire (no object per batch, issue 16). */
  private batchRecord(): Batch {
    return this.batchPool.take() ?? new Batch(this.slotHost, this.slots.count);
  }

  /** Block Unmapped Store (draft 6.3): allocate, write and bind in one round trip. */
  allocStore(handle: bigint, data: Uint8Array, options: StoreOptions = NO_OPTIONS): Promise<BlockInfo> {
    return this.storeCall(K.OPCODE_ALLOC_STORE, handle, data, options);
  }

  /** Block Free (draft 6.4). */
  free(handle: bigint, options: { generation?: number } & CallOptions = NO_OPTIONS): Promise<BlockInfo> {
    return this.startCall(this.singleCall(K.OPCODE_FREE, handle, 0, options.generation), options);
  }

  /** One RDMA Read of the table entry of `handle` through the Table STag (DIRECT_LOAD). */
  directReadEntry(handle: bigint, options: CallOptions = {}): Promise<TableEntry> {
    return this.call(`direct read of the entry of handle ${handle}`, options, (signal) => readEntry(this.directHost, handle, signal));
  }

  /** One RDMA Read of `length` octets of a block through the Pool STag (DIRECT_LOAD). */
  directReadBlock(blockOffset: bigint, length: number, options: CallOptions = {}): Promise<Uint8Array> {
    return this.call(`direct read of block ${blockOffset}`, options, (signal) => readBlock(this.directHost, blockOffset, length, signal));
  }

  /**
   * Direct Load (draft 6.6): the entry, the block, and the entry again, each read after the
   * previous one completed; the data is valid when both entry reads agree in all 16 octets with
   * VALID and SEALED and a real Block Offset. A block on the durable tier alone (Block Offset all
   * ones) or one that kept moving is loaded with LOAD instead, which brings it back into the pool
   * (kbtp-v1 section 12). A change in between is retried at most `attempts` times.
   */
  directLoad(handle: bigint, options: { attempts?: number } & CallOptions = {}): Promise<LoadResult> {
    return this.call(`direct load of handle ${handle}`, options, async (signal) => {
      for (let attempt = 0; attempt < (options.attempts ?? 4); attempt++) {
        const before = await readEntry(this.directHost, handle, signal);
        if ((before.flags & K.ENTRY_VALID) === 0) throw new KbtpStatusError(K.STATUS_NOT_VALID, `handle ${handle} is not bound`);
        if ((before.flags & K.ENTRY_SEALED) === 0) throw new KbtpStatusError(K.STATUS_NOT_SEALED, `handle ${handle} is not sealed`);
        if (before.blockOffset === ALL_ONES) break;
        const data = await readBlock(this.directHost, before.blockOffset, before.dataLength, signal);
        const after = await readEntry(this.directHost, handle, signal);
        if (directLoadConsistent(before, after)) return { generation: before.generation, dataLength: before.dataLength, blockOffset: before.blockOffset, data };
      }
      return this.startCall(this.singleCall(K.OPCODE_LOAD, handle, 0, 0), { signal }) as Promise<LoadResult>;
    });
  }

  /**
   * Direct Allocation (draft 6.6) in one call: take a block one-sidedly, RDMA-write the data into
   * it, and BIND it to `handle`.
   */
  directAllocStore(handle: bigint, data: Uint8Array, options: { seal?: boolean } & CallOptions = {}): Promise<BlockInfo & { ticket: number }> {
    return this.call(`direct allocation for handle ${handle}`, options, async (signal) => {
      this.checkLength(data);
      const taken = await takeBlock(this.directHost, signal);
      await writeBlock(this.directHost, taken.blockOffset, data, signal);
      return { ...(await this.bindBlock(handle, taken.ticket, taken.blockOffset, data.length, options, { signal })), ticket: taken.ticket };
    });
  }

  /** Takes a block one-sidedly (FetchAdd on the session's Head; direct.ts takeBlock). */
  directTakeBlock(options: CallOptions = {}): Promise<{ ticket: number; blockOffset: bigint }> {
    return this.call('direct block allocation', options, (signal) => takeBlock(this.directHost, signal));
  }

  /** RDMA-writes `data` into a block taken with directTakeBlock (through the Partition STag). */
  directWrite(blockOffset: bigint, data: Uint8Array, options: CallOptions = {}): Promise<void> {
    return this.call(`direct write of block ${blockOffset}`, options, (signal) => writeBlock(this.directHost, blockOffset, data, signal));
  }

  /** BIND (kbtp-v1 section 3): binds a one-sidedly taken and written block to `handle`. */
  bind(handle: bigint, ticket: number, blockOffset: bigint, dataLength: number, options: { seal?: boolean } & CallOptions = {}): Promise<BlockInfo> {
    return this.bindBlock(handle, ticket, blockOffset, dataLength, options, options);
  }

  private bindBlock(
    handle: bigint,
    ticket: number,
    blockOffset: bigint,
    dataLength: number,
    options: { seal?: boolean },
    within: CallOptions,
  ): Promise<BlockInfo> {
    const call = this.singleCall(K.OPCODE_BIND, handle, options.seal === true ? K.FLAG_SEAL : 0, 0);
    call.ticket = ticket;
    call.bindLength = dataLength;
    call.bindOffset = blockOffset;
    return this.startCall(call, within);
  }

  /**
   * GOODBYE, then waits for the target to finish the session and close (at most `timeoutMs`,
   * default 5 s); calls still running end with SessionClosedError. Safe to call more than once.
   */
  async close(timeoutMs = 5000): Promise<void> {
    if (this.failure === undefined && !this.closing && this.sendRegion !== undefined) {
      this.closing = true;
      const goodbye = encodeRequest({ opcode: K.OPCODE_GOODBYE, requestId: this.nextRequestId++, handle: 0n });
      this.control.set(goodbye);
      try {
        this.qp.postSend({ wrId: 0, opcode: 'SEND', sgList: [{ lkey: this.controlRegion.stag, offset: 0, length: goodbye.length }] });
      } catch {
        // The connection is already gone: nothing to say goodbye to.
        await this.abandon();
        return;
      }
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        this.qp.whenDisconnected(),
        new Promise((resolve) => {
          timer = setTimeout(resolve, timeoutMs);
        }),
      ]);
      clearTimeout(timer);
    }
    await this.abandon();
  }

  /** `await using session = await connect(...)` closes the session at the end of the block. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /** Drops the connection without GOODBYE (a failed connect, or after close's wait). */
  async abandon(): Promise<void> {
    this.closing = true;
    this.fail(new SessionClosedError());
    this.qp.disconnect();
    await this.rnic.close();
  }
}
