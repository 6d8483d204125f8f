// MPA CRC32c (RFC 5044 §4.4): Castagnoli polynomial, reflected, init and final XOR all-ones,
// written least-significant byte first. Inputs from 64 octets go to Intel's ISA-L (crc32_iscsi
// through koffi, host/util/isal.ts), as RoCE's ICRC and the durable tier's CRC32C do: measured
// here 3-7x faster than @node-rs/crc32 from 256 octets up (0.5 µs against 2.6-3.2 µs per 4 KiB),
// so the iWARP path with its CRC on pays what RoCE's ICRC pays and the two compare alike.
// @node-rs/crc32 takes the rest, and everything where libisal2 (or koffi) is missing or
// KBTP_CRC32C=node-rs asks for it (the same switch as the tier's).

import { crc32c } from '@node-rs/crc32';
import { type Isal, loadIsal } from '../../util/isal.ts';

export const CRC_LENGTH = 4;

/** Below this many octets the native add-on's call is about as cheap as the FFI call into ISA-L. */
const ISAL_FROM = 64;

let isal: Isal['crc32Iscsi'] | Error | undefined;

function bindIsal(): Isal['crc32Iscsi'] | Error {
  if (process.env.KBTP_CRC32C === 'node-rs') isal = new Error('KBTP_CRC32C=node-rs asks for @node-rs/crc32');
  else {
    const library = loadIsal();
    isal = library instanceof Error ? library : library.crc32Iscsi;
  }
  return isal;
}

/** CRC32c of `bytes`, continuing from `running` (the value returned for the bytes before them). */
export function crc32cUpdate(running: number, bytes: Uint8Array): number {
  const length = bytes.length;
  if (length === 0) return running;
  if (length >= ISAL_FROM && length <= 0x7fffffff) {
    const fast = isal ?? bindIsal();
    // crc32_iscsi works on the raw register: the previous result inverted in, inverted out.
    if (!(fast instanceof Error)) return ~fast(bytes, length, ~running) >>> 0;
  }
  return crc32c(bytes, running);
}

export function crc32cOf(bytes: Uint8Array): number {
  return crc32cUpdate(0, bytes);
}

/** Which implementation computes the MPA CRC of longer inputs in this thread, and why not ISA-L when it is not. */
export function mpaCrcImplementation(): string {
  const fast = isal ?? bindIsal();
  return fast instanceof Error ? `@node-rs/crc32 (ISA-L not used: ${fast.message})` : 'ISA-L crc32_iscsi (libisal.so.2)';
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
