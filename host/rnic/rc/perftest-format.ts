// perftest's per-QP key message (roce.md §8.2; perftest src/perftest_communication.c,
// ethernet_write_keys / ethernet_read_keys), so a kbtp RC QP can be the other end of ib_write_bw,
// ib_read_bw and ib_atomic_bw: with a GID (every RoCE run),
// "%04x:%04x:%06x:%06x:%08x:%016llx:" + 16 x "%02x:" + "%08x:" = LID : out_reads : QPN : PSN :
// rkey : virtual address : GID octets : SRQ number, written and read as exactly 108 octets
// including the NUL. The same message is exchanged again as a barrier after RTR, before the
// results and at the close.

import { RnicError } from '../errors.ts';

export const PERFTEST_KEY_MESSAGE_LENGTH = 108; // KEY_MSG_SIZE_GID
/** perftest's `--version` string size (MAX_VERSION), exchanged first. */
export const PERFTEST_VERSION_LENGTH = 16;
/** perftest refuses peers older than this (check_version_compatibility). */
export const PERFTEST_OLDEST_COMPATIBLE_VERSION = 5.7;
export const PERFTEST_DEFAULT_PORT = 18515;

export interface PerftestDestination {
  /** 0 on RoCE. */
  lid: number;
  /** The sender's responder resources for RDMA Read and atomics (the peer's max_rd_atomic). */
  outReads: number;
  qpNumber: number;
  psn: number;
  rkey: number;
  virtualAddress: bigint;
  /** 16 octets. */
  gid: Uint8Array;
  srqNumber: number;
}

export function encodePerftestKeys(destination: PerftestDestination): Uint8Array {
  const gid = Array.from(destination.gid, (octet) => `${hex(octet, 2)}:`).join('');
  const text =
    `${hex(destination.lid, 4)}:${hex(destination.outReads, 4)}:${hex(destination.qpNumber, 6)}:${hex(destination.psn, 6)}:` +
    `${hex(destination.rkey, 8)}:${destination.virtualAddress.toString(16).padStart(16, '0')}:${gid}${hex(destination.srqNumber, 8)}:`;
  const bytes = new Uint8Array(PERFTEST_KEY_MESSAGE_LENGTH);
  const encoded = new TextEncoder().encode(text);
  if (encoded.length !== PERFTEST_KEY_MESSAGE_LENGTH - 1) throw new RnicError('EINVAL', `perftest key field out of range: "${text}"`);
  bytes.set(encoded);
  return bytes;
}

/** Parses one 108-octet key message; every field must be hex of the width perftest prints. */
export function decodePerftestKeys(bytes: Uint8Array): PerftestDestination {
  if (bytes.length !== PERFTEST_KEY_MESSAGE_LENGTH)
    throw new RnicError('EPROTO', `perftest key message of ${bytes.length} octets, expected ${PERFTEST_KEY_MESSAGE_LENGTH}`);
  const end = bytes.indexOf(0);
  const text = new TextDecoder().decode(bytes.subarray(0, end < 0 ? bytes.length : end));
  const match = /^([0-9a-f]{4}):([0-9a-f]{4}):([0-9a-f]{6}):([0-9a-f]{6}):([0-9a-f]{8}):([0-9a-f]{16}):((?:[0-9a-f]{2}:){16})([0-9a-f]{8}):$/i.exec(text);
  if (match === null) throw new RnicError('EPROTO', `not a perftest key message with a GID: "${text.replace(/[^\x20-\x7e]/g, '?')}"`);
  return {
    lid: parseInt(match[1]!, 16),
    outReads: parseInt(match[2]!, 16),
    qpNumber: parseInt(match[3]!, 16),
    psn: parseInt(match[4]!, 16),
    rkey: parseInt(match[5]!, 16),
    virtualAddress: BigInt(`0x${match[6]!}`),
    gid: new Uint8Array(match[7]!.split(':', 16).map((octet) => parseInt(octet, 16))),
    srqNumber: parseInt(match[8]!, 16),
  };
}

/** The version perftest sends: its VERSION string in a 16-octet, NUL-padded field. */
export function decodePerftestVersion(bytes: Uint8Array): string {
  const end = bytes.indexOf(0);
  return new TextDecoder().decode(bytes.subarray(0, end < 0 ? bytes.length : end));
}

function hex(value: number, digits: number): string {
  return value.toString(16).padStart(digits, '0');
}

/**
 * The key message when perftest exchanges over RDMA CM (-R, -z; rdma_write_keys): its
 * `struct pingpong_dest` sent as one Send, every integer big-endian: lid, out_reads, qpn, psn, rkey
 * (4 octets each), 4 octets of padding, vaddr (8), gid (16), srqn, gid_index (4 each).
 */
export const PERFTEST_CM_KEY_MESSAGE_LENGTH = 56;

export interface PerftestCmKeys extends PerftestDestination {
  /** The sender's own -x; the receiver ignores it (ctx_hand_shake keeps its own). */
  gidIndex: number;
}

export function encodePerftestCmKeys(keys: PerftestCmKeys): Uint8Array {
  const bytes = new Uint8Array(PERFTEST_CM_KEY_MESSAGE_LENGTH);
  const view = new DataView(bytes.buffer);
  view.setUint32(0, keys.lid);
  view.setUint32(4, keys.outReads);
  view.setUint32(8, keys.qpNumber);
  view.setUint32(12, keys.psn);
  view.setUint32(16, keys.rkey);
  view.setBigUint64(24, keys.virtualAddress);
  if (keys.gid.length !== 16) throw new RnicError('EINVAL', `a GID is 16 octets, got ${keys.gid.length}`);
  bytes.set(keys.gid, 32);
  view.setUint32(48, keys.srqNumber);
  view.setUint32(52, keys.gidIndex);
  return bytes;
}

export function decodePerftestCmKeys(bytes: Uint8Array): PerftestCmKeys {
  if (bytes.length !== PERFTEST_CM_KEY_MESSAGE_LENGTH)
    throw new RnicError('EPROTO', `perftest RDMA CM key message of ${bytes.length} octets, expected ${PERFTEST_CM_KEY_MESSAGE_LENGTH}`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return {
    lid: view.getUint32(0),
    outReads: view.getUint32(4),
    qpNumber: view.getUint32(8),
    psn: view.getUint32(12),
    rkey: view.getUint32(16),
    virtualAddress: view.getBigUint64(24),
    gid: bytes.slice(32, 48),
    srqNumber: view.getUint32(48),
    gidIndex: view.getUint32(52),
  };
}
