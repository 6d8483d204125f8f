// The receive half of one RDMAP stream: finds FPDUs in the TCP byte stream, removes markers,
// checks lengths, DDP fields and CRC, and places payload straight into the memory the RDMAP
// layer (the QP, through ReceiveSink) names for it. With a socket whose reads land in a buffer
// chosen per read (`readBuffer()` / `commit()`), a large tagged or Send payload is read by the
// kernel directly into the registered region; small FPDUs are batched through a staging buffer.
//
// Every byte is accounted for by a fixed-size state (header, payload, trailer, marker), so any
// input makes progress, memory stays bounded, and the first error stops the stream for good.

import { CRC_LENGTH, crc32cUpdate, readCrc } from './wire/crc.ts';
import {
  DDP_ECODE_CATASTROPHIC,
  DDP_ETYPE_CATASTROPHIC,
  DDP_FLAG_LAST,
  DDP_FLAG_TAGGED,
  DDP_TAGGED_HEADER_LENGTH,
  DDP_UNTAGGED_HEADER_LENGTH,
  QN_SEND,
  QUEUE_COUNT,
  readUint32,
} from './wire/ddp.ts';
import { decodeMarker, MARKER_INTERVAL, MARKER_LENGTH } from './wire/markers.ts';
import { fpduPadding, MPA_ERROR_CONNECTION_LOST, MPA_ERROR_CRC, MPA_ERROR_MARKER, MPA_LENGTH_FIELD, MPA_MAX_ULPDU } from './wire/mpa.ts';
import { LLP_ETYPE_MPA, TerminateLayer, untaggedQueueOf } from './wire/rdmap.ts';
import { copyPayload } from './payload-copy.ts';
import {
  controlOctetsFault,
  controlSegmentFault,
  isControlOpcode,
  queueFault,
  sendSegmentFault,
  taggedContinuationFault,
  ulpduLengthFault,
} from './receive-checks.ts';
import { commitEnded, commitStarted, newStagingBuffer, sharedStagingBuffer, STAGING_SIZE, type StagingBuffer } from './receive-staging.ts';
import { FRAMING_BETWEEN_PAYLOADS, type VectorCursor, VectoredRead } from './receive-vector.ts';
import { BufferViews } from './receive-views.ts';
import type { TerminateCause } from './terminate.ts';
import { COUNT_FROM } from '../util/counter.ts';
import type { ViewCache } from './view-cache.ts';

/** What the receive path asks of the RDMAP layer above it (implemented by the QP). */
export interface ReceiveSink {
  /**
   * A tagged segment (RDMA Write or Read Response) passed the DDP checks; its tagged offset is
   * `toHigh` * 2^32 + `toLow` (halves, so no BigInt per segment). Returns the view its `length`
   * payload octets go to, or undefined after calling `receiver.fail()`. A longer view (a Read
   * Response's: the rest of the Read's sink) is the message's own destination; the receiver
   * may borrow the memory past the payload inside it until the message's last segment.
   * Zero-length segments must not have their STag or TO checked.
   */
  placeTagged(opcode: number, stag: number, toHigh: number, toLow: number, length: number, first: boolean, last: boolean): Uint8Array | undefined;
  /**
   * A Send-family segment. Returns the first view for its payload (may be shorter than `length`
   * when the receive buffer is scattered; `nextSendView` supplies the rest), or undefined after
   * calling `receiver.fail()`.
   */
  placeSend(opcode: number, messageOffset: number, length: number, first: boolean, invalidateStag: number, last: boolean): Uint8Array | undefined;
  nextSendView(): Uint8Array | undefined;
  /** The last segment of a tagged message arrived intact. */
  taggedMessageDone(opcode: number, stag: number): void;
  /** The last segment of a Send-family message arrived intact. */
  sendMessageDone(opcode: number, messageLength: number, invalidateStag: number, msn: number): void;
  /** A single-FPDU control message arrived intact; `fpdu` holds its length field and ULPDU. */
  controlMessage(opcode: number, fpdu: Uint8Array): void;
  /** The stream failed; the sink sends a Terminate for `cause` and closes. */
  receiveFailed(cause: TerminateCause): void;
  /**
   * Whether the view last returned for a segment runs exactly to the end of its message's
   * destination, memory nobody else reads or writes before the message completes (a Read
   * Response's: the rest of the Read's sink; a steered receive's last element). The receiver
   * may then read several of the message's segments at once into it, guessing where they fall,
   * and place again what it guessed wrong. Absent: never.
   */
  viewHoldsMessageEnd?(): boolean;
}

export interface ReceiveOptions {
  crc: boolean;
  /** The peer inserts markers (we asked with M=1). */
  markers: boolean;
  /** Largest ULPDU accepted (default 64768, the most DDP may send). */
  maxUlpdu?: number;
}

