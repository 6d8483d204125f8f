// The active side of RDMA CM over RoCEv2: kbtp connects an RC QP to a Linux rdma_cm listener
// (rping -s, perftest -R servers) with IB CM MADs on QP1 (wire/ib-cm.ts): REQ (with rdma_cm's
// header naming both IPv4 addresses and the port), REP → the QP goes to RTS and kbtp sends RTU;
// a REJ or silence ends the attempt with a clear error. disconnect() sends DREQ; the peer's DREQ
// is answered with DREP. The REQ is resent until a REP arrives, as the CM's retries would.

import { randomInt } from 'node:crypto';
import { RnicError } from '../errors.ts';
import {
  CmAttribute,
  CM_MANAGEMENT_CLASS,
  decodeCmIds,
  decodeCmRejReason,
  decodeCmRep,
  decodeMadHeader,
  encodeCmDreq,
  encodeCmIds,
  encodeCmReq,
  GSI_QKEY,
  MAD_LENGTH,
  RDMA_PS_TCP_SERVICE,
  REQ_PRIVATE_DATA,
} from '../wire/ib-cm.ts';
import { ipv4MappedGid, parseIpv4 } from '../wire/roce-frame.ts';
import type { RoceEndpoint } from './endpoint.ts';
import { sendGsiMad } from './gsi.ts';
import type { PeerAddress } from './link.ts';
import { PATH_MTUS, type PathMtu, type RcQueuePair } from './queue-pair.ts';
import { activateTowards } from './tool-side-channel.ts';

export interface CmConnectOptions {
  /** The listener's IPv4 address (its GID is the IPv4-mapped one) and rdma_cm port. */
  address: string;
  port: number;
  pathMtu?: PathMtu;
  /** REQ resends before giving up (default 8), one per `retryMs` (default 1000 ms: TCG guests are slow). */
  retries?: number;
  retryMs?: number;
  /**
   * Fresh REQs (one per `retryMs`) while the peer answers REJ "invalid service ID": what an
   * rdma_cm peer sends while nothing listens on the port yet, e.g. perftest -R between its two
   * connections (default 0: the REJ fails the connect at once).
   */
  retriesWhileNotListening?: number;
}

/** How long a connection's MAD receiver stays after the QP left RTS. */
const GSI_LINGER_MS = 30_000;

/** IB CM REJ reason: no listener for the REQ's service ID. */
const REJ_INVALID_SERVICE_ID = 8;

