// A deliberately small, independent MPA/DDP/RDMAP codec used only by the interop probes: it lets
// the harness talk to siw byte by byte without kbtp's RNIC, so a disagreement between kbtp and
// siw can be pinned on one side. It follows ../shared/reference/iwarp.md (§2.1, §2.2, §3, §4, §5)
// and shares no code with host/rnic on purpose.
import { crc32c } from '@node-rs/crc32';
import type { Socket } from 'node:net';

export const MPA_REQUEST_KEY = 'MPA ID Req Frame';
export const MPA_REPLY_KEY = 'MPA ID Rep Frame';

export const MPA_FLAG_MARKERS = 0x80;
export const MPA_FLAG_CRC = 0x40;
export const MPA_FLAG_REJECT = 0x20;
export const MPA_FLAG_ENHANCED = 0x10;

export const MPA_V2_PEER_TO_PEER = 0x8000; // IRD word
export const MPA_V2_SEND_RTR = 0x4000; // IRD word
export const MPA_V2_WRITE_RTR = 0x8000; // ORD word
export const MPA_V2_READ_RTR = 0x4000; // ORD word
export const MPA_V2_IRD_ORD_MASK = 0x3fff;

export interface MpaFrame {
  readonly key: string;
  readonly markers: boolean;
  readonly crc: boolean;
  readonly reject: boolean;
  readonly enhanced: boolean;
  /** Reserved low flag bits as received (siw may set 0x08, its private GSO experiment). */
  readonly reservedBits: number;
  readonly revision: number;
  /** Raw IRD / ORD words (with their A/B and C/D flag bits) when `enhanced`. */
  readonly irdWord?: number;
  readonly ordWord?: number;
  readonly privateData: Buffer;
}

export interface MpaFrameInput {
  readonly key: string;
  readonly markers?: boolean;
  readonly crc?: boolean;
  readonly reject?: boolean;
  readonly revision: number;
  readonly irdWord?: number;
  readonly ordWord?: number;
  readonly ulpData?: Buffer;
}

export function encodeMpaFrame(input: MpaFrameInput): Buffer {
  const enhanced = input.irdWord !== undefined || input.ordWord !== undefined;
  const ulp = input.ulpData ?? Buffer.alloc(0);
  const pdLength = (enhanced ? 4 : 0) + ulp.length;
  const frame = Buffer.alloc(20 + pdLength);
  frame.write(input.key, 0, 'latin1');
  frame[16] =
    (input.markers ? MPA_FLAG_MARKERS : 0) | (input.crc ? MPA_FLAG_CRC : 0) | (input.reject ? MPA_FLAG_REJECT : 0) | (enhanced ? MPA_FLAG_ENHANCED : 0);
  frame[17] = input.revision;
  frame.writeUInt16BE(pdLength, 18);
  if (enhanced) {
    frame.writeUInt16BE(input.irdWord ?? 0, 20);
    frame.writeUInt16BE(input.ordWord ?? 0, 22);
  }
  ulp.copy(frame, enhanced ? 24 : 20);
  return frame;
}

/** Length of the MPA frame at the start of `bytes`, or 0 while its fixed part is incomplete. */
export function mpaFrameLength(bytes: Buffer): number {
  return bytes.length < 20 ? 0 : 20 + bytes.readUInt16BE(18);
}

export function decodeMpaFrame(bytes: Buffer): MpaFrame {
  if (bytes.length < 20) throw new Error(`MPA frame needs 20 bytes, got ${bytes.length}`);
  const flags = bytes[16] ?? 0;
  const pdLength = bytes.readUInt16BE(18);
  if (bytes.length < 20 + pdLength) throw new Error(`MPA frame announces ${pdLength} bytes of private data, got ${bytes.length - 20}`);
  const enhanced = (flags & MPA_FLAG_ENHANCED) !== 0;
  const privateData = bytes.subarray(20, 20 + pdLength);
  return {
    key: bytes.toString('latin1', 0, 16),
    markers: (flags & MPA_FLAG_MARKERS) !== 0,
    crc: (flags & MPA_FLAG_CRC) !== 0,
    reject: (flags & MPA_FLAG_REJECT) !== 0,
    enhanced,
    reservedBits: flags & 0x0f,
    revision: bytes[17] ?? 0,
    ...(enhanced && pdLength >= 4 ? { irdWord: privateData.readUInt16BE(0), ordWord: privateData.readUInt16BE(2) } : {}),
    privateData,
  };
}

// --- FPDUs -------------------------------------------------------------------------------------

