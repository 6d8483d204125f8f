// Intel's ISA-L (Debian's libisal2) through koffi, bound once per thread: CRC routines that fold
// with carry-less multiplies and run at 28-44 GB/s on the benchmark machine, where
// @node-rs/crc32 runs at 3-6. Optional: where the library (or koffi) is missing, the reason comes
// back as an Error and callers keep @node-rs/crc32. Users: the durable tier's CRC32C
// (host/tier/checksum.ts) and the RoCE ICRC (host/rnic/wire/icrc.ts, host/rnic/rc/link.ts).
import { createRequire } from 'node:module';
import os from 'node:os';

export interface Isal {
  /** CRC32C on the raw register (all ones in, inverted out), as ISA-L's crc32_iscsi. `length` fits an int. */
  crc32Iscsi(data: Uint8Array, length: number, register: number): number;
  /**
   * CRC-32 (IEEE, reflected: zlib's) of `length` octets at the raw address `address`, continuing
   * from `running` (zlib style: the previous result, not the register). For memory that never
   * moves (SharedArrayBuffers). Signed 32-bit in and out (`x | 0` of the CRC; `>>> 0` makes it
   * unsigned): a value of 2^31 or more made a heap number at every call, half of the RoCE path's
   * per-packet calls (a Write's or Read Response's ICRC, the receiver's run check).
   */
  crc32AtAddress(running: number, address: number, length: number): number;
}

let loaded: Isal | Error | undefined;

export function loadIsal(): Isal | Error {
  if (loaded !== undefined) return loaded;
  try {
    if (process.platform !== 'linux' || os.endianness() !== 'LE') throw new Error(`ISA-L is used on little-endian Linux only (this is ${process.platform})`);
    const require = createRequire(import.meta.url);
    const koffi = require('koffi') as typeof import('koffi');
    const library = koffi.load('libisal.so.2');
    loaded = {
      crc32Iscsi: library.func('uint32_t crc32_iscsi(const uint8_t *buffer, int length, uint32_t register)') as Isal['crc32Iscsi'],
      // The C prototype's uint32_t as int32_t: the same 32-bit register either way.
      crc32AtAddress: library.func('int32_t crc32_gzip_refl(int32_t running, intptr_t buffer, uint64_t length)') as Isal['crc32AtAddress'],
    };
  } catch (error) {
    loaded = error instanceof Error ? error : new Error(String(error));
  }
  return loaded;
}
