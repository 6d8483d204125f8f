// The transmit half of one RDMAP stream: DDP segmentation to MULPDU, MPA framing (length, PAD,
// CRC32c, optional markers) and per-queue MSN numbering. Payloads are gathered as views of the
// registered memory and handed to the byte sink without copying; the sink reports when the
// kernel has taken every byte, which is when a Send or Write may complete locally (RFC 5040
// §5.5 rule 14) and the buffer may be reused.

import { CRC_LENGTH, crc32cUpdate, writeCrc } from './wire/crc.ts';
import { DDP_FLAG_LAST, DDP_FLAG_TAGGED, DDP_TAGGED_HEADER_LENGTH, DDP_UNTAGGED_HEADER_LENGTH, DDP_VERSION, QUEUE_COUNT, writeUint32 } from './wire/ddp.ts';
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
  sendTagged(opcode: number, stag: number, taggedOffset: bigint, payload: readonly Uint8Array[], length: number, done?: WriteDone): void {
    const headerSize = MPA_LENGTH_FIELD + DDP_TAGGED_HEADER_LENGTH;
    const perSegment = this.mulpdu - DDP_TAGGED_HEADER_LENGTH;
    const segments = Math.max(1, Math.ceil(length / perSegment));
    const framer = new MessageFramer(this, segments, headerSize, payload);
    const control = rdmapControl(opcode);
    const toHigh = Number((taggedOffset >> 32n) & 0xffffffffn);
    const toLow = Number(taggedOffset & 0xffffffffn);
    let sent = 0;
    for (let segment = 0; segment < segments; segment++) {
      const bytes = Math.min(perSegment, length - sent);
      const ulpduLength = DDP_TAGGED_HEADER_LENGTH + bytes;
      const header = framer.header();
      header[0] = ulpduLength >> 8;
      header[1] = ulpduLength & 0xff;
      header[2] = DDP_FLAG_TAGGED | (segment === segments - 1 ? DDP_FLAG_LAST : 0) | DDP_VERSION;
      header[3] = control;
      writeUint32(header, 4, stag);
      // TO + sent, carried across the 32-bit halves without a BigInt per segment.
      const low = toLow + sent;
      writeUint32(header, 8, (toHigh + Math.floor(low / 0x1_0000_0000)) >>> 0);
      writeUint32(header, 12, low >>> 0);
      framer.finishSegment(bytes, ulpduLength);
      sent += bytes;
    }
    this.emit(framer.chunks(), length, done);
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
    const headerSize = MPA_LENGTH_FIELD + DDP_UNTAGGED_HEADER_LENGTH + extra;
    const perSegment = this.mulpdu - DDP_UNTAGGED_HEADER_LENGTH - extra;
    const segments = Math.max(1, Math.ceil(length / perSegment));
    const framer = new MessageFramer(this, segments, headerSize, payload);
    const control = rdmapControl(opcode);
    let sent = 0;
    for (let segment = 0; segment < segments; segment++) {
      const bytes = Math.min(perSegment, length - sent);
      const ulpduLength = DDP_UNTAGGED_HEADER_LENGTH + extra + bytes;
      const header = framer.header();
      header[0] = ulpduLength >> 8;
      header[1] = ulpduLength & 0xff;
      header[2] = (segment === segments - 1 ? DDP_FLAG_LAST : 0) | DDP_VERSION;
      header[3] = control;
      writeUint32(header, 4, reserved);
      writeUint32(header, 8, queue);
      writeUint32(header, 12, msn);
      writeUint32(header, 16, sent);
      if (rdmapHeader !== undefined) header.set(rdmapHeader, 20);
      framer.finishSegment(bytes, ulpduLength);
      sent += bytes;
    }
    this.emit(framer.chunks(), length, done);
    return msn;
  }

  /** Sends an already built ULPDU as one FPDU (used for Terminate). */
  sendUlpdu(ulpdu: Uint8Array, done?: WriteDone): void {
    const framer = new MessageFramer(this, 1, MPA_LENGTH_FIELD + ulpdu.length, NO_PAYLOAD);
    const header = framer.header();
    header[0] = ulpdu.length >> 8;
    header[1] = ulpdu.length & 0xff;
    header.set(ulpdu, MPA_LENGTH_FIELD);
    framer.finishSegment(0, ulpdu.length);
    this.emit(framer.chunks(), 0, done);
  }

  /** Frames one ULPDU with markers at the current stream position and advances it. */
  frameWithMarkers(ulpdu: Uint8Array): Uint8Array {
    const framed = encodeFpduWithMarkers(ulpdu, this.streamOffset, this.crc);
    this.streamOffset = framed.nextStreamOffset;
    return framed.bytes;
  }

  private emit(chunks: Uint8Array[], payloadLength: number, done: WriteDone | undefined): void {
    this.messagesSent++;
    this.bytesSent += payloadLength;
    this.sink.write(chunks, done);
  }
}

/**
 * Lays out one message's FPDUs: headers and trailers share one allocation, and a trailer and
 * the next header are adjacent so they leave as one chunk between the payload views. With
 * markers the FPDU is built contiguously instead (markers may split any part of it).
 */
class MessageFramer {
  private readonly arena: Uint8Array;
  private readonly out: Uint8Array[] = [];
  private readonly cursor: GatherCursor;
  private offset = 0;
  private spanStart = 0;
  private headerStart = 0;

  constructor(
    private readonly transmitter: Transmitter,
    segments: number,
    private readonly headerSize: number,
    payload: readonly Uint8Array[],
  ) {
    this.arena = new Uint8Array(segments * (headerSize + 3 + CRC_LENGTH));
    this.cursor = new GatherCursor(payload);
  }

  /** Space for the next segment's length field and headers. */
  header(): Uint8Array {
    this.headerStart = this.offset;
    this.offset += this.headerSize;
    return this.arena.subarray(this.headerStart, this.offset);
  }

  /** Appends the segment's payload views, PAD and CRC. */
  finishSegment(payloadBytes: number, ulpduLength: number): void {
    const header = this.arena.subarray(this.headerStart, this.headerStart + this.headerSize);
    const views = this.cursor.take(payloadBytes);
    const padding = fpduPadding(ulpduLength);
    if (this.transmitter.markers) {
      const ulpdu = new Uint8Array(ulpduLength);
      ulpdu.set(header.subarray(MPA_LENGTH_FIELD), 0);
      let position = header.length - MPA_LENGTH_FIELD;
      for (const view of views) {
        ulpdu.set(view, position);
        position += view.length;
      }
      this.out.push(this.transmitter.frameWithMarkers(ulpdu));
      this.offset = this.headerStart;
      this.spanStart = this.offset;
      return;
    }
    const crcOn = this.transmitter.crc;
    let crc = crcOn ? crc32cUpdate(0, header) : 0;
    if (views.length > 0) {
      this.out.push(this.arena.subarray(this.spanStart, this.offset));
      for (const view of views) {
        this.out.push(view);
        if (crcOn) crc = crc32cUpdate(crc, view);
      }
      this.spanStart = this.offset;
    }
    // The arena is zero-filled, so the PAD octets are already zero.
    if (crcOn) {
      if (padding > 0) crc = crc32cUpdate(crc, this.arena.subarray(this.offset, this.offset + padding));
      writeCrc(this.arena, this.offset + padding, crc);
    }
    this.offset += padding + CRC_LENGTH;
  }

  chunks(): Uint8Array[] {
    if (this.offset > this.spanStart) this.out.push(this.arena.subarray(this.spanStart, this.offset));
    return this.out;
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
