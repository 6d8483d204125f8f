// The IB CM MADs RDMA CM sends over RoCEv2 (host/rnic/wire/ib-cm.ts): a REQ as Linux 6.1 rxe sent
// it for `rping -c -a 10.0.4.2 -p 7174` (taken from an interop run's capture, ICRC included)
// decodes field by field, its rdma_cm header too; REP, DREQ and DREP encode to the offsets of
// Linux's ibta_vol1_c12.h and decode back; REJ carries its reason at offset 10.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  decodeCmaHeader,
  decodeCmIds,
  decodeCmRejReason,
  encodeCmRej,
  CmRejectReason,
  decodeCmRep,
  decodeCmReq,
  decodeMadHeader,
  encodeCmDreq,
  encodeCmIds,
  encodeCmRep,
  encodeCmReq,
  CmAttribute,
  GSI_QKEY,
  MAD_LENGTH,
} from '../../host/rnic/wire/ib-cm.ts';
import { IbHeaders } from '../../host/rnic/wire/ib-headers.ts';
import { decodeIbPacket } from '../../host/rnic/wire/ib-packet.ts';
import { UD_SEND_ONLY } from '../../host/rnic/wire/ib-opcodes.ts';
import { REQ_IP, REQ_PACKET, REQ_UDP } from '../support/rxe-cm-req.ts';

const bytes = (hex: string): Uint8Array => new Uint8Array(Buffer.from(hex, 'hex'));
const hex = (data: Uint8Array): string => Buffer.from(data).toString('hex');

test('a REQ from rxe: UD Send to QP1, GSI Q_Key, ICRC, every field', () => {
  const h = new IbHeaders();
  assert.is(decodeIbPacket(bytes(REQ_PACKET), h, bytes(REQ_IP), bytes(REQ_UDP)), undefined, 'decodes, ICRC verified');
  assert.is(h.opcode, UD_SEND_ONLY);
  assert.is(h.destQp, 1);
  assert.is(h.qkey, GSI_QKEY);
  assert.is(h.sourceQp, 1);
  const mad = bytes(REQ_PACKET).subarray(h.payloadOffset, h.payloadOffset + h.payloadLength);
  assert.is(mad.length, MAD_LENGTH);
  const header = decodeMadHeader(mad)!;
  assert.equal([header.baseVersion, header.managementClass, header.classVersion, header.method, header.attributeId], [1, 7, 2, 3, CmAttribute.Req]);
  assert.is(header.transactionId, 0x2643fab0bn);
  const req = decodeCmReq(mad);
  assert.is(req.localCommId, 0x0bab3f64);
  assert.is(req.serviceId, 0x01061c06n, 'RDMA_PS_TCP, port 7174');
  assert.is(req.localCaGuid, 0x505400fffe4b420fn, 'EUI-64 of the guest MAC');
  assert.is(req.localQpn, 0x11);
  assert.equal([req.responderResources, req.initiatorDepth], [1, 1]);
  assert.equal([req.remoteCmResponseTimeout, req.transportServiceType, req.endToEndFlowControl], [20, 0, false]);
  assert.is(req.startingPsn, 0xf17aaa);
  assert.equal([req.localCmResponseTimeout, req.retryCount], [20, 7]);
  assert.equal([req.primaryLocalLid, req.primaryRemoteLid], [0xffff, 0xffff], 'permissive LIDs on RoCE');
  assert.equal([req.primaryFlowLabel, req.primaryLocalAckTimeout], [0x6fe0e, 19]);
  assert.is(req.partitionKey, 0xffff);
  assert.equal([req.pathMtu, req.rnrRetryCount, req.maxCmRetries, req.srq], [3, 7, 15, false]);
  assert.is(hex(req.primaryLocalGid), '00000000000000000000ffff0a00040f');
  assert.is(hex(req.primaryRemoteGid), '00000000000000000000ffff0a000402');
  assert.is(req.primaryHopLimit, 64);
  const cma = decodeCmaHeader(req.privateData)!;
  assert.equal(cma, { version: 0, ipVersion: 4, sourcePort: 0xbcf8, sourceAddress: '10.0.4.15', destinationAddress: '10.0.4.2' });
});

test('REQ and REP round trips; DREQ and DREP at their offsets', () => {
  const reqIn = decodeCmReq(bytes(REQ_PACKET).subarray(20, 20 + 256));
  const again = decodeCmReq(encodeCmReq(reqIn, 0x2643fab0bn));
  assert.equal({ ...again, privateData: hex(again.privateData) }, { ...reqIn, privateData: hex(reqIn.privateData) });
  assert.is(hex(encodeCmReq(reqIn, 0x2643fab0bn)), REQ_PACKET.slice(40, 40 + 512), 'the encoder reproduces rxe REQ byte for byte');
  const rep = {
    localCommId: 0x12345678,
    remoteCommId: 0x0bab3f64,
    localQkey: 0,
    localQpn: 0x2,
    startingPsn: 0x63d5ac,
    responderResources: 1,
    initiatorDepth: 1,
    targetAckDelay: 0,
    failoverAccepted: 0,
    endToEndFlowControl: true,
    rnrRetryCount: 7,
    srq: false,
    localCaGuid: 0x026b627400000001n,
    privateData: new Uint8Array([1, 2, 3]),
  };
  const mad = encodeCmRep(rep, 7n);
  assert.is(decodeMadHeader(mad)!.attributeId, CmAttribute.Rep);
  assert.is(hex(mad.subarray(24 + 12, 24 + 16)), '00000200', 'local QPN in the high 24 bits');
  assert.is(mad[24 + 27], 0xe0, 'RNR retry count in the top 3 bits');
  const back = decodeCmRep(mad);
  assert.equal({ ...back, privateData: hex(back.privateData.subarray(0, 3)) }, { ...rep, privateData: '010203' });
  const dreq = encodeCmDreq({ localCommId: 1, remoteCommId: 2 }, 0x11, 9n);
  assert.is(decodeMadHeader(dreq)!.attributeId, CmAttribute.Dreq);
  assert.equal(decodeCmIds(dreq), { localCommId: 1, remoteCommId: 2 });
  assert.is(hex(dreq.subarray(24 + 8, 24 + 12)), '00001100');
  const rej = encodeCmRej({ localCommId: 5, remoteCommId: 6 }, CmRejectReason.ConsumerDefined, 9n);
  assert.is(decodeMadHeader(rej)!.attributeId, CmAttribute.Rej);
  assert.is(rej[24 + 8]! >> 6, 0, 'Message REJected: the REQ');
  assert.is(hex(rej.subarray(24 + 10, 24 + 12)), '001c', 'reason 28 at offset 10');
  assert.is(decodeCmRejReason(rej), 28);
  assert.equal(decodeCmIds(encodeCmIds(CmAttribute.Drep, { localCommId: 2, remoteCommId: 1 }, 9n)), { localCommId: 2, remoteCommId: 1 });
});

test.run();
