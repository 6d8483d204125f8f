// The transmit half of one RDMAP stream: DDP segmentation to MULPDU, MPA framing (length, PAD,
// CRC32c, optional markers) and per-queue MSN numbering. Payloads are gathered as views of the
// registered memory and handed to the byte sink without copying; the sink reports when the
// kernel has taken every byte, which is when a Send or Write may complete locally (RFC 5040
// §5.5 rule 14) and the buffer may be reused.

import { CRC_LENGTH, crc32cUpdate, writeCrc } from './wire/crc.ts';
import {
  DDP_FLAG_LAST,
  DDP_FLAG_TAGGED,
  DDP_TAGGED_HEADER_LENGTH,
  DDP_UNTAGGED_HEADER_LENGTH,
  DDP_VERSION,
  QUEUE_COUNT,
  writeUint32,
} from './wire/ddp.ts';
import { encodeFpduWithMarkers } from './wire/markers.ts';
import { fpduPadding, MPA_LENGTH_FIELD, MPA_MAX_ULPDU, MPA_MIN_MULPDU } from './wire/mpa.ts';
import { rdmapControl } from './wire/rdmap.ts';

export type WriteDone = (error?: Error | null) => void;

/** Where framed bytes go: a TCP socket in production, a byte collector in tests. */
export interface ByteSink {
  /** Queues `chunks` in order; `done` runs once all of them reached the kernel (or failed). */
  write(chunks: Uint8Array[], done: WriteDone | undefined): void;
  /** Octets queued in user space that the kernel has not taken yet. */
  readonly pendingBytes: number;
}

export interface TransmitOptions {
  crc: boolean;
  /** Insert markers (the peer asked for them with M=1). */
  markers: boolean;
  /** Largest ULPDU to send (DDP header included), 128..64768. */
  mulpdu: number;
}

const NO_PAYLOAD: readonly Uint8Array[] = [];
const ZERO_PAD = new Uint8Array(3);

export class Transmitter {
  readonly crc: boolean;
  readonly markers: boolean;
  readonly mulpdu: number;
  /** Next MSN per untagged queue; every queue starts at 1 (RFC 5041 §5.1). */
  private readonly nextMsn = new Uint32Array(QUEUE_COUNT).fill(1);
  /** Octets sent in full operation, for marker placement. */
  private streamOffset = 0;
  messagesSent = 0;
  bytesSent = 0;

  constructor(
    private readonly sink: ByteSink,
    options: TransmitOptions,
  ) {
    if (!Number.isInteger(options.mulpdu) || options.mulpdu < MPA_MIN_MULPDU || options.mulpdu > MPA_MAX_ULPDU) {
      throw new RangeError(`MULPDU ${options.mulpdu} is outside ${MPA_MIN_MULPDU}..${MPA_MAX_ULPDU}`);
    }
    this.crc = options.crc;
    this.markers = options.markers;
    this.mulpdu = options.mulpdu;
  }

  get pendingBytes(): number {
    return this.sink.pendingBytes;
  }

  /** MSN the next message on `queue` will carry. */
  peekMsn(queue: number): number {
    return this.nextMsn[queue]!;
  }

  /** Sends an RDMA Write or Read Response of `length` octets gathered from `payload`. */
  sendTagged(
    opcode: number,
    stag: number,
    taggedOffset: bigint,
    payload: readonly Uint8Array[],
    length: number,
    done?: WriteDone,
  ): void {
    const perSegment = this.mulpdu - DDP_TAGGED_HEADER_LENGTH;
    const segments = Math.max(1, Math.ceil(length / perSegment));
    const headerSize = MPA_LENGTH_FIELD + DDP_TAGGED_HEADER_LENGTH;
    // One allocation per message holds every segment's header and trailer.
    const arena = new Uint8Array(segments * (headerSize + 3 + CRC_LENGTH));
    const chunks: Uint8Array[] = [];
    const cursor = new GatherCursor(payload);
    const control = rdmapControl(opcode);
    const toHigh = Number((taggedOffset >> 32n) & 0xffffffffn);
    const toLow = Number(taggedOffset & 0xffffffffn);
    let arenaOffset = 0;
    let sent = 0;
    for (let segment = 0; segment < segments; segment++) {
      const bytes = Math.min(perSegment, length - sent);
      const ulpduLength = DDP_TAGGED_HEADER_LENGTH + bytes;
      const header = arena.subarray(arenaOffset, arenaOffset + headerSize);
      arenaOffset += headerSize;
      header[0] = ulpduLength >> 8;
      header[1] = ulpduLength & 0xff;
      header[2] = DDP_FLAG_TAGGED | (segment === segments - 1 ? DDP_FLAG_LAST : 0) | DDP_VERSION;
      header[3] = control;
      writeUint32(header, 4, stag);
      // TO + sent, carried across the 32-bit halves without BigInt per segment.
      const low = toLow + sent;
      writeUint32(header, 8, (toHigh + Math.floor(low / 0x1_0000_0000)) >>> 0);
      writeUint32(header, 12, low >>> 0);
      arenaOffset = this.frame(header, cursor, bytes, ulpduLength, arena, arenaOffset, chunks);
      sent += bytes;
    }
    this.emit(chunks, length, done);
  }

