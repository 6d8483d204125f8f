// Framing and records of the tier's journal and checkpoints. A frame is
//   magic (4) | payload length (u32 LE) | CRC32C of length and payload (u32 LE) | payload
// and the payload is a msgpack map. The CRC covers the length, so a flipped length is caught
// before it sends the reader astray; the magic lets recovery tell a torn tail (nothing valid
// after the bad frame) from a bad frame in the middle (valid frames follow it).
import { crc32c } from '@node-rs/crc32';
import { Packr } from 'msgpackr';

export const JOURNAL_MAGIC = 0x314a424b; // "KBJ1" little-endian
export const CHECKPOINT_MAGIC = 0x3143424b; // "KBC1"
export const FRAME_HEADER = 12;
/** A frame longer than this is taken for a corrupt length. */
const MAX_PAYLOAD = 1 << 30;

const packr = new Packr({ useRecords: false, variableMapSize: true });

/** A block's data and entry are on the tier (STORE/ALLOC_STORE/BIND with SEAL). */
export interface SealRecord {
  k: 's';
  h: number;
  g: number;
  l: number;
  s: number;
  c: number;
}
/** The handle is not VALID any more with Generation g (FREE, drop, or a block found lost). */
export interface UnbindRecord {
  k: 'u';
  h: number;
  g: number;
  why: 'free' | 'drop' | 'lost';
}
/** Generations of handle h up to m may be shown before another record about it. */
export interface ReserveRecord {
  k: 'r';
  h: number;
  m: number;
}
/** First record of a group commit: every record before it was synced. */
export interface BatchRecord {
  k: 'b';
  q: number;
}
export type JournalRecord = SealRecord | UnbindRecord | ReserveRecord | BatchRecord;

export function encodeFrame(magic: number, payload: unknown): Buffer {
  const body = packr.pack(payload);
  const frame = Buffer.allocUnsafe(FRAME_HEADER + body.length);
  frame.writeUInt32LE(magic, 0);
  frame.writeUInt32LE(body.length, 4);
  body.copy(frame, FRAME_HEADER);
  frame.writeUInt32LE(crc32c(frame.subarray(FRAME_HEADER), crc32c(frame.subarray(4, 8))), 8);
  return frame;
}

export type FrameResult = { ok: true; payload: unknown; next: number } | { ok: false; reason: 'short' | 'magic' | 'length' | 'checksum' | 'decode' };

/** Decodes the frame at `offset`. */
export function decodeFrame(bytes: Uint8Array, offset: number, magic: number): FrameResult {
  if (offset + FRAME_HEADER > bytes.length) return { ok: false, reason: 'short' };
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (view.getUint32(offset, true) !== magic) return { ok: false, reason: 'magic' };
  const length = view.getUint32(offset + 4, true);
  if (length > MAX_PAYLOAD) return { ok: false, reason: 'length' };
  const end = offset + FRAME_HEADER + length;
  if (end > bytes.length) return { ok: false, reason: 'short' };
  const body = bytes.subarray(offset + FRAME_HEADER, end);
  if (crc32c(body, crc32c(bytes.subarray(offset + 4, offset + 8))) !== view.getUint32(offset + 8, true)) {
    return { ok: false, reason: 'checksum' };
  }
  try {
    return { ok: true, payload: packr.unpack(body), next: end };
  } catch {
    return { ok: false, reason: 'decode' };
  }
}

function isRecord(value: unknown): value is JournalRecord {
  if (typeof value !== 'object' || value === null) return false;
  const record = value as Record<string, unknown>;
  const int = (key: string): boolean => Number.isSafeInteger(record[key]) && (record[key] as number) >= 0;
  switch (record.k) {
    case 's':
      return int('h') && int('g') && int('l') && int('s') && int('c');
    case 'u':
      return int('h') && int('g') && (record.why === 'free' || record.why === 'drop' || record.why === 'lost');
    case 'r':
      return int('h') && int('m');
    case 'b':
      return int('q');
  }
  return false;
}

export interface ParsedJournal {
  records: JournalRecord[];
  /** Index in `records` of the first record after the last batch marker (its batch may not have been synced). */
  lastBatchStart: number;
  /** Offset just past the last good frame. */
  end: number;
  /** Octets after the last good frame that were not a valid frame (a torn tail). */
  tornBytes: number;
  /** Frames that failed their check and had valid frames after them (corruption, not a tear). */
  badFrames: number;
  /** Index in `records` of the first record after the first bad frame (records.length when none). */
  firstAfterCorruption: number;
}

/** Finds the next offset after `from` where a valid frame starts, or -1. */
function resync(bytes: Uint8Array, from: number, magic: number): number {
  const first = magic & 0xff;
  for (let offset = from; offset + FRAME_HEADER <= bytes.length; offset++) {
    if (bytes[offset] !== first) continue;
    if (decodeFrame(bytes, offset, magic).ok) return offset;
  }
  return -1;
}

/**
 * Reads a journal's records. A bad frame with nothing valid after it is a torn tail: replay
 * stops there (point in time). A bad frame followed by valid ones is counted and skipped.
 */
export function parseJournal(bytes: Uint8Array): ParsedJournal {
  const records: JournalRecord[] = [];
  let offset = 0;
  let end = 0;
  let lastBatchStart = 0;
  let badFrames = 0;
  let firstAfterCorruption = -1;
  while (offset < bytes.length) {
    const frame = decodeFrame(bytes, offset, JOURNAL_MAGIC);
    if (frame.ok && isRecord(frame.payload)) {
      if (frame.payload.k === 'b') lastBatchStart = records.length;
      else records.push(frame.payload);
      offset = frame.next;
      end = offset;
      continue;
    }
    // Zeros past the end are a file that was extended but never written: the clean end.
    if (bytes.subarray(offset).every((octet) => octet === 0)) break;
    const next = resync(bytes, offset + 1, JOURNAL_MAGIC);
    if (next < 0) break;
    badFrames += 1;
    if (firstAfterCorruption < 0) firstAfterCorruption = records.length;
    offset = next;
  }
  const tail = bytes.subarray(end);
  return {
    records,
    lastBatchStart,
    end,
    badFrames,
    tornBytes: tail.every((octet) => octet === 0) ? 0 : tail.length,
    firstAfterCorruption: firstAfterCorruption < 0 ? records.length : firstAfterCorruption,
  };
}
