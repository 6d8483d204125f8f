// Block contents the benchmark stores and the check it applies to every block it loads.
//
// A block is a pseudo-random body followed by a 16-octet stamp (handle, version). Its checksum is
// CRC-32 over the whole block; with the stamp last, crc32(stamp, crc32(body)) costs 16 octets per
// store because the body's CRC is computed once. A load passes only if its length, checksum and
// stamp all match what the benchmark last stored under that handle, so a block from another
// handle, a stale version or a corrupted octet anywhere is an error, not a fast answer.
// CRC-32 (not CRC-32C) because @node-rs/crc32's CRC-32 runs at about 3x the speed here, and the
// check must not be what limits a loopback benchmark; the 16-octet stamp's by table in JavaScript
// (crc32Continue): the native call per LOAD and per STORE cost more than its octets (issue 16).
import { crc32 } from '@node-rs/crc32';
import { crc32Continue } from '../util/crc32.ts';
import { UsageError } from '../errors.ts';

export const STAMP_SIZE = 16;

export interface ExpectedBlock {
  length: number;
  crc: number;
  version: number;
}

/** Deterministic pseudo-random octets (xorshift32), so runs are repeatable. */
export function fillPattern(target: Uint8Array, seed: number): void {
  let state = (seed ^ 0x9e3779b9) >>> 0 || 1;
  const words = new Uint32Array(target.buffer, target.byteOffset, Math.floor(target.byteLength / 4));
  for (let i = 0; i < words.length; i++) {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    words[i] = state;
  }
  for (let i = words.length * 4; i < target.length; i++) target[i] = (seed + i) & 0xff;
}

/**
 * Makes block contents of one size. The body is shared; each request gets its own buffer from
 * `buffer()` because the initiator copies the data only once the request has a slot.
 */
export class BlockMaker {
  private readonly body: Uint8Array;
  /** The body as a Buffer, for a memcmp against loaded blocks (check()). */
  private readonly bodyBuffer: Buffer;
  private readonly bodyCrc: number;
  private readonly stamp = new Uint8Array(STAMP_SIZE);
  /** `stamp` as a DataView, made once: a view per stored block was two allocations per STORE (issue 16). */
  private readonly stampView = new DataView(this.stamp.buffer);

  constructor(
    readonly size: number,
    seed = size,
  ) {
    if (!Number.isInteger(size) || size < 0) throw new UsageError(`block size ${size} must be a non-negative integer`);
    this.body = new Uint8Array(Math.max(0, size - STAMP_SIZE));
    fillPattern(this.body, seed);
    this.bodyCrc = crc32(this.body);
    this.bodyBuffer = Buffer.from(this.body.buffer, this.body.byteOffset, this.body.length);
  }

  /**
   * checkBlock for blocks this maker made, at a fraction of its cost: the body compared octet for
   * octet (memcmp runs several times faster than CRC-32 over the block) and the stamp by CRC-32
   * continued from the body's. A block that fails either is described by checkBlock.
   */
  check(data: Uint8Array, expected: ExpectedBlock, handle: bigint, stamp?: Uint8Array): string | undefined {
    const bodyLength = this.body.length;
    if (this.size < STAMP_SIZE || data.length !== this.size) return checkBlock(data, expected, handle);
    if (this.bodyBuffer.compare(data, 0, bodyLength) === 0 && crc32Continue(this.bodyCrc, stamp ?? data.subarray(bodyLength)) === expected.crc)
      return undefined;
    // The block's CRC-32 may still match (a collision): it differs all the same.
    return checkBlock(data, expected, handle) ?? `handle ${handle}: the loaded block differs from the stored one`;
  }

  /**
   * The stamp of a whole block in `buffer`, for check()'s `stamp`: a caller that checks the same
   * buffer again and again keeps it, and check() then makes no view per block (issue 16: a
   * typed array per request on the client of `kbtp bench`).
   */
  stampOf(buffer: Uint8Array): Uint8Array {
    return buffer.subarray(Math.min(this.body.length, buffer.length));
  }

  /** A buffer for one request, holding the body already; `make` then only writes the stamp. */
  buffer(): Uint8Array {
    const buffer = new Uint8Array(this.size);
    buffer.set(this.body);
    return buffer;
  }

  /** Stamps `buffer` (from `buffer()`) for (handle, version) and returns what a load must find. */
  make(buffer: Uint8Array, handle: bigint, version: number): ExpectedBlock {
    if (this.size < STAMP_SIZE) {
      // Too small for a stamp: the block is the stamp's first octets.
      this.writeStamp(handle, version);
      buffer.set(this.stamp.subarray(0, this.size));
      return { length: this.size, crc: crc32(buffer), version };
    }
    // The stamp is written into the maker's own and copied behind the body: no view of `buffer` per block.
    this.writeStamp(handle, version);
    buffer.set(this.stamp, this.body.length);
    return { length: this.size, crc: crc32Continue(this.bodyCrc, this.stamp), version };
  }

  /** The stamp of (handle, version) into `stamp`. */
  private writeStamp(handle: bigint, version: number): void {
    this.stampView.setBigUint64(0, BigInt.asUintN(64, handle), false);
    this.stampView.setFloat64(8, version, false);
  }
}

/** Why a loaded block is wrong, or undefined when it is what was stored. */
export function checkBlock(data: Uint8Array, expected: ExpectedBlock, handle: bigint): string | undefined {
  if (data.length !== expected.length) return `handle ${handle}: loaded ${data.length} octets, stored ${expected.length}`;
  const crc = crc32(data);
  if (crc === expected.crc) return undefined;
  if (data.length >= STAMP_SIZE) {
    const view = new DataView(data.buffer, data.byteOffset + data.length - STAMP_SIZE, STAMP_SIZE);
    const stampHandle = view.getBigUint64(0, false);
    const stampVersion = view.getFloat64(8, false);
    if (stampHandle !== BigInt.asUintN(64, handle)) return `handle ${handle}: loaded the block of handle ${stampHandle}`;
    if (stampVersion !== expected.version) return `handle ${handle}: loaded version ${stampVersion}, stored version ${expected.version}`;
  }
  return `handle ${handle}: checksum 0x${(crc >>> 0).toString(16)} differs from the stored block's 0x${(expected.crc >>> 0).toString(16)}`;
}
