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
  /**
   * Queues `chunks` in order; `done` runs once all of them reached the kernel (or failed). The
   * array is the transmitter's and valid during the call only; the chunks stay valid until `done`.
   */
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
  /** Lays out one message at a time (messages are framed one after another, never nested). */
  private readonly framer = new MessageFramer(this);

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
  sendTagged(opcode: number, stag: number, taggedOffset: bigint | number, payload: readonly Uint8Array[], length: number, done?: WriteDone): void {
    const headerSize = MPA_LENGTH_FIELD + DDP_TAGGED_HEADER_LENGTH;
    const perSegment = this.mulpdu - DDP_TAGGED_HEADER_LENGTH;
    const segments = Math.max(1, Math.ceil(length / perSegment));
    const framer = this.framer.begin(segments, headerSize, payload, length);
    const arena = framer.arena;
    const control = rdmapControl(opcode);
    // A number TO (below 2^53) is split without BigInt arithmetic, which allocates.
    const toHigh = typeof taggedOffset === 'number' ? Math.floor(taggedOffset / 0x1_0000_0000) : Number((taggedOffset >> 32n) & 0xffffffffn);
    const toLow = typeof taggedOffset === 'number' ? taggedOffset % 0x1_0000_0000 : Number(taggedOffset & 0xffffffffn);
    let sent = 0;
    for (let segment = 0; segment < segments; segment++) {
      const bytes = Math.min(perSegment, length - sent);
      const ulpduLength = DDP_TAGGED_HEADER_LENGTH + bytes;
      const at = framer.header();
      arena[at] = ulpduLength >> 8;
      arena[at + 1] = ulpduLength & 0xff;
      arena[at + 2] = DDP_FLAG_TAGGED | (segment === segments - 1 ? DDP_FLAG_LAST : 0) | DDP_VERSION;
      arena[at + 3] = control;
      writeUint32(arena, at + 4, stag);
      // TO + sent, carried across the 32-bit halves without a BigInt per segment.
      const low = toLow + sent;
      writeUint32(arena, at + 8, (toHigh + Math.floor(low / 0x1_0000_0000)) >>> 0);
      writeUint32(arena, at + 12, low >>> 0);
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
    const framer = this.framer.begin(segments, headerSize, payload, length);
    const arena = framer.arena;
    const control = rdmapControl(opcode);
    let sent = 0;
    for (let segment = 0; segment < segments; segment++) {
      const bytes = Math.min(perSegment, length - sent);
      const ulpduLength = DDP_UNTAGGED_HEADER_LENGTH + extra + bytes;
      const at = framer.header();
      arena[at] = ulpduLength >> 8;
      arena[at + 1] = ulpduLength & 0xff;
      arena[at + 2] = (segment === segments - 1 ? DDP_FLAG_LAST : 0) | DDP_VERSION;
      arena[at + 3] = control;
      writeUint32(arena, at + 4, reserved);
      writeUint32(arena, at + 8, queue);
      writeUint32(arena, at + 12, msn);
      writeUint32(arena, at + 16, sent);
      if (rdmapHeader !== undefined) arena.set(rdmapHeader, at + 20);
      framer.finishSegment(bytes, ulpduLength);
      sent += bytes;
    }
    this.emit(framer.chunks(), length, done);
    return msn;
  }

  /** Sends an already built ULPDU as one FPDU (used for Terminate). */
  sendUlpdu(ulpdu: Uint8Array, done?: WriteDone): void {
    const framer = this.framer.begin(1, MPA_LENGTH_FIELD + ulpdu.length, NO_PAYLOAD, 0);
    const at = framer.header();
    framer.arena[at] = ulpdu.length >> 8;
    framer.arena[at + 1] = ulpdu.length & 0xff;
    framer.arena.set(ulpdu, at + MPA_LENGTH_FIELD);
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
    this.framer.emitting = true;
    try {
      this.sink.write(chunks, done);
    } finally {
      this.framer.emitting = false;
    }
  }
}

/** Payloads up to this long, in one segment, are copied behind their header: one chunk, no views. */
const INLINE_PAYLOAD = 4096;

/**
 * Lays out one message's FPDUs: headers and trailers share one allocation, and a trailer and
 * the next header are adjacent so they leave as one chunk between the payload views. A short
 * single-segment message is built whole in that allocation instead (a COMPLETION, a request:
 * one chunk, nothing else allocated). With markers the FPDU is built contiguously (markers may
 * split any part of it). One framer serves its transmitter's messages one after another; the
 * chunk array it hands the sink is valid during the write call only.
 */
