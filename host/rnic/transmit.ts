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
  QN_SEND,
  QUEUE_COUNT,
  writeUint32,
} from './wire/ddp.ts';
import { FrameRing } from './frame-ring.ts';
import { setBytes, subarrayOf } from './uint8-methods.ts';
import { encodeFpduWithMarkers } from './wire/markers.ts';
import { fpduPadding, MPA_LENGTH_FIELD, MPA_MAX_ULPDU, MPA_MIN_MULPDU } from './wire/mpa.ts';
import { RdmapOpcode, rdmapControl } from './wire/rdmap.ts';
import { UsageError } from '../errors.ts';
import { COUNT_FROM } from '../util/counter.ts';

export type WriteDone = (error?: Error | null) => void;

/** Where framed bytes go: a TCP socket in production, a byte collector in tests. */
export interface ByteSink {
  /**
   * Queues `chunks[0..count)` in order; `done` runs once all of them reached the kernel (or
   * failed), and the writes' dones run in the order of the writes. The array is the
   * transmitter's, reused, and valid during the call only (entries past `count` are stale); the
   * chunks stay valid until `done`.
   */
  write(chunks: readonly Uint8Array[], count: number, done: WriteDone | undefined): void;
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
const WRITE_CONTROL = rdmapControl(RdmapOpcode.RdmaWrite);
const EMPTY = new Uint8Array(0);

export class Transmitter {
  readonly crc: boolean;
  readonly markers: boolean;
  readonly mulpdu: number;
  /** Next MSN per untagged queue; every queue starts at 1 (RFC 5041 §5.1). */
  private readonly nextMsn = new Uint32Array(QUEUE_COUNT).fill(1);
  /** Octets sent in full operation, for marker placement (COUNT_FROM: passes 2^31 after 2 GiB). */
  private streamOffset = COUNT_FROM;
  messagesSent = 0;
  bytesSent = COUNT_FROM;
  /** Lays out one message at a time (messages are framed one after another, never nested). */
  private readonly framer = new MessageFramer(this);

