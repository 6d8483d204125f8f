// The requester's handling of what the peer's responder sends back (requester.ts): ACKs (one may
// complete many messages), NAKs (sequence error: go back N; RNR: wait and retry; the rest fail
// the WQE and the QP), Read Responses (placed by PSN, in any order; a gap asked for again per
// chunk; the lean path's in-place MIDDLEs), Atomic Acknowledges; and what a response past an
// unanswered Read or atomic reveals was lost.

import { psnAdd, psnCompare, Syndrome, type IbHeaders } from '../wire/ib-headers.ts';
import { IbOpcode } from '../wire/ib-opcodes.ts';
import { WcStatus } from '../work.ts';
import type { RcQueuePair } from './queue-pair.ts';
import type { Retransmission } from './requester-retransmit.ts';
import type { Transmitter } from './requester-transmit.ts';
import { Kind, type SendQueue, type Wqe } from './send-queue.ts';
import { copyInto, moveAt, placementAddress } from './shared-copy.ts';
import { turn, type TurnParticipant } from '../turn.ts';

export class Responses {
  private readonly qp: RcQueuePair;
  /** Wired by Requester: the parts refer to one another. */
  transmitter!: Transmitter;
  retransmission!: Retransmission;
  /** The lean path placed Read Responses whose bookkeeping waits for the turn's end (settleLean). */
  private leanUnsettled = false;
  private readonly leanSettler: TurnParticipant = { endTurn: () => this.settleLean() };
  /** The Read acceptsReadResponse found for the lean path, and whether an unfinished Read came before it. */
  private leanRead: Wqe | undefined;
  private leanPassedRead = false;

  constructor(private readonly queue: SendQueue) {
    this.qp = queue.qp;
  }

  /** An ACK/NAK, Read Response or Atomic Acknowledge from the peer's responder. */
  response(h: IbHeaders, payload: Uint8Array): void {
    const queue = this.queue;
    // What the lean path placed in this turn is counted before anything else is judged.
    if (this.leanUnsettled) this.settleLean();
    const psn = h.psn;
    // Every ACK counts, the stale ones too (an ACK overtaken by a later one costs a receive all the same).
    if (h.opcode === IbOpcode.Acknowledge && (h.syndrome & Syndrome.TypeMask) === Syndrome.TypeAck) this.qp.stats.acksReceived++;
    // Only PSNs this side sent and that are not yet acknowledged can be answered.
    if (psnCompare(psn, queue.lastAcked) <= 0 || psnCompare(psn, queue.sentEnd) >= 0) return;
    if (h.opcode === IbOpcode.Acknowledge) {
      // ACKs and NAKs move the acknowledged PSN in ackThrough, before an RNR NAK turns the ACK
      // timer off for its own wait.
      this.acknowledge(h, psn);
    } else {
      if (h.opcode === IbOpcode.AtomicAcknowledge) this.atomicAcknowledge(h, psn);
      else this.readResponse(h, psn, payload);
      queue.releaseResources();
      // A response may complete older Writes implicitly even when it answers nothing itself (a
      // Read Response overtaking a lost Atomic Acknowledge): the acknowledged PSN follows, or the
      // ACK timer would go back to a PSN no queued WQE holds and retransmit nothing.
      this.retransmission.advanced();
    }
    queue.completeInOrder();
    this.transmitter.scheduleTransmit();
  }

