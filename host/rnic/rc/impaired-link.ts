// A link that loses, duplicates and reorders packets on purpose, wrapped around any other link:
// the RC transport's retransmission, duplicate detection and sequence-error paths are tested
// (and benchmarked at 1 % loss) with it. Decisions come from a seeded generator, so a failing
// run replays exactly.

import { Random } from '../../util/random.ts';
import type { LeanPacketReceiver, PacketLink, PacketReceiver, PeerAddress } from './link.ts';

export interface Impairments {
  /** Probability that a sent packet is dropped. */
  loss?: number;
  /** Probability that a sent packet is sent twice. */
  duplicate?: number;
  /** Probability that a sent packet is held back and sent after the next one(s). */
  reorder?: number;
  seed?: number;
}

export interface ImpairmentCounts {
  sent: number;
  dropped: number;
  duplicated: number;
  reordered: number;
}

export class ImpairedLink implements PacketLink {
  private readonly random: Random;
  private held: { to: PeerAddress; header: Uint8Array; payload: Uint8Array; trailer: Uint8Array; remaining: number } | undefined;
  private flushTimer: NodeJS.Timeout | undefined;
  readonly counts: ImpairmentCounts = { sent: 0, dropped: 0, duplicated: 0, reordered: 0 };

  constructor(
    private readonly inner: PacketLink,
    private readonly impairments: Impairments,
  ) {
    this.random = new Random(impairments.seed ?? 1);
  }

  get local(): PeerAddress {
    return this.inner.local;
  }

  setReceiver(receiver: PacketReceiver): void {
    this.inner.setReceiver(receiver);
  }

  /** Receiving is not impaired (the peer's link impairs what it sends): the inner link's lean path stays. */
  setLeanReceiver(receiver: LeanPacketReceiver): void {
    this.inner.setLeanReceiver?.(receiver);
  }

  receiveNow(): void {
    this.inner.receiveNow?.();
  }

  send(to: PeerAddress, header: Uint8Array, payload: Uint8Array, trailer: Uint8Array): void {
    this.counts.sent++;
    const { loss = 0, duplicate = 0, reorder = 0 } = this.impairments;
    if (this.random.float() < loss) {
      this.counts.dropped++;
      this.releaseHeld();
      return;
    }
    if (this.held === undefined && this.random.float() < reorder) {
      // Copies: the caller may reuse its header and trailer buffers once send returns.
      this.held = { to, header: header.slice(), payload: payload.slice(), trailer: trailer.slice(), remaining: 1 + this.random.below(3) };
      this.counts.reordered++;
      // A held packet with nothing behind it still leaves, a little late.
      this.flushTimer = setTimeout(() => this.releaseHeld(true), 2);
      this.flushTimer.unref();
      return;
    }
    this.inner.send(to, header, payload, trailer);
    if (this.random.float() < duplicate) {
      this.counts.duplicated++;
      this.inner.send(to, header, payload, trailer);
    }
    this.releaseHeld();
  }

  async close(): Promise<void> {
    if (this.flushTimer !== undefined) clearTimeout(this.flushTimer);
    this.held = undefined;
    await this.inner.close();
  }

  private releaseHeld(now = false): void {
    const held = this.held;
    if (held === undefined) return;
    if (!now && --held.remaining > 0) return;
    this.held = undefined;
    if (this.flushTimer !== undefined) clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    this.inner.send(held.to, held.header, held.payload, held.trailer);
  }
}
