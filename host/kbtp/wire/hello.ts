// HELLO and HELLO_ACK (kbtp-v1 sections 4 and 5): encode and decode, with every length checked.
import * as K from '../../../assembly/kbtp-constants.ts';
import { MessageFormatError } from './messages.ts';

export const HELLO_FIXED_SIZE = 32;
export const HELLO_ACK_SIZE = 128;
export const MAX_NAME_OCTETS = 64;

export interface Hello {
  version: number;
  requestId: bigint;
  capabilities: number;
  initiatorCredits: number;
  tenant: string;
  credential: Uint8Array;
}

export interface HelloAck {
  version: number;
  requestId: bigint;
  status: number;
  capabilities: number;
  blockSize: number;
  blockCount: number;
  targetCredits: number;
  sharedRingOrder: number;
  partitionRingOrder: number;
  maxInline: number;
  quota: number;
  ticketTimeoutMs: number;
  tableStag: number;
  tableOffset: bigint;
  tableBaseHandle: bigint;
  tableHandleCount: bigint;
  storeFirst: bigint;
  storeCount: bigint;
  poolStag: number;
  partitionStag: number;
  ringStag: number;
  ringOffset: bigint;
  headOffset: bigint;
}

export function encodeHello(hello: Hello): Uint8Array {
  const tenant = new TextEncoder().encode(hello.tenant);
  if (tenant.length > MAX_NAME_OCTETS) throw new MessageFormatError(`tenant name is ${tenant.length} octets, at most ${MAX_NAME_OCTETS}`);
  if (hello.credential.length > MAX_NAME_OCTETS) {
    throw new MessageFormatError(`credential is ${hello.credential.length} octets, at most ${MAX_NAME_OCTETS}`);
  }
  const bytes = new Uint8Array(HELLO_FIXED_SIZE + tenant.length + hello.credential.length);
  const view = new DataView(bytes.buffer);
  view.setUint8(0, hello.version);
  view.setUint8(1, K.OPCODE_HELLO);
  view.setBigUint64(4, hello.requestId, false);
  view.setUint32(24, hello.capabilities, false);
  view.setUint16(28, hello.initiatorCredits, false);
  view.setUint8(30, tenant.length);
  view.setUint8(31, hello.credential.length);
  bytes.set(tenant, HELLO_FIXED_SIZE);
  bytes.set(hello.credential, HELLO_FIXED_SIZE + tenant.length);
  return bytes;
}

/** Decodes a HELLO; a malformed one throws MessageFormatError (answered INVALID_REQUEST). */
export function decodeHello(bytes: Uint8Array): Hello {
  if (bytes.length < HELLO_FIXED_SIZE) throw new MessageFormatError(`HELLO is at least ${HELLO_FIXED_SIZE} octets, got ${bytes.length}`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (view.getUint8(1) !== K.OPCODE_HELLO) throw new MessageFormatError('not a HELLO');
  if (view.getUint16(2, false) !== 0 || view.getBigUint64(12, false) !== 0n || view.getUint16(20, false) !== 0 || view.getUint16(22, false) !== 0) {
    throw new MessageFormatError('HELLO must have Flags, Block Handle, Generation and Status zero');
  }
  const tenantLength = view.getUint8(30);
  const credentialLength = view.getUint8(31);
  if (tenantLength > MAX_NAME_OCTETS || credentialLength > MAX_NAME_OCTETS) {
    throw new MessageFormatError(`tenant and credential are at most ${MAX_NAME_OCTETS} octets`);
  }
  if (bytes.length !== HELLO_FIXED_SIZE + tenantLength + credentialLength) {
    throw new MessageFormatError(`HELLO length ${bytes.length} disagrees with its tenant (${tenantLength}) and credential (${credentialLength}) lengths`);
  }
  let tenant: string;
  try {
    tenant = new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(HELLO_FIXED_SIZE, HELLO_FIXED_SIZE + tenantLength));
  } catch {
    throw new MessageFormatError('tenant name is not valid UTF-8');
  }
  return {
    version: view.getUint8(0),
    requestId: view.getBigUint64(4, false),
    capabilities: view.getUint32(24, false),
    initiatorCredits: view.getUint16(28, false),
    tenant,
    credential: bytes.slice(HELLO_FIXED_SIZE + tenantLength),
  };
}