  private acknowledge(h: IbHeaders, psn: number): void {
    const type = h.syndrome & Syndrome.TypeMask;
    if (type === Syndrome.TypeAck) {
      this.ackThrough(psn, true);
      return;
    }
    this.ackThrough(psnAdd(psn, -1), false);
    if (type === Syndrome.TypeRnrNak) {
      this.qp.stats.rnrNaksReceived++;
      this.retransmission.rnrNak(psn, h.syndrome);
      return;
    }
    if (h.syndrome === Syndrome.NakPsnSequenceError) {
      this.qp.stats.sequenceNaksReceived++;
      this.retransmission.sequenceError(psn);
      return;
    }
    const [status, text] =
      h.syndrome === Syndrome.NakInvalidRequest
        ? [WcStatus.RemoteInvalidRequestError, 'the peer answered NAK invalid request']
        : h.syndrome === Syndrome.NakRemoteAccessError
          ? [WcStatus.RemoteAccessError, 'the peer answered NAK remote access error']
          : h.syndrome === Syndrome.NakRemoteOperationalError
            ? [WcStatus.RemoteOperationError, 'the peer answered NAK remote operational error']
            : [WcStatus.BadResponseError, `the peer answered with reserved syndrome 0x${h.syndrome.toString(16)}`];
    this.queue.failAt(psn, status, text);
  }

  /**
   * Everything through `psn` is acknowledged: Sends and Writes ending there complete. A Read or
   * atomic inside the range without its response means the response was lost: go back for it
   * (only for a real ACK; a NAK names its own PSN).
   */
  private ackThrough(psn: number, retryLostResponses: boolean): void {
    const queue = this.queue;
    let progress = false;
    for (let index = queue.head; index < queue.wqes.length; index++) {
      const wqe = queue.wqes[index]!;
      if (!wqe.started) break;
      if (wqe.done) continue;
      if (wqe.kind === Kind.Read || wqe.kind === Kind.Atomic) {
        if (retryLostResponses && psnCompare(wqe.firstPsn, psn) <= 0) this.retransmission.rewind(psnAdd(wqe.firstPsn, wqe.received));
        break;
      }
      const acknowledged = psnCompare(psn, wqe.firstPsn) + 1;
      if (acknowledged < wqe.packets) {
        // An AckReq inside a long message: part of it is acknowledged.
        if (acknowledged > wqe.received) {
          wqe.received = acknowledged;
          progress = true;
        }
        break;
      }
      wqe.done = true;
      progress = true;
    }
    if (progress || psnCompare(psn, queue.lastAcked) > 0) this.retransmission.advanced();
  }

  /**
   * Whether takeReadResponse would place a Read Response (`opcode`: FIRST, MIDDLE, LAST or ONLY,
   * its AETH an ACK, the endpoint checked) with `psn` and `length` payload octets now (no effect
   * but caching the sink's address and the Read found, `leanRead`).
   */
  acceptsReadResponse(opcode: number, psn: number, length: number): boolean {
    const queue = this.queue;
    if (!queue.running) return false;
    const wqe = this.outstandingReadHolding(psn);
    if (wqe === undefined) return false;
    const index = psnCompare(psn, wqe.firstPsn);
    if (index < wqe.received || index >= wqe.requested || wqe.arrived?.[index] === 1) return false;
    const mtu = queue.mtuFor();
    // The Read's final packet carries the rest and ends its run (readResponse's checks); any other a full path MTU.
    if (index === wqe.packets - 1) {
      if (length !== wqe.length - index * mtu || (opcode !== IbOpcode.RdmaReadResponseLast && opcode !== IbOpcode.RdmaReadResponseOnly)) return false;
    } else if (length !== mtu) return false;
    // Where the sink lies, looked up once per WQE (small plain memory has none: the full path
    // copies); a plain sink detached since (its length 0) has none any more.
    if (wqe.localAddress === -2) wqe.localAddress = placementAddress(wqe.local);
    return wqe.localAddress >= 0 && wqe.local.length !== 0;
  }

  /**
   * The outstanding Read whose responses include `psn` when every unfinished WQE before it is a
   * Read too (readAnswered would pass those, asking again for their lost tails, and find it);
   * otherwise undefined, and the full path judges the packet (an unfinished Send, Write or atomic
   * before it, or none holds it). Kept in `leanRead` with whether it passed an unfinished Read.
   */
  private outstandingReadHolding(psn: number): Wqe | undefined {
    const queue = this.queue;
    const wqes = queue.wqes;
    this.leanPassedRead = false;
    for (let index = queue.head; index < wqes.length; index++) {
      const wqe = wqes[index]!;
      if (!wqe.started) return undefined;
      if (wqe.done) continue;
      if (wqe.kind !== Kind.Read) return undefined;
      const offset = psnCompare(psn, wqe.firstPsn);
      if (offset < 0) return undefined;
      if (offset < wqe.packets) {
        this.leanRead = wqe;
        return wqe;
      }
      this.leanPassedRead = true;
    }
    return undefined;
  }