  constructor(
    private readonly sink: ByteSink,
    options: TransmitOptions,
  ) {
    if (!Number.isInteger(options.mulpdu) || options.mulpdu < MPA_MIN_MULPDU || options.mulpdu > MPA_MAX_ULPDU) {
      throw new UsageError(`MULPDU ${options.mulpdu} is outside ${MPA_MIN_MULPDU}..${MPA_MAX_ULPDU}`);
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
    // A number TO (below 2^53) is split without BigInt arithmetic, which allocates.
    const toHigh = typeof taggedOffset === 'number' ? Math.floor(taggedOffset / 0x1_0000_0000) : Number((taggedOffset >> 32n) & 0xffffffffn);
    const toLow = typeof taggedOffset === 'number' ? taggedOffset % 0x1_0000_0000 : Number(taggedOffset & 0xffffffffn);
    this.sendTaggedAt(opcode, stag, toHigh, toLow, payload, length, done);
  }

  /** sendTagged with the tagged offset as 32-bit halves (`toHigh` * 2^32 + `toLow`). */
  sendTaggedAt(opcode: number, stag: number, toHigh: number, toLow: number, payload: readonly Uint8Array[], length: number, done?: WriteDone): void {
    const headerSize = MPA_LENGTH_FIELD + DDP_TAGGED_HEADER_LENGTH;
    const perSegment = this.mulpdu - DDP_TAGGED_HEADER_LENGTH;
    const segments = Math.max(1, Math.ceil(length / perSegment));
    const framer = this.framer.begin(segments, headerSize, payload, length, done);
    const arena = framer.arena;
    const control = rdmapControl(opcode);
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
    this.emit(framer.chunks(), framer.count, length);
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
    const framer = this.framer.begin(segments, headerSize, payload, length, done);
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
    this.emit(framer.chunks(), framer.count, length);
    return msn;
  }

  /**
   * An RDMA Write of `data` to `stag` at TO `toHigh` * 2^32 + `toLow`, then a Send of `sendData`
   * on queue 0 (`sendOpcode`: Send or Send with Invalidate, `sendReserved` its invalidate STag or
   * 0): the FPDUs sendTaggedAt and sendUntagged would frame for them one after the other, laid out
   * in one ring reservation and handed to the sink in one write whose `done` stands for both (a
   * KBTP LOAD's data and COMPLETION; issue 16). No markers; the Send fits one FPDU. Returns its MSN.
   */
  sendWriteThenSend(
    stag: number,
    toHigh: number,
    toLow: number,
    data: Uint8Array,
    sendOpcode: number,
    sendReserved: number,
    sendData: Uint8Array,
    done: WriteDone,
  ): number {
    if (this.markers) throw new UsageError('sendWriteThenSend frames without markers');
    if (sendData.length > Math.min(INLINE_PAYLOAD, this.mulpdu - DDP_UNTAGGED_HEADER_LENGTH))
      throw new UsageError(`a Send of ${sendData.length} octets does not fit one FPDU of this stream`);
    const msn = this.nextMsn[QN_SEND]!;
    this.nextMsn[QN_SEND] = (msn + 1) >>> 0;
    const chunks = this.framer.writeThenSend(this.mulpdu, this.crc, stag, toHigh, toLow, data, rdmapControl(sendOpcode), sendReserved, msn, sendData, done);
    this.messagesSent++; // the Write; emit() counts the Send
    this.emit(chunks, this.framer.count, data.length + sendData.length);
    return msn;
  }

  /**
   * A Send-family message of `data` on queue 0 that fits one FPDU (at most INLINE_PAYLOAD octets),
   * as sendUntagged frames it, without the gather cursor: built whole in one ring reservation and
   * handed to the sink as one chunk. No markers. Returns its MSN.
   */
  sendSmall(opcode: number, reserved: number, data: Uint8Array, done: WriteDone): number {
    if (this.markers) throw new UsageError('sendSmall frames without markers');
    if (data.length > Math.min(INLINE_PAYLOAD, this.mulpdu - DDP_UNTAGGED_HEADER_LENGTH))
      throw new UsageError(`a Send of ${data.length} octets does not fit one FPDU of this stream`);
    const msn = this.nextMsn[QN_SEND]!;
    this.nextMsn[QN_SEND] = (msn + 1) >>> 0;
    const chunks = this.framer.small(this.crc, rdmapControl(opcode), reserved, msn, data, done);
    this.emit(chunks, 1, data.length);
    return msn;
  }

  /**
   * A Send-family message on queue 0 of `head` (at most INLINE_PAYLOAD octets) then `data`, that
   * fits one FPDU, as sendUntagged frames the two gathered: the headers and `head` in one ring
   * reservation, `data` handed to the sink as it is, then PAD and CRC (a KBTP inline STORE's
   * request and block; issue 16). No markers. Returns its MSN.
   */
  sendHeadAndData(opcode: number, reserved: number, head: Uint8Array, data: Uint8Array, done: WriteDone): number {
    if (this.markers) throw new UsageError('sendHeadAndData frames without markers');
    if (head.length > INLINE_PAYLOAD || head.length + data.length > this.mulpdu - DDP_UNTAGGED_HEADER_LENGTH)
      throw new UsageError(`a Send of ${head.length} + ${data.length} octets does not fit one FPDU of this stream`);
    const msn = this.nextMsn[QN_SEND]!;
    this.nextMsn[QN_SEND] = (msn + 1) >>> 0;
    const chunks = this.framer.headAndData(this.crc, rdmapControl(opcode), reserved, msn, head, data, done);
    this.emit(chunks, this.framer.count, head.length + data.length);
    return msn;
  }

  /** Sends an already built ULPDU as one FPDU (used for Terminate). */
  sendUlpdu(ulpdu: Uint8Array, done?: WriteDone): void {
    const framer = this.framer.begin(1, MPA_LENGTH_FIELD + ulpdu.length, NO_PAYLOAD, 0, done);
    const at = framer.header();
    framer.arena[at] = ulpdu.length >> 8;
    framer.arena[at + 1] = ulpdu.length & 0xff;
    framer.arena.set(ulpdu, at + MPA_LENGTH_FIELD);
    framer.finishSegment(0, ulpdu.length);
    this.emit(framer.chunks(), framer.count, 0);
  }

  /** Frames one ULPDU with markers at the current stream position and advances it. */
  frameWithMarkers(ulpdu: Uint8Array): Uint8Array {
    const framed = encodeFpduWithMarkers(ulpdu, this.streamOffset, this.crc);
    this.streamOffset = framed.nextStreamOffset;
    return framed.bytes;
  }

  /**
   * A write the sink completed (sinks complete writes in order): the oldest message's ring space
   * is free again, and its sender learns it was sent.
   */
  private readonly written = (error?: Error | null): void => {
    const done = this.framer.ring.release();
    if (done !== undefined) done(error);
  };

  private emit(chunks: readonly Uint8Array[], count: number, payloadLength: number): void {
    this.messagesSent++;
    this.bytesSent += payloadLength;
    this.framer.emitting = true;
    try {
      this.sink.write(chunks, count, this.written);
    } finally {
      this.framer.emitting = false;
      this.framer.forget();
    }
  }
}

/** Payloads up to this long, in one segment, are copied behind their header: one chunk, no views. */
const INLINE_PAYLOAD = 4096;

/** Ring space for headers, trailers and short messages: many turns' worth of small messages. */
const RING_CAPACITY = 256 * 1024;

/**
 * Lays out one message's FPDUs: headers and trailers share one reservation in the frame ring,
 * and a trailer and the next header are adjacent so they leave as one chunk between the payload
 * views. A short single-segment message is built whole in that reservation instead (a
 * COMPLETION, a request: one chunk). With markers the FPDU is built contiguously (markers may
 * split any part of it). One framer serves its transmitter's messages one after another; the
 * chunk array it hands the sink is valid during the write call only.
 */
class MessageFramer {
  arena: Uint8Array = new Uint8Array(0);
  /** Where `arena` comes from; released as the sink completes each message's write. */
  readonly ring = new FrameRing(RING_CAPACITY);
  /** This message's first octet in `arena`, and its end. */
  private base = 0;
  private end = 0;
  /** Set while the sink's write runs: a message framed from inside it gets an array of its own. */
  emitting = false;
  private out: Uint8Array[] = [];
  /** Chunks of the message in `out`. */
  count = 0;
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

