// The responder half of an RC queue pair (roce.md §6.3): executes the peer's requests in PSN
// order, places Sends into posted receives and Writes into registered memory, answers Reads
// and atomics from responder resources (a ring of `ird` entries, so a duplicate Read or atomic
// is answered again without running twice), acknowledges what asked for it (coalescing the
// ACKs of one event-loop turn into one), and sends the NAK that fits each failure:
// PSN sequence error once per gap (and again when a go-back-N shows the resend was lost), RNR NAK when no receive is posted, invalid request, remote
// access error and remote operational error (the last three also move the QP to error).
// With selective repeat (both ends kbtp: setup.ts), the MIDDLE and LAST packets of the Write in
// progress that arrive past a lost one are placed where their PSN says (its FIRST named the
// memory), and taken into the sequence when the lost one arrives; a hole left then is NAKed at
// once. The requester resends the NAKed packet alone (Transmitter.resendAlone) and everything
// after the Write as go-back-N would: past-gap packets of later messages are still dropped.

import { executeAtomic, isAtomicAligned } from '../atomic-executor.ts';
import { Access, AccessStatus, type MemoryRegion } from '../memory.ts';
import { accessStatusText, localAccessText } from '../qp-checks.ts';
import { turn, type TurnParticipant } from '../turn.ts';
import { AtomicOpcode, ALL_ONES_64 } from '../wire/atomics.ts';
import { psnAdd, psnCompare, Syndrome, type IbHeaders } from '../wire/ib-headers.ts';
import { IbOpcode, Kind, OPCODES, Position } from '../wire/ib-opcodes.ts';
import { WcStatus } from '../work.ts';
import { LOSSY_SPAN } from './requester-retransmit.ts';
import { copyInto, moveAt, placementAddress } from './shared-copy.ts';
import type { RcPathParameters, RcQueuePair, RcRecvWqe } from './queue-pair.ts';

const MAX_DMA_LENGTH = 0x80000000;
const EMPTY: Uint8Array = new Uint8Array(0);

/** A Read or atomic kept for a duplicate (a ring slot, rewritten in place: none made per request). */
interface Resource {
  kind: 'read' | 'atomic';
  psn: number;
  packets: number;
  /** The remote address's 32-bit halves (a duplicate compares them as one BigInt). */
  addressHigh: number;
  addressLow: number;
  rkey: number;
  length: number;
  original: bigint;
}

const InProgress = { None: 0, Send: 1, Write: 2 } as const;
type InProgress = (typeof InProgress)[keyof typeof InProgress];

/** Reads of up to this many packets go as ONLY responses where the peer takes them so (sendReadResponse). */
export const ONLY_READ_RESPONSES_UP_TO = 8;

export class Responder {
  private expectedPsn = 0;
  private msn = 0;
  private nakSent = false;
  /** Since the NAK: the highest PSN past the gap that arrived (request: a lower one is a go-back-N whose resend was lost). */
  private pastGapHighest = 0;
  private mtu = 1024;
  private minRnrTimer = 12;
  private inProgress: InProgress = InProgress.None;
  // The inbound Send being placed.
  private recv: RcRecvWqe | undefined;
  private scatter: Uint8Array[] = [];
  /** The address of its one scatter element (shared or off-heap plain memory), or -1: the lean path needs it. */
  private scatterAddress = -1;
  private placed = 0;
  // The inbound Write being placed.
  private writeTarget: Uint8Array = EMPTY;
  /** Its address in shared memory, or -1 (plain memory, or no native copy): the lean path needs it. */
  private writeAddress = -1;
  private writeLength = 0;
  /** Its first PSN and packet count (selective repeat places its packets by PSN). */
  private writeFirstPsn = 0;
  private writePackets = 0;
  /** Selective repeat: on for this connection; per packet of the Write in progress, 1 where it was placed past a lost one (none: undefined). */
  private selectiveRepeat = false;
  private placedPastGap: Uint8Array | undefined;
  /** Short Reads are answered with ONLY packets (RcPathParameters.onlyReadResponses). */
  private onlyReadResponses = false;
  private resources: Array<Resource | undefined> = [];
  private nextResource = 0;
  private pendingAck = -1;
  private ackImmediate: NodeJS.Immediate | undefined;
  /** The pending ACK goes at the end of the turn (the delivery), not the event loop's check phase (lossy). */
  private ackEnlisted = false;
  /** The expected PSN when this side last NAKed a gap (lossy); -1: never. */
  private nakAt = -1;

  constructor(private readonly qp: RcQueuePair) {}

  start(path: RcPathParameters): void {
    this.expectedPsn = path.receivePsn & 0xffffff;
    this.mtu = path.pathMtu;
    this.minRnrTimer = path.minRnrTimer ?? 12;
    this.selectiveRepeat = path.selectiveRepeat === true;
    this.onlyReadResponses = path.onlyReadResponses === true;
    this.placedPastGap = undefined;
    this.resources = new Array<Resource | undefined>(Math.max(1, path.ird)).fill(undefined);
  }

  stop(): void {
    if (this.ackImmediate !== undefined) clearImmediate(this.ackImmediate);
    this.ackImmediate = undefined;
    this.pendingAck = -1;
  }

