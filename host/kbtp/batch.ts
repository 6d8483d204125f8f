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

  constructor(
    private readonly host: BatchHost,
    private readonly opcode: number,
    private readonly flags: number,
    private readonly handles: readonly bigint[],
    private readonly buffers: readonly Uint8Array[],
    /** LOAD: octets each block held; filled as answers arrive. */
    private readonly lengths: Uint32Array | undefined,
    slots: number,
  ) {
    this.indexOfSlot = new Int32Array(slots).fill(-1);
    this.done = new Promise<void>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }

  /** Posts as many requests as there are free slots; the rest follow as answers free slots. */
  issue(): void {
    const host = this.host;
    if (host.failure !== undefined) {
      this.reject(host.failure);
      return;
    }
    while (this.next < this.handles.length) {
      const slot = host.claimSlot();
      if (slot < 0) {
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
