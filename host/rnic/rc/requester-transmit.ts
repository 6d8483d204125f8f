// The requester's transmission (requester.ts): turns the send queue's WQEs into packets, one
// PSN each, within the PSN window, ORD and fences and a per-turn packet budget (a clean window's
// 512; on a path that lost a packet lately in parts of 64, the thread's sockets read between them): path-MTU segments
// of Sends and Writes (their middle packets as runs to the link; a short Write's as a run of
// ONLY packets), Read requests per chunk of
// response packets, atomics; AckReq on every 64th packet, a message's last and the packet that
// fills the window (the send queue's lossy or clean one, as the path lost a packet lately or not).
// A rewind (requester-retransmit.ts) moves where it continues.

import { AccessStatus } from '../memory.ts';
import { turn } from '../turn.ts';
import { psnAdd, psnCompare } from '../wire/ib-headers.ts';
import { IbOpcode } from '../wire/ib-opcodes.ts';
import { WcStatus } from '../work.ts';
import type { RcQueuePair } from './queue-pair.ts';
import type { Retransmission } from './requester-retransmit.ts';
import { CLEAN_WINDOW_PACKETS, EMPTY, Kind, packetsInElement, payloadOf, type SendQueue, type Wqe } from './send-queue.ts';

/**
 * Packets sent per part of a turn on a path that lost a packet lately: a loss then costs at most
 * one part of packets past the gap before the NAK is read (transmitLater reads the sockets
 * between parts, and before the next turn). Where the link cannot read on demand a turn is one part.
 */
const PACKETS_PER_TURN = 64;
/**
 * The same on a path that has not lost a packet lately: the clean window's worth, so a stream
 * fills the window in one turn. A turn costs system calls whatever it carries: a sendmmsg, an
 * event-loop pass (setImmediate, a zero-timeout epoll_pwait), the responder's recvmmsg and ACK
 * for the batch and the requester's read of it. At 64 packets per turn those calls bounded Writes
 * on a VM whose every kernel entry flushes the TLB (session 16: one-thread Writes of 256 KiB
 * 17.6-19.0 Gbit/s, 26.5-26.6 with this; docs/notes/2026-12-02/issue-15-session16.md). The
 * price: the first loss on a clean path costs up to a window of packets past the gap, not a turn's.
 */
const CLEAN_PACKETS_PER_TURN = CLEAN_WINDOW_PACKETS;
/**
 * Parts of PACKETS_PER_TURN a lossy turn sends, the sockets of this thread read between them, so
 * a lossy turn sends the clean one's budget. Each turn costs its system calls and an event-loop
 * pass whatever it carries, and at 64 packets per turn a lossy path paid five or six per MiB:
 * with both QPs of a pair on one thread (the RoCE benchmark's rows), Writes at 1 % loss ran at
 * 0.40-0.48 of loss-free. Read between parts, the responder takes the part, NAKs a gap and
 * acknowledges at once (responder.ts: at the end of its delivery on a lossy path), and the
 * requester reads that before its next part, as a turn's first read did (session 17).
 */
const LOSSY_TURN_PARTS = CLEAN_PACKETS_PER_TURN / PACKETS_PER_TURN;
/** AckReq at least this often inside a long message (rxe: RXE_MAX_PKT_PER_ACK). */
const PACKETS_PER_ACK_REQUEST = 64;

/**
 * Whether a Send's or Write's LAST packet can end a run of its MIDDLE packets: on the wire it
 * differs from them in its opcode and (SEND_WITH_SE, a solicited Write) the SE bit only, its
 * header being the BTH alone (no ImmDt, no IETH) and its payload a whole path MTU. A 16 KiB Write
 * at path MTU 4096 then goes as its FIRST and one run (MIDDLE, MIDDLE, LAST), the LAST without a
 * packet's call chain of its own (sendSegment, the link's send).
 */
function lastJoinsRun(wqe: Wqe, mtu: number): boolean {
  const opcode = wqe.wr.opcode;
  return (opcode === 'RDMA_WRITE' || opcode === 'SEND' || opcode === 'SEND_WITH_SE') && wqe.length === wqe.packets * mtu;
}