  request(h: IbHeaders, payload: Uint8Array): void {
    const info = OPCODES[h.opcode];
    // Only RC requests reach a responder; UC/UD/CNP packets on an RC QP are dropped.
    if (info === undefined || h.opcode >= 0x20) return;
    const order = psnCompare(h.psn, this.expectedPsn);
    if (order > 0) {
      // Packets were lost: one NAK per gap, then silence until the expected PSN arrives, unless
      // a Send or Write shows the requester went back N (a PSN no higher than one already past
      // the gap): then its resend of the expected packet was lost too, and only a NAK now spares
      // it the wait for its retransmission timer (at 1 % loss about one gap in a hundred). Not a
      // Read request: its requester also asks again by itself for responses that did not come,
      // so a lower one is no such sign, and NAKing it rewound the requester once more (1 MiB
      // Reads at 1 % loss 10-15 % slower, with an ACK timeout).
      this.placePastGap(h, payload);
      if (!this.nakSent || (psnCompare(h.psn, this.pastGapHighest) <= 0 && (info.kind === Kind.Send || info.kind === Kind.Write))) this.nakGap();
      this.pastGapHighest = h.psn;
      return;
    }
    if (order < 0) {
      this.duplicate(h, info.kind);
      return;
    }
    this.nakSent = false;
    const position = info.position;
    const kind = info.kind;
    const continuing = position === Position.Middle || position === Position.Last;
    if (this.inProgress !== InProgress.None) {
      const same = (this.inProgress === InProgress.Send && kind === Kind.Send) || (this.inProgress === InProgress.Write && kind === Kind.Write);
      if (!same || !continuing) {
        this.fatal(Syndrome.NakInvalidRequest, h.psn, `${info.name} while a ${this.inProgress === InProgress.Send ? 'Send' : 'Write'} is in progress`);
        return;
      }
    } else if (continuing) {
      this.fatal(Syndrome.NakInvalidRequest, h.psn, `${info.name} without a FIRST packet`);
      return;
    }
    if (kind === Kind.Send || kind === Kind.Write) {
      const length = payload.length;
      const wrong =
        position === Position.First || position === Position.Middle
          ? length !== this.mtu
          : position === Position.Last
            ? length < 1 || length > this.mtu
            : length > this.mtu;
      if (wrong) {
        this.fatal(Syndrome.NakInvalidRequest, h.psn, `${info.name} carries ${length} octets at path MTU ${this.mtu}`);
        return;
      }
    }
    switch (kind) {
      case Kind.Send:
        this.send(h, payload, position);
        return;
      case Kind.Write:
        this.write(h, payload, position);
        return;
      case Kind.ReadRequest:
        this.readRequest(h);
        return;
      case Kind.Atomic:
        this.atomic(h);
        return;
      default:
        return; // responses are the requester's; nothing else reaches here
    }
  }

  private send(h: IbHeaders, payload: Uint8Array, position: Position): void {
    const qp = this.qp;
    if (position === Position.First || position === Position.Only) {
      if (qp.postedReceives === 0) {
        this.rnr(h.psn);
        return;
      }
      const recv = qp.takeReceive()!;
      const views: Uint8Array[] = [];
      for (const sge of recv.wr.sgList) {
        const status = qp.memory.checkLocal(sge.lkey, qp.pd, Access.LocalWrite, sge.offset, sge.length);
        if (status !== AccessStatus.Ok) {
          this.completeRecv(recv, 'RECV', 0, WcStatus.LocalProtectionError, localAccessText(status, sge));
          this.fatal(Syndrome.NakRemoteOperationalError, h.psn, `receive WR ${String(recv.wr.wrId)}: ${localAccessText(status, sge)}`);
          return;
        }
        views.push(qp.memory.resolvedRegion!.view(qp.memory.resolvedOffset, sge.length));
      }
      this.recv = recv;
      this.scatter = views;
      this.scatterAddress = views.length === 1 ? placementAddress(views[0]!) : -1;
      this.placed = 0;
      this.inProgress = InProgress.Send;
    }
    const recv = this.recv!;
    if (this.placed + payload.length > recv.capacity) {
      this.inProgress = InProgress.None;
      this.completeRecv(recv, 'RECV', this.placed, WcStatus.LocalLengthError, `Send longer than the ${recv.capacity}-octet receive`);
      this.fatal(Syndrome.NakInvalidRequest, h.psn, `Send longer than the posted ${recv.capacity}-octet receive`);
      return;
    }
    this.place(payload);
    this.qp.stats.payloadBytesReceived += payload.length;
    if (position === Position.Last || position === Position.Only) {
      this.inProgress = InProgress.None;
      let invalidated: number | undefined;
      if (h.opcode === IbOpcode.SendLastWithInvalidate || h.opcode === IbOpcode.SendOnlyWithInvalidate) {
        const status = qp.memory.invalidate(h.invalidateRkey, qp.pd);
        if (status !== AccessStatus.Ok) {
          this.completeRecv(
            recv,
            'RECV',
            this.placed,
            WcStatus.RemoteInvalidRequestError,
            `Send with Invalidate of rkey 0x${h.invalidateRkey.toString(16)}: ${accessStatusText(status)}`,
          );
          this.fatal(Syndrome.NakRemoteOperationalError, h.psn, `cannot invalidate rkey 0x${h.invalidateRkey.toString(16)}: ${accessStatusText(status)}`);
          return;
        }
        invalidated = h.invalidateRkey;
      }
      const immediate = h.opcode === IbOpcode.SendLastWithImmediate || h.opcode === IbOpcode.SendOnlyWithImmediate;
      this.completeSend(recv, h.solicited, immediate ? h.immediate : undefined, invalidated);
    }
    this.accepted(h);
  }