  /**
   * The lean path's Read Response (RcQueuePair.takeLean): placed when it belongs to an
   * outstanding Read with only unfinished Reads before it, has not arrived yet and was asked for,
   * with the length (and for the Read's final packet the opcode) readResponse checks: then
   * `response` would find the same WQE, place it at the same offset and count it the same way
   * (`responseArrived`, which completes the Read with its final packet), in order or past a lost
   * one, and its only other effect, asking again for the lost tails of the Reads before it, is
   * done here as readAnswered does it. Past a lost one too: at 1 % loss most 1 MiB Reads lose a
   * packet, and while the lean path took only in-order packets of Reads that had lost none, the
   * full path took about 80 % of their responses. Reads after the oldest too: at 1 % loss a
   * Read that lost a packet stays the oldest until its retry is answered, and the full path took
   * half of all responses, those of the Reads behind it. FIRST and LAST too (their AETH an ACK,
   * as the endpoint checked): a 16 KiB Read is four responses, two of them those. The
   * bookkeeping after it is response's own.
   */
  takeReadResponse(opcode: number, psn: number, payloadAddress: number, length: number): boolean {
    const queue = this.queue;
    if (!this.acceptsReadResponse(opcode, psn, length)) return false;
    const wqe = this.leanRead!;
    this.leanRead = undefined;
    if (this.leanPassedRead) this.retryReadsBefore(wqe);
    const index = psnCompare(psn, wqe.firstPsn);
    moveAt(wqe.localAddress + index * queue.mtuFor(), payloadAddress, length);
    this.qp.stats.payloadBytesReceived += length;
    this.responseArrived(wqe, index);
    // What follows a response (the acknowledged PSN, the timers, the ORD slot, completions, the
    // next transmission) once per turn, not per packet: a recvmmsg batch carries up to a few
    // hundred responses. At once where the Read is complete (it completes, the next Read's
    // responses find the head WQE) or lost a packet (retryRead asked again).
    if (wqe.done || wqe.arrived !== undefined) this.settleLean();
    else if (!this.leanUnsettled) {
      this.leanUnsettled = true;
      turn.notifyLater(this.leanSettler);
    }
    return true;
  }

  /**
   * The early timer expired with nothing acknowledged (Retransmission.earlyExpire): when every
   * unfinished WQE sent so far is a Read, asks again for each one's packets that were asked for
   * and have not arrived (their tails included, and runs asked for again before: that request or
   * its answer may be lost too) and returns true; otherwise false (go back N).
   */
  askAgainForMissingReads(): boolean {
    const queue = this.queue;
    let reads = 0;
    for (let index = queue.head; index < queue.wqes.length; index++) {
      const wqe = queue.wqes[index]!;
      if (!wqe.started) break;
      if (wqe.done) continue;
      if (wqe.kind !== Kind.Read) return false;
      reads++;
    }
    if (reads === 0) return false;
    for (let index = queue.head; index < queue.wqes.length; index++) {
      const wqe = queue.wqes[index]!;
      if (!wqe.started) break;
      if (wqe.done) continue;
      wqe.retried?.fill(0, wqe.received, wqe.requested);
      this.retryRead(wqe, wqe.requested);
    }
    return true;
  }

  /** What readAnswered does to the unfinished Reads before `target`: a response past them means their own tails went missing. */
  private retryReadsBefore(target: Wqe): void {
    const queue = this.queue;
    for (let index = queue.head; index < queue.wqes.length; index++) {
      const wqe = queue.wqes[index]!;
      if (wqe === target) return;
      if (!wqe.done) this.retryRead(wqe, wqe.requested);
    }
  }