/**
 * Whether `wqe` goes as one RDMA WRITE ONLY per packet, each with its own RETH: a plain RDMA Write
 * (no Immediate Data, whose receive completion reports the message's length) of 2 to `upTo`
 * packets (SendQueue.onlyPacketWritesUpTo), to a link that sends runs. The link sends a run of
 * equal datagrams as one GSO message; a FIRST is 16 octets longer than the MIDDLE and LAST packets
 * after it, so a 16 KiB Write at path MTU 4096 cost two kernel messages, and as ONLY packets a
 * stream of them shares one per 15 packets (session 20, docs/RNIC.md: two-thread 16 KiB Writes
 * 0.68-0.76 of iWARP's before, 0.90-0.91 after; one thread 16 -> 24 Gbit/s). On a lossy path too:
 * a lost ONLY packet costs a go-back-N where selective repeat would resend a MIDDLE alone, but that
 * saves at most the rest of a short Write (later Writes' packets past the gap go back N either
 * way), and at 1 % loss 16 KiB Writes ran 15.1 Gbit/s as ONLY packets against 10.5-10.9.
 * The responder sees four Writes where one was posted, which changes nothing it reports (a Write
 * without Immediate Data completes nothing there) but its MSN, and checks each packet's range
 * alone: a Write its R_Key refuses part of may have placed the packets before that part (within
 * what the R_Key allows) when the NAK ends the QP.
 */
function sendsAsOnlyPackets(wqe: Wqe, upTo: number, runLimit: number): boolean {
  return wqe.kind === Kind.Write && wqe.wr.opcode === 'RDMA_WRITE' && wqe.packets > 1 && wqe.packets <= upTo && runLimit > 1;
}

/**
 * Packets from `wqe`'s packet `from` on that one run to the link may carry: ONLY packets while
 * they are a full path MTU; MIDDLE packets up to the LAST (included where it can join them,
 * lastJoinsRun), none from a FIRST.
 */
function runAhead(wqe: Wqe, from: number, mtu: number): number {
  const ahead = wqe.onlyPackets ? Math.floor(wqe.length / mtu) - from : from === 0 ? 0 : wqe.packets - (lastJoinsRun(wqe, mtu) ? 0 : 1) - from;
  // A run is one view: a gathered message's runs stay inside one element.
  return wqe.elements === undefined ? ahead : Math.min(ahead, packetsInElement(wqe, from, mtu));
}

export class Transmitter {
  private readonly qp: RcQueuePair;
  /** Wired by Requester: the parts refer to one another. */
  retransmission!: Retransmission;
  private transmitScheduled = false;
  /** The last transmission turn ended at its packet budget (more to send: a stream). */
  private budgetSpent = false;
  private sinceAckRequest = 0;

  constructor(private readonly queue: SendQueue) {
    this.qp = queue.qp;
  }

  scheduleTransmit(): void {
    if (this.transmitScheduled || !this.queue.running) return;
    this.transmitScheduled = true;
    setImmediate(this.transmitLater);
  }

  private readonly transmitLater = (): void => {
    // A turn that used its whole packet budget continues here. On a path that loses packets a
    // NAK may already wait in the socket: the responder sent it while this thread took the
    // packets the last turn sent. Read it before sending more, or this turn's packets (up to
    // PACKETS_PER_TURN past the gap, which the responder drops) are sent only to be sent again:
    // at 1 % loss that was most of what a Write retransmitted. Only then: a turn started by a
    // post or an ACK, or on a path that has not lost a packet lately, pays no extra system call
    // (its first loss costs one turn of packets more). Still marked scheduled meanwhile: what
    // the read brings schedules nothing.
    if (this.budgetSpent) {
      this.budgetSpent = false;
      if (this.retransmission.lossy && psnCompare(this.queue.sentEnd, psnAdd(this.queue.lastAcked, 1)) > 0) this.qp.receiveNow();
    }
    this.transmitScheduled = false;
    if (!this.retransmission.lossy || !this.qp.receivesThreadNow) {
      this.transmitQueued();
      return;
    }
    // A lossy turn in parts. Each part's packets leave at its end (the turn settled: queued
    // sends flushed, completions raised), then the sockets are read: a NAK rewinds what the
    // next part sends, an ACK opens the window. What the reads bring may post or schedule work;
    // none of it runs inside transmitQueued.
    for (let part = 1; ; part++) {
      this.budgetSpent = false;
      turn.enter();
      try {
        this.transmitQueued();
      } finally {
        turn.leave();
      }
      if (!this.budgetSpent || part === LOSSY_TURN_PARTS || !this.retransmission.lossy) break;
      this.qp.receiveThreadNow();
    }
  };

