// Batched LOAD and STORE for the initiator (KbtpSession.loadMany / storeMany): the requests of a
// batch are written straight into the session's request slots and posted in one event-loop turn
// (so they leave in one system call while credits allow), each answer is routed to the batch by
// the slot its request id names, and the batch settles one promise when all are answered. No
// promise, closure or message object per request: what a request costs is its slot.
import * as K from '../../assembly/kbtp-constants.ts';
import { BatchError, type BatchFailure } from './errors.ts';
import { statusName } from './wire/messages.ts';

export { BatchError };

/** Request ids of batched requests carry this in their high 32 bits (ids of other requests stay below 2^32). */
export const BATCH_ID_MARK = 0x4b425450; // "KBTP"

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
  /** Writes and posts slot `slot`'s request; the answer comes back through `answered`. */
  post(slot: number, batch: Batch, opcode: number, flags: number, handle: bigint, length: number): void;
  /** The registered staging area of a slot (the block lands or is read from there). */
  staging(slot: number): Uint8Array;
  readonly failure: Error | undefined;
}

export class Batch {
  private next = 0;
  private answers = 0;
  private readonly indexOfSlot: Int32Array;
  private resolve!: () => void;
  private reject!: (error: Error) => void;
  readonly done: Promise<void>;
  private failures: BatchFailure[] | undefined;
  private firstFailure = '';
  private readonly resumeBound = (): void => this.issue();
  private waiting = false;

  constructor(
    private readonly host: BatchHost,
    private readonly opcode: number,
    private readonly flags: number,
    private readonly handles: readonly bigint[],
    private readonly buffers: readonly Uint8Array[],
    /** LOAD: octets each block held; filled as answers arrive. */
    private readonly lengths: Uint32Array | undefined,
    slots: number,
    /** The call's signal (its deadline or the caller's abort): requests not yet posted then never are. */
    private readonly signal: AbortSignal,
  ) {
    this.indexOfSlot = new Int32Array(slots).fill(-1);
    this.done = new Promise<void>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    signal.addEventListener('abort', () => this.stop(), { once: true });
  }

  /** The call gave up: stop waiting for slots and post nothing more (answers to posted requests still free their slots). */
  private stop(): void {
    if (this.waiting) this.host.stopWaiting(this.resumeBound);
    this.waiting = false;
    this.reject(this.signal.reason as Error);
  }

  /** Posts as many requests as there are free slots; the rest follow as answers free slots. */
  issue(): void {
    const host = this.host;
    this.waiting = false;
    if (host.failure !== undefined) {
      this.reject(host.failure);
      return;
    }
    if (this.signal.aborted) return;
    while (this.next < this.handles.length) {
      const slot = host.claimSlot();
      if (slot < 0) {
        this.waiting = true;
        host.waitForSlot(this.resumeBound);
        return;
      }
      const index = this.next++;
      this.indexOfSlot[slot] = index;
      let length = host.blockSize;
      if (this.opcode !== K.OPCODE_LOAD) {
        const data = this.buffers[index]!;
        host.staging(slot).set(data);
        length = data.length;
      }
      host.post(slot, this, this.opcode, this.flags, this.handles[index]!, length);
    }
    if (this.handles.length === 0) this.resolve();
  }

  /** The COMPLETION of slot `slot`'s request: status and the block's data length. */
  answered(slot: number, status: number, dataLength: number): void {
    const index = this.indexOfSlot[slot]!;
    this.indexOfSlot[slot] = -1;
    if (this.signal.aborted) {
      // The call already gave up: its caller may be using its buffers again, so nothing lands there.
      this.host.releaseSlot(slot);
      return;
    }
    if (status === K.STATUS_SUCCESS) {
      if (this.opcode === K.OPCODE_LOAD) {
        const into = this.buffers[index]!;
        if (into.length < dataLength) this.failed(index, K.STATUS_LENGTH_ERROR, `the ${dataLength}-octet block does not fit the ${into.length}-octet buffer`);
        else into.set(dataLength === this.host.blockSize ? this.host.staging(slot) : this.host.staging(slot).subarray(0, dataLength));
        if (this.lengths !== undefined) this.lengths[index] = dataLength;
      }
    } else {
      this.failed(index, status, statusName(status));
    }
    this.host.releaseSlot(slot);
    this.answers++;
    if (this.answers === this.handles.length) {
      if (this.failures === undefined) this.resolve();
      else this.reject(new BatchError(this.failures, this.firstFailure));
      return;
    }
    if (this.next < this.handles.length) this.issue();
  }

