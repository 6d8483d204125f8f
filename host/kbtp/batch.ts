// Batched LOAD and STORE for the initiator (KbtpSession.loadMany / storeMany): the requests of a
// batch are written straight into the session's request slots and posted in one event-loop turn
// (so they leave in one system call while credits allow), each answer is routed to the batch by
// the slot its request id names, and the batch settles one promise when all are answered. No
// promise, closure or message object per request: what a request costs is its slot. The batch's
// deadline is swept by the session's one timer (deadlines.ts); it listens to an AbortSignal only
// when the caller gave one.
import * as K from '../../assembly/kbtp-constants.ts';
import { AbortedError, BatchError, TimeoutError, type BatchFailure } from './errors.ts';
import { statusName } from './wire/messages.ts';
import type { DeadlineEntry, Deadlines } from './deadlines.ts';
import type { SlotOwner } from './slots.ts';
import { monotonicMsInto } from '../util/clock.ts';

/** This thread's clock reading for a call's deadline (monotonicMsInto: no heap number per call). */
const clock = new Float64Array(1);

export { BatchError };

/** What a batch needs of its session (implemented by KbtpSession). */
export interface BatchHost {
  readonly blockSize: number;
  /** A free request slot, or -1 (the batch then waits for `resume`). */
  claimSlot(): number;
  /** Gives a slot back (it may wake another waiter). */
  releaseSlot(slot: number): void;
  /** Calls `resume` once a slot was given back. */
  waitForSlot(resume: () => void): void;
  /** Forgets a `resume` given to waitForSlot (the batch's call gave up). */
  stopWaiting(resume: () => void): void;
  /**
   * Writes and posts slot `slot`'s request for `buffer`; the answer comes back through
   * `answered`. LOAD: `buffer` is the destination (the block lands in it directly when it is
   * registered with the session, landing.ts, else in the slot's staging area). STORE: `buffer`
   * is the data, sent inline when it fits the target's Max Inline, else staged for its RDMA Read.
   */
  post(slot: number, batch: Batch, opcode: number, flags: number, handle: bigint, buffer: Uint8Array): void;
  /** The registered staging area of a slot (the block lands or is read from there). */
  /** The registered staging area of a slot, or its first `length` octets (the same view each time). */
  staging(slot: number, length?: number): Uint8Array;
  /** True when the slot's LOAD landed in the caller's registered buffer itself. */
  landed(slot: number): boolean;
  readonly failure: Error | undefined;
  readonly deadlines: Deadlines;
  /** The batch's call ended with no request on the wire: the record may run another call. */
  recycleBatch(batch: Batch): void;
}

const NONE: readonly never[] = Object.freeze([]);

function noop(): void {}

export class Batch implements SlotOwner, DeadlineEntry {
  // The call this record runs now (records are reused: the session keeps the idle ones).
  private opcode = 0;
  private flags = 0;
  private handles: readonly bigint[] = NONE;
  private buffers: readonly Uint8Array[] = NONE;
  /** LOAD: octets each block held; filled as answers arrive. */
  private lengths: Uint32Array | undefined;
  /** The caller's signal, if any: requests not yet posted when it fires never are. */
  private signal: AbortSignal | undefined;
  private timeoutMs = 0;
  private next = 0;
  private answers = 0;
  /** Requests posted and not answered yet: the record is reused only once the call ended with none. */
  private inFlight = 0;
  private readonly indexOfSlot: Int32Array;
  private resolve: () => void = noop;
  private reject: (error: Error) => void = noop;
  private readonly executor = (resolve: () => void, reject: (error: Error) => void): void => {
    this.resolve = resolve;
    this.reject = reject;
  };
  private failures: BatchFailure[] | undefined;
  private firstFailure = '';
  private readonly resumeBound = (): void => this.issue();
  private readonly onAbortBound = (): void => this.stop(new AbortedError(`${this.what()}: aborted`, this.signal?.reason));
  private waiting = false;
  /** The call ended (settled, timed out or aborted): nothing more is posted or written to its buffers. */
  private ended = true;
  deadline = 0;
  previousDeadline: DeadlineEntry | undefined;
  nextDeadline: DeadlineEntry | undefined;
  inDeadlines = false;

  /** A record for batches of a session with `slots` request slots. */
  constructor(
    private readonly host: BatchHost,
    slots: number,
  ) {
    this.indexOfSlot = new Int32Array(slots).fill(-1);
  }