  /** The lean path's in-order packet of the Send or Write in progress, placed at `base` + what is placed so far. */
  private placeNext(base: number, payloadAddress: number, length: number): void {
    moveAt(base + this.placed, payloadAddress, length);
    this.placed += length;
    this.qp.stats.payloadBytesReceived += length;
    this.nakSent = false;
  }

  /** The Send in progress was placed whole (the full path or the lean one): its receive completes. */
  private completeSend(recv: RcRecvWqe, solicited: boolean, immediate: number | undefined, invalidated: number | undefined): void {
    const qp = this.qp;
    this.msn = (this.msn + 1) & 0xffffff;
    qp.stats.messagesReceived++;
    qp.pushCompletion(qp.recvCq, {
      wrId: recv.wr.wrId,
      status: WcStatus.Success,
      opcode: 'RECV',
      qpNumber: qp.qpNumber,
      byteLength: this.placed,
      solicited,
      ...(immediate === undefined ? {} : { immediate: BigInt(immediate) }),
      ...(invalidated === undefined ? {} : { invalidatedStag: invalidated }),
    });
    this.recv = undefined;
    this.scatter = [];
    this.scatterAddress = -1;
  }

  /**
   * Whether takeSend would place a Send MIDDLE (`last` false) or plain LAST (no Immediate Data or
   * Invalidate; the lean path passes no SE bit) with `psn` and `length` payload octets now (no
   * effect): the next PSN of the Send in progress into a receive of one element with an address,
   * a MIDDLE a full path MTU, a LAST that fits.
   */
  acceptsSend(last: boolean, psn: number, length: number): boolean {
    if (this.inProgress !== InProgress.Send || this.scatterAddress < 0 || psn !== this.expectedPsn) return false;
    // A plain receive buffer detached since the Send began has length 0 and no address any more.
    const room = this.scatter[0]!.length - this.placed;
    return last ? length >= 1 && length <= this.mtu && length <= room : length === this.mtu && length <= room;
  }

  /**
   * The lean path's Send MIDDLE or plain LAST (RcQueuePair.takeLean): placed as `send` would place
   * it, the LAST completing the receive as there. A 256 KiB inline STORE of a KBTP session over
   * RoCE is 64 packets, 62 of them MIDDLEs, each decoded and checked by the full path before.
   */
  takeSend(last: boolean, psn: number, ackRequest: boolean, payloadAddress: number, length: number): boolean {
    if (!this.acceptsSend(last, psn, length)) return false;
    this.placeNext(this.scatterAddress, payloadAddress, length);
    if (last) {
      this.inProgress = InProgress.None;
      this.completeSend(this.recv!, false, undefined, undefined);
    }
    this.acceptedPsn(psn, ackRequest);
    return true;
  }

  private write(h: IbHeaders, payload: Uint8Array, position: Position): void {
    const qp = this.qp;
    const first = position === Position.First || position === Position.Only;
    const last = position === Position.Last || position === Position.Only;
    const immediate = h.opcode === IbOpcode.RdmaWriteOnlyWithImmediate || h.opcode === IbOpcode.RdmaWriteLastWithImmediate;
    // A Write with Immediate consumes a receive: without one the peer retries this packet later.
    if (immediate && qp.postedReceives === 0) {
      this.rnr(h.psn);
      return;
    }
    if (first) {
      if (h.dmaLength > MAX_DMA_LENGTH) {
        this.fatal(Syndrome.NakInvalidRequest, h.psn, `RDMA Write DMA length ${h.dmaLength} exceeds 2^31`);
        return;
      }
      this.writeTarget = EMPTY;
      this.writeAddress = -1;
      // A zero-length Write names no memory and is not checked (IBA C9-88, as rxe).
      if (h.dmaLength > 0) {
        const target = this.remote(h, Access.RemoteWrite, h.dmaLength, 'RDMA Write');
        if (target === undefined) return;
        this.writeTarget = target;
        this.writeAddress = placementAddress(target);
      }
      this.startWrite(h.psn, h.dmaLength);
    }
    if (this.placed + payload.length > this.writeLength) {
      this.fatal(Syndrome.NakInvalidRequest, h.psn, `RDMA Write data exceeds its DMA length ${this.writeLength}`);
      return;
    }
    copyInto(this.writeTarget, this.placed, payload);
    this.placed += payload.length;
    this.qp.stats.payloadBytesReceived += payload.length;
    if (this.placedPastGap !== undefined && !last) {
      this.takePlacedPastGap(h.psn);
      return;
    }
    if (last) {
      this.inProgress = InProgress.None;
      this.placedPastGap = undefined;
      if (this.placed !== this.writeLength) {
        this.fatal(Syndrome.NakInvalidRequest, h.psn, `RDMA Write carried ${this.placed} of its ${this.writeLength} octets`);
        return;
      }
      this.msn = (this.msn + 1) & 0xffffff;
      this.qp.stats.messagesReceived++;
      if (immediate) {
        const recv = qp.takeReceive()!;
        qp.pushCompletion(qp.recvCq, {
          wrId: recv.wr.wrId,
          status: WcStatus.Success,
          opcode: 'RECV_RDMA_WITH_IMM',
          qpNumber: qp.qpNumber,
          byteLength: this.writeLength,
          immediate: BigInt(h.immediate),
          solicited: h.solicited,
        });
      }
    }
    this.accepted(h);
  }

