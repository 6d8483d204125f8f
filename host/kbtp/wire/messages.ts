// KBTP request and COMPLETION messages (draft 5.1-5.2, kbtp-v1 sections 1-3): encode and decode.
import * as K from '../../../assembly/kbtp-constants.ts';
import { ProtocolError } from '../../errors.ts';

export interface DataDescriptor {
  stag: number;
  taggedOffset: bigint;
  length: number;
}

export interface RequestFields {
  opcode: number;
  flags?: number;
  requestId: bigint;
  handle: bigint;
  /** Expected generation; 0 means any. */
  generation?: number;
  /** LOAD, STORE, ALLOC_STORE. With INLINE, STag and Tagged Offset are 0 and Length is the inline length. */
  descriptor?: DataDescriptor;
  /** Completion Descriptor (present exactly when RECORD is set). */
  completionDescriptor?: { stag: number; taggedOffset: bigint };
  /** Inline data (STORE, ALLOC_STORE with INLINE). */
  inline?: Uint8Array;
  /** BIND body. */
  bind?: { ticket: number; dataLength: number; blockOffset: bigint };
  version?: number;
}

export interface Completion {
  version: number;
  requestOpcode: number;
  requestId: bigint;
  handle: bigint;
  generation: number;
  status: number;
  dataLength: number;
  blockOffset: bigint;
}

/** A KBTP message that does not decode (a ProtocolError, code KBTP_PROTOCOL). */
export class MessageFormatError extends ProtocolError {}

function writeHeader(view: DataView, fields: RequestFields): void {
  view.setUint8(K.HEADER_VERSION, fields.version ?? K.KBTP_VERSION);
  view.setUint8(K.HEADER_OPCODE, fields.opcode);
  view.setUint16(K.HEADER_FLAGS, fields.flags ?? 0, false);
  view.setBigUint64(K.HEADER_REQUEST_ID, fields.requestId, false);
  view.setBigUint64(K.HEADER_HANDLE, fields.handle, false);
  view.setUint16(K.HEADER_GENERATION, fields.generation ?? 0, false);
  view.setUint16(K.HEADER_STATUS, 0, false);
}

/** Encodes a request exactly as laid out in kbtp-v1 section 1 (descriptors, BIND body, inline data). */
export function encodeRequest(fields: RequestFields): Uint8Array {
  const flags = fields.flags ?? 0;
  const hasDescriptor = fields.opcode === K.OPCODE_LOAD || fields.opcode === K.OPCODE_STORE || fields.opcode === K.OPCODE_ALLOC_STORE;
  const record = (flags & K.FLAG_RECORD) !== 0;
  const inline = (flags & K.FLAG_INLINE) !== 0 ? (fields.inline ?? new Uint8Array(0)) : undefined;
  let length = K.HEADER_SIZE;
  if (hasDescriptor) length += K.DESCRIPTOR_SIZE;
  if (fields.opcode === K.OPCODE_BIND) length = K.BIND_SIZE;
  if (record) length += K.DESCRIPTOR_SIZE;
  if (inline !== undefined) length += inline.length;
  const bytes = new Uint8Array(length);
  const view = new DataView(bytes.buffer);
  writeHeader(view, fields);
  let cursor = K.HEADER_SIZE;
  if (hasDescriptor) {
    const descriptor = fields.descriptor ?? { stag: 0, taggedOffset: 0n, length: inline?.length ?? 0 };
    view.setUint32(cursor + K.DESCRIPTOR_STAG, descriptor.stag, false);
    view.setBigUint64(cursor + K.DESCRIPTOR_TAGGED_OFFSET, descriptor.taggedOffset, false);
    view.setUint32(cursor + K.DESCRIPTOR_LENGTH, descriptor.length, false);
    cursor += K.DESCRIPTOR_SIZE;
  }
  if (fields.opcode === K.OPCODE_BIND) {
    const bind = fields.bind;
    if (bind === undefined) throw new MessageFormatError('BIND needs ticket, dataLength and blockOffset');
    view.setUint32(K.BIND_TICKET, bind.ticket, false);
    view.setUint32(K.BIND_DATA_LENGTH, bind.dataLength, false);
    view.setBigUint64(K.BIND_BLOCK_OFFSET, bind.blockOffset, false);
    cursor = K.BIND_SIZE;
  }
  if (record) {
    const completion = fields.completionDescriptor ?? { stag: 0, taggedOffset: 0n };
    view.setUint32(cursor + K.DESCRIPTOR_STAG, completion.stag, false);
    view.setBigUint64(cursor + K.DESCRIPTOR_TAGGED_OFFSET, completion.taggedOffset, false);
    view.setUint32(cursor + K.DESCRIPTOR_LENGTH, 0, false);
    cursor += K.DESCRIPTOR_SIZE;
  }
  if (inline !== undefined) bytes.set(inline, cursor);
  return bytes;
}

