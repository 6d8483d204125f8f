// The ICRCs of a GRO run (equal RoCE packets back to back in one receive slot) checked with one
// ISA-L call over the whole run instead of one per packet. Per packet the native call's fixed
// cost (koffi's argument conversion, ~170 ns) was about as much as the CRC of its 4 KiB (~200
// ns), on each of the 256 packets of a MiB.
//
// Why one CRC suffices. In raw register form a CRC-32 step is linear over GF(2): running a
// register r over octets B gives shift(r, |B|) xor U(B), where shift multiplies by x^(8|B|)
// modulo the polynomial (what running over |B| zero octets does) and U(B) is B's CRC from a zero
// register. A packet (BTH .. ICRC, L octets) is good when the register after the LRH stand-in and
// the masked IP and UDP headers (r_S, from the link's running ICRC `afterUdp`), run over the
// packet with its BTH octet 4 masked to ones and then its own ICRC (least significant octet
// first), ends at the CRC-32 residue 0xDEBB20E3. Octet 4 as received differs from the mask by
// delta = octet ^ 0xFF, which adds U(delta at 4) = shift(U([delta]), L - 5). So a packet is good
// exactly when U(packet as received) = T, with
//     T = 0xDEBB20E3 xor shift(r_S, L) xor shift(U([delta]), L - 5),
// the same T for every packet of the run (one source, one length, one octet 4). Run from a zero
// register over n such packets back to back, the register ends at E_n, E_1 = T and
// E_(m+1) = shift(E_m, L) xor T, when every packet is good. A run whose packets' own errors are
// e_1..e_n (U(packet) xor T) ends at E_n xor sum of shift(e_i, L (n - i)): one bad packet always
// shows (shift is invertible), and errors in several cancel only where the run's concatenated
// error polynomial is a multiple of the CRC polynomial, as for one CRC-32 over the run's (at most
// 64 KiB) octets. A run that does not end at E_n is checked packet by packet (the bad one is
// found and dropped as before); the E_n are kept per (afterUdp, L, octet 4).

import { loadIsal, type Isal } from '../../util/isal.ts';
import { sharedAddress } from './shared-copy.ts';

/** Packets checked by one call at most (a GRO run of 4 KiB packets has up to 15). */
export const MAX_RUN_PACKETS = 16;
/** Longest packet checked in runs (a zero region this long stands in for shift). */
const MAX_RUN_PACKET_OCTETS = 8192;
/** The raw CRC-32 register after a message followed by its own CRC, least significant octet first. */
const RAW_RESIDUE = 0xdebb20e3;
/** Ends kept at most, per (afterUdp, length, octet 4); a flow has a few. */
const KEPT = 64;

let crcAt: Isal['crc32AtAddress'] | null | undefined;
let zeros: Uint8Array | undefined;
let zerosAddress = -1;

/** ISA-L and the zero region, on first use; false where either is missing (every packet is then checked alone). */
function bind(): boolean {
  if (crcAt === undefined) {
    const isal = loadIsal();
    crcAt = isal instanceof Error ? null : isal.crc32AtAddress;
    if (crcAt !== null) {
      zeros = new Uint8Array(new SharedArrayBuffer(MAX_RUN_PACKET_OCTETS));
      zerosAddress = sharedAddress(zeros);
      if (zerosAddress < 0) crcAt = null;
    }
  }
  return crcAt !== null;
}

/** The raw register `register` run over `octets` zero octets: times x^(8 octets), modulo the polynomial. */
function shift(register: number, octets: number): number {
  // ISA-L takes and returns zlib-style values, the register inverted (signed 32-bit: isal.ts).
  return ~crcAt!(~register, zerosAddress, octets) >>> 0;
}

/** U([octet]): one octet's CRC from a zero register. */
function octetCrc(octet: number): number {
  let c = octet;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
}

/**
 * Checks the ICRCs of runs of equal packets with one native call each. Per link direction (it
 * keeps the ends of the last few kinds of run).
 */
export class IcrcRunChecker {
  private readonly ends = new Map<number, Uint32Array>();
  private lastKey = -1;
  private lastEnds: Uint32Array = new Uint32Array(0);

  /**
   * True when all `count` packets of `length` octets at `area[at..]` (raw address `address`,
   * shared memory), received after IP and UDP headers whose running ICRC is `afterUdp`, carry
   * good ICRCs; false when one may not (or the run cannot be checked whole: check each packet).
   */
  allGood(afterUdp: number, area: Uint8Array, at: number, address: number, length: number, count: number): boolean {
    if (count < 2 || count > MAX_RUN_PACKETS || length < 16 || length > MAX_RUN_PACKET_OCTETS || address < 0 || !bind()) return false;
    const octet4 = area[at + 4]!;
    for (let i = 1; i < count; i++) if (area[at + i * length + 4] !== octet4) return false;
    // afterUdp < 2^32, length < 2^13, octet < 2^8: an exact integer key.
    const key = (afterUdp * 8192 + length) * 256 + octet4;
    let ends = this.lastEnds;
    if (key !== this.lastKey) {
      ends = this.ends.get(key) ?? this.remember(key, afterUdp, length, octet4);
      this.lastKey = key;
      this.lastEnds = ends;
    }
    return ~crcAt!(-1, address, count * length) >>> 0 === ends[count]!;
  }

  /** E_1 .. E_MAX_RUN_PACKETS for one kind of run (header comment). */
  private remember(key: number, afterUdp: number, length: number, octet4: number): Uint32Array {
    const delta = octet4 ^ 0xff;
    const t = (RAW_RESIDUE ^ shift(~afterUdp >>> 0, length) ^ (delta === 0 ? 0 : shift(octetCrc(delta), length - 5))) >>> 0;
    const ends = new Uint32Array(MAX_RUN_PACKETS + 1);
    ends[1] = t;
    for (let n = 2; n <= MAX_RUN_PACKETS; n++) ends[n] = (shift(ends[n - 1]!, length) ^ t) >>> 0;
    if (this.ends.size >= KEPT) this.ends.clear();
    this.ends.set(key, ends);
    return ends;
  }
}
