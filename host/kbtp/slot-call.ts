// One two-sided call of a session (LOAD, STORE, ALLOC_STORE, FREE, BIND) as a reusable record
// (issue 16): it takes a slot without awaiting when one is free, is written into the slot's
// request message in place, is answered through the slot its request id names (slots.ts) and
// settles the caller's promise straight from the COMPLETION. Its deadline is swept by the
// session's one timer (deadlines.ts); it listens to an AbortSignal only when the caller gave one.
// What a call allocates is its promise and the result object.
import * as K from '../../assembly/kbtp-constants.ts';
import { AbortedError, KbtpStatusError, TimeoutError, TransportError } from './errors.ts';
import { decodeCompletion, requestName } from './wire/messages.ts';
import type { DeadlineEntry, Deadlines } from './deadlines.ts';
import type { SlotOwner } from './slots.ts';
import type { BlockInfo, LoadResult } from './session-types.ts';
import { monotonicMsInto } from '../util/clock.ts';

/** This thread's clock reading for a call's deadline (monotonicMsInto: no heap number per call). */
const clock = new Float64Array(1);

/**
 * How a callback-style call ends (KbtpSession.loadInto / storeFrom): `error` undefined on success,
 * then the block's data length and generation. Called from the completion handler, never during
 * the call that started it.
 */
export type CallDone = (error: Error | undefined, dataLength: number, generation: number) => void;

/** What a call needs of its session (implemented by KbtpSession). */
export interface SlotCallHost {
  readonly failure: Error | undefined;
  readonly deadlines: Deadlines;
  /** A free request slot, or -1. */
  claimSlot(): number;
  releaseSlot(slot: number): void;
  waitForSlot(resume: () => void): void;
  stopWaiting(resume: () => void): void;
  /** Writes `call`'s request into `slot` (staging its data) and posts it. */
  send(slot: number, call: SlotCall): void;
  /** The registered staging area of a slot, or its first `length` octets (the same view each time). */
  staging(slot: number, length?: number): Uint8Array;
  /** True when the slot's LOAD landed in the caller's registered buffer itself (landing.ts). */
  landed(slot: number): boolean;
  /** What a failed request's status means for its handle. */
  describeFailure(handle: bigint, status: number): string;
  /** The call is over and holds no slot: it may be reused. */
  recycle(call: SlotCall): void;
}

const IDLE = 0;
const WAITING = 1;
const SENT = 2;
/** Timed out or aborted with its request on the wire: keeps its slot until the answer comes. */
const ABANDONED = 3;

export class SlotCall implements SlotOwner, DeadlineEntry {
  opcode = 0;
  flags = 0;
  handle = 0n;
  generation = 0;
  /** STORE/ALLOC_STORE: the caller's data (inline or staged). */
  data: Uint8Array | undefined;
  /** LOAD: the caller's buffer, if given. */
  into: Uint8Array | undefined;
  /** BIND body. */
  ticket = 0;
  bindLength = 0;
  bindOffset = 0n;
  private signal: AbortSignal | undefined;
  private timeoutMs = 0;
  private phase = IDLE;
  private resolve: (value: BlockInfo) => void = () => undefined;
  /** Callback-style calls: no promise and no result object. */
  private callback: CallDone | undefined;
  private doneLength = 0;
  private doneGeneration = 0;
  /** The call is still inside start(): a callback is not called from there. */
  private starting = false;
  private reject: (error: Error) => void = () => undefined;
  deadline = 0;
  previousDeadline: DeadlineEntry | undefined;
  nextDeadline: DeadlineEntry | undefined;
  inDeadlines = false;
  /** Built once: the promise executor, the slot waiter and the abort listener are this record's, not the call's. */
  private readonly executor = (resolve: (value: BlockInfo) => void, reject: (error: Error) => void): void => {
    this.resolve = resolve;
    this.reject = reject;
  };
  private readonly resumeBound = (): void => this.issue();
  private readonly onAbortBound = (): void => this.stop(new AbortedError(`${this.what()}: aborted`, this.signal?.reason));

  constructor(private readonly host: SlotCallHost) {}

  /** Runs the call whose fields are set, within `timeoutMs` and `signal`. */
  start(timeoutMs: number, signal: AbortSignal | undefined): Promise<BlockInfo> {
    const promise = new Promise<BlockInfo>(this.executor);
    this.run(timeoutMs, signal);
    return promise;
  }

  /** Runs the call whose fields are set, within `timeoutMs` and `signal`; `done` tells how it ended. */
  startWith(done: CallDone, timeoutMs: number, signal: AbortSignal | undefined): void {
    this.callback = done;
    this.run(timeoutMs, signal);
  }

  private run(timeoutMs: number, signal: AbortSignal | undefined): void {
    this.timeoutMs = timeoutMs;
    this.starting = true;
    try {
      if (this.host.failure !== undefined) {
        this.finish(this.host.failure, undefined);
        return;
      }
      if (signal?.aborted === true) {
        this.finish(new AbortedError(`${this.what()}: aborted`, signal.reason), undefined);
        return;
      }
      this.signal = signal;
      monotonicMsInto(clock, 0);
      this.deadline = (clock[0] as number) + timeoutMs;
      this.host.deadlines.add(this);
      signal?.addEventListener('abort', this.onAbortBound, { once: true });
      this.issue();
    } finally {
      this.starting = false;
    }
  }

  private what(): string {
    return `${requestName(this.opcode)} of handle ${this.handle}`;
  }