  begin(segments: number, headerSize: number, payload: readonly Uint8Array[], length: number, done: WriteDone | undefined): this {
    this.inline = segments === 1 && length <= INLINE_PAYLOAD && !this.transmitter.markers;
    const size = segments * (headerSize + 3 + CRC_LENGTH) + (this.inline ? length : 0);
    this.arena = this.ring.reserve(size, done);
    this.base = this.ring.start;
    this.end = this.base + size;
    if (this.emitting) {
      this.out = [];
    } else {
      // Entries are overwritten, never truncated: `length = 0` would free the array's storage
      // and the next message would allocate it again.
      this.out = this.reusable;
    }
    this.count = 0;
    this.headerSize = headerSize;
    this.offset = this.base;
    this.spanStart = this.base;
    this.headerStart = this.base;
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
      this.out[this.count++] = this.transmitter.frameWithMarkers(ulpdu);
      this.offset = this.headerStart;
      this.spanStart = this.offset;
      return;
    }
    const crcOn = this.transmitter.crc;
    let crc = crcOn ? crc32cUpdate(0, this.span(this.headerStart, this.headerStart + this.headerSize)) : 0;
    if (payloadBytes > 0) {
      if (this.inline) {
        const start = this.offset;
        this.copyPayload(payloadBytes);
        if (crcOn) crc = crc32cUpdate(crc, this.span(start, this.offset));
      } else {
        this.out[this.count++] = this.span(this.spanStart, this.offset);
        let remaining = payloadBytes;
        while (remaining > 0) {
          const view = this.nextView(remaining);
          this.out[this.count++] = view;
          if (crcOn) crc = crc32cUpdate(crc, view);
          remaining -= view.length;
        }
        this.spanStart = this.offset;
      }
    }
    // Ring space is reused: PAD (and the CRC field when CRCs are off) must be zeroed. At most 7
    // octets: a loop, not TypedArray fill(), which optimized code reaches only through a call
    // into the runtime's C++ (issue 16: on both sides' profiles once per message).
    const zeroEnd = this.offset + padding + (crcOn ? 0 : CRC_LENGTH);
    for (let i = this.offset; i < zeroEnd; i++) arena[i] = 0;
    if (crcOn) {
      if (padding > 0) crc = crc32cUpdate(crc, this.span(this.offset, this.offset + padding));
      writeCrc(arena, this.offset + padding, crc);
    }
    this.offset += padding + CRC_LENGTH;
  }