  /**
   * The bookkeeping takeReadResponse leaves to the turn's end, as response does after each
   * response: releaseResources, advanced, completeInOrder, scheduleTransmit. Also before the
   * full path judges a packet (response), so it sees the queue as if each had been settled.
   */
  settleLean(): void {
    this.leanUnsettled = false;
    const queue = this.queue;
    if (!queue.running) return;
    this.qp.stats.leanSettles++;
    queue.releaseResources();
    this.retransmission.advanced();
    queue.completeInOrder();
    this.transmitter.scheduleTransmit();
  }

  private readResponse(h: IbHeaders, psn: number, payload: Uint8Array): void {
    const queue = this.queue;
    // Completes the Sends and Writes before the oldest Read or atomic (implicitly acknowledged).
    if (this.oldestAwaitingResponse(psn) === undefined) return;
    const wqe = this.readAnswered(psn);
    if (wqe === undefined) return;
    const index = psnCompare(psn, wqe.firstPsn);
    if (index < wqe.received || wqe.arrived?.[index] === 1) return; // a duplicate of what already arrived
    const mtu = queue.mtuFor();
    const final = index === wqe.packets - 1;
    // Each chunk (and each retried part of one) is its own response run, FIRST..LAST or ONLY;
    // the PSN fixes where the data goes, so the checks are the length and the run's end.
    const expectedLength = Math.min(mtu, wqe.length - index * mtu);
    const endsRun = h.opcode === IbOpcode.RdmaReadResponseLast || h.opcode === IbOpcode.RdmaReadResponseOnly;
    if (payload.length !== expectedLength || (final && !endsRun)) {
      queue.failWqe(
        wqe,
        WcStatus.BadResponseError,
        `Read Response PSN 0x${psn.toString(16)}: opcode 0x${h.opcode.toString(16)} with ${payload.length} octets, expected ${expectedLength}${final ? ' ending the Read' : ''}`,
      );
      return;
    }
    if (h.opcode !== IbOpcode.RdmaReadResponseMiddle && (h.syndrome & Syndrome.TypeMask) !== Syndrome.TypeAck) {
      queue.failWqe(wqe, WcStatus.BadResponseError, `Read Response carries syndrome 0x${h.syndrome.toString(16)}`);
      return;
    }
    copyInto(wqe.local, index * mtu, payload);
    this.qp.stats.payloadBytesReceived += payload.length;
    this.responseArrived(wqe, index);
  }

  /** Response packet `index` of the Read `wqe` (not arrived before) was placed: count it. */
  private responseArrived(wqe: Wqe, index: number): void {
    if (index > wqe.received) {
      // Past a packet that went missing: keep this one, ask for the missing ones again.
      wqe.arrived ??= new Uint8Array(wqe.packets);
      wqe.arrived[index] = 1;
      this.retryRead(wqe, index);
      return;
    }
    const arrived = wqe.arrived;
    do wqe.received++;
    while (arrived !== undefined && wqe.received < wqe.packets && arrived[wqe.received] === 1);
    if (wqe.received === wqe.packets) this.finishResponse(wqe);
  }

