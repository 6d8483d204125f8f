// CRC32C (Castagnoli) of the durable tier's block data and records. A persistent STORE checksums
// every octet it seals, so the speed of this function is a share of the persistent STORE's CPU:
// @node-rs/crc32 runs at 3-6 GB/s on the benchmark machine (one crc32 instruction stream, about
// 45 us per 256 KiB and 170 us per MiB, more when both cores are busy), while Intel's ISA-L
// (Debian's libisal2, crc32_iscsi: folding with carry-less multiplies, AVX-512 where the CPU has
// it) runs at 28-44 GB/s there. So large inputs go to ISA-L through koffi (already a dependency)
// when the library is installed, and everything else, or everything when it is not, to
// @node-rs/crc32. Both compute the same function (test/tier/checksum.test.ts).
import { crc32c as nodeRsCrc32c } from '@node-rs/crc32';
import { type Isal, loadIsal as loadIsalLibrary } from '../util/isal.ts';

/** Below this many octets the native add-on's call is cheaper than the FFI call into ISA-L. */
const ISAL_FROM = 4096;
/**
 * ISA-L takes an `int` length, so inputs go in pieces, the CRC register carried over. A piece of
 * 1 MiB costs one more FFI call per MiB (under a microsecond) and lets the tests cover the carry.
 */
const ISAL_PIECE = 1 << 20;

type IsalCrc = Isal['crc32Iscsi'];

let isal: IsalCrc | Error | undefined;

/** ISA-L's crc32_iscsi (host/util/isal.ts), once per thread; the reason as an Error where it cannot be used. */
function loadIsal(): IsalCrc | Error {
  if (isal !== undefined) return isal;
  if (process.env.KBTP_CRC32C === 'node-rs') isal = new Error('KBTP_CRC32C=node-rs asks for @node-rs/crc32');
  else {
    const library = loadIsalLibrary();
    isal = library instanceof Error ? library : library.crc32Iscsi;
  }
  return isal;
}

/** CRC32C of `data`, as @node-rs/crc32's crc32c(data) (initial and final XOR all ones). */
export function crc32c(data: Uint8Array): number {
  if (data.length < ISAL_FROM) return nodeRsCrc32c(data);
  const fast = loadIsal();
  if (fast instanceof Error) return nodeRsCrc32c(data);
  // crc32_iscsi works on the raw register: all ones in, inverted out.
  let register = 0xffffffff;
  for (let offset = 0; offset < data.length; offset += ISAL_PIECE) {
    const piece = offset === 0 && data.length <= ISAL_PIECE ? data : data.subarray(offset, offset + ISAL_PIECE);
    register = fast(piece, piece.length, register);
  }
  return ~register >>> 0;
}

/** Which implementation checksums large inputs in this thread, and why not ISA-L when it is not. */
export function crc32cImplementation(): string {
  const fast = loadIsal();
  return fast instanceof Error ? `@node-rs/crc32 (ISA-L not used: ${fast.message})` : 'ISA-L crc32_iscsi (libisal.so.2)';
}