/**
 * Payloads up to this long are copied octet by octet (cheaper than creating views for a bulk
 * copy). Longer ones go through copyPayload with the staging buffer's cached views: the octet
 * loop cost about 25 instructions an octet, some 3,000 per 16 KiB LOAD for its two 64-octet
 * messages (the request, the COMPLETION), where TypedArray set() costs a few hundred (issue 16,
 * session 10, callgrind).
 */
const SMALL_COPY = 16;
/** Payloads at least this long are read by the kernel straight into their target. */
export const DIRECT_PLACEMENT_MIN = 32 * 1024;
/** Small FPDUs that may follow a large one before reads go back to filling the staging buffer. */
const BULK_CREDIT = 4;
/**
 * Octets a staged read of a message's end (its last FPDU's payload tail, or its PAD and CRC) takes
 * past the next FPDU's prefix. A small message that follows (a client's COMPLETION Send
 * after the RDMA Write of its block, 60 octets here; an Immediate Data or Terminate) then comes in
 * the same read instead of one or two more; a large one costs a copy of this many payload
 * octets, after which the kernel places the rest as before (issue 16: a 256 KiB LOAD took 7 reads
 * on the client, 1 of them for the COMPLETION alone).
 */
const MESSAGE_END_SLACK = 256;
/** Length field plus the longest header collected whole (Atomic Request, full Terminate). */
const HEADER_BUFFER_SIZE = MPA_LENGTH_FIELD + DDP_UNTAGGED_HEADER_LENGTH + 52;
const TAGGED_PREFIX = MPA_LENGTH_FIELD + DDP_TAGGED_HEADER_LENGTH;
/** The same for an untagged FPDU (a Send's segments): its header is 4 octets longer. */
const UNTAGGED_PREFIX = MPA_LENGTH_FIELD + DDP_UNTAGGED_HEADER_LENGTH;
/**
 * Octets a direct payload read may take past the payload: the FPDU's PAD and CRC field and the
 * next FPDU's prefix (length field and DDP/RDMAP header), so a large message costs one read per
 * FPDU instead of two or three.
 */
const OVERREAD_MAX = FRAMING_BETWEEN_PAYLOADS;

const State = { Header: 0, Payload: 1, Trailer: 2, Dead: 3 } as const;
type State = (typeof State)[keyof typeof State];

export class FpduReceiver {
  private state: State = State.Header;
  private readonly crcEnabled: boolean;
  private readonly markersEnabled: boolean;
  private readonly maxUlpdu: number;
  private readonly header = new Uint8Array(HEADER_BUFFER_SIZE);
  /** Views of `header` by length, made once: a control message's header goes to the sink as one. */
  private readonly headerViews: Array<Uint8Array | undefined> = [];
  private readonly trailer = new Uint8Array(3 + CRC_LENGTH);
  private readonly markerBytes = new Uint8Array(MARKER_LENGTH);

  // Current FPDU.
  private headerHave = 0;
  private headerNeed = 4;
  private ulpduLength = 0;
  private opcode = 0;
  private tagged = false;
  private last = false;
  private control = false;
  private payloadRemaining = 0;
  private payloadLength = 0;
  private trailerHave = 0;
  private trailerNeed = 0;
  private padding = 0;
  private crc = 0;
  /** A stream offset (COUNT_FROM: passes 2^31 after 2 GiB). */
  private fpduStartOffset = COUNT_FROM;
  private markerMismatch = false;
  private pendingError: TerminateCause | undefined;
  private target: Uint8Array | undefined;
  private targetPosition = 0;
  private discard = false;
  private segmentStag = 0;
  private segmentToHigh = 0;
  private segmentToLow = 0;
  private segmentMessageOffset = 0;
  private segmentInvalidateStag = 0;

