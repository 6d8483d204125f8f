// Two stream channels joined back to back in one thread, with no socket: what one side writes
// during an event-loop turn reaches the other side's consumer at the end of that turn, in the
// read buffers the consumer picks, exactly as a socket read would place it. Used to drive a
// target and an initiator in one process (the allocation tests, in-process benchmarks) without
// the kernel: after warm-up a delivery allocates nothing.

import { failWriteLater, InProcessChannel, type StreamChannel, type StreamConsumer } from './channel.ts';
import type { WriteDone } from './transmit.ts';
import { turn, type TurnParticipant } from './turn.ts';

const EMPTY = new Uint8Array(0);

/** Nobody reads yet: bytes that arrive are kept (bounded by the writer's flow) for the first consumer. */
class Pending implements StreamConsumer {
  private buffer = new Uint8Array(4096);
  private held = 0;
  readBuffer(): Uint8Array {
    if (this.held === this.buffer.length) {
      const grown = new Uint8Array(this.buffer.length * 2);
      grown.set(this.buffer);
      this.buffer = grown;
    }
    return this.buffer.subarray(this.held);
  }
  commit(length: number): void {
    this.held += length;
  }
  leftover(): Uint8Array {
    const out = this.buffer.slice(0, this.held);
    this.held = 0;
    return out;
  }
}

export class LinkedChannel extends InProcessChannel implements StreamChannel, TurnParticipant {
  private peer: LinkedChannel | undefined;
  private consumer: StreamConsumer = new Pending();
  private readonly chunks: Uint8Array[] = [];
  private chunkCount = 0;
  private queuedBytes = 0;
  private readonly dones: Array<WriteDone | undefined> = [];
  private doneCount = 0;
  private flushScheduled = false;
  private ended = false;
  /** Octets delivered to the peer, in total. */
  bytesWritten = 0;

  private constructor() {
    super('linked');
  }

  /** A connected pair: what `a` writes `b` reads, and the other way round. */
  static pair(): [LinkedChannel, LinkedChannel] {
    const a = new LinkedChannel();
    const b = new LinkedChannel();
    a.peer = b;
    b.peer = a;
    return [a, b];
  }

  setConsumer(consumer: StreamConsumer): void {
    const previous = this.consumer;
    this.consumer = consumer;
    const early = previous.leftover?.();
    if (early !== undefined && early.length > 0) this.receive(early, 0, early.length);
  }

  write(chunks: readonly Uint8Array[], count: number, done: WriteDone | undefined): void {
    if (this.isClosed || this.ended) {
      failWriteLater(done);
      return;
    }
    for (let i = 0; i < count; i++) {
      const chunk = chunks[i]!;
      this.chunks[this.chunkCount++] = chunk;
      this.queuedBytes += chunk.length;
    }
    this.dones[this.doneCount++] = done;
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      turn.flushLater(this);
    }
  }

  get pendingBytes(): number {
    return this.queuedBytes;
  }

  /** Delivers what this turn queued to the peer, then completes the writes (TurnParticipant). */
  endTurn(): void {
    this.flushScheduled = false;
    const peer = this.peer;
    const count = this.chunkCount;
    this.chunkCount = 0;
    this.queuedBytes = 0;
    for (let i = 0; i < count; i++) {
      const chunk = this.chunks[i]!;
      this.chunks[i] = EMPTY;
      if (peer !== undefined && !peer.isClosed) peer.receive(chunk, 0, chunk.length);
      this.bytesWritten += chunk.length;
    }
    const dones = this.doneCount;
    this.doneCount = 0;
    turn.enter();
    try {
      for (let i = 0; i < dones; i++) {
        const done = this.dones[i];
        this.dones[i] = undefined;
        if (done !== undefined) done();
      }
    } finally {
      turn.leave();
    }
    if (this.ended && peer !== undefined) {
      this.ended = false;
      peer.events?.onEnd();
      this.close();
      peer.close();
    }
  }

  /** Places `bytes[start..end)` through the consumer's read buffers, as socket reads would. */
  private receive(bytes: Uint8Array, start: number, end: number): void {
    turn.enter();
    try {
      let offset = start;
      let idle = 0;
      while (offset < end && !this.isClosed) {
        const target = this.consumer.readBuffer();
        const length = Math.min(target.length, end - offset);
        if (length === 0) {
          if (++idle > 2) return; // a consumer that takes nothing is dead; drop the rest
          continue;
        }
        idle = 0;
        // A chunk taken whole needs no view of it.
        if (offset === 0 && length === bytes.length) target.set(bytes);
        else target.set(bytes.subarray(offset, offset + length));
        offset += length;
        this.consumer.commit(length);
      }
    } finally {
      turn.leave();
    }
  }

  /** Sends what is queued, then FIN: the peer sees the end and both sides close. */
  end(): void {
    if (this.isClosed) return;
    this.ended = true;
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      turn.flushLater(this);
    }
  }

  destroy(): void {
    this.close();
    this.peer?.close();
  }
}