  /**
   * Transmitter.sendWriteThenSend's layout: the Write's segments as sendTaggedAt frames them (a
   * header, the payload as a view or, one segment of at most INLINE_PAYLOAD, copied, then PAD and
   * CRC), the whole Send behind them. The header, the trailers and the Send are written straight
   * into one reservation; the payload views go between.
   */
  writeThenSend(
    mulpdu: number,
    crcOn: boolean,
    stag: number,
    toHigh: number,
    toLow: number,
    data: Uint8Array,
    sendControl: number,
    sendReserved: number,
    msn: number,
    sendData: Uint8Array,
    done: WriteDone,
  ): Uint8Array[] {
    const length = data.length;
    const perSegment = mulpdu - DDP_TAGGED_HEADER_LENGTH;
    const segments = Math.max(1, Math.ceil(length / perSegment));
    const inline = segments === 1 && length <= INLINE_PAYLOAD;
    const sendUlpdu = DDP_UNTAGGED_HEADER_LENGTH + sendData.length;
    const size =
      segments * (MPA_LENGTH_FIELD + DDP_TAGGED_HEADER_LENGTH + 3 + CRC_LENGTH) + (inline ? length : 0) + MPA_LENGTH_FIELD + sendUlpdu + 3 + CRC_LENGTH;
    const arena = this.ring.reserve(size, done);
    this.arena = arena;
    const out = this.emitting ? [] : this.reusable;
    this.out = out;
    let count = 0;
    let at = this.ring.start;
    let spanStart = at;
    let sent = 0;
    for (let segment = 0; segment < segments; segment++) {
      const bytes = Math.min(perSegment, length - sent);
      const ulpduLength = DDP_TAGGED_HEADER_LENGTH + bytes;
      const header = at;
      arena[at] = ulpduLength >> 8;
      arena[at + 1] = ulpduLength & 0xff;
      arena[at + 2] = DDP_FLAG_TAGGED | (segment === segments - 1 ? DDP_FLAG_LAST : 0) | DDP_VERSION;
      arena[at + 3] = WRITE_CONTROL;
      writeUint32(arena, at + 4, stag);
      const low = toLow + sent;
      writeUint32(arena, at + 8, (toHigh + Math.floor(low / 0x1_0000_0000)) >>> 0);
      writeUint32(arena, at + 12, low >>> 0);
      at += MPA_LENGTH_FIELD + DDP_TAGGED_HEADER_LENGTH;
      let crc = crcOn ? crc32cUpdate(0, this.span(header, at)) : 0;
      if (bytes > 0) {
        const piece = bytes === length ? data : subarrayOf.call(data, sent, sent + bytes);
        if (inline) {
          setBytes.call(arena, piece, at);
          if (crcOn) crc = crc32cUpdate(crc, this.span(at, at + bytes));
          at += bytes;
        } else {
          out[count++] = this.span(spanStart, at);
          out[count++] = piece;
          if (crcOn) crc = crc32cUpdate(crc, piece);
          spanStart = at;
        }
      }
      at = this.trailer(arena, at, fpduPadding(ulpduLength), crcOn, crc);
      sent += bytes;
    }
    at = this.untaggedSend(arena, at, crcOn, sendControl, sendReserved, msn, sendData);
    out[count++] = spanStart === 0 && at === arena.length ? arena : this.span(spanStart, at);
    this.count = count;
    return out;
  }

  /** Transmitter.sendSmall's layout: the whole FPDU in one reservation, one chunk. */
  small(crcOn: boolean, control: number, reserved: number, msn: number, data: Uint8Array, done: WriteDone): Uint8Array[] {
    const size = MPA_LENGTH_FIELD + DDP_UNTAGGED_HEADER_LENGTH + data.length + 3 + CRC_LENGTH;
    const arena = this.ring.reserve(size, done);
    this.arena = arena;
    const out = this.emitting ? [] : this.reusable;
    this.out = out;
    const start = this.ring.start;
    const end = this.untaggedSend(arena, start, crcOn, control, reserved, msn, data);
    out[0] = start === 0 && end === arena.length ? arena : this.span(start, end);
    this.count = 1;
    return out;
  }

  /** Transmitter.sendHeadAndData's layout: the headers and `head` in one reservation, `data` as its own chunk, then PAD and CRC. */
  headAndData(crcOn: boolean, control: number, reserved: number, msn: number, head: Uint8Array, data: Uint8Array, done: WriteDone): Uint8Array[] {
    const ulpduLength = DDP_UNTAGGED_HEADER_LENGTH + head.length + data.length;
    const arena = this.ring.reserve(MPA_LENGTH_FIELD + DDP_UNTAGGED_HEADER_LENGTH + head.length + 3 + CRC_LENGTH, done);
    this.arena = arena;
    const out = this.emitting ? [] : this.reusable;
    this.out = out;
    const start = this.ring.start;
    // untaggedSend's header with the data's length in it, written here: as a function shared with
    // untaggedSend it was not inlined into small() (277 instructions of its own per COMPLETION in
    // one callgrind run, against 222 in writeUint32 calls without it): no gain either way measured,
    // and small() is the hot path of every COMPLETION and request, so it stays as it was.
    arena[start] = ulpduLength >> 8;
    arena[start + 1] = ulpduLength & 0xff;
    arena[start + 2] = DDP_FLAG_LAST | DDP_VERSION;
    arena[start + 3] = control;
    writeUint32(arena, start + 4, reserved);
    writeUint32(arena, start + 8, QN_SEND);
    writeUint32(arena, start + 12, msn);
    writeUint32(arena, start + 16, 0);
    let at = start + MPA_LENGTH_FIELD + DDP_UNTAGGED_HEADER_LENGTH;
    if (head.length > 0) setBytes.call(arena, head, at);
    at += head.length;
    let crc = crcOn ? crc32cUpdate(0, this.span(start, at)) : 0;
    out[0] = this.span(start, at);
    let count = 1;
    if (data.length > 0) {
      out[count++] = data;
      if (crcOn) crc = crc32cUpdate(crc, data);
    }
    out[count++] = this.span(at, this.trailer(arena, at, fpduPadding(ulpduLength), crcOn, crc));
    this.count = count;
    return out;
  }