  /**
   * Whether `request` would drop a request with `psn` unanswered: past the gap this side NAK'd and
   * higher than any past it so far (noted as the highest: the drop's one effect). A lower one goes
   * to `request`, which NAKs again.
   */
  dropsPastGap(psn: number): boolean {
    if (!this.nakSent || psnCompare(psn, this.expectedPsn) <= 0 || psnCompare(psn, this.pastGapHighest) <= 0) return false;
    // Selective repeat places the Write in progress's packets past the gap (request, placePastGap).
    if (this.selectiveRepeat && this.inProgress === InProgress.Write && psnCompare(psn, psnAdd(this.writeFirstPsn, this.writePackets)) < 0) return false;
    this.pastGapHighest = psn;
    return true;
  }

  /**
   * Whether takeWriteStart could place a Write FIRST (`only` false) or ONLY without Immediate
   * Data with `psn`, `length` payload octets and `dmaLength` from its RETH now, before its remote
   * range is checked (no effect): the next PSN, no message in progress, a FIRST a full path MTU
   * of a longer DMA length, an ONLY all of it.
   */
  acceptsWriteStart(only: boolean, psn: number, length: number, dmaLength: number): boolean {
    return (
      this.inProgress === InProgress.None &&
      psn === this.expectedPsn &&
      dmaLength <= MAX_DMA_LENGTH &&
      (only ? length >= 1 && length <= this.mtu && length === dmaLength : length === this.mtu && dmaLength > length)
    );
  }

  /**
   * The lean path's Write FIRST or ONLY (RcQueuePair.takeLean): as acceptsWriteStart, and its
   * remote range (RETH: the tagged offset's halves, `rkey`, `dmaLength`) allowed, it is placed
   * as `write` would place it, the ONLY completing the message. A range refused is not answered
   * here (false): the full path checks it again and NAKs. A 16 KiB Write's FIRST was the one
   * packet of four left to the full path once its LAST went lean.
   */
  takeWriteStart(
    only: boolean,
    psn: number,
    ackRequest: boolean,
    high: number,
    low: number,
    rkey: number,
    dmaLength: number,
    payloadAddress: number,
    length: number,
  ): boolean {
    if (!this.acceptsWriteStart(only, psn, length, dmaLength)) return false;
    const qp = this.qp;
    const memory = qp.memory;
    if (memory.checkRemoteAt(rkey, qp.pd, Access.RemoteWrite, high, low, dmaLength) !== AccessStatus.Ok) return false;
    const target = memory.resolvedRegion!.view(memory.resolvedOffset, dmaLength);
    const address = placementAddress(target);
    if (address < 0) return false;
    this.writeTarget = target;
    this.writeAddress = address;
    this.startWrite(psn, dmaLength);
    return this.takeWrite(only, psn, ackRequest, payloadAddress, length);
  }

  /** A Write of `dmaLength` octets starts at `psn` (its target is set): nothing of it placed yet. */
  private startWrite(psn: number, dmaLength: number): void {
    this.writeLength = dmaLength;
    this.writeFirstPsn = psn;
    this.writePackets = Math.max(1, Math.ceil(dmaLength / this.mtu));
    this.placedPastGap = undefined;
    this.placed = 0;
    this.inProgress = InProgress.Write;
  }

  /** A PSN sequence error NAK for the expected PSN: the requester goes back to it, or resends it alone (selective repeat). */
  private nakGap(): void {
    this.nakSent = true;
    this.nakAt = this.expectedPsn;
    this.qp.stats.sequenceNaksSent++;
    this.sendAck(Syndrome.NakPsnSequenceError, this.expectedPsn);
  }

  /**
   * Selective repeat: where in the Write in progress a MIDDLE (`last` false) or LAST of `length`
   * payload octets with `psn` goes, when it may be placed past a gap: its packet index, or -1 (off,
   * no Write in progress, outside it, or not the length `write` checks: a MIDDLE a full path MTU,
   * the LAST the rest of the DMA length).
   */
  private pastGapIndex(last: boolean, psn: number, length: number): number {
    if (!this.selectiveRepeat || this.inProgress !== InProgress.Write) return -1;
    const index = psnCompare(psn, this.writeFirstPsn);
    if (index <= 0 || index >= this.writePackets || last !== (index === this.writePackets - 1)) return -1;
    return length === (last ? this.writeLength - index * this.mtu : this.mtu) ? index : -1;
  }