class MessageFramer {
  arena: Uint8Array = new Uint8Array(0);
  /** Set while the sink's write runs: a message framed from inside it gets an array of its own. */
  emitting = false;
  private out: Uint8Array[] = [];
  private readonly reusable: Uint8Array[] = [];
  private headerSize = 0;
  private inline = false;
  private offset = 0;
  private spanStart = 0;
  private headerStart = 0;
  // The gather cursor: element index and offset into it.
  private views: readonly Uint8Array[] = NO_PAYLOAD;
  private index = 0;
  private viewOffset = 0;

  constructor(private readonly transmitter: Transmitter) {}

  begin(segments: number, headerSize: number, payload: readonly Uint8Array[], length: number): this {
    this.inline = segments === 1 && length <= INLINE_PAYLOAD && !this.transmitter.markers;
    this.arena = new Uint8Array(segments * (headerSize + 3 + CRC_LENGTH) + (this.inline ? length : 0));
    if (this.emitting) {
      this.out = [];
    } else {
      this.out = this.reusable;
      this.out.length = 0;
    }
    this.headerSize = headerSize;
    this.offset = 0;
    this.spanStart = 0;
    this.headerStart = 0;
    this.views = payload;
    this.index = 0;
    this.viewOffset = 0;
    return this;
  }

  /** Index in `arena` of the next segment's length field and headers. */
  header(): number {
    this.headerStart = this.offset;
    this.offset += this.headerSize;
    return this.headerStart;
  }

  /** Appends the segment's payload (views, or a copy when inline), PAD and CRC. */
  finishSegment(payloadBytes: number, ulpduLength: number): void {
    const arena = this.arena;
    const padding = fpduPadding(ulpduLength);
    if (this.transmitter.markers) {
      const ulpdu = new Uint8Array(ulpduLength);
      ulpdu.set(arena.subarray(this.headerStart + MPA_LENGTH_FIELD, this.headerStart + this.headerSize), 0);
      let position = this.headerSize - MPA_LENGTH_FIELD;
      for (const view of this.take(payloadBytes)) {
        ulpdu.set(view, position);
        position += view.length;
      }
      this.out.push(this.transmitter.frameWithMarkers(ulpdu));
      this.offset = this.headerStart;
      this.spanStart = this.offset;
      return;
    }
    const crcOn = this.transmitter.crc;
    let crc = crcOn ? crc32cUpdate(0, arena.subarray(this.headerStart, this.headerStart + this.headerSize)) : 0;
    if (payloadBytes > 0) {
      if (this.inline) {
        const start = this.offset;
        this.copyPayload(payloadBytes);
        if (crcOn) crc = crc32cUpdate(crc, arena.subarray(start, this.offset));
      } else {
        this.out.push(arena.subarray(this.spanStart, this.offset));
        let remaining = payloadBytes;
        while (remaining > 0) {
          const view = this.nextView(remaining);
          this.out.push(view);
          if (crcOn) crc = crc32cUpdate(crc, view);
          remaining -= view.length;
        }
        this.spanStart = this.offset;
      }
    }
    // The arena is zero-filled, so the PAD octets are already zero.
    if (crcOn) {
      if (padding > 0) crc = crc32cUpdate(crc, arena.subarray(this.offset, this.offset + padding));
      writeCrc(arena, this.offset + padding, crc);
    }
    this.offset += padding + CRC_LENGTH;
  }

  chunks(): Uint8Array[] {
    if (this.offset > this.spanStart) {
      const whole = this.spanStart === 0 && this.offset === this.arena.length;
      this.out.push(whole ? this.arena : this.arena.subarray(this.spanStart, this.offset));
    }
    return this.out;
  }

  /** The next piece of the gather list, at most `limit` octets: the element itself when it fits whole. */
  private nextView(limit: number): Uint8Array {
    for (;;) {
      const view = this.views[this.index];
      if (view === undefined) throw new RangeError('gather list shorter than the message length');
      const available = view.length - this.viewOffset;
      if (available === 0) {
        this.index++;
        this.viewOffset = 0;
        continue;
      }
      const bytes = Math.min(available, limit);
      const piece = this.viewOffset === 0 && bytes === view.length ? view : view.subarray(this.viewOffset, this.viewOffset + bytes);
      this.viewOffset += bytes;
      return piece;
    }
  }

  /** Copies `length` payload octets behind the header in the arena. */
  private copyPayload(length: number): void {
    let remaining = length;
    while (remaining > 0) {
      const view = this.nextView(remaining);
      this.arena.set(view, this.offset);
      this.offset += view.length;
      remaining -= view.length;
    }
  }

  private take(length: number): Uint8Array[] {
    const out: Uint8Array[] = [];
    let remaining = length;
    while (remaining > 0) {
      const view = this.nextView(remaining);
      out.push(view);
      remaining -= view.length;
    }
    return out;
  }
}