  /** Sends what the send queue holds, within the PSN window, ORD and fences, and a per-turn packet budget (the rest next turn). */
  transmitQueued(): void {
    const queue = this.queue;
    const qp = this.qp;
    if (!queue.running || qp.state !== 'rts' || this.retransmission.rnrWaiting) return;
    const lossy = this.retransmission.lossy;
    let budget = lossy ? PACKETS_PER_TURN : CLEAN_PACKETS_PER_TURN;
    const window = lossy ? queue.window : queue.cleanWindow;
    const readWindow = lossy ? queue.readWindow : queue.cleanReadWindow;
    while (budget > 0 && queue.txIndex < queue.wqes.length) {
      const wqe = queue.wqes[queue.txIndex]!;
      if (wqe.localError !== undefined) break; // completes (and fails the QP) once it is the oldest
      if (wqe.kind === Kind.Local) {
        if (!wqe.started) {
          wqe.started = true;
          wqe.firstPsn = queue.nextPsn; // uses no PSN; keeps the PSN bookkeeping of completion simple
          wqe.done = true;
          const status = qp.memory.invalidate(wqe.wr.invalidateStag ?? 0, qp.pd);
          if (status !== AccessStatus.Ok) {
            wqe.status = WcStatus.LocalProtectionError;
            wqe.error = `LOCAL_INV of STag 0x${(wqe.wr.invalidateStag ?? 0).toString(16)}: cannot invalidate`;
          }
        }
        queue.txIndex++;
        queue.completeInOrder();
        continue;
      }
      const firstTime = !wqe.started;
      if (firstTime && wqe.wr.fence === true && queue.readsOutstanding > 0) break;
      const newChunk = wqe.kind === Kind.Read ? queue.txPacket >= wqe.requested : firstTime && wqe.kind === Kind.Atomic;
      if (newChunk && queue.readsOutstanding >= queue.ord) break;
      const chunk = firstTime ? queue.readChunkPackets : wqe.chunkPackets;
      const chunkEnd = Math.min(wqe.packets, (Math.floor(queue.txPacket / chunk) + 1) * chunk);
      // The window: a Read chunk needs its whole response range unless nothing else is unacknowledged.
      const needed = wqe.kind === Kind.Read ? chunkEnd - queue.txPacket : 1;
      const unacked = psnCompare(queue.nextPsn, queue.lastAcked) - 1;
      if (unacked > 0 && unacked + needed > (wqe.kind === Kind.Read ? readWindow : window)) break;
      if (firstTime) {
        wqe.started = true;
        wqe.chunkPackets = chunk;
        wqe.firstPsn = queue.nextPsn;
        wqe.onlyPackets = sendsAsOnlyPackets(wqe, queue.onlyPacketWritesUpTo, qp.runLimit);
        qp.stats.messagesSent++;
      }
      if (newChunk) queue.holdResource(wqe, wqe.kind === Kind.Read ? chunkEnd : 1);
      if (psnCompare(queue.nextPsn, queue.sentEnd) < 0) qp.stats.retransmittedPackets++;
      else this.retransmission.timeNew(queue.nextPsn);
      if (wqe.kind === Kind.Read) {
        this.sendReadRequest(wqe, queue.txPacket, chunkEnd);
        if (chunkEnd > wqe.requested) wqe.requested = chunkEnd;
        queue.nextPsn = psnAdd(wqe.firstPsn, chunkEnd);
        queue.txPacket = chunkEnd;
        if (chunkEnd === wqe.packets) {
          queue.txIndex++;
          queue.txPacket = 0;
        }
      } else if (wqe.kind === Kind.Atomic) {
        this.sendAtomic(wqe);
        queue.nextPsn = psnAdd(queue.nextPsn, 1);
        queue.txIndex++;
        queue.txPacket = 0;
      } else if (runAhead(wqe, queue.txPacket, queue.mtuFor()) >= 2 && budget > 1 && this.qp.runLimit > 1) {
        // Two or more packets that can go as one run to the link (the same packets, not a call
        // chain per packet). `budget` counts this one; the run takes what it sends of the rest.
        const sent = this.sendRun(wqe, unacked, window, budget);
        queue.nextPsn = psnAdd(queue.nextPsn, sent);
        queue.txPacket += sent;
        budget -= sent - 1;
        if (queue.txPacket === wqe.packets) {
          queue.txIndex++;
          queue.txPacket = 0;
        }
      } else {
        // The packet that fills the PSN window asks for an ACK: nothing can follow it until one
        // comes, and the responder acknowledges only packets that ask (without it a window
        // smaller than PACKETS_PER_ACK_REQUEST, or one whose AckReq packets were dropped after
        // a loss, waits for the ACK timer).
        this.sendSegment(wqe, queue.txPacket, queue.nextPsn, unacked + 2 > window);
        queue.nextPsn = psnAdd(queue.nextPsn, 1);
        if (++queue.txPacket === wqe.packets) {
          queue.txIndex++;
          queue.txPacket = 0;
        }
      }
      if (psnCompare(queue.nextPsn, queue.sentEnd) > 0) queue.sentEnd = queue.nextPsn;
      budget--;
      this.retransmission.armTimer();
    }
    if (budget === 0) {
      this.budgetSpent = true;
      this.scheduleTransmit();
    }
  }