/**
 * Writes a request in place at `at` of `view` (kbtp-v1 section 1), for a sender that reuses its
 * message buffers: the header with the Request ID as two 32-bit halves, then for LOAD, STORE and
 * ALLOC_STORE one data descriptor (Tagged Offset below 2^53), for BIND its body. Inline data, if
 * any, the caller copies after the descriptor. Returns the message's length without inline data.
 */
export function writeRequestAt(
  view: DataView,
  at: number,
  opcode: number,
  flags: number,
  idHigh: number,
  idLow: number,
  handle: bigint,
  generation: number,
  stag: number,
  taggedOffset: number,
  length: number,
): number {
  view.setUint8(at + K.HEADER_VERSION, K.KBTP_VERSION);
  view.setUint8(at + K.HEADER_OPCODE, opcode);
  view.setUint16(at + K.HEADER_FLAGS, flags, false);
  view.setUint32(at + K.HEADER_REQUEST_ID, idHigh, false);
  view.setUint32(at + K.HEADER_REQUEST_ID + 4, idLow, false);
  view.setBigUint64(at + K.HEADER_HANDLE, handle, false);
  view.setUint16(at + K.HEADER_GENERATION, generation, false);
  view.setUint16(at + K.HEADER_STATUS, 0, false);
  if (opcode !== K.OPCODE_LOAD && opcode !== K.OPCODE_STORE && opcode !== K.OPCODE_ALLOC_STORE) return K.HEADER_SIZE;
  const descriptor = at + K.HEADER_SIZE;
  view.setUint32(descriptor + K.DESCRIPTOR_STAG, stag, false);
  view.setUint32(descriptor + K.DESCRIPTOR_TAGGED_OFFSET, Math.floor(taggedOffset / 2 ** 32), false);
  view.setUint32(descriptor + K.DESCRIPTOR_TAGGED_OFFSET + 4, taggedOffset >>> 0, false);
  view.setUint32(descriptor + K.DESCRIPTOR_LENGTH, length, false);
  return K.HEADER_SIZE + K.DESCRIPTOR_SIZE;
}

/** Writes a BIND body after a header written by writeRequestAt (kbtp-v1 section 3); returns BIND_SIZE. */
export function writeBindAt(view: DataView, at: number, ticket: number, dataLength: number, blockOffset: bigint): number {
  view.setUint32(at + K.BIND_TICKET, ticket, false);
  view.setUint32(at + K.BIND_DATA_LENGTH, dataLength, false);
  view.setBigUint64(at + K.BIND_BLOCK_OFFSET, blockOffset, false);
  return K.BIND_SIZE;
}

/** Encodes a 40-octet COMPLETION (kbtp-v1 section 2). */
export function encodeCompletion(completion: Completion): Uint8Array {
  const bytes = new Uint8Array(K.COMPLETION_SIZE);
  const view = new DataView(bytes.buffer);
  view.setUint8(K.HEADER_VERSION, completion.version);
  view.setUint8(K.HEADER_OPCODE, K.OPCODE_COMPLETION);
  // The request's opcode travels in the Flags field, zero-extended.
  view.setUint16(K.HEADER_FLAGS, completion.requestOpcode & 0xff, false);
  view.setBigUint64(K.HEADER_REQUEST_ID, completion.requestId, false);
  view.setBigUint64(K.HEADER_HANDLE, completion.handle, false);
  view.setUint16(K.HEADER_GENERATION, completion.generation, false);
  view.setUint16(K.HEADER_STATUS, completion.status, false);
  view.setUint32(K.COMPLETION_DATA_LENGTH, completion.dataLength, false);
  view.setBigUint64(K.COMPLETION_BLOCK_OFFSET, completion.blockOffset, false);
  return bytes;
}

