// InfiniBand Communication Management MADs (IBA vol. 1 ch. 12; field offsets as Linux's
// include/rdma/ibta_vol1_c12.h gives them), the connection messages RDMA CM exchanges over RoCE:
// a 256-octet MAD sent as a UD Send to QP1, made of the 24-octet common MAD header (base version 1,
// management class 0x07, class version 2, method Send 0x03, transaction ID, attribute ID) and the
// message. REQ, REP, RTU, REJ, DREQ and DREP are decoded and encoded here; RDMA CM's own 36-octet
// header at the start of the REQ's private data (version, IP version, port, addresses) too.

export const MAD_LENGTH = 256;
export const MAD_HEADER_LENGTH = 24;
export const CM_MANAGEMENT_CLASS = 0x07;
export const CM_CLASS_VERSION = 2;
export const MAD_METHOD_SEND = 0x03;
/** The GSI's well-known Q_Key. */
export const GSI_QKEY = 0x80010000;

export const CmAttribute = {
  Req: 0x0010,
  Mra: 0x0011,
  Rej: 0x0012,
  Rep: 0x0013,
  Rtu: 0x0014,
  Dreq: 0x0015,
  Drep: 0x0016,
} as const;

/** REJ reasons (IBA table 109) kbtp sends. */
export const CmRejectReason = {
  InvalidServiceId: 8,
  ConsumerDefined: 28,
} as const;

export const REQ_PRIVATE_DATA = { offset: 140, length: 92 } as const;
export const REP_PRIVATE_DATA = { offset: 36, length: 196 } as const;
/** rdma_cm's service IDs: (port space << 16) + port; RDMA_PS_TCP = 0x0106. */
export const RDMA_PS_TCP_SERVICE = 0x0000_0000_0106_0000n;

export interface MadHeader {
  baseVersion: number;
  managementClass: number;
  classVersion: number;
  method: number;
  status: number;
  transactionId: bigint;
  attributeId: number;
  attributeModifier: number;
}

export interface CmReq {
  localCommId: number;
  serviceId: bigint;
  localCaGuid: bigint;
  localQkey: number;
  localQpn: number;
  responderResources: number;
  initiatorDepth: number;
  remoteCmResponseTimeout: number;
  transportServiceType: number;
  endToEndFlowControl: boolean;
  startingPsn: number;
  localCmResponseTimeout: number;
  retryCount: number;
  partitionKey: number;
  /** IB MTU code (1 = 256 .. 5 = 4096). */
  pathMtu: number;
  rnrRetryCount: number;
  maxCmRetries: number;
  srq: boolean;
  /** 0xFFFF (permissive) on RoCE. */
  primaryLocalLid: number;
  primaryRemoteLid: number;
  primaryLocalGid: Uint8Array;
  primaryRemoteGid: Uint8Array;
  primaryFlowLabel: number;
  primaryPacketRate: number;
  primaryTrafficClass: number;
  primaryHopLimit: number;
  primarySl: number;
  primarySubnetLocal: boolean;
  primaryLocalAckTimeout: number;
  privateData: Uint8Array;
}

export interface CmRep {
  localCommId: number;
  remoteCommId: number;
  localQkey: number;
  localQpn: number;
  startingPsn: number;
  responderResources: number;
  initiatorDepth: number;
  targetAckDelay: number;
  failoverAccepted: number;
  endToEndFlowControl: boolean;
  rnrRetryCount: number;
  srq: boolean;
  localCaGuid: bigint;
  privateData: Uint8Array;
}

/** RTU, DREP (and DREQ with its remote QPN) share the two comm IDs and private data. */
export interface CmIds {
  localCommId: number;
  remoteCommId: number;
}

export function decodeMadHeader(mad: Uint8Array): MadHeader | undefined {
  if (mad.length < MAD_HEADER_LENGTH) return undefined;
  const view = new DataView(mad.buffer, mad.byteOffset, mad.length);
  return {
    baseVersion: mad[0]!,
    managementClass: mad[1]!,
    classVersion: mad[2]!,
    method: mad[3]!,
    status: view.getUint16(4),
    transactionId: view.getBigUint64(8),
    attributeId: view.getUint16(16),
    attributeModifier: view.getUint32(20),
  };
}

/** A CM MAD with the common header filled in; the message body starts at MAD_HEADER_LENGTH. */
export function newCmMad(attributeId: number, transactionId: bigint): { mad: Uint8Array; body: DataView } {
  const mad = new Uint8Array(MAD_LENGTH);
  const view = new DataView(mad.buffer);
  mad[0] = 1;
  mad[1] = CM_MANAGEMENT_CLASS;
  mad[2] = CM_CLASS_VERSION;
  mad[3] = MAD_METHOD_SEND;
  view.setBigUint64(8, transactionId);
  view.setUint16(16, attributeId);
  return { mad, body: new DataView(mad.buffer, MAD_HEADER_LENGTH) };
}