  // Stream-wide DDP state.
  /** Octets received in full operation (COUNT_FROM: passes 2^31 after 2 GiB). */
  private streamOffset = COUNT_FROM;
  private markerRemaining = 0;
  private readonly expectedMsn = new Uint32Array(QUEUE_COUNT).fill(1);
  private sendInProgress = false;
  private sendOpcode = 0;
  private sendReceived = 0;
  private taggedInProgress = false;
  private taggedOpcode = 0;
  private taggedStag = 0;
  /** Where the tagged message in progress continues (TO halves). */
  private taggedNextHigh = 0;
  private taggedNextLow = 0;
  /**
   * Large FPDUs were seen recently, so reads stop exactly where a payload starts and the kernel
   * places it. Kept for a few small FPDUs (a large message's short last segment, a Send after
   * Writes) so one of them does not turn the next large payload into a staged copy.
   */
  private bulk = false;
  private bulkCredit = 0;
  /** How much of the last Send's first segment its first element took when that was less (see stagingWant), else 0. */
  private sendHead = 0;
  /** Whether the last message that followed a tagged / an untagged message began with a tagged FPDU (nextPrefix). */
  private taggedAfterTagged = true;
  private taggedAfterUntagged = true;
  /** The view handed out by the last `readBuffer()` when it was a direct placement target. */
  private directView: Uint8Array | undefined;
  /** Octets of `directView` past the payload (memory after it, saved in `overreadSaved`), or 0. */
  private directExtra = 0;
  private readonly overreadSaved = new Uint8Array(OVERREAD_MAX);
  /** What a direct read brought past its payload, consumed from here like a staging read. */
  private readonly overreadBytes = new Uint8Array(OVERREAD_MAX);
  /** Views of the targets' buffers for direct reads and CRC: none made per FPDU. */
  private readonly views = new BufferViews();
  /** Reads ahead of the stream into several buffers at once (readVector / commitVector). */
  private readonly vectored = new VectoredRead(this.views, DIRECT_PLACEMENT_MIN);
  /** What the vectored read's commit may do to this receiver (made once: no closure per read). */
  private readonly vectorCursor: VectorCursor = {
    dead: () => this.state === State.Dead,
    landedInPlace: (buffer, got) => this.landedInPlace(buffer, got),
    placed: (length) => this.placed(length),
    consume: (source, start, end) => {
      this.consume(source, start, end);
    },
    awaitsHeaderRest: (length) => this.state === State.Header && this.headerHave === 4 && this.headerNeed === length,
  };
  /** The staging buffer handed out by the last `readBuffer()` otherwise. */
  private readStaging: StagingBuffer | undefined;
  /** Used only when a receiver is fed from inside another receiver's commit. */
  private ownStaging: StagingBuffer | undefined;

  fpdusReceived = 0;
  messagesReceived = 0;
  payloadBytesReceived = COUNT_FROM;

  constructor(
    private readonly sink: ReceiveSink,
    options: ReceiveOptions,
  ) {
    this.crcEnabled = options.crc;
    this.markersEnabled = options.markers;
    this.maxUlpdu = options.maxUlpdu ?? MPA_MAX_ULPDU;
  }

  get dead(): boolean {
    return this.state === State.Dead;
  }

  /** Whether FPDUs carry a CRC that is checked (MPA CRC negotiated). */
  get crcChecked(): boolean {
    return this.crcEnabled;
  }

  /** True when the stream is between FPDUs (a close here loses nothing). */
  get atBoundary(): boolean {
    return this.state === State.Header && this.headerHave === 0 && this.markerRemaining === 0;
  }

  /** The buffer the next socket read should fill. */
  readBuffer(): Uint8Array {
    if (this.state === State.Payload && !this.discard && this.target !== undefined && this.markerRemaining === 0) {
      let length = Math.min(this.payloadRemaining, this.target.length - this.targetPosition);
      if (this.markersEnabled) length = Math.min(length, MARKER_INTERVAL - (this.streamOffset % MARKER_INTERVAL));
      if (length >= DIRECT_PLACEMENT_MIN) {
        const extra = length === this.payloadRemaining && !this.markersEnabled && !this.last ? this.overreadRoom(this.target, length) : 0;
        this.directExtra = extra;
        const view = this.views.within(this.target, this.targetPosition, length + extra);
        const saved = this.overreadSaved;
        for (let i = 0; i < extra; i++) saved[i] = view[length + i]!;
        this.directView = view;
        return view;
      }
    }
    this.directView = undefined;
    let staging = sharedStagingBuffer();
    if (staging === undefined) {
      if (this.ownStaging === undefined) this.ownStaging = newStagingBuffer();
      staging = this.ownStaging;
    }
    this.readStaging = staging;
    return staging.readView(this.stagingWant());
  }

  /** `length` octets were written into the buffer returned by the last `readBuffer()`. */
  commit(length: number): void {
    if (length <= 0) return;
    const direct = this.directView;
    this.directView = undefined;
    if (direct !== undefined && this.state === State.Payload) {
      const payload = direct.length - this.directExtra;
      if (length <= payload) {
        this.placed(length);
        return;
      }
      // The read ran past the payload into the memory after it: take those octets out and put
      // that memory back before anything else runs (it is not shared, see overreadRoom).
      const over = length - payload;
      const bytes = this.overreadBytes;
      for (let i = 0; i < over; i++) bytes[i] = direct[payload + i]!;
      const saved = this.overreadSaved;
      for (let i = 0; i < this.directExtra; i++) direct[payload + i] = saved[i]!;
      this.placed(payload);
      this.consume(bytes, 0, over);
      return;
    }
    const staging = this.readStaging;
    if (staging === undefined) return;
    this.readStaging = undefined;
    commitStarted();
    try {
      this.consume(staging.bytes, 0, Math.min(length, STAGING_SIZE), staging.views);
    } finally {
      commitEnded();
    }
  }