  /** Packet `index` of the Write in progress (`length` payload octets) was placed past a gap: remembered and counted. */
  private notePlacedPastGap(index: number, length: number): void {
    this.placedPastGap ??= new Uint8Array(this.writePackets);
    this.placedPastGap[index] = 1;
    this.qp.stats.placedPastGap++;
    this.qp.stats.payloadBytesReceived += length;
  }

  /**
   * Selective repeat: a MIDDLE, or a LAST without Immediate Data, of the Write in progress that
   * arrived past a lost packet is placed where its PSN says and remembered (takePlacedPastGap
   * takes it into the sequence once the lost one arrives); anything else past the gap is left to
   * the go-back-N the requester does after the Write.
   */
  private placePastGap(h: IbHeaders, payload: Uint8Array): void {
    if (h.opcode !== IbOpcode.RdmaWriteMiddle && h.opcode !== IbOpcode.RdmaWriteLast) return;
    const index = this.pastGapIndex(h.opcode === IbOpcode.RdmaWriteLast, h.psn, payload.length);
    if (index < 0 || this.placedPastGap?.[index] === 1) return;
    copyInto(this.writeTarget, index * this.mtu, payload);
    this.notePlacedPastGap(index, payload.length);
  }

  /**
   * The packet `psn` of the Write in progress filled a gap (its payload placed and counted):
   * takes the packets placed past it into the sequence as if they arrived now, completes the
   * Write if its LAST was among them, acknowledges the last of them, and NAKs the next hole at
   * once when packets past it are placed too (the requester resends it alone).
   */
  private takePlacedPastGap(psn: number): void {
    const placedPastGap = this.placedPastGap!;
    let index = psnCompare(psn, this.writeFirstPsn) + 1;
    while (index < this.writePackets && placedPastGap[index] === 1) {
      this.placed += index === this.writePackets - 1 ? this.writeLength - index * this.mtu : this.mtu;
      index++;
    }
    const through = psnAdd(this.writeFirstPsn, index - 1);
    if (index === this.writePackets) {
      this.placedPastGap = undefined;
      this.inProgress = InProgress.None;
      this.msn = (this.msn + 1) & 0xffffff;
      this.qp.stats.messagesReceived++;
    }
    this.acceptedPsn(through, true);
    if (this.placedPastGap !== undefined && placedPastGap.indexOf(1, index) >= 0) this.nakGap();
  }

  /**
   * Whether takeWrite would place a Write MIDDLE (`last` false) or LAST without Immediate Data
   * (`last`) with `psn` and `length` payload octets now (no effect).
   */
  acceptsWrite(last: boolean, psn: number, length: number): boolean {
    // A plain target detached since the Write began (its length 0) has no address any more.
    if (this.inProgress !== InProgress.Write || this.writeAddress < 0 || this.writeTarget.length === 0) return false;
    if (psn !== this.expectedPsn) return this.acceptsPastGap(last, psn, length);
    // The packet that fills a gap takes what was placed past it: the full path's (write).
    return (
      this.placedPastGap === undefined &&
      (last ? length >= 1 && length <= this.mtu && this.placed + length === this.writeLength : length === this.mtu && this.placed + length < this.writeLength)
    );
  }

  /**
   * Selective repeat on the lean path: a MIDDLE or LAST of the Write in progress past the gap this
   * side NAKed, higher than any past it so far (a lower one may be a go-back-N whose resend was
   * lost: `request` judges it), not placed yet, with the length placePastGap checks.
   */
  private acceptsPastGap(last: boolean, psn: number, length: number): boolean {
    if (!this.nakSent || psnCompare(psn, this.pastGapHighest) <= 0) return false;
    const index = this.pastGapIndex(last, psn, length);
    return index >= 0 && this.placedPastGap?.[index] !== 1;
  }

  /**
   * The lean path's Write MIDDLE or LAST (RcQueuePair.takeLean): placed when it is the next PSN
   * of the Write in progress and carries what `write` would accept without a NAK (a MIDDLE a full
   * path MTU leaving room for the LAST, a LAST exactly the rest of the DMA length), exactly as
   * `request` and `write` would place it, the LAST completing the message as there (the rest
   * goes through them: they check and NAK). The LAST too: a 16 KiB Write is four packets, and its
   * LAST through the full path (decode, ICRC, checks) was a quarter of the responder's packets.
   */
  takeWrite(last: boolean, psn: number, ackRequest: boolean, payloadAddress: number, length: number): boolean {
    if (!this.acceptsWrite(last, psn, length)) return false;
    if (psn !== this.expectedPsn) {
      // Past the gap (acceptsPastGap): placed where its PSN says, as placePastGap does.
      const index = psnCompare(psn, this.writeFirstPsn);
      moveAt(this.writeAddress + index * this.mtu, payloadAddress, length);
      this.notePlacedPastGap(index, length);
      this.pastGapHighest = psn;
      return true;
    }
    this.placeNext(this.writeAddress, payloadAddress, length);
    if (last) {
      this.inProgress = InProgress.None;
      this.msn = (this.msn + 1) & 0xffffff;
      this.qp.stats.messagesReceived++;
    }
    this.acceptedPsn(psn, ackRequest);
    return true;
  }

