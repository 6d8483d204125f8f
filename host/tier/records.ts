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

/**
 * Where a record sits: group commit `q`, position `i` of `n` records. Recovery uses them to tell
 * which records of a group it did not get (a frame that failed its checksum). Journals written
 * before these fields existed have none; their records are replayed as they are.
 */
export interface GroupPlace {
  q?: number;
  i?: number;
  n?: number;
}
/** A block's data and entry are on the tier (STORE/ALLOC_STORE/BIND with SEAL). */
export interface SealRecord extends GroupPlace {
  k: 's';
  h: number;
  g: number;
  l: number;
  s: number;
  c: number;
}
/**
 * The handle is not VALID any more with Generation g: FREE, drop, a block found lost, or the
 * undoing of a BIND's seal whose ticket was taken by another BIND or a reclaim meanwhile.
 */
export interface UnbindRecord extends GroupPlace {
  k: 'u';
  h: number;
  g: number;
  why: 'free' | 'drop' | 'lost' | 'undo';
}
/** Generations of handle h up to m may be shown before another record about it. */
export interface ReserveRecord extends GroupPlace {
  k: 'r';
  h: number;
  m: number;
}
/**
 * First record of group commit q: every record before it was synced. It also lists, per record
 * of the group, its kind (t: one of 's', 'u', 'r'), handle (h) and Generation or mark (g), so a
 * record that fails its checksum still names the handle it was about (kbtp-v1 section 12: that
 * entry is not recovered, and resumes above the Generation it may have shown). h and g are
 * little-endian u32 and u16 columns (number arrays in journals written before the columns).
 */
export interface BatchRecord {
  k: 'b';
  q: number;
  t?: string;
  h?: number[] | Uint8Array;
  g?: number[] | Uint8Array;
}
/**
 * The records of group commit q in one frame, as columns (little-endian u32 except g, u16): kind
 * t, handle h, Generation or mark g, Data Length l, slot s and data CRC32C c (0 where a kind has
 * none). One frame and one decode per group keeps both the commit and recovery cheap; the batch
 * marker before it names the same handles, so a body that fails its checksum loses no handle.
 */
export interface GroupBodyRecord {
  k: 'g';
  q: number;
  t: string;
  h: Uint8Array;
  g: Uint8Array;
  l: Uint8Array;
  s: Uint8Array;
  c: Uint8Array;
}
/**
 * First frame of a journal started because a group commit failed: groups q of journal j never
 * happened, whatever of them reached j (they were answered TIER_ERROR). The checkpoint written with
 * this journal already leaves them out; this record is for a recovery that falls back to the
 * checkpoint before it (the newer one failing its checksum) and so replays journal j again.
 */
export interface VoidRecord {
  k: 'v';
  j: number;
  q: number[];
}
/**
 * Near the start of every journal: the Generation mark of every handle (m, a little-endian u16
 * column) as of the checkpoint that names the journal. A copy for a recovery that finds every
 * checkpoint corrupt: without it, handles the journals do not name would have to restart at 1.
 */
export interface MarksRecord {
  k: 'm';
  m: Uint8Array;
}
export type JournalRecord = SealRecord | UnbindRecord | ReserveRecord | BatchRecord | GroupBodyRecord | VoidRecord | MarksRecord;

/** A little-endian column as numbers (an aligned copy: frames sit at any offset). */
export function u32Column(bytes: Uint8Array): Uint32Array {
  const column = new Uint32Array(bytes.byteLength >> 2);
  new Uint8Array(column.buffer).set(bytes.subarray(0, column.byteLength));
  return column;
}
export function u16Column(bytes: Uint8Array): Uint16Array {
  const column = new Uint16Array(bytes.byteLength >> 1);
  new Uint8Array(column.buffer).set(bytes.subarray(0, column.byteLength));
  return column;
}
/** The bytes of a typed array, for a msgpack bin. */
export const columnBytes = (array: Uint16Array | Uint32Array): Uint8Array => new Uint8Array(array.buffer, array.byteOffset, array.byteLength);

