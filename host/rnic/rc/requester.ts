// The requester half of an RC queue pair (roce.md §6.1, §6.4): turns send work requests into
// packets (one PSN each, path-MTU segments, a Read reserving one PSN per response packet),
// keeps at most `maxUnackedPackets` PSNs unacknowledged, completes work from ACKs (one ACK may
// cover many messages), Read Responses and Atomic Acknowledges, and recovers from loss by
// going back to the first unacknowledged PSN: on a NAK sequence error, on a gap in a Read
// Response, on an ACK past an unanswered Read, and when the local ACK timer expires.
//
// Split as Linux siw splits its QP code: the send queue and completion (send-queue.ts),
// transmission (requester-transmit.ts), retransmission and timers (requester-retransmit.ts),
// responses (requester-responses.ts). This file joins them and is what the QP calls.

import type { IbHeaders } from '../wire/ib-headers.ts';
import type { SendWorkRequest } from '../work.ts';
import type { RcPathParameters, RcQueuePair } from './queue-pair.ts';
import { Responses } from './requester-responses.ts';
import { Retransmission } from './requester-retransmit.ts';
import { Transmitter } from './requester-transmit.ts';
import { SendQueue } from './send-queue.ts';

export class Requester {
  private readonly queue: SendQueue;
  private readonly transmitter: Transmitter;
  private readonly retransmission: Retransmission;
  private readonly responses: Responses;

  constructor(qp: RcQueuePair) {
    this.queue = new SendQueue(qp);
    this.transmitter = new Transmitter(this.queue);
    this.retransmission = new Retransmission(this.queue);
    this.responses = new Responses(this.queue);
    this.transmitter.retransmission = this.retransmission;
    this.retransmission.transmitter = this.transmitter;
    this.retransmission.responses = this.responses;
    this.responses.transmitter = this.transmitter;
    this.responses.retransmission = this.retransmission;
  }

  get outstanding(): number {
    return this.queue.outstanding;
  }

  /** `receiveBufferBytes`: the link's (PacketLink.receiveBufferBytes), which bounds the windows. */
  start(path: RcPathParameters, receiveBufferBytes?: number): void {
    this.queue.configure(path, receiveBufferBytes);
    this.retransmission.configure(path);
    this.queue.running = true;
    this.transmitter.scheduleTransmit();
  }

  stop(): void {
    this.queue.running = false;
    this.retransmission.stop();
  }

  post(wr: SendWorkRequest): void {
    this.queue.post(wr);
    this.transmitter.scheduleTransmit();
  }

  /** Completes every WR still queued: failed ones with their status, the rest flushed. */
  flush(): void {
    this.queue.flush();
  }

  /** An ACK/NAK, Read Response or Atomic Acknowledge from the peer's responder. */
  response(h: IbHeaders, payload: Uint8Array): void {
    this.responses.response(h, payload);
  }

  /** Whether takeReadResponse would place a Read Response (`opcode`) with `psn` and `length` payload octets now (no effect but caching the sink's address). */
  acceptsReadResponse(opcode: number, psn: number, length: number): boolean {
    return this.responses.acceptsReadResponse(opcode, psn, length);
  }

  /** The lean path's Read Response (RcQueuePair.takeLean), its payload at raw address `payloadAddress`. */
  takeReadResponse(opcode: number, psn: number, payloadAddress: number, length: number): boolean {
    return this.responses.takeReadResponse(opcode, psn, payloadAddress, length);
  }

  /** Reports finished WQEs oldest first; a locally failed one fails the QP when its turn comes. */
  completeInOrder(): void {
    this.queue.completeInOrder();
  }
}