  private readRequest(h: IbHeaders): void {
    const length = h.dmaLength;
    if (length > MAX_DMA_LENGTH) {
      this.fatal(Syndrome.NakInvalidRequest, h.psn, `RDMA Read DMA length ${length} exceeds 2^31`);
      return;
    }
    if (length > 0 && !this.remoteAllowed(h, Access.RemoteRead, length, 'RDMA Read')) return;
    this.answerRead(h.psn, h.virtualAddressHigh, h.virtualAddressLow, h.rkey, length);
  }

  /**
   * Whether takeReadRequest could answer an RDMA Read Request with `psn`, `length` payload octets
   * and `dmaLength` from its RETH now, before its remote range is checked (no effect): the next
   * PSN, no message in progress, no payload, a DMA length the full path would not refuse.
   */
  acceptsReadRequest(psn: number, length: number, dmaLength: number): boolean {
    return this.inProgress === InProgress.None && psn === this.expectedPsn && length === 0 && dmaLength <= MAX_DMA_LENGTH;
  }

  /**
   * The lean path's RDMA Read Request (RcQueuePair.takeLean): as acceptsReadRequest, and its
   * remote range (RETH: the address's halves, `rkey`, `dmaLength`) allowed, answered as
   * readRequest would answer it; a range refused is not answered here (false): the full path
   * checks it again and NAKs. A short Read's request was the one packet of its exchange the
   * responder decoded in full (two-thread 16 KiB Reads: one per 16 KiB).
   */
  takeReadRequest(psn: number, length: number, high: number, low: number, rkey: number, dmaLength: number): boolean {
    if (!this.acceptsReadRequest(psn, length, dmaLength)) return false;
    const qp = this.qp;
    if (dmaLength > 0 && qp.memory.checkRemoteAt(rkey, qp.pd, Access.RemoteRead, high, low, dmaLength) !== AccessStatus.Ok) return false;
    this.nakSent = false;
    this.answerRead(psn, high, low, rkey, dmaLength);
    return true;
  }

  /** A Read Request with `psn` whose range (`length` octets at the address's halves, `rkey`) was just resolved: kept as a resource, counted and answered. */
  private answerRead(psn: number, high: number, low: number, rkey: number, length: number): void {
    const packets = Math.max(1, Math.ceil(length / this.mtu));
    this.remember('read', psn, packets, high, low, rkey, length, 0n);
    this.msn = (this.msn + 1) & 0xffffff;
    this.qp.stats.messagesReceived++;
    this.expectedPsn = psnAdd(psn, packets);
    this.sendReadResponse(psn, length);
  }

  private atomic(h: IbHeaders): void {
    const qp = this.qp;
    if (h.virtualAddress % 8n !== 0n) {
      this.fatal(Syndrome.NakInvalidRequest, h.psn, `atomic target 0x${h.virtualAddress.toString(16)} is not 8-octet aligned`);
      return;
    }
    if (!this.remoteAllowed(h, Access.RemoteAtomic, 8, 'atomic')) return;
    const region = qp.memory.resolvedRegion!;
    const offset = qp.memory.resolvedOffset;
    if (!isAtomicAligned(region, offset)) {
      this.fatal(Syndrome.NakInvalidRequest, h.psn, 'atomic target is not 8-octet aligned in memory');
      return;
    }
    const fetchAdd = h.opcode === IbOpcode.FetchAdd;
    // IB atomics are unmasked (roce.md §6.1): an add over all 64 bits, a compare of all of them.
    const original = executeAtomic(region, offset, {
      atomicOpcode: fetchAdd ? AtomicOpcode.FetchAdd : AtomicOpcode.CompareSwap,
      addOrSwapData: h.swapOrAdd,
      addOrSwapMask: fetchAdd ? 0n : ALL_ONES_64,
      compareData: h.compare,
      compareMask: ALL_ONES_64,
    });
    region.onRemoteAtomic?.(offset, original);
    this.remember('atomic', h.psn, 1, h.virtualAddressHigh, h.virtualAddressLow, h.rkey, 8, original);
    this.msn = (this.msn + 1) & 0xffffff;
    this.qp.stats.messagesReceived++;
    this.expectedPsn = psnAdd(h.psn, 1);
    this.sendAtomicAcknowledge(h.psn, original);
  }

  /** An old PSN: acknowledge again, or answer a Read/atomic again from its resource. */
  private duplicate(h: IbHeaders, kind: Kind): void {
    this.qp.stats.duplicatesReceived++;
    if (kind === Kind.Send || kind === Kind.Write) {
      if (h.ackRequest) this.sendAck(Syndrome.AckUnlimitedCredits, psnAdd(this.expectedPsn, -1));
      return;
    }
    for (const resource of this.resources) {
      if (resource === undefined) continue;
      const offset = psnCompare(h.psn, resource.psn);
      if (offset < 0 || offset >= resource.packets) continue;
      if (kind === Kind.Atomic && resource.kind === 'atomic' && offset === 0) {
        this.sendAtomicAcknowledge(h.psn, resource.original);
        return;
      }
      if (kind === Kind.ReadRequest && resource.kind === 'read') {
        // A retried Read may ask for the tail of the original range only, same rkey.
        const start = h.virtualAddress - ((BigInt(resource.addressHigh) << 32n) | BigInt(resource.addressLow));
        if (h.rkey !== resource.rkey || start < 0n || start + BigInt(h.dmaLength) > BigInt(resource.length)) return;
        if (h.dmaLength > 0 && !this.remoteAllowed(h, Access.RemoteRead, h.dmaLength, 'RDMA Read (repeated)')) return;
        this.sendReadResponse(h.psn, h.dmaLength);
        return;
      }
    }
    // No resource holds it any more: drop (roce.md §6.3).
  }

