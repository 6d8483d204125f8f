// What a queue pair is given at creation, whichever transport carries it (ibv_create_qp's
// attributes): its protection domain and completion queues, and the queue limits, checked once
// here so that iWARP's QueuePair and RoCE's RcQueuePair refuse the same bad values with the same
// errors.
import { EventEmitter } from 'node:events';
import type { CompletionQueue } from './cq.ts';
import type { ProtectionDomain } from './memory.ts';
import { limit, positive } from './qp-checks.ts';

export interface QueuePairOptions {
  pd: ProtectionDomain;
  sendCq: CompletionQueue;
  recvCq: CompletionQueue;
  /** Most send work requests outstanding (posted, not yet completed); default 1024. */
  maxSendWr?: number;
  /** Most receive work requests posted; default 1024. */
  maxRecvWr?: number;
  /** Most scatter/gather elements per work request; default 16. */
  maxSge?: number;
  /** Complete every send WR, not only those posted with `signaled: true` (default true). */
  signalAll?: boolean;
  /** Inbound RDMA Read / Atomic Requests this side accepts at once (IRD, default 16). */
  ird?: number;
  /** RDMA Reads / atomics this side issues at once (ORD, default 16). */
  ord?: number;
}

export class QueuePairAttributes<Events extends Record<keyof Events, unknown[]>> extends EventEmitter<Events> {
  readonly pd: ProtectionDomain;
  readonly sendCq: CompletionQueue;
  readonly recvCq: CompletionQueue;
  readonly maxSendWr: number;
  readonly maxRecvWr: number;
  readonly maxSge: number;
  readonly signalAll: boolean;
  /** Requested limits; the negotiated ones are the transport's once connected. */
  readonly requestedIrd: number;
  readonly requestedOrd: number;

  constructor(options: QueuePairOptions) {
    super();
    this.pd = options.pd;
    this.sendCq = options.sendCq;
    this.recvCq = options.recvCq;
    this.maxSendWr = positive('maxSendWr', options.maxSendWr ?? 1024);
    this.maxRecvWr = positive('maxRecvWr', options.maxRecvWr ?? 1024);
    this.maxSge = positive('maxSge', options.maxSge ?? 16);
    this.signalAll = options.signalAll ?? true;
    this.requestedIrd = limit('ird', options.ird ?? 16);
    this.requestedOrd = limit('ord', options.ord ?? 16);
  }
}
