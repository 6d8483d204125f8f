// RFC 7306 extensions: the Atomic Request / Atomic Response and Immediate Data headers, and the
// bit-exact semantics of masked FetchAdd and CmpSwap as pure 64-bit functions. The code that
// applies them to registered memory atomically is ../atomic-executor.ts.

import { readUint32, readUint64, writeUint32, writeUint64 } from './ddp.ts';
import { ProtocolError } from '../../errors.ts';

export const ATOMIC_REQUEST_HEADER_LENGTH = 52;
/** RFC 7306 §4 prose says 32; its Figure 6 and Appendix A.2 (and Wireshark) define 12. */
export const ATOMIC_RESPONSE_HEADER_LENGTH = 12;
export const IMMEDIATE_DATA_HEADER_LENGTH = 8;
/** Atomic operands and targets are 64-bit and must be 8-octet aligned. */
export const ATOMIC_OPERAND_LENGTH = 8;

export const AtomicOpcode = { FetchAdd: 0x0, CompareSwap: 0x2 } as const;
export type AtomicOpcode = (typeof AtomicOpcode)[keyof typeof AtomicOpcode];

export const ALL_ONES_64 = 0xffff_ffff_ffff_ffffn;

export interface AtomicRequestHeader {
  /** Low four bits of the first word; the 28 bits above are reserved and ignored. */
  readonly atomicOpcode: number;
  readonly requestId: number;
  readonly remoteStag: number;
  readonly remoteTaggedOffset: bigint;
  readonly addOrSwapData: bigint;
  readonly addOrSwapMask: bigint;
  readonly compareData: bigint;
  readonly compareMask: bigint;
}

export interface AtomicResponseHeader {
  readonly requestId: number;
  readonly originalValue: bigint;
}

export function encodeAtomicRequest(target: Uint8Array, offset: number, header: AtomicRequestHeader): void {
  writeUint32(target, offset, header.atomicOpcode & 0xf);
  writeUint32(target, offset + 4, header.requestId);
  writeUint32(target, offset + 8, header.remoteStag);
  writeUint64(target, offset + 12, header.remoteTaggedOffset);
  writeUint64(target, offset + 20, header.addOrSwapData);
  writeUint64(target, offset + 28, header.addOrSwapMask);
  writeUint64(target, offset + 36, header.compareData);
  writeUint64(target, offset + 44, header.compareMask);
}

export function decodeAtomicRequest(source: Uint8Array, offset = 0): AtomicRequestHeader {
  if (source.length < offset + ATOMIC_REQUEST_HEADER_LENGTH) throw new ProtocolError('Atomic Request header shorter than 52 octets');
  return {
    atomicOpcode: readUint32(source, offset) & 0xf,
    requestId: readUint32(source, offset + 4),
    remoteStag: readUint32(source, offset + 8),
    remoteTaggedOffset: readUint64(source, offset + 12),
    addOrSwapData: readUint64(source, offset + 20),
    addOrSwapMask: readUint64(source, offset + 28),
    compareData: readUint64(source, offset + 36),
    compareMask: readUint64(source, offset + 44),
  };
}

export function encodeAtomicResponse(target: Uint8Array, offset: number, header: AtomicResponseHeader): void {
  writeUint32(target, offset, header.requestId);
  writeUint64(target, offset + 4, header.originalValue);
}

export function decodeAtomicResponse(source: Uint8Array, offset = 0): AtomicResponseHeader {
  if (source.length < offset + ATOMIC_RESPONSE_HEADER_LENGTH) throw new ProtocolError('Atomic Response header shorter than 12 octets');
  return { requestId: readUint32(source, offset), originalValue: readUint64(source, offset + 4) };
}

export function encodeImmediateData(target: Uint8Array, offset: number, value: bigint): void {
  writeUint64(target, offset, value);
}

export function decodeImmediateData(source: Uint8Array, offset = 0): bigint {
  if (source.length < offset + IMMEDIATE_DATA_HEADER_LENGTH) throw new ProtocolError('Immediate Data header shorter than 8 octets');
  return readUint64(source, offset);
}

/**
 * RFC 7306 §6 masked FetchAdd: each 1 in `mask` marks the most significant bit of a field and
 * the carry out of that bit is dropped, so the fields add independently. Clearing every field's
 * MSB before adding keeps carries inside the field; the MSB is then the XOR of both MSBs and the
 * carry that reached it, which is what the low sum already holds there. mask = 0 is a plain add.
 */
export function maskedFetchAdd(original: bigint, addData: bigint, addMask: bigint): bigint {
  const notMask = ~addMask & ALL_ONES_64;
  const low = ((original & notMask) + (addData & notMask)) & ALL_ONES_64;
  return (low ^ ((original ^ addData) & addMask)) & ALL_ONES_64;
}

/**
 * RFC 7306 §6 masked CmpSwap: compares only the `compareMask` bits; on a match replaces only the
 * `swapMask` bits. Returns the new memory value, or `original` when the comparison fails.
 */
export function maskedCompareSwap(original: bigint, compareData: bigint, compareMask: bigint, swapData: bigint, swapMask: bigint): bigint {
  if (((compareData ^ original) & compareMask) !== 0n) return original;
  return ((original & ~swapMask) | (swapData & swapMask)) & ALL_ONES_64;
}