  /**
   * Starts a call on this idle record: `opcode` (LOAD or STORE) of `handles[i]` into or from
   * `buffers[i]`, within `timeoutMs` and `signal`; posts what free slots allow. The promise
   * settles once every request is answered, or at the deadline, the signal or the session's failure.
   */
  start(
    opcode: number,
    flags: number,
    handles: readonly bigint[],
    buffers: readonly Uint8Array[],
    lengths: Uint32Array | undefined,
    signal: AbortSignal | undefined,
    timeoutMs: number,
  ): Promise<void> {
    this.opcode = opcode;
    this.flags = flags;
    this.handles = handles;
    this.buffers = buffers;
    this.lengths = lengths;
    this.signal = signal;
    this.timeoutMs = timeoutMs;
    this.next = 0;
    this.answers = 0;
    this.failures = undefined;
    this.firstFailure = '';
    this.waiting = false;
    this.ended = false;
    const done = new Promise<void>(this.executor);
    if (signal?.aborted === true) {
      this.settle(new AbortedError(`${this.what()}: aborted`, signal.reason));
      return done;
    }
    monotonicMsInto(clock, 0);
    this.deadline = (clock[0] as number) + timeoutMs;
    this.host.deadlines.add(this);
    signal?.addEventListener('abort', this.onAbortBound, { once: true });
    this.issue();
    return done;
  }

  private what(): string {
    return `${this.opcode === K.OPCODE_LOAD ? 'LOAD' : 'STORE'} of a batch of ${this.handles.length}`;
  }

  expired(): void {
    this.stop(new TimeoutError(`${this.what()}: no answer within ${this.timeoutMs} ms`));
  }

  /** The call gave up: stop waiting for slots and post nothing more (answers to posted requests still free their slots). */
  private stop(error: Error): void {
    if (this.waiting) this.host.stopWaiting(this.resumeBound);
    this.waiting = false;
    this.settle(error);
  }

  private settle(error: Error | undefined): void {
    if (this.ended) return;
    this.ended = true;
    this.host.deadlines.remove(this);
    this.signal?.removeEventListener('abort', this.onAbortBound);
    this.signal = undefined;
    const { resolve, reject } = this;
    this.resolve = noop;
    this.reject = noop;
    if (error === undefined) resolve();
    else reject(error);
    this.recycleIfIdle();
  }

  /** An ended call with no request left on the wire: nothing refers to the record any more. */
  private recycleIfIdle(): void {
    if (!this.ended || this.inFlight > 0) return;
    // The caller's arrays are the caller's: the idle record keeps none of them alive.
    this.handles = NONE;
    this.buffers = NONE;
    this.lengths = undefined;
    this.failures = undefined;
    this.host.recycleBatch(this);
  }

  /** Posts as many requests as there are free slots; the rest follow as answers free slots. */
  issue(): void {
    const host = this.host;
    this.waiting = false;
    if (host.failure !== undefined) {
      this.settle(host.failure);
      return;
    }
    if (this.ended) return;
    while (this.next < this.handles.length) {
      const slot = host.claimSlot();
      if (slot < 0) {
        this.waiting = true;
        host.waitForSlot(this.resumeBound);
        return;
      }
      const index = this.next++;
      this.indexOfSlot[slot] = index;
      this.inFlight++;
      host.post(slot, this, this.opcode, this.flags, this.handles[index]!, this.buffers[index]!);
    }
    if (this.handles.length === 0) this.settle(undefined);
  }

  /** The COMPLETION of slot `slot`'s request: status and the block's data length. */
  answered(slot: number, status: number, dataLength: number): void {
    const index = this.indexOfSlot[slot]!;
    this.indexOfSlot[slot] = -1;
    this.inFlight--;
    if (this.ended) {
      // The call already gave up: its caller may be using its buffers again, so nothing lands there.
      this.host.releaseSlot(slot);
      this.recycleIfIdle();
      return;
    }
    if (status === K.STATUS_SUCCESS) {
      if (this.opcode === K.OPCODE_LOAD) {
        const into = this.buffers[index]!;
        if (into.length < dataLength) this.failed(index, K.STATUS_LENGTH_ERROR, `the ${dataLength}-octet block does not fit the ${into.length}-octet buffer`);
        else if (!this.host.landed(slot)) into.set(this.host.staging(slot, dataLength));
        if (this.lengths !== undefined) this.lengths[index] = dataLength;
      }
    } else {
      this.failed(index, status, statusName(status));
    }
    this.answers++;
    if (this.answers === this.handles.length) {
      // Settled before the slot goes back: a waiter woken by releaseSlot may take this record.
      this.settle(this.failures === undefined ? undefined : new BatchError(this.failures, this.firstFailure));
      this.host.releaseSlot(slot);
      return;
    }
    this.host.releaseSlot(slot);
    if (this.next < this.handles.length) this.issue();
  }

  /** The session failed: the batch fails with it. */
  abort(error: Error): void {
    this.settle(error);
  }

  private failed(index: number, status: number, reason: string): void {
    this.failures ??= [];
    this.failures.push({ index, handle: this.handles[index]!, status });
    if (this.failures.length === 1) this.firstFailure = `handle ${this.handles[index]}: ${reason}`;
  }
}
