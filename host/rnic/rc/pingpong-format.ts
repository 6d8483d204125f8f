// The out-of-band messages of rdma-core's ibv_rc_pingpong (roce.md §8.1), so a kbtp RC QP can be
// the other end of the Linux tool: "LLLL:QQQQQQ:PPPPPP:<32 hex GID digits>" (LID, QPN, PSN, the
// GID's 16 octets in wire order), written and read as exactly 52 octets including the NUL;
// after the server's reply the client sends "done\0".

import { RnicError } from '../errors.ts';

export const PINGPONG_MESSAGE_LENGTH = 52; // sizeof "0000:000000:000000:00000000000000000000000000000000"
export const PINGPONG_DONE = new Uint8Array([0x64, 0x6f, 0x6e, 0x65, 0]); // "done\0"
export const PINGPONG_DEFAULT_PORT = 18515;

export interface PingpongDestination {
  /** 0 on RoCE (no LID routing). */
  lid: number;
  qpNumber: number;
  psn: number;
  /** 16 octets; all zero means "no GRH" (IB LID routing), which RoCE cannot use. */
  gid: Uint8Array;
}

export function encodePingpong(destination: PingpongDestination): Uint8Array {
  const gid = Buffer.from(destination.gid).toString('hex');
  const text = `${hex(destination.lid, 4)}:${hex(destination.qpNumber, 6)}:${hex(destination.psn, 6)}:${gid}`;
  const bytes = new Uint8Array(PINGPONG_MESSAGE_LENGTH);
  bytes.set(new TextEncoder().encode(text));
  return bytes;
}

/** Parses one 52-octet message the way rc_pingpong's sscanf("%x:%x:%x:%s") does, strictly. */
export function decodePingpong(bytes: Uint8Array): PingpongDestination {
  if (bytes.length !== PINGPONG_MESSAGE_LENGTH)
    throw new RnicError('EPROTO', `rc_pingpong message of ${bytes.length} octets, expected ${PINGPONG_MESSAGE_LENGTH}`);
  const end = bytes.indexOf(0);
  const text = new TextDecoder().decode(bytes.subarray(0, end < 0 ? bytes.length : end));
  const match = /^([0-9a-f]{1,4}):([0-9a-f]{1,6}):([0-9a-f]{1,6}):([0-9a-f]{32})$/i.exec(text);
  if (match === null) throw new RnicError('EPROTO', `not an rc_pingpong message: "${text.replace(/[^\x20-\x7e]/g, '?')}"`);
  return {
    lid: parseInt(match[1]!, 16),
    qpNumber: parseInt(match[2]!, 16),
    psn: parseInt(match[3]!, 16),
    gid: new Uint8Array(Buffer.from(match[4]!, 'hex')),
  };
}

function hex(value: number, digits: number): string {
  return value.toString(16).padStart(digits, '0');
}