  /**
   * The Read a response with `psn` answers. Responses are taken in any order (the PSN fixes
   * where the data goes; Reads still complete in order), so a lost packet costs what its chunk
   * sent after it, asked for again alone, not every response sent after it (go-back-N). A
   * response past an older Read reveals what that one lost at its end: asked for at once, not
   * after the ACK timeout. An Atomic Acknowledge overtaken that way goes back N: the atomic's
   * PSN is asked again (the responder answers it from its resources, never executes it twice).
   */
  private readAnswered(psn: number): Wqe | undefined {
    const queue = this.queue;
    for (let index = queue.head; index < queue.wqes.length; index++) {
      const wqe = queue.wqes[index]!;
      if (!wqe.started) return undefined;
      if (wqe.done) continue;
      const end = psnAdd(wqe.firstPsn, wqe.packets);
      const holds = psnCompare(psn, wqe.firstPsn) >= 0 && psnCompare(psn, end) < 0;
      if (wqe.kind === Kind.Read) {
        if (holds) return wqe;
        this.retryRead(wqe, wqe.requested); // the response is past this Read: its own tail went missing
      } else if (wqe.kind === Kind.Atomic) {
        if (holds) return undefined; // a Read Response at an atomic's PSN: not ours to take
        const expected = wqe.firstPsn;
        this.retransmission.rewindOnceTo(expected);
        return undefined;
      } else if (psnCompare(psnAdd(end, -1), psn) < 0) {
        // A Send or Write before the answered PSN: the responder executed it before answering.
        wqe.done = true;
      } else {
        return undefined;
      }
    }
    return undefined;
  }

  /**
   * Asks again for the packets of `wqe` before `upTo` that have not arrived and were asked for
   * already: each run of missing packets, from its first to the next packet that arrived or its
   * chunk's end (a chunk is one responder resource, and a retried Read may ask for any sub-range
   * of it, roce.md §6.3), once per run start. Only the run: asking for the rest of the chunk, as
   * before, had the responder send again what had arrived (at 1 % loss about 7 packets for each
   * lost one).
   */
  private retryRead(wqe: Wqe, upTo: number): void {
    const limit = Math.min(upTo, wqe.requested);
    const arrived = wqe.arrived;
    let start = wqe.received;
    while (start < limit) {
      if (arrived !== undefined && arrived[start] === 1) {
        start++;
        continue;
      }
      const chunkEnd = Math.min(wqe.requested, (Math.floor(start / wqe.chunkPackets) + 1) * wqe.chunkPackets);
      let end = start + 1;
      while (end < chunkEnd && (arrived === undefined || arrived[end] !== 1)) end++;
      wqe.retried ??= new Uint8Array(wqe.packets);
      if (wqe.retried[start] === 0) {
        wqe.retried[start] = 1;
        this.retransmission.readResponseLost();
        this.qp.stats.retransmittedPackets++;
        this.transmitter.sendReadRequest(wqe, start, end);
      }
      start = end;
    }
  }

  private atomicAcknowledge(h: IbHeaders, psn: number): void {
    const wqe = this.oldestAwaitingResponse(psn);
    if (wqe === undefined || wqe.kind !== Kind.Atomic || wqe.firstPsn !== psn) return;
    if ((h.syndrome & Syndrome.TypeMask) !== Syndrome.TypeAck) {
      this.queue.failWqe(wqe, WcStatus.BadResponseError, `Atomic Acknowledge carries syndrome 0x${h.syndrome.toString(16)}`);
      return;
    }
    wqe.atomicResult = h.originalData;
    if (wqe.local.length === 8) {
      // The original value lands in the requester's buffer in host order, as the target held it.
      new DataView(wqe.local.buffer, wqe.local.byteOffset, 8).setBigUint64(0, h.originalData, true);
    }
    wqe.received = 1;
    this.finishResponse(wqe);
  }

  /** Completes the Sends/Writes a response implicitly acknowledges and returns the WQE it answers. */
  private oldestAwaitingResponse(psn: number): Wqe | undefined {
    const queue = this.queue;
    for (let index = queue.head; index < queue.wqes.length; index++) {
      const wqe = queue.wqes[index]!;
      if (!wqe.started) return undefined;
      if (wqe.done) continue;
      if (wqe.kind === Kind.Read || wqe.kind === Kind.Atomic) return wqe;
      if (psnCompare(psnAdd(wqe.firstPsn, wqe.packets - 1), psn) >= 0) return undefined;
      wqe.done = true;
    }
    return undefined;
  }

  private finishResponse(wqe: Wqe): void {
    wqe.done = true;
  }
}
