// Vectored reads for one FPDU receiver (issue 16): inside a large message whose destination runs
// to the message's end, one readv takes the rest of the current payload and the next segments'
// payloads straight into place, with the framing between them (PAD, CRC, the next prefix) in a
// side buffer. The next segments' lengths are guessed (a sender cuts a message at its MULPDU);
// the receiver checks every header as always, and a guess that proves wrong costs a copy, never a
// wrong placement. Apart from receive.ts as Linux siw keeps its receive path apart from the rest
// of the QP: the receiver's state machine stays in one place, the planning of reads ahead here.

import { CRC_LENGTH } from './wire/crc.ts';
import { DDP_UNTAGGED_HEADER_LENGTH } from './wire/ddp.ts';
import { fpduPadding, MPA_LENGTH_FIELD } from './wire/mpa.ts';
import type { BufferViews } from './receive-views.ts';
import { ViewCache } from './view-cache.ts';

/** The most framing between two payloads: one FPDU's PAD and CRC and the next one's (untagged, the longer) prefix. */
export const FRAMING_BETWEEN_PAYLOADS = 3 + CRC_LENGTH + MPA_LENGTH_FIELD + DDP_UNTAGGED_HEADER_LENGTH;
/**
 * Payloads one vectored read places at most: with the framing between them in a side buffer, a
 * 256 KiB STORE's rest after its first FPDU comes in one system call instead of four, a 1 MiB
 * Read Response in two instead of sixteen (issue 16).
 */
const VECTOR_FPDUS = 8;

/** What committing a vectored read asks of the receiver it was planned for. */
export interface VectorCursor {
  dead(): boolean;
  /**
   * Whether `got` octets read into `buffer` are exactly the current segment's next payload octets
   * in place: all of its rest when they filled `buffer` (a longer segment's rest would land on the
   * next buffer's octets), at most its rest otherwise.
   */
  landedInPlace(buffer: Uint8Array, got: number): boolean;
  /** `length` payload octets landed at the current position of the current target. */
  placed(length: number): void;
  /** Processes `source[start..end)` as a staged read would. */
  consume(source: Uint8Array, start: number, end: number): void;
  /** Whether the stream has read the first four octets of a header `length` octets long, and waits for its rest. */
  awaitsHeaderRest(length: number): boolean;
}

export class VectoredRead {
  /** Buffer lists, one array per length (a read system call takes the whole array). */
  private readonly vectors: Uint8Array[][] = [];
  /** The list plan() handed out, and which of its buffers are payload (1) or framing (0). */
  private vector: Uint8Array[] | undefined;
  private readonly payload = new Uint8Array(2 * VECTOR_FPDUS);
  /** For a framing buffer: how many of its octets are the PAD and CRC of the FPDU before it. */
  private readonly trailer = new Uint8Array(2 * VECTOR_FPDUS);
  private length = 0;
  /** The buffers of the read being planned, in order. */
  private readonly slots: Array<Uint8Array | undefined> = new Array<Uint8Array | undefined>(2 * VECTOR_FPDUS).fill(undefined);
  /** Where the framing between the payloads lands, and its views. */
  private readonly side = new Uint8Array(VECTOR_FPDUS * FRAMING_BETWEEN_PAYLOADS);
  private readonly sideViews = new ViewCache(this.side, 4 * VECTOR_FPDUS);

  /**
   * @param views the receiver's views of its targets (one cache for direct reads, CRC and these)
   * @param minPayload the shortest payload read straight into place (the receiver's direct placement threshold)
   */
  constructor(
    private readonly views: BufferViews,
    private readonly minPayload: number,
  ) {}

  /** Forgets the last plan (the receiver offers no vectored read now). */
  clear(): void {
    this.vector = undefined;
  }