  /**
   * Buffers for one vectored read (readv) continuing the stream, or undefined when a plain
   * read suits as well (receive-vector.ts). Offered inside a large payload of a message whose
   * destination runs to the message's end (ReceiveSink.viewHoldsMessageEnd); the next read then
   * starts at a payload again, as after a direct read.
   */
  readVector(): Uint8Array[] | undefined {
    const target = this.target;
    const offered =
      this.state === State.Payload &&
      !this.discard &&
      target !== undefined &&
      !this.markersEnabled &&
      !this.last &&
      this.payloadRemaining >= DIRECT_PLACEMENT_MIN &&
      this.sink.viewHoldsMessageEnd?.() === true;
    if (!offered) {
      this.vectored.clear();
      return undefined;
    }
    const prefix = this.tagged ? TAGGED_PREFIX : UNTAGGED_PREFIX;
    return this.vectored.plan(target, this.targetPosition, this.payloadRemaining, this.padding, this.payloadLength, prefix, this.nextPrefixAfter(this.tagged));
  }

  /** `length` octets were read into the buffers readVector() returned, in order (receive-vector.ts). */
  commitVector(length: number): void {
    this.vectored.commit(length, this.vectorCursor);
  }

  /** Whether `got` octets read into `buffer` are exactly where the current segment's next payload octets go (VectorCursor). */
  private landedInPlace(buffer: Uint8Array, got: number): boolean {
    const target = this.target;
    const exact = got === buffer.length ? got === this.payloadRemaining : got <= this.payloadRemaining;
    return (
      exact &&
      this.state === State.Payload &&
      !this.discard &&
      target !== undefined &&
      target.buffer === buffer.buffer &&
      target.byteOffset + this.targetPosition === buffer.byteOffset &&
      got <= target.length - this.targetPosition
    );
  }

  /**
   * The peer closed its sending side. A close between FPDUs is orderly; inside one it is a
   * truncated stream (MPA error 1, "TCP connection closed").
   */
  end(): void {
    if (this.state === State.Dead) return;
    if (!this.atBoundary) {
      this.report({
        layer: TerminateLayer.Llp,
        errorType: LLP_ETYPE_MPA,
        errorCode: MPA_ERROR_CONNECTION_LOST,
        reason: `stream ended inside an FPDU (${this.describePosition()})`,
      });
      return;
    }
    this.state = State.Dead;
  }

  /** Stops processing without reporting (the connection is being torn down). */
  stop(): void {
    this.state = State.Dead;
    this.target = undefined;
  }

  /**
   * Called by the sink while a segment is being placed: the segment is invalid. The error is
   * reported once the FPDU's CRC has been checked (a corrupted header is a CRC error, not the
   * error it seems to show), or at once when CRC is off.
   */
  fail(layer: number, errorType: number, errorCode: number, reason: string): void {
    if (this.state === State.Dead || this.pendingError !== undefined) return;
    this.pendingError = { layer, errorType, errorCode, reason, failedFpdu: this.header.slice(0, this.headerHave) };
    this.discard = true;
    this.target = undefined;
  }

  /** Reports an error found after the FPDU completed (e.g. by the QP processing a message). */
  failMessage(cause: TerminateCause): void {
    this.report(cause);
  }

  private report(cause: TerminateCause): void {
    if (this.state === State.Dead) return;
    this.state = State.Dead;
    this.target = undefined;
    this.sink.receiveFailed(cause);
  }

  private describePosition(): string {
    if (this.markerRemaining > 0) return `${MARKER_LENGTH - this.markerRemaining} of 4 marker octets`;
    switch (this.state) {
      case State.Header:
        return `${this.headerHave} of ${this.headerNeed} header octets`;
      case State.Payload:
        return `${this.payloadLength - this.payloadRemaining} of ${this.payloadLength} payload octets`;
      default:
        return `${this.trailerHave} of ${this.trailerNeed} PAD and CRC octets`;
    }
  }

  /**
   * How many octets after the `length` payload octets at the current position of `target` a
   * read may also fill: the rest of the FPDU and the next one's tagged prefix, when the memory
   * there exists and is not shared. Only asked for an FPDU that is not the last of its message
   * (DDP L=0): the memory after it is then the same message's destination, which the next FPDU
   * fills and nobody may read or write before the message completes. After a message's last
   * FPDU it could be anyone's: the application's neighbouring block, which it may write between
   * this readBuffer() (Node asks for the next read's buffer right after the previous read) and
   * the read, so the octets put back would undo its write. Its previous contents are saved and put back by commit()
   * before anything else on this thread runs; memory other threads may use (a pool in a
   * SharedArrayBuffer) is never borrowed, since they could see or write it meanwhile.
   */
  private overreadRoom(target: Uint8Array, length: number): number {
    const buffer = target.buffer;
    const want = this.padding + CRC_LENGTH + this.nextPrefix();
    if (typeof SharedArrayBuffer !== 'undefined' && buffer instanceof SharedArrayBuffer) {
      // Only the view the sink gave for this message: a Send's is the rest of its posted receive
      // buffer, which by verbs rules nobody else touches before the receive completes (a
      // target's request context, issue 16: a 256 KiB inline STORE took 15 reads, now 6); a
      // Read Response's the rest of the Read's sink; an RDMA Write's exactly its payload, so
      // nothing is borrowed there (a one-sided writer's neighbours may be in use).
      return Math.max(0, Math.min(want, target.length - (this.targetPosition + length)));
    }
    const after = buffer.byteLength - (target.byteOffset + this.targetPosition + length);
    return Math.max(0, Math.min(want, after));
  }