  /** Takes a free slot and posts, or waits for one (resumed by the session's giveSlot). */
  private issue(): void {
    const host = this.host;
    if (host.failure !== undefined) {
      this.finish(host.failure, undefined);
      return;
    }
    const slot = host.claimSlot();
    if (slot < 0) {
      this.phase = WAITING;
      host.waitForSlot(this.resumeBound);
      return;
    }
    this.phase = SENT;
    try {
      host.send(slot, this);
    } catch (error) {
      // The QP left RTS between the failure check and now (the disconnect event follows).
      host.releaseSlot(slot);
      this.finish(new TransportError(`cannot send to the target: ${error instanceof Error ? error.message : String(error)}`, { cause: error }), undefined);
    }
  }

  expired(): void {
    this.stop(new TimeoutError(`${this.what()}: no answer within ${this.timeoutMs} ms`));
  }

  /** The deadline passed or the caller aborted: the call fails now; a request on the wire keeps its slot until answered. */
  private stop(error: Error): void {
    if (this.phase === WAITING) {
      this.host.stopWaiting(this.resumeBound);
      this.finish(error, undefined);
    } else if (this.phase === SENT) {
      this.settle(error, undefined);
      this.phase = ABANDONED;
    }
  }

  answered(slot: number, status: number, dataLength: number, view: DataView, offset: number): void {
    const host = this.host;
    if (this.phase !== SENT) {
      // Abandoned: the caller moved on and may be using its buffer again, so nothing lands there.
      host.releaseSlot(slot);
      this.phase = IDLE;
      host.recycle(this);
      return;
    }
    if (status !== K.STATUS_SUCCESS) {
      const completion = decodeCompletion(new Uint8Array(view.buffer, view.byteOffset + offset, K.COMPLETION_SIZE));
      host.releaseSlot(slot);
      this.finish(new KbtpStatusError(status, host.describeFailure(this.handle, status), completion), undefined);
      return;
    }
    const generation = view.getUint16(offset + K.HEADER_GENERATION, false);
    if (this.callback !== undefined) {
      this.answerCallback(slot, dataLength, generation);
      return;
    }
    const blockOffset = view.getBigUint64(offset + K.COMPLETION_BLOCK_OFFSET, false);
    if (this.opcode !== K.OPCODE_LOAD) {
      host.releaseSlot(slot);
      this.finish(undefined, { generation, dataLength, blockOffset });
      return;
    }
    const into = this.into;
    let data: Uint8Array;
    if (into === undefined) {
      data = host.staging(slot).slice(0, dataLength);
    } else {
      if (!this.landInto(into, slot, dataLength)) return;
      data = dataLength === into.length ? into : into.subarray(0, dataLength);
    }
    host.releaseSlot(slot);
    const result: LoadResult = { generation, dataLength, blockOffset, data };
    this.finish(undefined, result);
  }

  /** A successful answer to a callback-style call: the block lands in `into` (LOAD), nothing else is made. */
  private answerCallback(slot: number, dataLength: number, generation: number): void {
    const host = this.host;
    const into = this.into;
    if (this.opcode === K.OPCODE_LOAD && into !== undefined && !this.landInto(into, slot, dataLength)) return;
    host.releaseSlot(slot);
    this.doneLength = dataLength;
    this.doneGeneration = generation;
    this.finish(undefined, undefined);
  }

  /**
   * Copies a loaded block from its slot's staging area into the caller's buffer (unless it landed
   * there directly); false when it does not fit, after the call has been ended with LENGTH_ERROR
   * and its slot released.
   */
  private landInto(into: Uint8Array, slot: number, dataLength: number): boolean {
    if (into.length < dataLength) {
      this.host.releaseSlot(slot);
      this.finish(
        new KbtpStatusError(K.STATUS_LENGTH_ERROR, `handle ${this.handle}: the ${dataLength}-octet block does not fit the ${into.length}-octet buffer given`),
        undefined,
      );
      return false;
    }
    if (this.host.landed(slot)) return true;
    into.set(this.host.staging(slot, dataLength));
    return true;
  }

  /** The session failed. */
  abort(error: Error): void {
    if (this.phase === SENT) this.finish(error, undefined);
    else this.phase = IDLE;
  }

  /** Settles the caller's promise and gives the record back (it holds no slot). */
  private finish(error: Error | undefined, value: BlockInfo | undefined): void {
    this.settle(error, value);
    this.phase = IDLE;
    this.host.recycle(this);
  }

  private settle(error: Error | undefined, value: BlockInfo | undefined): void {
    this.host.deadlines.remove(this);
    this.signal?.removeEventListener('abort', this.onAbortBound);
    this.signal = undefined;
    this.data = undefined;
    this.into = undefined;
    const callback = this.callback;
    if (callback !== undefined) {
      this.callback = undefined;
      if (this.starting) {
        // Only a failure to start ends a call inside start(): tell the caller after it returned.
        callBackLater(callback, error);
        return;
      }
      try {
        callback(error, this.doneLength, this.doneGeneration);
      } catch (thrown) {
        // The caller's exception is the caller's: it must not unwind the session's completion handling.
        rethrowLater(thrown);
      }
      return;
    }
    const { resolve, reject } = this;
    this.resolve = noop;
    this.reject = noop;
    if (error !== undefined) reject(error);
    else resolve(value!);
  }
}

function noop(): void {}

// Closures of their own: a variable captured by a closure anywhere in a function lives in a
// context V8 allocates on every call of it, taken path or not (issue 16: settle() and the
// session's startCallWith() each allocated one per call).

/** Tells a callback-style caller why its call ended, after the call returned. */
export function callBackLater(callback: CallDone, error: Error | undefined): void {
  queueMicrotask(() => callback(error, 0, 0));
}

function rethrowLater(thrown: unknown): void {
  queueMicrotask(() => {
    throw thrown;
  });
}