function body(mad: Uint8Array): DataView {
  return new DataView(mad.buffer, mad.byteOffset + MAD_HEADER_LENGTH, MAD_LENGTH - MAD_HEADER_LENGTH);
}

const u24 = (view: DataView, offset: number): number => view.getUint32(offset) >>> 8;

export function decodeCmReq(mad: Uint8Array): CmReq {
  const v = body(mad);
  const b = (offset: number): number => v.getUint8(offset);
  return {
    localCommId: v.getUint32(0),
    serviceId: v.getBigUint64(8),
    localCaGuid: v.getBigUint64(16),
    localQkey: v.getUint32(28),
    localQpn: u24(v, 32),
    responderResources: b(35),
    initiatorDepth: b(39),
    remoteCmResponseTimeout: b(43) >> 3,
    transportServiceType: (b(43) >> 1) & 3,
    endToEndFlowControl: (b(43) & 1) === 1,
    startingPsn: u24(v, 44),
    localCmResponseTimeout: b(47) >> 3,
    retryCount: b(47) & 7,
    partitionKey: v.getUint16(48),
    pathMtu: b(50) >> 4,
    rnrRetryCount: b(50) & 7,
    maxCmRetries: b(51) >> 4,
    srq: ((b(51) >> 3) & 1) === 1,
    primaryLocalLid: v.getUint16(52),
    primaryRemoteLid: v.getUint16(54),
    primaryLocalGid: new Uint8Array(v.buffer.slice(v.byteOffset + 56, v.byteOffset + 72)),
    primaryRemoteGid: new Uint8Array(v.buffer.slice(v.byteOffset + 72, v.byteOffset + 88)),
    primaryFlowLabel: v.getUint32(88) >>> 12,
    primaryPacketRate: b(91) & 0x3f,
    primaryTrafficClass: b(92),
    primaryHopLimit: b(93),
    primarySl: b(94) >> 4,
    primarySubnetLocal: ((b(94) >> 3) & 1) === 1,
    primaryLocalAckTimeout: b(95) >> 3,
    privateData: new Uint8Array(v.buffer.slice(v.byteOffset + REQ_PRIVATE_DATA.offset, v.byteOffset + REQ_PRIVATE_DATA.offset + REQ_PRIVATE_DATA.length)),
  };
}

export function encodeCmReq(req: CmReq, transactionId: bigint): Uint8Array {
  const { mad, body: v } = newCmMad(CmAttribute.Req, transactionId);
  v.setUint32(0, req.localCommId);
  v.setBigUint64(8, req.serviceId);
  v.setBigUint64(16, req.localCaGuid);
  v.setUint32(28, req.localQkey);
  v.setUint32(32, ((req.localQpn & 0xffffff) << 8) | (req.responderResources & 0xff));
  v.setUint32(36, req.initiatorDepth & 0xff);
  v.setUint8(43, ((req.remoteCmResponseTimeout & 0x1f) << 3) | ((req.transportServiceType & 3) << 1) | (req.endToEndFlowControl ? 1 : 0));
  v.setUint32(44, ((req.startingPsn & 0xffffff) << 8) | ((req.localCmResponseTimeout & 0x1f) << 3) | (req.retryCount & 7));
  v.setUint16(48, req.partitionKey);
  v.setUint8(50, ((req.pathMtu & 0xf) << 4) | (req.rnrRetryCount & 7));
  v.setUint8(51, ((req.maxCmRetries & 0xf) << 4) | (req.srq ? 0x08 : 0));
  v.setUint16(52, req.primaryLocalLid);
  v.setUint16(54, req.primaryRemoteLid);
  mad.set(req.primaryLocalGid, MAD_HEADER_LENGTH + 56);
  mad.set(req.primaryRemoteGid, MAD_HEADER_LENGTH + 72);
  v.setUint32(88, ((req.primaryFlowLabel & 0xfffff) << 12) | (req.primaryPacketRate & 0x3f));
  v.setUint8(92, req.primaryTrafficClass);
  v.setUint8(93, req.primaryHopLimit);
  v.setUint8(94, ((req.primarySl & 0xf) << 4) | (req.primarySubnetLocal ? 0x08 : 0));
  v.setUint8(95, (req.primaryLocalAckTimeout & 0x1f) << 3);
  mad.set(req.privateData.subarray(0, REQ_PRIVATE_DATA.length), MAD_HEADER_LENGTH + REQ_PRIVATE_DATA.offset);
  return mad;
}

