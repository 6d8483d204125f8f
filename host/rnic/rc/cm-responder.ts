// The passive side of RDMA CM over RoCEv2: kbtp's QP1 (the GSI) receives the initiator's
// connection management MADs as UD Sends (wire/ib-cm.ts) and answers them, so Linux's rdma_cm
// clients (rping -c, perftest -R) can connect to a kbtp RC QP. REQ → the caller accepts with a QP,
// which goes to RTS with the REQ's path, and kbtp sends REP (a retransmitted REQ gets the same REP
// again); RTU needs no answer; DREQ → DREP and the QP leaves RTS; kbtp leaving first sends DREQ.
// What it remembers per REQ (the answer to repeat, the QP a DREQ ends) is bounded: anyone on the
// link can send REQs with fresh communication ids, so the oldest answers are forgotten first.

import { randomInt } from 'node:crypto';
import { RnicError } from '../errors.ts';
import {
  CmAttribute,
  CmRejectReason,
  type CmaHeader,
  type CmReq,
  decodeCmaHeader,
  decodeCmIds,
  decodeCmReq,
  decodeMadHeader,
  encodeCmDreq,
  encodeCmIds,
  encodeCmRej,
  encodeCmRep,
  GSI_QKEY,
  CM_MANAGEMENT_CLASS,
  MAD_LENGTH,
} from '../wire/ib-cm.ts';
import type { IbHeaders } from '../wire/ib-headers.ts';
import { UD_SEND_ONLY } from '../wire/ib-opcodes.ts';
import type { RoceEndpoint } from './endpoint.ts';
import { sendGsiMad } from './gsi.ts';
import type { PeerAddress } from './link.ts';
import { PATH_MTUS, type RcQueuePair } from './queue-pair.ts';
import { activateTowards } from './tool-side-channel.ts';

export interface CmConnectionRequest {
  readonly req: CmReq;
  /** rdma_cm's header from the REQ's private data (addresses and the initiator's port). */
  readonly cma: CmaHeader | undefined;
  /** The port the initiator connects to (the low 16 bits of the service ID). */
  readonly servicePort: number;
  readonly from: string;
  /** Brings `qp` to RTS towards the initiator and answers with REP. */
  accept(qp: RcQueuePair): void;
  /** Answers with REJ (default reason: consumer-defined, as rdma_reject() sends). */
  reject(reason?: number): void;
}

interface Connection {
  readonly peer: string;
  /** The answer to repeat if the REQ comes again: REP or REJ. */
  readonly remoteCommId: number;
  readonly localCommId: number;
  readonly answer: Uint8Array;
  qp: RcQueuePair | undefined;
  remoteQpn: number;
}

export interface CmResponderOptions {
  /**
   * REQs whose answer is remembered (to repeat it to a retransmitted REQ) at most, default 1024.
   * Past it the oldest answers of connections no longer at RTS are forgotten (a REQ repeated
   * after that is a new request); connections at RTS stay, so that their DREQ still ends them:
   * those are bounded by the QPs the caller accepted with.
   */
  maxRemembered?: number;
}

export const DEFAULT_CM_REMEMBERED = 1024;

export class CmResponder {
  /** Insertion order = age: the Map's first entries are the oldest. */
  private readonly connections = new Map<string, Connection>();
  private psn = 0;
  readonly stats = { madsIn: 0, madsOut: 0, ignored: 0, reqs: 0, duplicateReqs: 0, rtus: 0, dreqs: 0, forgotten: 0 };
  private readonly caGuid: bigint;
  private readonly maxRemembered: number;
  private readonly removeGsi: () => void;

  constructor(
    private readonly endpoint: RoceEndpoint,
    private readonly onRequest: (request: CmConnectionRequest) => void,
    options: CmResponderOptions = {},
  ) {
    const max = options.maxRemembered ?? DEFAULT_CM_REMEMBERED;
    if (!Number.isSafeInteger(max) || max < 1) throw new RnicError('EINVAL', `maxRemembered must be a positive integer (got ${String(max)})`);
    this.maxRemembered = max;
    this.caGuid = BigInt.asUintN(64, (0x026b6274n << 32n) | BigInt(randomInt(0x7fffffff)));
    this.removeGsi = endpoint.addGsiReceiver((h, payload, from) => this.receive(h, payload, from));
  }

  /** REQ answers remembered now (at most maxRemembered plus the connections at RTS). */
  get remembered(): number {
    return this.connections.size;
  }

  close(): void {
    this.removeGsi();
  }

