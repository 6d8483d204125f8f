// Which call owns each request slot of a session, and routing a COMPLETION back to it read in
// place (issue 16): a request's id names its slot (SLOT_ID_MARK, then a per-slot sequence and the
// slot number), so an answer finds its call without a map, a BigInt or a decoded message object,
// and a late answer to an earlier use of the slot is not taken for the current one.
import * as K from '../../assembly/kbtp-constants.ts';

/** Request ids of slot-routed requests carry this in their high 32 bits (the session's other ids stay below 2^32). */
export const SLOT_ID_MARK = 0x4b425450; // "KBTP"

/** A call that has a request in a slot (a single call, slot-call.ts, or a batch, batch.ts). */
export interface SlotOwner {
  /** The COMPLETION of `slot`'s request: its status and data length; the whole message is at `offset` of `view`. */
  answered(slot: number, status: number, dataLength: number, view: DataView, offset: number): void;
  /** The session failed. */
  abort(error: Error): void;
}

export class RequestSlots {
  private readonly ownerOfSlot: Array<SlotOwner | undefined> = [];
  private sequence = new Uint16Array(0);

  /** `repost(index)` gives receive buffer `index` back to the QP once its answer is read. */
  constructor(private readonly repost: (index: number) => void) {}

  /** The session's request slots. */
  get count(): number {
    return this.ownerOfSlot.length;
  }

  /** Sizes the table for the session's `slots` request slots (known after HELLO). */
  open(slots: number): void {
    this.sequence = new Uint16Array(slots);
    for (let slot = 0; slot < slots; slot++) this.ownerOfSlot.push(undefined);
  }

  /**
   * `owner` sends a request from `slot`: returns the low 32 bits of its request id (the high ones
   * are SLOT_ID_MARK) as a signed 32-bit integer, the same octets on the wire: as an unsigned
   * value half the sequences put it at or above 2^31, a heap number (16 octets) wherever it
   * crossed a call (issue 16).
   */
  begin(slot: number, owner: SlotOwner): number {
    const sequence = (this.sequence[slot]! + 1) & 0xffff;
    this.sequence[slot] = sequence;
    this.ownerOfSlot[slot] = owner;
    return (sequence << 16) | slot;
  }

  /**
   * Routes the message of `length` octets in receive buffer `index` (at `offset` of `view`) to its
   * owner when it is the COMPLETION of a slot-routed request in flight; false for any other message.
   */
  route(view: DataView, index: number, offset: number, length: number): boolean {
    if (
      length !== K.COMPLETION_SIZE ||
      view.getUint8(offset + K.HEADER_OPCODE) !== K.OPCODE_COMPLETION ||
      view.getUint32(offset + K.HEADER_REQUEST_ID, false) !== SLOT_ID_MARK
    )
      return false;
    const low = view.getUint32(offset + K.HEADER_REQUEST_ID + 4, false);
    const slot = low & 0xffff;
    const owner = this.ownerOfSlot[slot];
    if (owner === undefined || low >>> 16 !== this.sequence[slot]) return false; // not ours: the general path ignores it
    const status = view.getUint16(offset + K.HEADER_STATUS, false);
    const dataLength = view.getUint32(offset + K.COMPLETION_DATA_LENGTH, false);
    this.ownerOfSlot[slot] = undefined;
    // The owner reads the message first: the receive buffer goes back to the QP after.
    owner.answered(slot, status, dataLength, view, offset);
    this.repost(index);
    return true;
  }

  /** The session failed: every call with a request in flight fails with it. */
  abortAll(error: Error): void {
    for (let slot = 0; slot < this.ownerOfSlot.length; slot++) {
      const owner = this.ownerOfSlot[slot];
      this.ownerOfSlot[slot] = undefined;
      owner?.abort(error);
    }
  }
}