  /**
   * A tail-loss probe (Retransmission.earlyExpire, on a path that has not lost a packet lately):
   * sends the last packet sent once more, asking for an ACK, when it is a Send or Write segment
   * and no rewind is under way. The responder answers a duplicate that asks with an ACK of
   * everything it holds (the ACKs were only late: nothing more is resent), a packet past what it
   * expects with a NAK sequence error (the tail was lost: go back N from there), and takes the
   * packet if it is the one it expects. Returns false when it sent nothing (go back N instead).
   */
  probe(): boolean {
    const queue = this.queue;
    if (queue.nextPsn !== queue.sentEnd) return false;
    const psn = psnAdd(queue.sentEnd, -1);
    for (let index = Math.min(queue.txIndex, queue.wqes.length - 1); index >= queue.head; index--) {
      const wqe = queue.wqes[index]!;
      if (!wqe.started || wqe.kind === Kind.Local) continue;
      const offset = psnCompare(psn, wqe.firstPsn);
      if (offset < 0) continue;
      if (offset >= wqe.packets || (wqe.kind !== Kind.Send && wqe.kind !== Kind.Write)) return false;
      this.qp.stats.retransmittedPackets++;
      this.sendSegment(wqe, offset, psn, true);
      return true;
    }
    return false;
  }

  /**
   * Selective repeat (Retransmission.sequenceError): resends the packet `psn` alone, asking for an
   * ACK, when it is a MIDDLE or LAST of a Write this side has sent past; returns the PSN to go back
   * to (after that Write, or its LAST with Immediate Data), or undefined when it sent nothing (a FIRST, whose loss left the responder without the
   * Write's address, or any other packet: go back N).
   */
  resendAlone(psn: number): number | undefined {
    const queue = this.queue;
    if (psnCompare(queue.nextPsn, psn) <= 0) return undefined;
    for (let index = queue.head; index < queue.wqes.length; index++) {
      const wqe = queue.wqes[index]!;
      if (!wqe.started) return undefined;
      if (wqe.kind === Kind.Local) continue;
      const offset = psnCompare(psn, wqe.firstPsn);
      if (offset < 0) return undefined;
      if (offset >= wqe.packets) continue;
      if (wqe.kind !== Kind.Write || offset === 0 || wqe.done || wqe.onlyPackets) return undefined;
      this.qp.stats.retransmittedPackets++;
      this.qp.stats.resentAlone++;
      this.sendSegment(wqe, offset, psn, true);
      // A LAST with Immediate Data consumes a receive: the responder never places it past a gap,
      // so going back starts there (unless it is the packet just resent).
      const immediateLast = wqe.wr.opcode === 'RDMA_WRITE_WITH_IMM' && offset < wqe.packets - 1;
      return psnAdd(wqe.firstPsn, immediateLast ? wqe.packets - 1 : wqe.packets);
    }
    return undefined;
  }