export const OP_WRITE = 0x0;
export const OP_READ_REQUEST = 0x1;
export const OP_READ_RESPONSE = 0x2;
export const OP_SEND = 0x3;
export const OP_TERMINATE = 0x7;

export type DdpSegment =
  | {
      readonly tagged: true;
      readonly last: boolean;
      readonly opcode: number;
      readonly rdmapVersion: number;
      readonly stag: number;
      readonly to: bigint;
      readonly payload: Buffer;
    }
  | {
      readonly tagged: false;
      readonly last: boolean;
      readonly opcode: number;
      readonly rdmapVersion: number;
      readonly invalidateStag: number;
      readonly qn: number;
      readonly msn: number;
      readonly mo: number;
      readonly payload: Buffer;
    };

export interface ReadRequest {
  readonly sinkStag: number;
  readonly sinkTo: bigint;
  readonly size: number;
  readonly sourceStag: number;
  readonly sourceTo: bigint;
}

export function encodeTagged(opcode: number, stag: number, to: bigint, payload: Buffer, last = true): Buffer {
  const segment = Buffer.alloc(14 + payload.length);
  segment[0] = 0x80 | (last ? 0x40 : 0) | 0x01;
  segment[1] = 0x40 | opcode;
  segment.writeUInt32BE(stag, 2);
  segment.writeBigUInt64BE(to, 6);
  payload.copy(segment, 14);
  return segment;
}

export function encodeUntagged(opcode: number, qn: number, msn: number, mo: number, payload: Buffer, last = true): Buffer {
  const segment = Buffer.alloc(18 + payload.length);
  segment[0] = (last ? 0x40 : 0) | 0x01;
  segment[1] = 0x40 | opcode;
  segment.writeUInt32BE(qn, 6);
  segment.writeUInt32BE(msn, 10);
  segment.writeUInt32BE(mo, 14);
  payload.copy(segment, 18);
  return segment;
}

export function encodeReadRequest(msn: number, request: ReadRequest): Buffer {
  const header = Buffer.alloc(28);
  header.writeUInt32BE(request.sinkStag, 0);
  header.writeBigUInt64BE(request.sinkTo, 4);
  header.writeUInt32BE(request.size, 12);
  header.writeUInt32BE(request.sourceStag, 16);
  header.writeBigUInt64BE(request.sourceTo, 20);
  return encodeUntagged(OP_READ_REQUEST, 1, msn, 0, header);
}

export function decodeReadRequest(segment: DdpSegment): ReadRequest {
  if (segment.tagged || segment.opcode !== OP_READ_REQUEST || segment.payload.length !== 28) {
    throw new Error(`not a Read Request: ${describeSegment(segment)}`);
  }
  const p = segment.payload;
  return {
    sinkStag: p.readUInt32BE(0),
    sinkTo: p.readBigUInt64BE(4),
    size: p.readUInt32BE(12),
    sourceStag: p.readUInt32BE(16),
    sourceTo: p.readBigUInt64BE(20),
  };
}

/** Terminate (QN 2) for an error found before any DDP segment of the stream was processed. */
export function encodeTerminate(msn: number, layer: number, errorType: number, errorCode: number): Buffer {
  const header = Buffer.alloc(4);
  header[0] = ((layer & 0xf) << 4) | (errorType & 0xf);
  header[1] = errorCode;
  return encodeUntagged(OP_TERMINATE, 2, msn, 0, header);
}

/** Wraps one DDP segment in an FPDU: length, pad to 4, CRC32c (LSB first; zero when CRC is off). */
export function encodeFpdu(segment: Buffer, withCrc: boolean): Buffer {
  const pad = (4 - ((2 + segment.length) % 4)) % 4;
  const fpdu = Buffer.alloc(2 + segment.length + pad + 4);
  fpdu.writeUInt16BE(segment.length, 0);
  segment.copy(fpdu, 2);
  if (withCrc) fpdu.writeUInt32LE(crc32c(fpdu.subarray(0, fpdu.length - 4)), fpdu.length - 4);
  return fpdu;
}

export function decodeSegment(ulpdu: Buffer): DdpSegment {
  if (ulpdu.length < 2) throw new Error(`DDP segment of ${ulpdu.length} bytes`);
  const ddp = ulpdu[0] ?? 0;
  const rdmap = ulpdu[1] ?? 0;
  const tagged = (ddp & 0x80) !== 0;
  const last = (ddp & 0x40) !== 0;
  if ((ddp & 0x03) !== 1) throw new Error(`DDP version ${ddp & 0x03}, expected 1`);
  const common = { last, opcode: rdmap & 0x0f, rdmapVersion: rdmap >> 6 };
  if (tagged) {
    if (ulpdu.length < 14) throw new Error(`tagged DDP segment of ${ulpdu.length} bytes`);
    return { tagged, ...common, stag: ulpdu.readUInt32BE(2), to: ulpdu.readBigUInt64BE(6), payload: ulpdu.subarray(14) };
  }
  if (ulpdu.length < 18) throw new Error(`untagged DDP segment of ${ulpdu.length} bytes`);
  return {
    tagged,
    ...common,
    invalidateStag: ulpdu.readUInt32BE(2),
    qn: ulpdu.readUInt32BE(6),
    msn: ulpdu.readUInt32BE(10),
    mo: ulpdu.readUInt32BE(14),
    payload: ulpdu.subarray(18),
  };
}