  /**
   * Sends an untagged message on `queue`: a Send-family message with `payload`, or a control
   * message whose RDMAP header is `rdmapHeader` (Read Request, Terminate, atomics, Immediate).
   * Returns the MSN it used.
   */
  sendUntagged(
    opcode: number,
    queue: number,
    reserved: number,
    rdmapHeader: Uint8Array | undefined,
    payload: readonly Uint8Array[] = NO_PAYLOAD,
    length = 0,
    done?: WriteDone,
  ): number {
    const msn = this.nextMsn[queue]!;
    this.nextMsn[queue] = (msn + 1) >>> 0;
    const extra = rdmapHeader?.length ?? 0;
    const perSegment = this.mulpdu - DDP_UNTAGGED_HEADER_LENGTH - extra;
    const segments = Math.max(1, Math.ceil(length / perSegment));
    const headerSize = MPA_LENGTH_FIELD + DDP_UNTAGGED_HEADER_LENGTH + extra;
    const arena = new Uint8Array(segments * (headerSize + 3 + CRC_LENGTH));
    const chunks: Uint8Array[] = [];
    const cursor = new GatherCursor(payload);
    const control = rdmapControl(opcode);
    let arenaOffset = 0;
    let sent = 0;
    for (let segment = 0; segment < segments; segment++) {
      const bytes = Math.min(perSegment, length - sent);
      const ulpduLength = DDP_UNTAGGED_HEADER_LENGTH + extra + bytes;
      const header = arena.subarray(arenaOffset, arenaOffset + headerSize);
      arenaOffset += headerSize;
      header[0] = ulpduLength >> 8;
      header[1] = ulpduLength & 0xff;
      header[2] = (segment === segments - 1 ? DDP_FLAG_LAST : 0) | DDP_VERSION;
      header[3] = control;
      writeUint32(header, 4, reserved);
      writeUint32(header, 8, queue);
      writeUint32(header, 12, msn);
      writeUint32(header, 16, sent);
      if (rdmapHeader !== undefined) header.set(rdmapHeader, 20);
      arenaOffset = this.frame(header, cursor, bytes, ulpduLength, arena, arenaOffset, chunks);
      sent += bytes;
    }
    this.emit(chunks, length, done);
    return msn;
  }

  /** Sends an already built ULPDU as one FPDU (used for Terminate). */
  sendUlpdu(ulpdu: Uint8Array, done?: WriteDone): void {
    const header = new Uint8Array(MPA_LENGTH_FIELD + ulpdu.length);
    header[0] = ulpdu.length >> 8;
    header[1] = ulpdu.length & 0xff;
    header.set(ulpdu, MPA_LENGTH_FIELD);
    const arena = new Uint8Array(3 + CRC_LENGTH);
    const chunks: Uint8Array[] = [];
    this.frame(header, new GatherCursor(NO_PAYLOAD), 0, ulpdu.length, arena, 0, chunks);
    this.emit(chunks, 0, done);
  }

  /**
   * Appends one FPDU (header, payload views, PAD, CRC) to `chunks`; with markers, builds it
   * contiguously through the marker encoder instead. Returns the new arena offset.
   */
  private frame(
    header: Uint8Array,
    cursor: GatherCursor,
    payloadBytes: number,
    ulpduLength: number,
    arena: Uint8Array,
    arenaOffset: number,
    chunks: Uint8Array[],
  ): number {
    const padding = fpduPadding(ulpduLength);
    if (this.markers) {
      const ulpdu = new Uint8Array(ulpduLength);
      ulpdu.set(header.subarray(MPA_LENGTH_FIELD), 0);
      let offset = header.length - MPA_LENGTH_FIELD;
      for (const view of cursor.take(payloadBytes)) {
        ulpdu.set(view, offset);
        offset += view.length;
      }
      const framed = encodeFpduWithMarkers(ulpdu, this.streamOffset, this.crc);
      this.streamOffset = framed.nextStreamOffset;
      chunks.push(framed.bytes);
      return arenaOffset;
    }
    chunks.push(header);
    let crc = this.crc ? crc32cUpdate(0, header) : 0;
    for (const view of cursor.take(payloadBytes)) {
      chunks.push(view);
      if (this.crc) crc = crc32cUpdate(crc, view);
    }
    const trailer = arena.subarray(arenaOffset, arenaOffset + padding + CRC_LENGTH);
    if (this.crc) {
      if (padding > 0) crc = crc32cUpdate(crc, ZERO_PAD.subarray(0, padding));
      writeCrc(trailer, padding, crc);
    }
    chunks.push(trailer);
    return arenaOffset + padding + CRC_LENGTH;
  }

  private emit(chunks: Uint8Array[], payloadLength: number, done: WriteDone | undefined): void {
    this.messagesSent++;
    this.bytesSent += payloadLength;
    this.sink.write(chunks, done);
  }
}

/** Walks a gather list, handing out views of the requested sizes across element boundaries. */
class GatherCursor {
  private index = 0;
  private offset = 0;

  constructor(private readonly views: readonly Uint8Array[]) {}

  take(length: number): Uint8Array[] {
    const out: Uint8Array[] = [];
    let remaining = length;
    while (remaining > 0) {
      const view = this.views[this.index];
      if (view === undefined) throw new RangeError('gather list shorter than the message length');
      const available = view.length - this.offset;
      if (available === 0) {
        this.index++;
        this.offset = 0;
        continue;
      }
      const bytes = Math.min(available, remaining);
      out.push(view.subarray(this.offset, this.offset + bytes));
      this.offset += bytes;
      remaining -= bytes;
    }
    return out;
  }
}