  /**
   * The prefix to read with the end of the current (or just finished) FPDU, so that the next
   * FPDU's header comes in the same read: a segment that is not its message's last is followed
   * by the message's next one, of the same kind; after a message's last segment, by whatever
   * kind of message followed the previous message of this kind (learned: a target's requests
   * follow each other, a client's COMPLETION follows its RDMA Write). A wrong guess costs one
   * more read, or a few payload octets staged instead of placed by the kernel.
   */
  private nextPrefix(): number {
    if (!this.last) return this.tagged ? TAGGED_PREFIX : UNTAGGED_PREFIX;
    return this.nextPrefixAfter(this.tagged);
  }

  /** The prefix of the message expected after one that was tagged or not. */
  private nextPrefixAfter(tagged: boolean): number {
    return (tagged ? this.taggedAfterTagged : this.taggedAfterUntagged) ? TAGGED_PREFIX : UNTAGGED_PREFIX;
  }

  private stagingWant(): number {
    if (!this.bulk) return STAGING_SIZE;
    let want: number;
    switch (this.state) {
      case State.Header:
        if (this.headerHave >= 4) {
          want = this.headerNeed - this.headerHave;
          break;
        }
        want = this.nextPrefix() - this.headerHave;
        // A Send whose first octets went to a short first element (an early-steered STORE's
        // header, work.ts steerAt) comes with them in this read when the next message is such a
        // Send: the rest then goes straight to where steer() points.
        if (this.headerHave === 0 && !this.sendInProgress && !this.taggedInProgress && want === UNTAGGED_PREFIX) want += this.sendHead;
        break;
      case State.Payload:
        // A target that ends inside the payload (a steered receive's header element) is read to
        // its end only: what follows goes to the next element, straight from the socket when large.
        if (this.target !== undefined && this.target.length - this.targetPosition < this.payloadRemaining) {
          return Math.max(1, this.target.length - this.targetPosition);
        }
        want = this.payloadRemaining + this.padding + CRC_LENGTH + this.nextPrefix();
        break;
      case State.Trailer:
        want = this.trailerNeed - this.trailerHave + this.nextPrefix();
        break;
      default:
        want = STAGING_SIZE;
    }
    if (this.markerRemaining > 0) want += this.markerRemaining;
    if (this.last && (this.state === State.Payload || this.state === State.Trailer)) want += MESSAGE_END_SLACK;
    return Math.max(1, Math.min(STAGING_SIZE, want));
  }

  /** `header[0, length)`, the same view for the same length (it aliases the header, as a subarray would). */
  private headerView(length: number): Uint8Array {
    let view = this.headerViews[length];
    if (view === undefined) {
      view = this.header.subarray(0, length);
      this.headerViews[length] = view;
    }
    return view;
  }