/** A marker's handle and Generation lists, whichever way they were written. */
export function markerColumns(record: BatchRecord): { h: ArrayLike<number>; g: ArrayLike<number> } | undefined {
  if (record.h === undefined || record.g === undefined) return undefined;
  return {
    h: record.h instanceof Uint8Array ? u32Column(record.h) : record.h,
    g: record.g instanceof Uint8Array ? u16Column(record.g) : record.g,
  };
}

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
  const optional = (key: string): boolean => record[key] === undefined || int(key);
  if (record.k === 'm') return record.m instanceof Uint8Array && record.m.byteLength % 2 === 0;
  if (record.k === 'v') return int('j') && Array.isArray(record.q) && record.q.every((q) => Number.isSafeInteger(q) && q >= 0);
  if (record.k !== 'b' && !(optional('q') && optional('i') && optional('n'))) return false;
  switch (record.k) {
    case 's':
      return int('h') && int('g') && int('l') && int('s') && int('c');
    case 'u':
      return int('h') && int('g') && (record.why === 'free' || record.why === 'drop' || record.why === 'lost' || record.why === 'undo');
    case 'r':
      return int('h') && int('m');
    case 'b': {
      if (!int('q')) return false;
      if (record.t === undefined && record.h === undefined && record.g === undefined) return true;
      const { t, h, g } = record;
      if (typeof t !== 'string' || !/^[sur]*$/.test(t)) return false;
      if (h instanceof Uint8Array && g instanceof Uint8Array) return h.byteLength === 4 * t.length && g.byteLength === 2 * t.length;
      const ints = (list: unknown): list is number[] => Array.isArray(list) && list.every((x) => Number.isSafeInteger(x) && x >= 0);
      return ints(h) && ints(g) && h.length === t.length && g.length === t.length;
    }
    case 'g': {
      const { t, h, g, l, s, c } = record;
      if (!int('q') || typeof t !== 'string' || !/^[sur]*$/.test(t)) return false;
      const n = t.length;
      const bin = (value: unknown, width: number): boolean => value instanceof Uint8Array && value.byteLength === width * n;
      return bin(h, 4) && bin(g, 2) && bin(l, 4) && bin(s, 4) && bin(c, 4);
    }
  }
  return false;
}

export interface ParsedJournal {
  /** The valid records, batch markers included, in file order. */
  records: JournalRecord[];
  /** Offset just past the last good frame. */
  end: number;
  /** Octets after the last good frame that were not a valid frame (a torn tail). */
  tornBytes: number;
  /** Stretches of bad frames with valid frames after them (corruption, not a tear). */
  badFrames: number;
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
 * Reads a journal's records. A bad frame with nothing valid after it is a torn tail: reading
 * stops there (point in time). A bad frame followed by valid ones is counted and skipped; the
 * group places in the records let recovery tell what it was about.
 */
export function parseJournal(bytes: Uint8Array): ParsedJournal {
  const records: JournalRecord[] = [];
  let offset = 0;
  let end = 0;
  let badFrames = 0;
  while (offset < bytes.length) {
    const frame = decodeFrame(bytes, offset, JOURNAL_MAGIC);
    if (frame.ok && isRecord(frame.payload)) {
      records.push(frame.payload);
      offset = frame.next;
      end = offset;
      continue;
    }
    // Zeros past the end are a file that was extended but never written: the clean end.
    if (bytes.subarray(offset).every((octet) => octet === 0)) break;
    const next = resync(bytes, offset + 1, JOURNAL_MAGIC);
    if (next < 0) break;
    badFrames += 1;
    offset = next;
  }
  const tail = bytes.subarray(end);
  return { records, end, badFrames, tornBytes: tail.every((octet) => octet === 0) ? 0 : tail.length };
}