  private receive(h: IbHeaders, mad: Uint8Array, from: PeerAddress): void {
    this.stats.madsIn++;
    const header = decodeMadHeader(mad);
    if (h.opcode !== UD_SEND_ONLY || h.qkey !== GSI_QKEY || mad.length < MAD_LENGTH || header?.managementClass !== CM_MANAGEMENT_CLASS) {
      this.stats.ignored++;
      return;
    }
    switch (header.attributeId) {
      case CmAttribute.Req:
        this.req(decodeCmReq(mad), header.transactionId, from.address);
        return;
      case CmAttribute.Rtu:
        this.stats.rtus++;
        return;
      case CmAttribute.Dreq: {
        this.stats.dreqs++;
        const ids = decodeCmIds(mad);
        let connection: Connection | undefined;
        for (const candidate of this.connections.values()) {
          if (candidate.localCommId === ids.remoteCommId && candidate.peer === from.address) {
            connection = candidate;
            break;
          }
        }
        this.send(from.address, encodeCmIds(CmAttribute.Drep, { localCommId: ids.remoteCommId, remoteCommId: ids.localCommId }, header.transactionId));
        const qp = connection?.qp;
        if (qp !== undefined && qp.state === 'rts') {
          connection!.qp = undefined;
          qp.enterError({ reason: 'peer-closed', message: 'the peer sent a CM DREQ' });
        }
        return;
      }
      default:
        this.stats.ignored++;
    }
  }

  private req(req: CmReq, transactionId: bigint, from: string): void {
    this.stats.reqs++;
    const key = `${from}/${req.localCommId}`;
    const known = this.connections.get(key);
    if (known !== undefined) {
      // The initiator's CM timed out before our REP arrived: send the same one again.
      this.stats.duplicateReqs++;
      this.send(from, known.answer);
      return;
    }
    const cma = decodeCmaHeader(req.privateData);
    const request: CmConnectionRequest = {
      req,
      cma,
      servicePort: Number(req.serviceId & 0xffffn),
      from,
      accept: (qp) => {
        const pathMtu = PATH_MTUS[req.pathMtu - 1];
        if (pathMtu === undefined) throw new RnicError('EPROTO', `CM REQ with path MTU code ${req.pathMtu}`);
        const ird = Math.min(qp.requestedIrd, req.initiatorDepth);
        const ord = Math.min(qp.requestedOrd, req.responderResources);
        // Linux's CM (rxe here) sends its first packet with the REP's starting PSN and expects
        // the REQ's from us (seen in the captures, docs/INTEROP.md): each message's starting PSN
        // is the PSN its sender expects to receive.
        const receivePsn = randomInt(0x1000000);
        qp.beginConnecting();
        activateTowards(
          this.endpoint,
          qp,
          { gid: req.primaryLocalGid, qpNumber: req.localQpn, psn: receivePsn },
          { sendPsn: req.startingPsn, pathMtu, ird, ord, timeout: 14, retryCount: req.retryCount, rnrRetry: req.rnrRetryCount, minRnrTimer: 12 },
          'the REQ names no IPv4-mapped GID',
        );
        const localCommId = randomInt(1, 0x7fffffff);
        const rep = encodeCmRep(
          {
            localCommId,
            remoteCommId: req.localCommId,
            localQkey: 0,
            localQpn: qp.qpNumber,
            startingPsn: receivePsn,
            responderResources: ird,
            initiatorDepth: ord,
            targetAckDelay: 0,
            failoverAccepted: 0,
            endToEndFlowControl: req.endToEndFlowControl,
            rnrRetryCount: 7,
            srq: false,
            localCaGuid: this.caGuid,
            privateData: new Uint8Array(0),
          },
          transactionId,
        );
        const connection: Connection = { peer: from, remoteCommId: req.localCommId, localCommId, answer: rep, qp, remoteQpn: req.localQpn };
        this.remember(key, connection);
        qp.onLeaveRts = (info) => {
          if (info.reason === 'peer-closed' || connection.qp === undefined) return;
          connection.qp = undefined;
          // kbtp leaves first: tell the initiator's CM (no retry: the QP is gone either way).
          this.send(from, encodeCmDreq({ localCommId, remoteCommId: req.localCommId }, req.localQpn, BigInt(randomInt(0x7fffffff))));
        };
        this.send(from, rep);
      },
      reject: (reason = CmRejectReason.ConsumerDefined) => {
        const localCommId = randomInt(1, 0x7fffffff);
        const rej = encodeCmRej({ localCommId, remoteCommId: req.localCommId }, reason, transactionId);
        this.remember(key, { peer: from, remoteCommId: req.localCommId, localCommId, answer: rej, qp: undefined, remoteQpn: req.localQpn });
        this.send(from, rej);
      },
    };
    this.onRequest(request);
  }

  private remember(key: string, connection: Connection): void {
    this.connections.set(key, connection);
    if (this.connections.size <= this.maxRemembered) return;
    for (const [oldKey, old] of this.connections) {
      if (this.connections.size <= this.maxRemembered) return;
      if (old.qp !== undefined && old.qp.state === 'rts') continue;
      this.connections.delete(oldKey);
      this.stats.forgotten++;
    }
  }

  private send(address: string, mad: Uint8Array): void {
    this.stats.madsOut++;
    sendGsiMad(this.endpoint, address, mad, this.psn);
    this.psn = (this.psn + 1) & 0xffffff;
  }
}
