// HELLO and HELLO_ACK (kbtp-v1 sections 4 and 5): encode and decode, with every length checked.
import * as K from '../../../assembly/kbtp-constants.ts';
import { MessageFormatError } from './messages.ts';

export const HELLO_FIXED_SIZE = 32;
export const HELLO_ACK_SIZE = 128;
export const MAX_NAME_OCTETS = 64;

// HELLO body field offsets (kbtp-v1 section 4), after the common header.
const HELLO_CAPABILITIES = 24;
const HELLO_CREDITS = 28;
const HELLO_TENANT_LENGTH = 30;
const HELLO_CREDENTIAL_LENGTH = 31;

// HELLO_ACK body field offsets (kbtp-v1 section 5).
const ACK_CAPABILITIES = 24;
const ACK_BLOCK_SIZE = 28;
const ACK_BLOCK_COUNT = 32;
const ACK_TARGET_CREDITS = 36;
const ACK_SHARED_RING_ORDER = 38;
const ACK_PARTITION_RING_ORDER = 39;
const ACK_MAX_INLINE = 40;
const ACK_QUOTA = 44;
const ACK_TICKET_TIMEOUT = 48;
const ACK_TABLE_STAG = 52;
const ACK_TABLE_OFFSET = 56;
const ACK_TABLE_BASE_HANDLE = 64;
const ACK_TABLE_HANDLE_COUNT = 72;
const ACK_STORE_FIRST = 80;
const ACK_STORE_COUNT = 88;
const ACK_POOL_STAG = 96;
const ACK_PARTITION_STAG = 100;
const ACK_RING_STAG = 104;
const ACK_RESERVED = 108;
const ACK_RING_OFFSET = 112;
const ACK_HEAD_OFFSET = 120;

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
  view.setUint8(K.HEADER_VERSION, hello.version);
  view.setUint8(K.HEADER_OPCODE, K.OPCODE_HELLO);
  view.setBigUint64(K.HEADER_REQUEST_ID, hello.requestId, false);
  view.setUint32(HELLO_CAPABILITIES, hello.capabilities, false);
  view.setUint16(HELLO_CREDITS, hello.initiatorCredits, false);
  view.setUint8(HELLO_TENANT_LENGTH, tenant.length);
  view.setUint8(HELLO_CREDENTIAL_LENGTH, hello.credential.length);
  bytes.set(tenant, HELLO_FIXED_SIZE);
  bytes.set(hello.credential, HELLO_FIXED_SIZE + tenant.length);
  return bytes;
}

/** Decodes a HELLO; a malformed one throws MessageFormatError (answered INVALID_REQUEST). */
export function decodeHello(bytes: Uint8Array): Hello {
  if (bytes.length < HELLO_FIXED_SIZE) throw new MessageFormatError(`HELLO is at least ${HELLO_FIXED_SIZE} octets, got ${bytes.length}`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (view.getUint8(K.HEADER_OPCODE) !== K.OPCODE_HELLO) throw new MessageFormatError('not a HELLO');
  if (
    view.getUint16(K.HEADER_FLAGS, false) !== 0 ||
    view.getBigUint64(K.HEADER_HANDLE, false) !== 0n ||
    view.getUint16(K.HEADER_GENERATION, false) !== 0 ||
    view.getUint16(K.HEADER_STATUS, false) !== 0
  ) {
    throw new MessageFormatError('HELLO must have Flags, Block Handle, Generation and Status zero');
  }
  const tenantLength = view.getUint8(HELLO_TENANT_LENGTH);
  const credentialLength = view.getUint8(HELLO_CREDENTIAL_LENGTH);
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
    version: view.getUint8(K.HEADER_VERSION),
    requestId: view.getBigUint64(K.HEADER_REQUEST_ID, false),
    capabilities: view.getUint32(HELLO_CAPABILITIES, false),
    initiatorCredits: view.getUint16(HELLO_CREDITS, false),
    tenant,
    credential: bytes.slice(HELLO_FIXED_SIZE + tenantLength),
  };
}

/** A HELLO_ACK that refuses: every body field zero (kbtp-v1 section 5). */
export function refusal(requestId: bigint, status: number): HelloAck {
  return {
    version: K.KBTP_VERSION,
    requestId,
    status,
    capabilities: 0,
    blockSize: 0,
    blockCount: 0,
    targetCredits: 0,
    sharedRingOrder: 0,
    partitionRingOrder: 0,
    maxInline: 0,
    quota: 0,
    ticketTimeoutMs: 0,
    tableStag: 0,
    tableOffset: 0n,
    tableBaseHandle: 0n,
    tableHandleCount: 0n,
    storeFirst: 0n,
    storeCount: 0n,
    poolStag: 0,
    partitionStag: 0,
    ringStag: 0,
    ringOffset: 0n,
    headOffset: 0n,
  };
}