  /** Processes `source[start..end)`; returns the offset reached (end, unless the stream died). */
  private consume(source: Uint8Array, start: number, end: number, sourceViews?: ViewCache): number {
    let offset = start;
    while (offset < end && this.state !== State.Dead) {
      let limit = end;
      if (this.markersEnabled) {
        if (this.markerRemaining === 0 && this.streamOffset % MARKER_INTERVAL === 0) this.markerRemaining = MARKER_LENGTH;
        if (this.markerRemaining > 0) {
          const length = Math.min(this.markerRemaining, end - offset);
          this.markerBytes.set(source.subarray(offset, offset + length), MARKER_LENGTH - this.markerRemaining);
          if (this.crcEnabled) this.crc = crc32cUpdate(this.crc, source.subarray(offset, offset + length));
          this.markerRemaining -= length;
          this.streamOffset += length;
          offset += length;
          if (this.markerRemaining === 0) this.checkMarker();
          continue;
        }
        limit = Math.min(end, offset + MARKER_INTERVAL - (this.streamOffset % MARKER_INTERVAL));
      }
      switch (this.state) {
        case State.Header: {
          const length = Math.min(this.headerNeed - this.headerHave, limit - offset);
          if (this.headerHave === 0) this.fpduStartOffset = this.streamOffset;
          // Headers are a few dozen octets: a loop copies them without creating a view.
          const header = this.header;
          for (let i = 0, at = this.headerHave; i < length; i++) header[at + i] = source[offset + i]!;
          if (this.crcEnabled) this.crc = crc32cUpdate(this.crc, source.subarray(offset, offset + length));
          this.headerHave += length;
          this.streamOffset += length;
          offset += length;
          if (this.headerHave === this.headerNeed) this.headerComplete();
          break;
        }
        case State.Payload: {
          if (this.discard || this.target === undefined) {
            const length = Math.min(this.payloadRemaining, limit - offset);
            if (this.crcEnabled) this.crc = crc32cUpdate(this.crc, source.subarray(offset, offset + length));
            this.payloadRemaining -= length;
            this.streamOffset += length;
            offset += length;
            if (this.payloadRemaining === 0) this.enterTrailer();
            break;
          }
          const length = Math.min(this.payloadRemaining, this.target.length - this.targetPosition, limit - offset);
          const target = this.target;
          if (length <= SMALL_COPY) {
            for (let i = 0, at = this.targetPosition; i < length; i++) target[at + i] = source[offset + i]!;
          } else {
            copyPayload(target, this.targetPosition, source, offset, length, sourceViews);
          }
          offset += length;
          this.placed(length);
          break;
        }
        case State.Trailer: {
          const length = Math.min(this.trailerNeed - this.trailerHave, limit - offset);
          if (this.crcEnabled && this.trailerHave < this.padding) {
            // PAD is covered by the CRC; the CRC field itself is not.
            this.crc = crc32cUpdate(this.crc, source.subarray(offset, offset + Math.min(length, this.padding - this.trailerHave)));
          }
          const trailer = this.trailer;
          for (let i = 0, at = this.trailerHave; i < length; i++) trailer[at + i] = source[offset + i]!;
          this.trailerHave += length;
          this.streamOffset += length;
          offset += length;
          if (this.trailerHave === this.trailerNeed) this.fpduComplete();
          break;
        }
        default:
          return end;
      }
    }
    return this.state === State.Dead ? end : offset;
  }

  /** `length` payload octets landed at the current position of the current target. */
  private placed(length: number): void {
    if (this.crcEnabled) this.crc = crc32cUpdate(this.crc, this.views.within(this.target!, this.targetPosition, length));
    this.targetPosition += length;
    this.payloadRemaining -= length;
    this.streamOffset += length;
    this.payloadBytesReceived += length;
    if (this.payloadRemaining === 0) {
      this.enterTrailer();
      return;
    }
    if (this.target !== undefined && this.targetPosition === this.target.length) {
      // A scattered receive buffer: the next element continues the payload.
      const next = this.tagged ? undefined : this.sink.nextSendView();
      if (this.state === State.Dead) return;
      if (next === undefined || next.length === 0) {
        if (this.pendingError === undefined) {
          this.fail(TerminateLayer.Ddp, DDP_ETYPE_CATASTROPHIC, DDP_ECODE_CATASTROPHIC, 'placement target ended before the segment');
        }
        this.proceedAfterHeader();
        return;
      }
      this.target = next;
      this.targetPosition = 0;
    }
  }

  private checkMarker(): void {
    const pointer = decodeMarker(this.markerBytes);
    const markerOffset = this.streamOffset - MARKER_LENGTH;
    // A marker before the first octet of an FPDU belongs to it and points at itself (0).
    const expected = this.state === State.Header && this.headerHave === 0 ? 0 : markerOffset - this.fpduStartOffset;
    if (pointer !== expected) this.markerMismatch = true;
  }

  private headerComplete(): void {
    if (this.headerHave === 4 && this.headerNeed === 4) {
      this.classify();
      return;
    }
    this.dispatchHeader();
  }

  /** First four octets known: length, DDP control and RDMAP control. Decide what to collect. */
  private classify(): void {
    const header = this.header;
    this.ulpduLength = (header[0]! << 8) | header[1]!;
    const ddpControl = header[2]!;
    const rdmapControl = header[3]!;
    const previousTagged = this.tagged;
    this.tagged = (ddpControl & DDP_FLAG_TAGGED) !== 0;
    if (!this.sendInProgress && !this.taggedInProgress) {
      // A message starts: remember what followed the previous one's kind.
      if (previousTagged) this.taggedAfterTagged = this.tagged;
      else this.taggedAfterUntagged = this.tagged;
    }
    this.last = (ddpControl & DDP_FLAG_LAST) !== 0;
    this.opcode = rdmapControl & 0x0f;
    const ddpHeaderLength = this.tagged ? DDP_TAGGED_HEADER_LENGTH : DDP_UNTAGGED_HEADER_LENGTH;
    if (this.ulpduLength >= DIRECT_PLACEMENT_MIN) this.bulkCredit = BULK_CREDIT;
    else if (this.bulkCredit > 0) this.bulkCredit--;
    this.bulk = this.bulkCredit > 0;
    this.padding = fpduPadding(this.ulpduLength);
    const extentFault = ulpduLengthFault(this.ulpduLength, ddpHeaderLength, this.maxUlpdu);
    if (extentFault !== undefined) {
      this.report({ ...extentFault, failedFpdu: this.header.slice(0, this.headerHave) });
      return;
    }
    // From here the FPDU's extent is known, so errors wait for its CRC.
    this.headerNeed = MPA_LENGTH_FIELD + ddpHeaderLength;
    const control = isControlOpcode(this.opcode);
    const headerFault = controlOctetsFault(this.ulpduLength, ddpControl, rdmapControl, this.tagged, this.opcode, control);
    if (headerFault !== undefined) {
      this.failWhole(headerFault);
      return;
    }
    this.control = control;
    if (this.control) this.headerNeed = MPA_LENGTH_FIELD + this.ulpduLength;
    if (this.headerHave === this.headerNeed) this.dispatchHeader();
  }

