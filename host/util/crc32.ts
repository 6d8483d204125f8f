// CRC-32 (IEEE 802.3, reflected, as zlib) continued from a previous result, by table in
// JavaScript for short runs: a call into @node-rs/crc32 crosses N-API (argument checks, the
// buffer's info, a number made for the result), which costs more than a few hundred octets by
// table. Measured on this VM (issue 16, session 14): 16 octets took 120-190 ns per native call in
// a warm loop against 25-37 ns by table, and in kbtp bench's client at 1 in flight, where each
// loaded block's stamp was checked by the native call, its samples were ~2 % of the thread.

import { crc32 } from '@node-rs/crc32';

/** The reflected polynomial's table, for callers that fold single octets in (icrc.ts). */
export const CRC32_TABLE = new Int32Array(256);
for (let n = 0; n < 256; n++) {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  CRC32_TABLE[n] = c;
}

/** Below this many octets the table beats the native call (its N-API crossing). */
export const CRC32_NATIVE_FROM = 256;

/** zlib-style continuation (`running` = the CRC of the octets before) over bytes[start, end), by table. */
export function crc32Range(running: number, bytes: Uint8Array, start: number, end: number): number {
  let c = ~running;
  for (let i = start; i < end; i++) c = CRC32_TABLE[(c ^ bytes[i]!) & 0xff]! ^ (c >>> 8);
  return ~c >>> 0;
}

/** CRC-32 of `bytes` continuing from `running` (0 to start): @node-rs/crc32's crc32(bytes, running), by table when short. */
export function crc32Continue(running: number, bytes: Uint8Array): number {
  const length = bytes.length;
  if (length < CRC32_NATIVE_FROM) return length === 0 ? running : crc32Range(running, bytes, 0, length);
  return crc32(bytes, running);
}