export function decodeCmRep(mad: Uint8Array): CmRep {
  const v = body(mad);
  const b = (offset: number): number => v.getUint8(offset);
  return {
    localCommId: v.getUint32(0),
    remoteCommId: v.getUint32(4),
    localQkey: v.getUint32(8),
    localQpn: u24(v, 12),
    startingPsn: u24(v, 20),
    responderResources: b(24),
    initiatorDepth: b(25),
    targetAckDelay: b(26) >> 3,
    failoverAccepted: (b(26) >> 1) & 3,
    endToEndFlowControl: (b(26) & 1) === 1,
    rnrRetryCount: b(27) >> 5,
    srq: ((b(27) >> 4) & 1) === 1,
    localCaGuid: v.getBigUint64(28),
    privateData: new Uint8Array(v.buffer.slice(v.byteOffset + REP_PRIVATE_DATA.offset, v.byteOffset + REP_PRIVATE_DATA.offset + REP_PRIVATE_DATA.length)),
  };
}

export function encodeCmRep(rep: CmRep, transactionId: bigint): Uint8Array {
  const { mad, body: v } = newCmMad(CmAttribute.Rep, transactionId);
  v.setUint32(0, rep.localCommId);
  v.setUint32(4, rep.remoteCommId);
  v.setUint32(8, rep.localQkey);
  v.setUint32(12, (rep.localQpn & 0xffffff) << 8);
  v.setUint32(20, (rep.startingPsn & 0xffffff) << 8);
  v.setUint8(24, rep.responderResources);
  v.setUint8(25, rep.initiatorDepth);
  v.setUint8(26, ((rep.targetAckDelay & 0x1f) << 3) | ((rep.failoverAccepted & 3) << 1) | (rep.endToEndFlowControl ? 1 : 0));
  v.setUint8(27, ((rep.rnrRetryCount & 7) << 5) | (rep.srq ? 0x10 : 0));
  v.setBigUint64(28, rep.localCaGuid);
  mad.set(rep.privateData.subarray(0, REP_PRIVATE_DATA.length), MAD_HEADER_LENGTH + REP_PRIVATE_DATA.offset);
  return mad;
}

export function decodeCmIds(mad: Uint8Array): CmIds {
  const v = body(mad);
  return { localCommId: v.getUint32(0), remoteCommId: v.getUint32(4) };
}

/** DREP (or RTU) from this side's and the peer's comm IDs. */
export function encodeCmIds(attributeId: number, ids: CmIds, transactionId: bigint): Uint8Array {
  const { mad, body: v } = newCmMad(attributeId, transactionId);
  v.setUint32(0, ids.localCommId);
  v.setUint32(4, ids.remoteCommId);
  return mad;
}

/** REJ of a REQ (Message REJected 0) with `reason`; the reason is also readable by decodeCmRejReason. */
export function encodeCmRej(ids: CmIds, reason: number, transactionId: bigint): Uint8Array {
  const mad = encodeCmIds(CmAttribute.Rej, ids, transactionId);
  new DataView(mad.buffer).setUint16(MAD_HEADER_LENGTH + 10, reason);
  return mad;
}

export function decodeCmRejReason(mad: Uint8Array): number {
  return body(mad).getUint16(10);
}

/** DREQ: the comm IDs and the QPN of the QP the receiver should disconnect. */
export function encodeCmDreq(ids: CmIds, remoteQpn: number, transactionId: bigint): Uint8Array {
  const mad = encodeCmIds(CmAttribute.Dreq, ids, transactionId);
  new DataView(mad.buffer).setUint32(MAD_HEADER_LENGTH + 8, (remoteQpn & 0xffffff) << 8);
  return mad;
}

/** rdma_cm's header at the start of a REQ's private data (cma_hdr). */
export interface CmaHeader {
  version: number;
  ipVersion: number;
  sourcePort: number;
  sourceAddress: string;
  destinationAddress: string;
}

export function decodeCmaHeader(privateData: Uint8Array): CmaHeader | undefined {
  if (privateData.length < 36) return undefined;
  const ipVersion = privateData[1]! >> 4;
  const address = (at: number): string =>
    ipVersion === 4 ? Array.from(privateData.subarray(at + 12, at + 16)).join('.') : Buffer.from(privateData.subarray(at, at + 16)).toString('hex');
  return {
    version: privateData[0]!,
    ipVersion,
    sourcePort: (privateData[2]! << 8) | privateData[3]!,
    sourceAddress: address(4),
    destinationAddress: address(20),
  };
}