  private sendSegment(wqe: Wqe, index: number, psn: number, windowFull: boolean): void {
    const qp = this.qp;
    const mtu = this.queue.mtuFor();
    const last = index === wqe.packets - 1;
    const first = index === 0;
    const opcode = wqe.wr.opcode;
    let code: number;
    if (wqe.onlyPackets) code = IbOpcode.RdmaWriteOnly;
    else if (wqe.kind === Kind.Write) {
      const immediate = opcode === 'RDMA_WRITE_WITH_IMM';
      if (wqe.packets === 1) code = immediate ? IbOpcode.RdmaWriteOnlyWithImmediate : IbOpcode.RdmaWriteOnly;
      else if (first) code = IbOpcode.RdmaWriteFirst;
      else if (last) code = immediate ? IbOpcode.RdmaWriteLastWithImmediate : IbOpcode.RdmaWriteLast;
      else code = IbOpcode.RdmaWriteMiddle;
    } else {
      const invalidate = opcode === 'SEND_WITH_INV' || opcode === 'SEND_WITH_SE_INV';
      if (wqe.packets === 1) code = invalidate ? IbOpcode.SendOnlyWithInvalidate : IbOpcode.SendOnly;
      else if (first) code = IbOpcode.SendFirst;
      else if (last) code = invalidate ? IbOpcode.SendLastWithInvalidate : IbOpcode.SendLast;
      else code = IbOpcode.SendMiddle;
    }
    const h = qp.headers(code, psn);
    if (last) {
      h.solicited = wqe.wr.solicited === true || opcode === 'SEND_WITH_SE' || opcode === 'SEND_WITH_SE_INV';
      h.immediate = wqe.wr.immediate === undefined ? 0 : Number(wqe.wr.immediate & 0xffffffffn); // no BigInt made per message without one
      h.invalidateRkey = wqe.wr.invalidateStag ?? 0;
    }
    const start = index * mtu;
    const length = Math.min(wqe.length, start + mtu) - start;
    if (wqe.onlyPackets) {
      h.virtualAddress = wqe.remoteAddress + BigInt(start);
      h.rkey = wqe.wr.remote!.stag;
      h.dmaLength = length;
    } else if (first && wqe.kind === Kind.Write) {
      h.virtualAddress = wqe.remoteAddress;
      h.rkey = wqe.wr.remote!.stag;
      h.dmaLength = wqe.length;
    }
    h.ackRequest = this.ackRequest(last || windowFull);
    const payload = payloadOf(wqe, start, length);
    qp.stats.payloadBytesSent += payload.length;
    qp.sendPacket(h, payload);
  }

