// Test helper: the frames of a tier journal as they lie in the file, so a test can corrupt
// exactly the record it means to (a FREE, a batch marker, a whole group).
import { decodeFrame, FRAME_HEADER, JOURNAL_MAGIC, u32Column, type JournalRecord } from '../../host/tier/records.ts';

export interface JournalFrame {
  offset: number;
  length: number;
  record: JournalRecord;
}

export function journalFrames(bytes: Uint8Array): JournalFrame[] {
  const frames: JournalFrame[] = [];
  let offset = 0;
  for (;;) {
    const frame = decodeFrame(bytes, offset, JOURNAL_MAGIC);
    if (!frame.ok) return frames;
    frames.push({ offset, length: frame.next - offset, record: frame.payload as JournalRecord });
    offset = frame.next;
  }
}

/** The body frame of a group commit holding a record of `kind` about handle index `handle`. */
export function isGroupWith(kind: 's' | 'u' | 'r', handle: number): (frame: JournalFrame) => boolean {
  return ({ record }) => {
    if (record.k !== 'g') return false;
    const handles = u32Column(record.h);
    return [...record.t].some((k, i) => k === kind && handles[i] === handle);
  };
}

/** Flips one bit in the payload of `frame` (so its checksum fails). */
export function corrupt(bytes: Uint8Array, frame: JournalFrame): void {
  const at = frame.offset + FRAME_HEADER + 1;
  bytes[at] = (bytes[at] ?? 0) ^ 0x10;
}