/** Decodes a 40-octet COMPLETION (kbtp-v1 section 2). */
export function decodeCompletion(bytes: Uint8Array): Completion {
  if (bytes.length !== K.COMPLETION_SIZE) throw new MessageFormatError(`COMPLETION is ${K.COMPLETION_SIZE} octets, got ${bytes.length}`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const opcode = view.getUint8(K.HEADER_OPCODE);
  if (opcode !== K.OPCODE_COMPLETION) throw new MessageFormatError(`opcode 0x${opcode.toString(16)} is not COMPLETION`);
  return {
    version: view.getUint8(K.HEADER_VERSION),
    requestOpcode: view.getUint16(K.HEADER_FLAGS, false) & 0xff,
    requestId: view.getBigUint64(K.HEADER_REQUEST_ID, false),
    handle: view.getBigUint64(K.HEADER_HANDLE, false),
    generation: view.getUint16(K.HEADER_GENERATION, false),
    status: view.getUint16(K.HEADER_STATUS, false),
    dataLength: view.getUint32(K.COMPLETION_DATA_LENGTH, false),
    blockOffset: view.getBigUint64(K.COMPLETION_BLOCK_OFFSET, false),
  };
}

const STATUS_NAMES: Record<number, string> = {
  [K.STATUS_SUCCESS]: 'SUCCESS',
  [K.STATUS_INVALID_REQUEST]: 'INVALID_REQUEST',
  [K.STATUS_VERSION_MISMATCH]: 'VERSION_MISMATCH',
  [K.STATUS_AUTH_FAILED]: 'AUTH_FAILED',
  [K.STATUS_NOT_SUPPORTED]: 'NOT_SUPPORTED',
  [K.STATUS_OUT_OF_RANGE]: 'OUT_OF_RANGE',
  [K.STATUS_ACCESS_DENIED]: 'ACCESS_DENIED',
  [K.STATUS_NOT_VALID]: 'NOT_VALID',
  [K.STATUS_NOT_SEALED]: 'NOT_SEALED',
  [K.STATUS_SEALED]: 'SEALED',
  [K.STATUS_ALREADY_VALID]: 'ALREADY_VALID',
  [K.STATUS_GENERATION_MISMATCH]: 'GENERATION_MISMATCH',
  [K.STATUS_LENGTH_ERROR]: 'LENGTH_ERROR',
  [K.STATUS_NO_SPACE]: 'NO_SPACE',
  [K.STATUS_TICKET_ABANDONED]: 'TICKET_ABANDONED',
  [K.STATUS_BAD_TICKET]: 'BAD_TICKET',
  [K.STATUS_REMOTE_ACCESS]: 'REMOTE_ACCESS',
  [K.STATUS_TOO_MANY_REQUESTS]: 'TOO_MANY_REQUESTS',
  [K.STATUS_TIER_ERROR]: 'TIER_ERROR',
  [K.STATUS_SHUTTING_DOWN]: 'SHUTTING_DOWN',
};

const REQUEST_NAMES: Record<number, string> = {
  [K.OPCODE_LOAD]: 'LOAD',
  [K.OPCODE_STORE]: 'STORE',
  [K.OPCODE_ALLOC_STORE]: 'ALLOC_STORE',
  [K.OPCODE_FREE]: 'FREE',
  [K.OPCODE_BIND]: 'BIND',
};

/** A request opcode's name (LOAD, STORE, ...), for messages. */
export function requestName(opcode: number): string {
  return REQUEST_NAMES[opcode] ?? `opcode 0x${opcode.toString(16).padStart(2, '0')}`;
}

export function statusName(status: number): string {
  return STATUS_NAMES[status] ?? `UNKNOWN_STATUS_0x${status.toString(16).padStart(4, '0')}`;
}