  /** The session failed: the batch fails with it. */
  abort(error: Error): void {
    this.reject(error);
  }

  private failed(index: number, status: number, reason: string): void {
    this.failures ??= [];
    this.failures.push({ index, handle: this.handles[index]!, status });
    if (this.failures.length === 1) this.firstFailure = `handle ${this.handles[index]}: ${reason}`;
  }
}

/**
 * The session's side of batching: which batch each request slot's request belongs to, the
 * request id that names the slot (BATCH_ID_MARK, then a per-slot sequence and the slot number,
 * so a late answer to an earlier use of the slot is not taken for the current one), writing a
 * batched request into its slot's message, and routing its COMPLETION back, read in place.
 */
export class BatchSlots {
  private readonly batchOfSlot: Array<Batch | undefined> = [];
  private sequence = new Uint16Array(0);

  /** `repost(index)` gives receive buffer `index` back to the QP once its answer is read. */
  constructor(private readonly repost: (index: number) => void) {}

  /** The session's request slots (every batch maps them). */
  get count(): number {
    return this.batchOfSlot.length;
  }

  /** Sizes the table for the session's `slots` request slots (known after HELLO). */
  open(slots: number): void {
    this.sequence = new Uint16Array(slots);
    for (let slot = 0; slot < slots; slot++) this.batchOfSlot.push(undefined);
  }

  /** Writes a batched LOAD or STORE for `slot` at `at` of `view` (kbtp-v1 section 1 layout: header and one descriptor). */
  write(
    view: DataView,
    at: number,
    slot: number,
    batch: Batch,
    opcode: number,
    flags: number,
    handle: bigint,
    stag: number,
    taggedOffset: number,
    length: number,
  ): void {
    const sequence = (this.sequence[slot]! + 1) & 0xffff;
    this.sequence[slot] = sequence;
    view.setUint8(at + K.HEADER_VERSION, K.KBTP_VERSION);
    view.setUint8(at + K.HEADER_OPCODE, opcode);
    view.setUint16(at + K.HEADER_FLAGS, flags, false);
    view.setUint32(at + K.HEADER_REQUEST_ID, BATCH_ID_MARK, false);
    view.setUint32(at + K.HEADER_REQUEST_ID + 4, sequence * 0x10000 + slot, false);
    view.setBigUint64(at + K.HEADER_HANDLE, handle, false);
    view.setUint32(at + K.HEADER_GENERATION, 0, false); // generation 0 (any), reserved
    const descriptor = at + K.HEADER_SIZE;
    view.setUint32(descriptor + K.DESCRIPTOR_STAG, stag, false);
    view.setUint32(descriptor + K.DESCRIPTOR_TAGGED_OFFSET, 0, false);
    view.setUint32(descriptor + K.DESCRIPTOR_TAGGED_OFFSET + 4, taggedOffset, false);
    view.setUint32(descriptor + K.DESCRIPTOR_LENGTH, length, false);
    this.batchOfSlot[slot] = batch;
  }

  /**
   * Routes the message of `length` octets in receive buffer `index` (at `offset` of `view`) to its
   * batch when it is the COMPLETION of a batched request in flight; false for any other message.
   */
  route(view: DataView, index: number, offset: number, length: number): boolean {
    if (
      length !== K.COMPLETION_SIZE ||
      view.getUint8(offset + K.HEADER_OPCODE) !== K.OPCODE_COMPLETION ||
      view.getUint32(offset + K.HEADER_REQUEST_ID, false) !== BATCH_ID_MARK
    )
      return false;
    const low = view.getUint32(offset + K.HEADER_REQUEST_ID + 4, false);
    const slot = low & 0xffff;
    const batch = this.batchOfSlot[slot];
    if (batch === undefined || low >>> 16 !== this.sequence[slot]) return false; // not ours: the general path ignores it
    const status = view.getUint16(offset + K.HEADER_STATUS, false);
    const dataLength = view.getUint32(offset + K.COMPLETION_DATA_LENGTH, false);
    this.repost(index);
    this.batchOfSlot[slot] = undefined;
    batch.answered(slot, status, dataLength);
    return true;
  }

  /** The session failed: every batch in flight fails with it. */
  abortAll(error: Error): void {
    for (let slot = 0; slot < this.batchOfSlot.length; slot++) {
      const batch = this.batchOfSlot[slot];
      this.batchOfSlot[slot] = undefined;
      batch?.abort(error);
    }
  }
}