  /**
   * Sends packets of `wqe` from `txPacket` on (at least one, which the caller admitted) as one
   * run, as sendSegment would one by one: ONLY packets of a Write sent so, or MIDDLE packets of a
   * Send or Write, as far as runAhead allows, the PSN `window` (`unacked` before the first), the
   * turn's `budget`, the link's run limit, and the next AckReq, which ends the run (every
   * PACKETS_PER_ACK_REQUEST-th packet, the one that fills the window, the message's last); a run
   * stays all new or all retransmitted, so the retransmission count and the round-trip timing see
   * each packet as sendSegment does. Returns how many packets it sent.
   */
  private sendRun(wqe: Wqe, unacked: number, window: number, budget: number): number {
    const queue = this.queue;
    const qp = this.qp;
    const mtu = queue.mtuFor();
    const index = queue.txPacket;
    let count = Math.min(runAhead(wqe, index, mtu), budget, qp.runLimit, PACKETS_PER_ACK_REQUEST - this.sinceAckRequest);
    // Packet j of the run has unacked + j unacknowledged before it: it fits while that stays below the window.
    count = Math.min(count, window - unacked);
    const resent = psnCompare(queue.sentEnd, queue.nextPsn);
    if (resent > 0) count = Math.min(count, resent);
    count = Math.max(1, count);
    const endsMessage = index + count === wqe.packets;
    // Only the last can ask for an ACK: the message's LAST, the counter's 64th, or the one that fills the window.
    const ackRequest = endsMessage || this.sinceAckRequest + count >= PACKETS_PER_ACK_REQUEST || unacked + count + 1 > window;
    this.sinceAckRequest = ackRequest ? 0 : this.sinceAckRequest + count;
    // The caller counted the first packet (a retransmission, or the one timed).
    if (resent > 0) qp.stats.retransmittedPackets += count - 1;
    const start = index * mtu;
    const length = count * mtu;
    const payload = payloadOf(wqe, start, length);
    qp.stats.payloadBytesSent += length;
    if (wqe.onlyPackets) {
      qp.sendWriteOnlyRun(
        queue.nextPsn,
        count,
        payload,
        mtu,
        wqe.remoteAddress,
        start,
        wqe.wr.remote!.stag,
        ackRequest,
        endsMessage && wqe.wr.solicited === true,
      );
      return count;
    }
    const write = wqe.kind === Kind.Write;
    const middle = write ? IbOpcode.RdmaWriteMiddle : IbOpcode.SendMiddle;
    if (!endsMessage) qp.sendRun(middle, queue.nextPsn, count, payload, mtu, ackRequest);
    else {
      const solicited = wqe.wr.solicited === true || wqe.wr.opcode === 'SEND_WITH_SE';
      qp.sendRun(middle, queue.nextPsn, count, payload, mtu, ackRequest, write ? IbOpcode.RdmaWriteLast : IbOpcode.SendLast, solicited);
    }
    return count;
  }

  sendReadRequest(wqe: Wqe, fromPacket: number, toPacket: number): void {
    // A retried Read asks only for what has not arrived, at that packet's PSN (roce.md §6.3).
    const mtu = this.queue.mtuFor();
    const skipped = fromPacket * mtu;
    const h = this.qp.headers(IbOpcode.RdmaReadRequest, psnAdd(wqe.firstPsn, fromPacket));
    h.virtualAddress = skipped === 0 ? wqe.remoteAddress : wqe.remoteAddress + BigInt(skipped);
    h.rkey = wqe.wr.remote!.stag;
    h.dmaLength = Math.min(wqe.length, toPacket * mtu) - skipped;
    h.ackRequest = this.ackRequest(true);
    this.qp.sendPacket(h, EMPTY);
  }

  private sendAtomic(wqe: Wqe): void {
    const fetchAdd = wqe.wr.opcode === 'ATOMIC_FETCH_ADD';
    const h = this.qp.headers(fetchAdd ? IbOpcode.FetchAdd : IbOpcode.CompareSwap, wqe.firstPsn);
    h.virtualAddress = wqe.remoteAddress;
    h.rkey = wqe.wr.remote!.stag;
    h.swapOrAdd = BigInt.asUintN(64, fetchAdd ? wqe.wr.atomic!.add! : wqe.wr.atomic!.swap!);
    h.compare = fetchAdd ? 0n : BigInt.asUintN(64, wqe.wr.atomic!.compare!);
    h.ackRequest = this.ackRequest(true);
    this.qp.sendPacket(h, EMPTY);
  }

  private ackRequest(endOfMessage: boolean): boolean {
    if (endOfMessage || ++this.sinceAckRequest >= PACKETS_PER_ACK_REQUEST) {
      this.sinceAckRequest = 0;
      return true;
    }
    return false;
  }
}