  /**
   * Buffers for one readv continuing the stream inside a payload whose `remaining` octets go to
   * `target` from `at`, `target` running exactly to the message's end; or undefined when a plain
   * read suits as well. The next segments' payloads are each guessed as long as this FPDU's
   * (`payloadLength`) up to the last large one; the message's short last segment comes too (the
   * view ends with the message, so it is exactly the rest), and with its trailer the next
   * message's prefix (`nextMessagePrefix`): back-to-back messages then take a read fewer each. A
   * short segment that is not the last (a sender with small segments) is left to staged reads.
   * `prefix` is the length field and DDP header of this message's FPDUs; `padding` this FPDU's PAD.
   */
  plan(
    target: Uint8Array,
    at: number,
    remaining: number,
    padding: number,
    payloadLength: number,
    prefix: number,
    nextMessagePrefix: number,
  ): Uint8Array[] | undefined {
    this.vector = undefined;
    const headerLength = prefix - MPA_LENGTH_FIELD;
    let payload = remaining;
    let count = 0;
    let sideAt = 0;
    for (let fpdus = 0; fpdus < VECTOR_FPDUS; fpdus++) {
      if (payload > target.length - at) break;
      this.payload[count] = 1;
      this.slots[count++] = this.views.within(target, at, payload);
      at += payload;
      const rest = target.length - at;
      // After the message's last FPDU comes another message, of the kind that came last time.
      const sideLength = padding + CRC_LENGTH + (rest === 0 ? nextMessagePrefix : prefix);
      this.payload[count] = 0;
      this.trailer[count] = padding + CRC_LENGTH;
      this.slots[count++] = this.sideViews.view(sideAt, sideLength);
      sideAt += sideLength;
      const next = Math.min(payloadLength, rest);
      if (next === 0 || (next < this.minPayload && next !== rest)) break;
      payload = next;
      padding = fpduPadding(headerLength + next);
    }
    if (count < 4) return undefined; // one payload: a plain direct read does the same
    const vector = this.vectorOf(count);
    this.vector = vector;
    this.length = count;
    return vector;
  }

  /**
   * `length` octets were read into the buffers plan() returned, in order. Payload that landed
   * exactly where its segment (checked when its header came through the side buffer before it)
   * says it belongs is placed as it is. From the first octet that did not, everything read is
   * copied out and processed like a staged read, before anything is placed over memory those
   * octets still sit in.
   */
  commit(length: number, cursor: VectorCursor): void {
    const vector = this.vector;
    this.vector = undefined;
    if (vector === undefined || length <= 0) return;
    let left = length;
    for (let i = 0; i < this.length && left > 0 && !cursor.dead(); i++) {
      const buffer = vector[i]!;
      const got = Math.min(left, buffer.length);
      left -= got;
      if (this.payload[i] === 1) {
        if (!cursor.landedInPlace(buffer, got)) {
          this.replay(vector, i, 0, got, left, cursor);
          return;
        }
        cursor.placed(got);
        continue;
      }
      // A side piece: the PAD and CRC of the FPDU just placed, then the next FPDU's prefix. Its
      // first four octets say how long that FPDU's header is; one that is not the prefix assumed
      // would have payload in the piece, to be placed over octets of the next buffer.
      const trailer = this.trailer[i]!;
      const first = Math.min(got, trailer + 4);
      cursor.consume(buffer, 0, first);
      if (got === first || cursor.dead()) continue;
      if (!cursor.awaitsHeaderRest(buffer.length - trailer)) {
        this.replay(vector, i, first, got, left, cursor);
        return;
      }
      cursor.consume(buffer, first, got);
    }
  }

  /**
   * The guess was wrong from octet `start` of buffer `from` on (a segment of another length than
   * the one before it, another message): what was read from there (up to `got` octets of that
   * buffer, `left` after it) goes through the receiver as a staged read would, from a copy. Rare:
   * a peer that cuts its messages into segments of one size never takes it.
   */
  private replay(vector: Uint8Array[], from: number, start: number, got: number, left: number, cursor: VectorCursor): void {
    const copy = new Uint8Array(got - start + left);
    copy.set(vector[from]!.subarray(start, got));
    let at = got - start;
    for (let i = from + 1; i < this.length && at < copy.length; i++) {
      const buffer = vector[i]!;
      const take = Math.min(buffer.length, copy.length - at);
      copy.set(buffer.subarray(0, take), at);
      at += take;
    }
    cursor.consume(copy, 0, copy.length);
  }

  /** The slots' first `count` buffers as an array of exactly that length, reused. */
  private vectorOf(count: number): Uint8Array[] {
    let vector = this.vectors[count];
    if (vector === undefined) {
      vector = [];
      for (let i = 0; i < count; i++) vector.push(this.side);
      this.vectors[count] = vector;
    }
    for (let i = 0; i < count; i++) vector[i] = this.slots[i]!;
    return vector;
  }
}