/** A HELLO_ACK that refuses: every body field zero (kbtp-v1 section 5). */
export function refusal(requestId: bigint, status: number): HelloAck {
  return {
    version: K.KBTP_VERSION, requestId, status, capabilities: 0, blockSize: 0, blockCount: 0, targetCredits: 0, sharedRingOrder: 0,
    partitionRingOrder: 0, maxInline: 0, quota: 0, ticketTimeoutMs: 0, tableStag: 0, tableOffset: 0n, tableBaseHandle: 0n,
    tableHandleCount: 0n, storeFirst: 0n, storeCount: 0n, poolStag: 0, partitionStag: 0, ringStag: 0, ringOffset: 0n, headOffset: 0n,
  };
}

export function encodeHelloAck(ack: HelloAck): Uint8Array {
  const bytes = new Uint8Array(HELLO_ACK_SIZE);
  const view = new DataView(bytes.buffer);
  view.setUint8(0, ack.version);
  view.setUint8(1, K.OPCODE_HELLO_ACK);
  view.setBigUint64(4, ack.requestId, false);
  view.setUint16(22, ack.status, false);
  view.setUint32(24, ack.capabilities, false);
  view.setUint32(28, ack.blockSize, false);
  view.setUint32(32, ack.blockCount, false);
  view.setUint16(36, ack.targetCredits, false);
  view.setUint8(38, ack.sharedRingOrder);
  view.setUint8(39, ack.partitionRingOrder);
  view.setUint32(40, ack.maxInline, false);
  view.setUint32(44, ack.quota, false);
  view.setUint32(48, ack.ticketTimeoutMs, false);
  view.setUint32(52, ack.tableStag, false);
  view.setBigUint64(56, ack.tableOffset, false);
  view.setBigUint64(64, ack.tableBaseHandle, false);
  view.setBigUint64(72, ack.tableHandleCount, false);
  view.setBigUint64(80, ack.storeFirst, false);
  view.setBigUint64(88, ack.storeCount, false);
  view.setUint32(96, ack.poolStag, false);
  view.setUint32(100, ack.partitionStag, false);
  view.setUint32(104, ack.ringStag, false);
  view.setUint32(108, 0, false);
  view.setBigUint64(112, ack.ringOffset, false);
  view.setBigUint64(120, ack.headOffset, false);
  return bytes;
}

export function decodeHelloAck(bytes: Uint8Array): HelloAck {
  if (bytes.length !== HELLO_ACK_SIZE) throw new MessageFormatError(`HELLO_ACK is ${HELLO_ACK_SIZE} octets, got ${bytes.length}`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (view.getUint8(1) !== K.OPCODE_HELLO_ACK) throw new MessageFormatError('not a HELLO_ACK');
  return {
    version: view.getUint8(0),
    requestId: view.getBigUint64(4, false),
    status: view.getUint16(22, false),
    capabilities: view.getUint32(24, false),
    blockSize: view.getUint32(28, false),
    blockCount: view.getUint32(32, false),
    targetCredits: view.getUint16(36, false),
    sharedRingOrder: view.getUint8(38),
    partitionRingOrder: view.getUint8(39),
    maxInline: view.getUint32(40, false),
    quota: view.getUint32(44, false),
    ticketTimeoutMs: view.getUint32(48, false),
    tableStag: view.getUint32(52, false),
    tableOffset: view.getBigUint64(56, false),
    tableBaseHandle: view.getBigUint64(64, false),
    tableHandleCount: view.getBigUint64(72, false),
    storeFirst: view.getBigUint64(80, false),
    storeCount: view.getBigUint64(88, false),
    poolStag: view.getUint32(96, false),
    partitionStag: view.getUint32(100, false),
    ringStag: view.getUint32(104, false),
    ringOffset: view.getBigUint64(112, false),
    headOffset: view.getBigUint64(120, false),
  };
}