/** Connects `qp` through RDMA CM; resolves once it is at RTS and RTU has been sent. */
export function connectRdmaCm(endpoint: RoceEndpoint, qp: RcQueuePair, options: CmConnectOptions): Promise<void> {
  let localCommId = randomInt(1, 0x7fffffff);
  let transactionId = BigInt(randomInt(1, 0x7fffffff));
  // Linux's CM treats each message's starting PSN as the PSN its sender expects to receive
  // (docs/INTEROP.md): the REQ carries ours, the REP the one we send with.
  const receivePsn = randomInt(0x1000000);
  const ownPathMtu = options.pathMtu ?? 1024;
  const local = endpoint.local.address;
  const privateData = new Uint8Array(REQ_PRIVATE_DATA.length);
  privateData[1] = 4 << 4; // rdma_cm header version 0, IPv4
  const sourcePort = randomInt(32768, 61000);
  privateData[2] = sourcePort >> 8;
  privateData[3] = sourcePort & 0xff;
  privateData.set(parseIpv4(local), 4 + 12);
  privateData.set(parseIpv4(options.address), 20 + 12);
  const request = (): Uint8Array =>
    encodeCmReq(
      {
        localCommId,
        serviceId: RDMA_PS_TCP_SERVICE + BigInt(options.port),
        localCaGuid: BigInt.asUintN(64, (0x026b6274n << 32n) | BigInt(localCommId)),
        localQkey: 0,
        localQpn: qp.qpNumber,
        responderResources: qp.requestedIrd,
        initiatorDepth: qp.requestedOrd,
        remoteCmResponseTimeout: 20,
        transportServiceType: 0,
        endToEndFlowControl: false,
        startingPsn: receivePsn,
        localCmResponseTimeout: 20,
        retryCount: 7,
        partitionKey: 0xffff,
        pathMtu: PATH_MTUS.indexOf(ownPathMtu) + 1,
        rnrRetryCount: 7,
        maxCmRetries: 15,
        srq: false,
        primaryLocalLid: 0xffff,
        primaryRemoteLid: 0xffff,
        primaryLocalGid: ipv4MappedGid(parseIpv4(local)),
        primaryRemoteGid: ipv4MappedGid(parseIpv4(options.address)),
        primaryFlowLabel: 0,
        primaryPacketRate: 0,
        primaryTrafficClass: 0,
        primaryHopLimit: 64,
        primarySl: 0,
        primarySubnetLocal: false,
        primaryLocalAckTimeout: 14,
        privateData,
      },
      transactionId,
    );
  let req = request();
  let notListeningRetries = options.retriesWhileNotListening ?? 0;
  qp.beginConnecting();
  let psn = 0;
  const send = (mad: Uint8Array): void => sendGsiMad(endpoint, options.address, mad, psn++);
  return new Promise<void>((resolve, reject) => {
    let remoteCommId: number | undefined;
    let remoteQpn = 0;
    let tries = 0;
    const fail = (error: Error): void => {
      clearInterval(timer);
      removeGsi();
      qp.connectFailed({ reason: 'connection-lost', message: error.message });
      reject(error);
    };
    const timer = setInterval(() => {
      if (remoteCommId !== undefined) return;
      if (++tries > (options.retries ?? 8)) {
        fail(new RnicError('ETIMEDOUT', `no CM REP from ${options.address} port ${options.port} after ${tries} REQs`));
        return;
      }
      send(req);
    }, options.retryMs ?? 1000);
    const removeGsi = endpoint.addGsiReceiver((h, mad, from: PeerAddress) => {
      const header = decodeMadHeader(mad);
      if (from.address !== options.address || h.qkey !== GSI_QKEY || mad.length < MAD_LENGTH || header?.managementClass !== CM_MANAGEMENT_CLASS) return;
      const ids = decodeCmIds(mad);
      if (header.attributeId === CmAttribute.Rej && ids.remoteCommId === localCommId) {
        if (decodeCmRejReason(mad) === REJ_INVALID_SERVICE_ID && notListeningRetries-- > 0) {
          // A new REQ (new ids) goes out on the timer's next tick.
          localCommId = randomInt(1, 0x7fffffff);
          transactionId = BigInt(randomInt(1, 0x7fffffff));
          req = request();
          tries = 0;
          return;
        }
        fail(new RnicError('ECONNREFUSED', `${options.address} port ${options.port} rejected the connection (CM REJ reason ${decodeCmRejReason(mad)})`));
        return;
      }
      if (header.attributeId === CmAttribute.Rep && ids.remoteCommId === localCommId) {
        if (remoteCommId === undefined) {
          const rep = decodeCmRep(mad);
          remoteCommId = rep.localCommId;
          remoteQpn = rep.localQpn;
          clearInterval(timer);
          const pathMtu = Math.min(ownPathMtu, 4096) as PathMtu;
          activateTowards(
            endpoint,
            qp,
            { gid: ipv4MappedGid(parseIpv4(options.address)), qpNumber: rep.localQpn, psn: receivePsn },
            {
              sendPsn: rep.startingPsn,
              pathMtu,
              ird: Math.min(qp.requestedIrd, rep.initiatorDepth),
              ord: Math.min(qp.requestedOrd, rep.responderResources),
              timeout: 14,
              retryCount: 7,
              rnrRetry: rep.rnrRetryCount,
              minRnrTimer: 12,
            },
            'the CM peer has no IPv4-mapped GID',
          );
          qp.onLeaveRts = (info) => {
            if (info.reason !== 'peer-closed') send(encodeCmDreq({ localCommId, remoteCommId: rep.localCommId }, remoteQpn, transactionId + 1n));
            // Lingers to answer a repeated DREQ (or take the DREP), then stops listening.
            setTimeout(removeGsi, GSI_LINGER_MS).unref();
          };
          resolve();
        }
        // A REP again means our RTU was lost: repeat it.
        send(encodeCmIds(CmAttribute.Rtu, { localCommId, remoteCommId: remoteCommId }, transactionId));
        return;
      }
      if (header.attributeId === CmAttribute.Dreq && ids.remoteCommId === localCommId) {
        send(encodeCmIds(CmAttribute.Drep, { localCommId, remoteCommId: ids.localCommId }, header.transactionId));
        if (qp.state === 'rts') qp.enterError({ reason: 'peer-closed', message: 'the peer sent a CM DREQ' });
      }
    });
    send(req);
  });
}