  /** The whole DDP header (and a control message's body) is in `header`. */
  private dispatchHeader(): void {
    const header = this.header;
    this.payloadLength = this.control ? 0 : this.ulpduLength - (this.headerNeed - MPA_LENGTH_FIELD);
    this.payloadRemaining = this.payloadLength;
    this.target = undefined;
    this.targetPosition = 0;
    if (this.pendingError !== undefined) {
      this.proceedAfterHeader();
      return;
    }
    let target: Uint8Array | undefined;
    if (this.tagged) {
      const stag = readUint32(header, 4);
      const toHigh = readUint32(header, 6 + 2);
      const toLow = readUint32(header, 10 + 2);
      const first = !this.taggedInProgress;
      if (!first) {
        const continuation = taggedContinuationFault(
          this.opcode,
          stag,
          toHigh,
          toLow,
          this.taggedOpcode,
          this.taggedStag,
          this.taggedNextHigh,
          this.taggedNextLow,
        );
        if (continuation !== undefined) {
          this.rejectSegment(continuation);
          return;
        }
      }
      this.segmentStag = stag;
      this.segmentToHigh = toHigh;
      this.segmentToLow = toLow;
      target = this.acceptTarget(this.sink.placeTagged(this.opcode, stag, toHigh, toLow, this.payloadLength, first, this.last));
      if (target === undefined) return;
    } else {
      const queue = readUint32(header, 8);
      const msn = readUint32(header, 12);
      const messageOffset = readUint32(header, 16);
      const wrongQueue = queueFault(this.opcode, queue);
      if (wrongQueue !== undefined) {
        this.rejectSegment(wrongQueue);
        return;
      }
      if (this.control) {
        const controlFault = controlSegmentFault(this.opcode, queue, msn, this.expectedMsn[queue]!, messageOffset, this.last, this.sendInProgress);
        if (controlFault !== undefined) this.failSegment(controlFault);
        this.proceedAfterHeader();
        return;
      }
      const first = !this.sendInProgress;
      const sendFault = sendSegmentFault(this.opcode, msn, this.expectedMsn[QN_SEND]!, messageOffset, first ? 0 : this.sendReceived, first, this.sendOpcode);
      if (sendFault !== undefined) {
        this.rejectSegment(sendFault);
        return;
      }
      this.segmentMessageOffset = messageOffset;
      this.segmentInvalidateStag = readUint32(header, 4);
      target = this.acceptTarget(this.sink.placeSend(this.opcode, messageOffset, this.payloadLength, first, this.segmentInvalidateStag, this.last));
      if (target === undefined) return;
      if (first) this.sendHead = target.length < this.payloadLength ? target.length : 0;
    }
    this.state = this.payloadRemaining > 0 ? State.Payload : State.Trailer;
    if (this.state === State.Trailer) this.enterTrailer();
    else if (target.length === 0) {
      const next = this.sink.nextSendView();
      if (this.dead) return;
      if (next === undefined || next.length === 0) {
        this.fail(TerminateLayer.Ddp, DDP_ETYPE_CATASTROPHIC, DDP_ECODE_CATASTROPHIC, 'no placement target for the payload');
        this.proceedAfterHeader();
        return;
      }
      this.target = next;
    }
  }

  /**
   * Leaves the header state after a control message or a failed check: an error is reported at
   * once without CRC, otherwise after skipping the payload and checking the CRC.
   */
  private proceedAfterHeader(): void {
    if (this.state === State.Dead) return;
    this.discard = this.pendingError !== undefined;
    this.target = undefined;
    if (this.pendingError !== undefined && !this.crcEnabled) {
      this.report(this.pendingError);
      return;
    }
    if (this.state === State.Header) {
      this.state = this.payloadRemaining > 0 ? State.Payload : State.Trailer;
      if (this.state === State.Trailer) this.enterTrailer();
    }
  }

