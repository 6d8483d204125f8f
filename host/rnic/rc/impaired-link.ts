// A link that loses, duplicates and reorders packets on purpose, wrapped around any other link:
// the RC transport's retransmission, duplicate detection and sequence-error paths are tested
// (and benchmarked at 1 % loss) with it. Decisions come from a seeded generator, so a failing
// run replays exactly.

import { Random } from '../../util/random.ts';
import type { LeanPacketReceiver, PacketLink, PacketReceiver, PacketRun, PeerAddress } from './link.ts';

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

const EMPTY = new Uint8Array(0);

export class ImpairedLink implements PacketLink {
  private readonly random: Random;
  private held: { to: PeerAddress; header: Uint8Array; payload: Uint8Array; trailer: Uint8Array; remaining: number } | undefined;
  private flushTimer: NodeJS.Timeout | undefined;
  readonly counts: ImpairmentCounts = { sent: 0, dropped: 0, duplicated: 0, reordered: 0 };

  /**
   * Present when the inner link takes runs: a run leaves as runs, less what is dropped, so a
   * lossy link costs the sender what a lossy network would (the loss happens on the wire, the
   * sender still writes runs), not a call chain per packet. Each packet draws from the
   * generator exactly as `send` would, so a seed drops the same packets either way.
   */
  readonly sendRun?: (to: PeerAddress, run: PacketRun) => void;
  /** Present when the inner link has it (receiving is not impaired). */
  readonly receiveThreadNow?: () => void;
  /** The part of a run that goes on (sendRun), refilled per part. */
  private readonly part: PacketRun = { headers: EMPTY, headerLength: 0, payload: EMPTY, segment: 0, count: 0, trailers: EMPTY, trailerLength: 0 };

  constructor(
    private readonly inner: PacketLink,
    private readonly impairments: Impairments,
  ) {
    this.random = new Random(impairments.seed ?? 1);
    if (inner.sendRun !== undefined) this.sendRun = (to, run) => this.impairRun(to, run);
    if (inner.receiveThreadNow !== undefined) this.receiveThreadNow = () => inner.receiveThreadNow!();
  }

  get local(): PeerAddress {
    return this.inner.local;
  }

  get receiveBufferBytes(): number | undefined {
    return this.inner.receiveBufferBytes;
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

  private impairRun(to: PeerAddress, run: PacketRun): void {
    const { headers, headerLength, payload, segment, count, trailers, trailerLength } = run;
    const { loss = 0, duplicate = 0, reorder = 0 } = this.impairments;
    if (duplicate > 0 || reorder > 0 || this.held !== undefined) {
      // Duplication and reordering act per packet: the run goes packet by packet through send.
      for (let i = 0; i < count; i++) {
        this.send(
          to,
          headers.subarray(i * headerLength, (i + 1) * headerLength),
          payload.subarray(i * segment, (i + 1) * segment),
          trailers.subarray(i * trailerLength, (i + 1) * trailerLength),
        );
      }
      return;
    }
    let start = 0;
    for (let i = 0; i < count; i++) {
      this.counts.sent++;
      if (this.random.float() < loss) {
        this.counts.dropped++;
        this.sendPart(to, run, start, i);
        start = i + 1;
      } else {
        // The draws send makes for a packet it keeps (reorder, then duplicate), both zero here.
        this.random.float();
        this.random.float();
      }
    }
    this.sendPart(to, run, start, count);
  }

  /** Packets [from, to) of `run` to the inner link as one run (the whole run when nothing was dropped). */
  private sendPart(to: PeerAddress, run: PacketRun, from: number, end: number): void {
    if (end <= from) return;
    if (from === 0 && end === run.count) {
      this.inner.sendRun!(to, run);
      return;
    }
    const part = this.part;
    part.headers = run.headers.subarray(from * run.headerLength, end * run.headerLength);
    part.headerLength = run.headerLength;
    part.payload = run.payload.subarray(from * run.segment, end * run.segment);
    part.segment = run.segment;
    part.count = end - from;
    part.trailers = run.trailers.subarray(from * run.trailerLength, end * run.trailerLength);
    part.trailerLength = run.trailerLength;
    this.inner.sendRun!(to, part);
    part.headers = part.payload = part.trailers = EMPTY; // nothing of the caller's kept reachable
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
