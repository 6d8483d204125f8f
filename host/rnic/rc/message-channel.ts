// Small lock-step messages over an RC QP's Sends and Receives, for tools that exchange their setup
// over the RDMA connection itself instead of a TCP side channel (perftest -R: perftest-cm.ts).
// Each message is one Send; received messages are copied out of a few posted receive slots, which
// are posted again at once, so a peer that answers message by message never meets an empty
// receive queue.

import { RnicError } from '../errors.ts';
import type { CompletionQueue } from '../cq.ts';
import { Access, type MemoryRegion, type ProtectionDomain } from '../memory.ts';
import { WcStatus, wcStatusName, type WorkCompletion } from '../work.ts';
import type { RcQueuePair, RcQueuePairOptions } from './queue-pair.ts';

const DEFAULT_SLOTS = 8;
const DEFAULT_SLOT_SIZE = 4096;

/** What the channel needs of an RNIC (Rnic has it). */
export interface MessageChannelVerbs {
  createCq(options?: { depth?: number }): CompletionQueue;
  registerMemory(pd: ProtectionDomain, memory: ArrayBufferLike | ArrayBufferView, options: { access: number }): MemoryRegion;
  deregisterMemory(region: MemoryRegion): void;
  createRcQp(options: RcQueuePairOptions): RcQueuePair;
}

export interface MessageChannelOptions {
  /** Receive slots kept posted, and Send slots rotated through (default 8 each). */
  slots?: number;
  /** Largest message either way (default 4096 octets). */
  slotSize?: number;
}

export class RcMessageChannel {
  readonly qp: RcQueuePair;
  private readonly cq: CompletionQueue;
  private readonly region: MemoryRegion;
  private readonly slots: number;
  private readonly slotSize: number;
  private nextSendSlot = 0;
  private readonly received: Uint8Array[] = [];
  private failure: string | undefined;
  private disconnected = false;
  /** Settles when the connection ends; every wait races it (one waiter on the QP, not one per wait). */
  private readonly ended: Promise<unknown>;
  private closed = false;

  constructor(
    private readonly verbs: MessageChannelVerbs,
    pd: ProtectionDomain,
    options: MessageChannelOptions = {},
  ) {
    this.slots = options.slots ?? DEFAULT_SLOTS;
    this.slotSize = options.slotSize ?? DEFAULT_SLOT_SIZE;
    this.cq = verbs.createCq({ depth: 4 * this.slots });
    this.region = verbs.registerMemory(pd, new ArrayBuffer(2 * this.slots * this.slotSize), { access: Access.LocalWrite });
    this.qp = verbs.createRcQp({ pd, sendCq: this.cq, recvCq: this.cq, maxSendWr: this.slots, maxRecvWr: this.slots });
    for (let slot = 0; slot < this.slots; slot++) this.postReceive(slot);
    this.ended = this.qp.whenDisconnected().then(() => {
      this.disconnected = true;
    });
  }

  /** Sends one message (at most slotSize octets); a failed Send shows in the next receive. */
  send(message: Uint8Array): void {
    if (message.length > this.slotSize) throw new RnicError('EINVAL', `message of ${message.length} octets, slots hold ${this.slotSize}`);
    const offset = (this.slots + this.nextSendSlot) * this.slotSize;
    this.nextSendSlot = (this.nextSendSlot + 1) % this.slots;
    this.region.bytes.set(message, offset);
    this.qp.postSend({ wrId: offset, opcode: 'SEND', sgList: [{ lkey: this.region.lkey, offset, length: message.length }] });
  }

  /**
   * The next message the peer sent, or undefined once the connection ended with nothing left to
   * read (a peer's disconnect after its last message is how perftest ends).
   */
  async receive(timeoutMs: number, what: string): Promise<Uint8Array | undefined> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      this.drain();
      const message = this.received.shift();
      if (message !== undefined) return message;
      if (this.failure !== undefined) throw new RnicError('ECONNRESET', `${what}: ${this.failure}`);
      if (this.disconnected || this.qp.state === 'error') return undefined;
      const remaining = deadline - Date.now();
      if (remaining <= 0) throw new RnicError('ETIMEDOUT', `${what} within ${timeoutMs} ms`);
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        this.cq.wait(),
        this.ended,
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, Math.min(remaining, 1000));
        }),
      ]);
      clearTimeout(timer);
    }
  }

  /**
   * Disconnects (CM DREQ when CM connected it) and frees the QP and memory, one loop turn later:
   * the RNIC acknowledges what arrived at the end of its turn, and a peer whose last Send was
   * never acknowledged retransmits it instead of seeing the disconnect (rxe's perftest -R server
   * then never finishes).
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await new Promise<void>((resolve) => setImmediate(resolve));
    if (this.qp.state !== 'error') this.qp.disconnect();
    this.qp.destroy();
    this.verbs.deregisterMemory(this.region);
  }

  private drain(): void {
    for (const completion of this.cq.poll(4 * this.slots)) this.completed(completion);
  }

  private completed(completion: WorkCompletion): void {
    if (completion.status !== WcStatus.Success) {
      // Flushes after the peer's disconnect are the normal end, not a failure.
      if (completion.status === WcStatus.WrFlushError && this.disconnected) return;
      this.failure ??= `${completion.opcode} completion failed: ${wcStatusName(completion.status)}${completion.error ? ` (${completion.error})` : ''}`;
      return;
    }
    if (completion.opcode !== 'RECV') return;
    const offset = Number(completion.wrId);
    this.received.push(this.region.bytes.slice(offset, offset + (completion.byteLength ?? 0)));
    this.postReceive(offset / this.slotSize);
  }

  private postReceive(slot: number): void {
    const offset = slot * this.slotSize;
    this.qp.postRecv({ wrId: offset, sgList: [{ lkey: this.region.lkey, offset, length: this.slotSize }] });
  }
}