export function describeSegment(segment: DdpSegment): string {
  const base = `op ${segment.opcode} ${segment.last ? 'L' : '-'} ${segment.payload.length} B`;
  return segment.tagged
    ? `tagged ${base} stag 0x${segment.stag.toString(16)} to 0x${segment.to.toString(16)}`
    : `untagged ${base} qn ${segment.qn} msn ${segment.msn} mo ${segment.mo}`;
}

export interface ReceivedFpdu {
  readonly segment: DdpSegment;
  readonly crcField: number;
  readonly crcComputed: number;
  /** Bytes of PAD that were not zero (a receiver must ignore them, iwarp.md §2.2). */
  readonly nonZeroPad: number;
}

/**
 * Reads MPA from one TCP socket in order: first the startup frame, then FPDUs. Errors (close,
 * malformed bytes, timeouts) reject the pending read with a message saying what was seen.
 */
export class MpaStreamReader {
  private buffered = Buffer.alloc(0);
  private closed = false;
  private wake: (() => void) | undefined;

  constructor(readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.buffered = Buffer.concat([this.buffered, chunk]);
      this.wake?.();
    });
    const onEnd = (): void => {
      this.closed = true;
      this.wake?.();
    };
    socket.on('end', onEnd);
    socket.on('close', onEnd);
    socket.on('error', onEnd);
  }

  async readMpaFrame(timeoutMs = 30_000): Promise<MpaFrame> {
    await this.waitFor(
      () => {
        const length = mpaFrameLength(this.buffered);
        return length > 0 && this.buffered.length >= length;
      },
      timeoutMs,
      'MPA frame',
    );
    const length = mpaFrameLength(this.buffered);
    const frame = decodeMpaFrame(this.buffered.subarray(0, length));
    this.buffered = this.buffered.subarray(length);
    return frame;
  }

  async readFpdu(timeoutMs = 30_000): Promise<ReceivedFpdu> {
    const total = (): number => {
      if (this.buffered.length < 2) return 0;
      const ulpduLength = this.buffered.readUInt16BE(0);
      return 2 + ulpduLength + ((4 - ((2 + ulpduLength) % 4)) % 4) + 4;
    };
    await this.waitFor(() => total() > 0 && this.buffered.length >= total(), timeoutMs, 'FPDU');
    const length = total();
    const fpdu = this.buffered.subarray(0, length);
    this.buffered = this.buffered.subarray(length);
    const ulpduLength = fpdu.readUInt16BE(0);
    let nonZeroPad = 0;
    for (let i = 2 + ulpduLength; i < length - 4; i++) if (fpdu[i] !== 0) nonZeroPad++;
    return {
      segment: decodeSegment(fpdu.subarray(2, 2 + ulpduLength)),
      crcField: fpdu.readUInt32LE(length - 4),
      crcComputed: crc32c(fpdu.subarray(0, length - 4)),
      nonZeroPad,
    };
  }

  /** Resolves when the peer has closed the stream (after any bytes still buffered are ignored). */
  async waitClosed(timeoutMs = 30_000): Promise<Buffer> {
    await this.waitFor(() => false, timeoutMs, 'close', true);
    return this.buffered;
  }

  private waitFor(ready: () => boolean, timeoutMs: number, what: string, untilClose = false): Promise<void> {
    return new Promise((resolveWait, reject) => {
      const timer = setTimeout(() => {
        this.wake = undefined;
        reject(new Error(`no ${what} within ${timeoutMs} ms (${this.buffered.length} bytes buffered)`));
      }, timeoutMs);
      const check = (): void => {
        if (ready() || (untilClose && this.closed)) {
          clearTimeout(timer);
          this.wake = undefined;
          resolveWait();
        } else if (this.closed) {
          clearTimeout(timer);
          this.wake = undefined;
          reject(new Error(`connection closed while waiting for ${what} (${this.buffered.length} bytes buffered)`));
        }
      };
      this.wake = check;
      check();
    });
  }
}