export function encodeHelloAck(ack: HelloAck): Uint8Array {
  const bytes = new Uint8Array(HELLO_ACK_SIZE);
  const view = new DataView(bytes.buffer);
  view.setUint8(K.HEADER_VERSION, ack.version);
  view.setUint8(K.HEADER_OPCODE, K.OPCODE_HELLO_ACK);
  view.setBigUint64(K.HEADER_REQUEST_ID, ack.requestId, false);
  view.setUint16(K.HEADER_STATUS, ack.status, false);
  view.setUint32(ACK_CAPABILITIES, ack.capabilities, false);
  view.setUint32(ACK_BLOCK_SIZE, ack.blockSize, false);
  view.setUint32(ACK_BLOCK_COUNT, ack.blockCount, false);
  view.setUint16(ACK_TARGET_CREDITS, ack.targetCredits, false);
  view.setUint8(ACK_SHARED_RING_ORDER, ack.sharedRingOrder);
  view.setUint8(ACK_PARTITION_RING_ORDER, ack.partitionRingOrder);
  view.setUint32(ACK_MAX_INLINE, ack.maxInline, false);
  view.setUint32(ACK_QUOTA, ack.quota, false);
  view.setUint32(ACK_TICKET_TIMEOUT, ack.ticketTimeoutMs, false);
  view.setUint32(ACK_TABLE_STAG, ack.tableStag, false);
  view.setBigUint64(ACK_TABLE_OFFSET, ack.tableOffset, false);
  view.setBigUint64(ACK_TABLE_BASE_HANDLE, ack.tableBaseHandle, false);
  view.setBigUint64(ACK_TABLE_HANDLE_COUNT, ack.tableHandleCount, false);
  view.setBigUint64(ACK_STORE_FIRST, ack.storeFirst, false);
  view.setBigUint64(ACK_STORE_COUNT, ack.storeCount, false);
  view.setUint32(ACK_POOL_STAG, ack.poolStag, false);
  view.setUint32(ACK_PARTITION_STAG, ack.partitionStag, false);
  view.setUint32(ACK_RING_STAG, ack.ringStag, false);
  view.setUint32(ACK_RESERVED, 0, false);
  view.setBigUint64(ACK_RING_OFFSET, ack.ringOffset, false);
  view.setBigUint64(ACK_HEAD_OFFSET, ack.headOffset, false);
  return bytes;
}

export function decodeHelloAck(bytes: Uint8Array): HelloAck {
  if (bytes.length !== HELLO_ACK_SIZE) throw new MessageFormatError(`HELLO_ACK is ${HELLO_ACK_SIZE} octets, got ${bytes.length}`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (view.getUint8(K.HEADER_OPCODE) !== K.OPCODE_HELLO_ACK) throw new MessageFormatError('not a HELLO_ACK');
  return {
    version: view.getUint8(K.HEADER_VERSION),
    requestId: view.getBigUint64(K.HEADER_REQUEST_ID, false),
    status: view.getUint16(K.HEADER_STATUS, false),
    capabilities: view.getUint32(ACK_CAPABILITIES, false),
    blockSize: view.getUint32(ACK_BLOCK_SIZE, false),
    blockCount: view.getUint32(ACK_BLOCK_COUNT, false),
    targetCredits: view.getUint16(ACK_TARGET_CREDITS, false),
    sharedRingOrder: view.getUint8(ACK_SHARED_RING_ORDER),
    partitionRingOrder: view.getUint8(ACK_PARTITION_RING_ORDER),
    maxInline: view.getUint32(ACK_MAX_INLINE, false),
    quota: view.getUint32(ACK_QUOTA, false),
    ticketTimeoutMs: view.getUint32(ACK_TICKET_TIMEOUT, false),
    tableStag: view.getUint32(ACK_TABLE_STAG, false),
    tableOffset: view.getBigUint64(ACK_TABLE_OFFSET, false),
    tableBaseHandle: view.getBigUint64(ACK_TABLE_BASE_HANDLE, false),
    tableHandleCount: view.getBigUint64(ACK_TABLE_HANDLE_COUNT, false),
    storeFirst: view.getBigUint64(ACK_STORE_FIRST, false),
    storeCount: view.getBigUint64(ACK_STORE_COUNT, false),
    poolStag: view.getUint32(ACK_POOL_STAG, false),
    partitionStag: view.getUint32(ACK_PARTITION_STAG, false),
    ringStag: view.getUint32(ACK_RING_STAG, false),
    ringOffset: view.getBigUint64(ACK_RING_OFFSET, false),
    headOffset: view.getBigUint64(ACK_HEAD_OFFSET, false),
  };
}