  /** An untagged Send-family FPDU on queue 0 carrying `data` (one segment, MO 0) written at `at`; returns its end. */
  private untaggedSend(arena: Uint8Array, at: number, crcOn: boolean, control: number, reserved: number, msn: number, data: Uint8Array): number {
    const ulpduLength = DDP_UNTAGGED_HEADER_LENGTH + data.length;
    const header = at;
    arena[at] = ulpduLength >> 8;
    arena[at + 1] = ulpduLength & 0xff;
    arena[at + 2] = DDP_FLAG_LAST | DDP_VERSION;
    arena[at + 3] = control;
    writeUint32(arena, at + 4, reserved);
    writeUint32(arena, at + 8, QN_SEND);
    writeUint32(arena, at + 12, msn);
    writeUint32(arena, at + 16, 0);
    at += MPA_LENGTH_FIELD + DDP_UNTAGGED_HEADER_LENGTH;
    if (data.length > 0) setBytes.call(arena, data, at);
    at += data.length;
    return this.trailer(arena, at, fpduPadding(ulpduLength), crcOn, crcOn ? crc32cUpdate(0, this.span(header, at)) : 0);
  }

  /** PAD and the CRC field at `at` (the CRC over the FPDU so far, `crc`, finished with the PAD); returns the FPDU's end. */
  private trailer(arena: Uint8Array, at: number, padding: number, crcOn: boolean, crc: number): number {
    // Ring space is reused: PAD (and the CRC field when CRCs are off) must be zeroed (see finishSegment).
    const zeroEnd = at + padding + (crcOn ? 0 : CRC_LENGTH);
    for (let i = at; i < zeroEnd; i++) arena[i] = 0;
    if (crcOn) writeCrc(arena, at + padding, padding > 0 ? crc32cUpdate(crc, this.span(at, at + padding)) : crc);
    return at + padding + CRC_LENGTH;
  }

  chunks(): Uint8Array[] {
    if (this.offset > this.spanStart) {
      const whole = this.spanStart === 0 && this.offset === this.arena.length && this.arena.length === this.end;
      this.out[this.count++] = whole ? this.arena : this.span(this.spanStart, this.offset);
    }
    return this.out;
  }

  /** `arena[start, end)` as a view; the ring's views are reused (FrameRing.view). */
  private span(start: number, end: number): Uint8Array {
    return this.ring.view(this.arena, start, end - start);
  }

  /** Drops the references to the last message's chunks (the sink holds its own now). */
  forget(): void {
    for (let i = 0; i < this.count; i++) this.out[i] = EMPTY;
    this.views = NO_PAYLOAD;
  }

  /** The next piece of the gather list, at most `limit` octets: the element itself when it fits whole. */
  private nextView(limit: number): Uint8Array {
    for (;;) {
      const view = this.views[this.index];
      if (view === undefined) throw new UsageError('gather list shorter than the message length');
      const available = view.length - this.viewOffset;
      if (available === 0) {
        this.index++;
        this.viewOffset = 0;
        continue;
      }
      const bytes = Math.min(available, limit);
      const piece = this.viewOffset === 0 && bytes === view.length ? view : subarrayOf.call(view, this.viewOffset, this.viewOffset + bytes);
      this.viewOffset += bytes;
      return piece;
    }
  }

  /** Copies `length` payload octets behind the header in the arena. */
  private copyPayload(length: number): void {
    let remaining = length;
    while (remaining > 0) {
      const view = this.nextView(remaining);
      setBytes.call(this.arena, view, this.offset);
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
