// MPA CRC32c (RFC 5044 §4.4): Castagnoli polynomial, reflected, init and final XOR all-ones,
// written least-significant byte first. The native @node-rs/crc32 implementation runs at several
// GB/s, so the CRC of a 1 MiB write costs far less than moving the bytes.

import { crc32c } from '@node-rs/crc32';

export const CRC_LENGTH = 4;

/** CRC32c of `bytes`, continuing from `running` (the value returned for the bytes before them). */
export function crc32cUpdate(running: number, bytes: Uint8Array): number {
  if (bytes.length === 0) return running;
  return crc32c(bytes, running);
}

export function crc32cOf(bytes: Uint8Array): number {
  return crc32c(bytes, 0);
}

/** Writes a CRC value into the 4-byte trailer position, LSB first as MPA requires. */
export function writeCrc(target: Uint8Array, offset: number, crc: number): void {
  target[offset] = crc & 0xff;
  target[offset + 1] = (crc >>> 8) & 0xff;
  target[offset + 2] = (crc >>> 16) & 0xff;
  target[offset + 3] = (crc >>> 24) & 0xff;
}

export function readCrc(source: Uint8Array, offset: number): number {
  return (source[offset]! | (source[offset + 1]! << 8) | (source[offset + 2]! << 16) | (source[offset + 3]! << 24)) >>> 0;
}