  /**
   * Takes the sink's destination for the segment's payload; undefined when the segment goes no
   * further (the stream died in the sink, or the sink refused it and said why).
   */
  private acceptTarget(target: Uint8Array | undefined): Uint8Array | undefined {
    if (this.state === State.Dead) return undefined;
    if (target === undefined) {
      this.failIfSilent();
      this.proceedAfterHeader();
      return undefined;
    }
    this.target = target;
    return target;
  }

  /** A header check failed: skip the segment (reported after its CRC, or at once without CRC). */
  private rejectSegment(cause: TerminateCause): void {
    this.failSegment(cause);
    this.proceedAfterHeader();
  }

  private failSegment(cause: TerminateCause): void {
    this.fail(cause.layer, cause.errorType, cause.errorCode, cause.reason);
  }

  /** Fails a segment whose header is not fully read yet: skip the rest of the ULPDU, then report. */
  private failWhole(cause: TerminateCause): void {
    this.failSegment(cause);
    if (!this.crcEnabled) {
      this.proceedAfterHeader();
      return;
    }
    // Treat everything after the octets read so far as payload to be skipped.
    this.payloadLength = MPA_LENGTH_FIELD + this.ulpduLength - this.headerHave;
    this.payloadRemaining = this.payloadLength;
    this.headerNeed = this.headerHave;
    this.state = this.payloadRemaining > 0 ? State.Payload : State.Trailer;
    if (this.state === State.Trailer) this.enterTrailer();
  }

  /** A sink that refused a segment must have said why; never let a segment vanish silently. */
  private failIfSilent(): void {
    if (this.pendingError === undefined) {
      this.fail(TerminateLayer.Ddp, DDP_ETYPE_CATASTROPHIC, DDP_ECODE_CATASTROPHIC, 'segment refused without a reason');
    }
  }

  private enterTrailer(): void {
    this.state = State.Trailer;
    this.trailerHave = 0;
    this.trailerNeed = this.padding + CRC_LENGTH;
    this.target = undefined;
  }

  private fpduComplete(): void {
    this.fpdusReceived++;
    if (this.crcEnabled) {
      const carried = readCrc(this.trailer, this.padding);
      if (carried !== this.crc >>> 0) {
        this.report({
          layer: TerminateLayer.Llp,
          errorType: LLP_ETYPE_MPA,
          errorCode: MPA_ERROR_CRC,
          reason: `CRC 0x${carried.toString(16).padStart(8, '0')} carried, 0x${(this.crc >>> 0).toString(16).padStart(8, '0')} computed`,
          failedFpdu: this.header.slice(0, this.headerHave),
        });
        return;
      }
    }
    if (this.pendingError !== undefined) {
      this.report(this.pendingError);
      return;
    }
    if (this.markerMismatch) {
      this.report({
        layer: TerminateLayer.Llp,
        errorType: LLP_ETYPE_MPA,
        errorCode: MPA_ERROR_MARKER,
        reason: 'a marker does not point at the start of its FPDU',
      });
      return;
    }
    const opcode = this.opcode;
    const headerLength = this.headerNeed;
    // Reset before calling up: the sink may fail the stream or (in tests) feed more input.
    this.resetFpdu();
    if (this.tagged) {
      if (this.last) {
        this.taggedInProgress = false;
        this.messagesReceived++;
        this.sink.taggedMessageDone(opcode, this.segmentStag);
      } else {
        this.taggedInProgress = true;
        this.taggedOpcode = opcode;
        this.taggedStag = this.segmentStag;
        // TO + length, carried across the halves and wrapped at 2^64.
        const low = this.segmentToLow + this.payloadLength;
        this.taggedNextLow = low >>> 0;
        this.taggedNextHigh = (this.segmentToHigh + (low >= 0x1_0000_0000 ? 1 : 0)) >>> 0;
      }
      return;
    }
    if (this.control) {
      const queue = untaggedQueueOf(opcode);
      this.expectedMsn[queue] = (this.expectedMsn[queue]! + 1) >>> 0;
      this.messagesReceived++;
      this.sink.controlMessage(opcode, this.headerView(headerLength));
      return;
    }
    this.sendReceived = this.segmentMessageOffset + this.payloadLength;
    if (this.last) {
      const msn = this.expectedMsn[QN_SEND]!;
      this.expectedMsn[QN_SEND] = (msn + 1) >>> 0;
      this.sendInProgress = false;
      this.messagesReceived++;
      this.sink.sendMessageDone(opcode, this.sendReceived, this.segmentInvalidateStag, msn);
    } else {
      this.sendInProgress = true;
      this.sendOpcode = opcode;
    }
  }

  private resetFpdu(): void {
    this.state = State.Header;
    this.headerHave = 0;
    this.headerNeed = 4;
    this.crc = 0;
    this.discard = false;
    this.target = undefined;
    this.markerMismatch = false;
  }
}