  /**
   * Answers a Read of `length` octets from where the caller's `remoteAllowed` just resolved it
   * (the region and offset the memory table holds until its next check). A short one, to a peer
   * that takes them so, over a link that sends runs, as ONLY packets: GSO sends a run of equal
   * datagrams as one message, and a FIRST and LAST carry an AETH where the MIDDLE packets between
   * them carry none, so a 16 KiB Read's four responses were two kernel messages; as ONLY packets a
   * stream of short Reads shares one per 15 packets (session 20: two-thread 16 KiB Reads 11-12 -> 15-16 Gbit/s, 32 KiB ones
   * 15-16 -> 18.5-19; 64 KiB and longer ones no faster, 256 KiB two-thread ones slower).
   */
  private sendReadResponse(psn: number, length: number): void {
    const qp = this.qp;
    this.cancelPendingAck(); // the responses acknowledge everything before them
    const region: MemoryRegion | undefined = length > 0 ? qp.memory.resolvedRegion! : undefined;
    const start = qp.memory.resolvedOffset;
    const packets = Math.max(1, Math.ceil(length / this.mtu));
    const runLimit = region === undefined ? 0 : qp.runLimit;
    const allOnly = this.onlyReadResponses && packets > 1 && packets <= ONLY_READ_RESPONSES_UP_TO && runLimit > 1;
    const fullPackets = Math.floor(length / this.mtu);
    for (let index = 0; index < packets; index++) {
      if (allOnly && fullPackets - index >= 2) {
        // Full-MTU ONLY responses, two or more, go as one run.
        const count = Math.min(fullPackets - index, runLimit);
        const bytes = count * this.mtu;
        qp.stats.payloadBytesSent += bytes;
        qp.sendReadResponseOnlyRun(psnAdd(psn, index), count, region!.view(start + index * this.mtu, bytes), this.mtu, Syndrome.AckUnlimitedCredits, this.msn);
        index += count - 1;
        continue;
      }
      if (!allOnly && index > 0 && index < packets - 2 && runLimit > 1) {
        // MIDDLE responses (all but the first and the last: two or more) go as one run.
        const count = Math.min(packets - 1 - index, runLimit);
        const bytes = count * this.mtu;
        qp.stats.payloadBytesSent += bytes;
        qp.sendRun(IbOpcode.RdmaReadResponseMiddle, psnAdd(psn, index), count, region!.view(start + index * this.mtu, bytes), this.mtu, false);
        index += count - 1;
        continue;
      }
      const opcode =
        packets === 1 || allOnly
          ? IbOpcode.RdmaReadResponseOnly
          : index === 0
            ? IbOpcode.RdmaReadResponseFirst
            : index === packets - 1
              ? IbOpcode.RdmaReadResponseLast
              : IbOpcode.RdmaReadResponseMiddle;
      const h = qp.headers(opcode, psnAdd(psn, index));
      h.syndrome = Syndrome.AckUnlimitedCredits;
      h.msn = this.msn;
      // The region's cached views: the same ranges are read again and again (pool blocks).
      const payload = region === undefined ? EMPTY : region.view(start + index * this.mtu, Math.min(this.mtu, length - index * this.mtu));
      qp.stats.payloadBytesSent += payload.length;
      qp.sendPacket(h, payload);
    }
  }

  private sendAtomicAcknowledge(psn: number, original: bigint): void {
    this.cancelPendingAck();
    const h = this.qp.headers(IbOpcode.AtomicAcknowledge, psn);
    h.syndrome = Syndrome.AckUnlimitedCredits;
    h.msn = this.msn;
    h.originalData = original;
    this.qp.sendPacket(h, EMPTY);
  }

  /** The packet was executed: advance the PSN and acknowledge it if asked (coalesced per turn). */
  private accepted(h: IbHeaders): void {
    this.acceptedPsn(h.psn, h.ackRequest);
  }

  /** The packet `psn` was taken (the full path or the lean one): the next is expected, an AckReq answered at the turn's end. */
  private acceptedPsn(psn: number, ackRequest: boolean): void {
    this.expectedPsn = psnAdd(psn, 1);
    if (!ackRequest) return;
    this.pendingAck = psn;
    if (this.lossy()) {
      // On a path that loses packets the requester sends a turn in parts of 64 and reads the
      // sockets between them (requester-transmit.ts). An ACK at the end of this delivery is in
      // that read; one coalesced to the event loop's check phase is, with both QPs on one thread,
      // sent after the requester's whole turn: its window closes after two parts, and the ACK is
      // read only in the next poll, a wake-up more (session 17, RoCE at 1 % loss).
      if (!this.ackEnlisted) {
        this.ackEnlisted = true;
        turn.notifyLater(this.ackAtTurnEnd);
      }
      return;
    }
    this.ackImmediate ??= setImmediate(this.acknowledgeLater);
  }

  /** Whether this side NAKed a gap within the last LOSSY_SPAN PSNs it took (the requester's span for its own lossy state). */
  private lossy(): boolean {
    return this.nakAt >= 0 && psnCompare(this.expectedPsn, psnAdd(this.nakAt, LOSSY_SPAN)) < 0;
  }

  private readonly ackAtTurnEnd: TurnParticipant = {
    endTurn: (): void => {
      this.ackEnlisted = false;
      this.acknowledgeLater();
    },
  };

  private readonly acknowledgeLater = (): void => {
    this.ackImmediate = undefined;
    if (this.pendingAck < 0 || this.qp.state !== 'rts') return;
    const psn = this.pendingAck;
    this.pendingAck = -1;
    this.sendAck(Syndrome.AckUnlimitedCredits, psn);
  };

  private cancelPendingAck(): void {
    this.pendingAck = -1;
  }

  private sendAck(syndrome: number, psn: number): void {
    const qp = this.qp;
    if (this.pendingAck >= 0 && syndrome !== Syndrome.AckUnlimitedCredits) {
      // An ACK still waiting for the end of the turn goes first: NAKs never overtake it.
      const pending = this.pendingAck;
      this.pendingAck = -1;
      this.sendAck(Syndrome.AckUnlimitedCredits, pending);
    }
    const h = qp.headers(IbOpcode.Acknowledge, psn);
    h.syndrome = syndrome;
    h.msn = this.msn;
    qp.stats.acksSent++;
    qp.sendPacket(h, EMPTY);
  }

  private rnr(psn: number): void {
    this.qp.stats.rnrNaksSent++;
    this.sendAck(Syndrome.TypeRnrNak | (this.minRnrTimer & 0x1f), psn);
  }

  /**
   * Checks the remote range of a request (the memory table then holds its region and offset);
   * on failure sends NAK remote access error. The address's two halves: no BigInt per request.
   */
  private remoteAllowed(h: IbHeaders, right: number, length: number, what: string): boolean {
    const status = this.qp.memory.checkRemoteAt(h.rkey, this.qp.pd, right, h.virtualAddressHigh, h.virtualAddressLow, length);
    if (status === AccessStatus.Ok) return true;
    this.fatal(
      Syndrome.NakRemoteAccessError,
      h.psn,
      `${what} rkey 0x${h.rkey.toString(16)} VA 0x${h.virtualAddress.toString(16)} length ${length}: ${accessStatusText(status)}`,
    );
    return false;
  }

  /** The remote range of a request as a view, or undefined after the NAK (remoteAllowed). */
  private remote(h: IbHeaders, right: number, length: number, what: string): Uint8Array | undefined {
    if (!this.remoteAllowed(h, right, length, what)) return undefined;
    const memory = this.qp.memory;
    return memory.resolvedRegion!.view(memory.resolvedOffset, length);
  }

  private remember(kind: Resource['kind'], psn: number, packets: number, high: number, low: number, rkey: number, length: number, original: bigint): void {
    const slot = this.resources[this.nextResource];
    if (slot === undefined) {
      this.resources[this.nextResource] = { kind, psn, packets, addressHigh: high, addressLow: low, rkey, length, original };
    } else {
      slot.kind = kind;
      slot.psn = psn;
      slot.packets = packets;
      slot.addressHigh = high;
      slot.addressLow = low;
      slot.rkey = rkey;
      slot.length = length;
      slot.original = original;
    }
    this.nextResource = (this.nextResource + 1) % this.resources.length;
  }

  private place(payload: Uint8Array): void {
    let offset = this.placed;
    let source = 0;
    for (const view of this.scatter) {
      if (source === payload.length) break;
      if (offset >= view.length) {
        offset -= view.length;
        continue;
      }
      const count = Math.min(view.length - offset, payload.length - source);
      copyInto(view, offset, payload.subarray(source, source + count));
      source += count;
      offset = 0;
    }
    this.placed += payload.length;
  }

  private completeRecv(recv: RcRecvWqe, opcode: 'RECV', byteLength: number, status: WcStatus, error: string): void {
    this.qp.pushCompletion(this.qp.recvCq, { wrId: recv.wr.wrId, status, opcode, qpNumber: this.qp.qpNumber, byteLength, error });
    this.recv = undefined;
  }

  /** A request this side cannot execute: NAK it, and the QP enters the error state. */
  private fatal(syndrome: number, psn: number, text: string): void {
    this.sendAck(syndrome, psn);
    this.qp.enterError({
      reason: 'terminate-sent',
      message: `${text} (sent ${syndrome === Syndrome.NakRemoteAccessError ? 'NAK remote access error' : syndrome === Syndrome.NakInvalidRequest ? 'NAK invalid request' : 'NAK remote operational error'})`,
    });
  }
}
