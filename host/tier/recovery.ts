// Warm restart: the newest checkpoint that passes its checksum, then every journal written after
// it, record by record, up to the first torn frame (point in time). Seals of the last group
// commit (after its batch marker) may have reached the journal without their data: their data is
// read and checked before they count. A checkpoint that fails its checksum is skipped for the one
// before it, whose journals are kept for exactly that case.
import { crc32c } from './checksum.ts';
import path from 'node:path';
import type { FileLayer, TierFile } from './files.ts';
import { EXIT_USAGE, KbtpError } from '../errors.ts';
import { decodeCheckpoint, type Checkpoint } from './checkpoint.ts';
import {
  markerColumns,
  parseJournal,
  u16Column,
  u32Column,
  type BatchRecord,
  type GroupBodyRecord,
  type JournalRecord,
  type ReserveRecord,
  type SealRecord,
  type UnbindRecord,
  type ParsedJournal,
  type MarksRecord,
} from './records.ts';
import { generationLater, generationPlus, GENERATION_RESERVE_BATCH } from './generations.ts';

export interface BlockRecord {
  generation: number;
  dataLength: number;
  slot: number;
  crc: number;
  tenant: number;
}

export interface RecoveryReport {
  /** Wall time of recovery, seconds. */
  seconds: number;
  /** Sealed blocks whose entries were rebuilt. */
  blocksRecovered: number;
  /** Journal records not replayed: seals of the last, unsynced group commit whose data did not check. */
  recordsDropped: number;
  /** Octets of a torn journal tail, cut off. */
  tornBytes: number;
  /** Journal frames or checkpoints that failed their checksum. */
  checksumFailures: number;
  /**
   * Sealed blocks not recovered because a journal record that could have been about them failed
   * its checksum (a corrupt free must not bring a freed block back).
   */
  blocksDiscarded: number;
  /** Blocks left out because the tier is now smaller or a tenant's Durable Quota lower than when they were written. */
  blocksOverCapacity: number;
  /** The checkpoint used, or 'none' for a new tier. */
  checkpoint: string;
  journalsReplayed: number;
  fresh: boolean;
}

export interface RecoveryInput {
  files: FileLayer;
  directory: string;
  data: TierFile;
  blockSize: number;
  slotSize: number;
  handleBase: bigint;
  handleCount: number;
  maxSlots: number;
  tenantOf(index: number): number;
  durableQuota(tenant: number): number;
  /** Called before each journal is replayed (done of total), so a long recovery can say how far it is. */
  progress?: (journalsDone: number, journals: number) => void;
}

export interface RecoveredState {
  /** Blocks on the tier in least-recently-used order. */
  blocks: Map<number, BlockRecord>;
  /** Per handle, the Generation its entry resumes at when it is not among `blocks`. */
  resume: Uint16Array;
  /** Per handle, the mark after the restart: Generations up to it may be shown. */
  marks: Uint16Array;
  highSlot: number;
  /** Number for the journal (and checkpoint) written next. */
  nextSequence: number;
  /** Number of the next group commit. */
  nextGroup: number;
  /** Number of the checkpoint recovery started from (-1: none); it is kept as the fallback of the next. */
  usedCheckpoint: number;
  report: Omit<RecoveryReport, 'seconds'>;
}

/** The data directory was written with another block size or handle space (a configuration error, code KBTP_CONFIG). */
export class TierConfigMismatchError extends KbtpError {
  constructor(message: string) {
    super('KBTP_CONFIG', message, EXIT_USAGE);
  }
}

export const CHECKPOINT_PATTERN = /^checkpoint-(\d{8})$/;
export const JOURNAL_PATTERN = /^journal-(\d{8})$/;
export const sequenceName = (kind: 'checkpoint' | 'journal', sequence: number): string => `${kind}-${String(sequence).padStart(8, '0')}`;

async function readWhole(files: FileLayer, file: string): Promise<Uint8Array> {
  const handle = await files.open(file, false);
  try {
    const bytes = new Uint8Array(await handle.size());
    await handle.read(bytes, 0);
    return bytes;
  } finally {
    await handle.close();
  }
}

function numbered(names: string[], pattern: RegExp): number[] {
  return names
    .flatMap((name) => {
      const match = pattern.exec(name);
      return match?.[1] === undefined ? [] : [Number(match[1])];
    })
    .sort((a, b) => a - b);
}

export async function recoverTier(input: RecoveryInput): Promise<RecoveredState> {
  const { files, directory, handleCount } = input;
  const names = await files.list(directory);
  const checkpoints = numbered(names, CHECKPOINT_PATTERN);
  const journals = numbered(names, JOURNAL_PATTERN);
  let checksumFailures = 0;
  let checkpoint: Checkpoint | undefined;
  let checkpointName = 'none';
  let usedCheckpoint = -1;
  for (const sequence of [...checkpoints].reverse()) {
    const name = sequenceName('checkpoint', sequence);
    const decoded = decodeCheckpoint(await readWhole(files, path.join(directory, name)));
    if (typeof decoded === 'string') {
      checksumFailures += 1;
      continue;
    }
    checkpoint = decoded;
    checkpointName = name;
    usedCheckpoint = sequence;
    break;
  }
  if (checkpoint !== undefined) {
    const mismatch = (field: string, was: string, now: string): never => {
      throw new TierConfigMismatchError(
        `${directory} was written with ${field} ${was}, but the target is configured with ${now}; ` +
          `start with the same ${field}, or point --data-dir at another directory (the data here is kept)`,
      );
    };
    if (checkpoint.blockSize !== input.blockSize) mismatch('blockSize', String(checkpoint.blockSize), String(input.blockSize));
    if (checkpoint.handleBase !== input.handleBase) mismatch('handleBase', String(checkpoint.handleBase), String(input.handleBase));
    if (checkpoint.handleCount !== handleCount) mismatch('handleCount', String(checkpoint.handleCount), String(handleCount));
    if (checkpoint.slotSize !== input.slotSize) mismatch('slot size', String(checkpoint.slotSize), String(input.slotSize));
  }
  const fresh = checkpoint === undefined && journals.length === 0;

  const marks = new Uint16Array(handleCount);
  const blocks = new Map<number, BlockRecord>();
  let highSlot = 0;
  if (checkpoint !== undefined) {
    marks.set(checkpoint.marks);
    highSlot = checkpoint.highSlot;
    const b = checkpoint.blocks;
    for (let i = 0; i < b.index.length; i++) {
      const index = b.index[i] ?? 0;
      blocks.set(index, {
        generation: b.generation[i] ?? 1,
        dataLength: b.dataLength[i] ?? 0,
        slot: b.slot[i] ?? 0,
        crc: b.crc[i] ?? 0,
        tenant: input.tenantOf(index),
      });
    }
  } else {
    // No checkpoint: a new tier (every entry starts at Generation 1), or one whose every
    // checkpoint is bad, where the journals say what was shown: the first journal replayed
    // starts with a copy of the marks as of its (lost) checkpoint, and its records go on from there.
    marks.fill(1);
  }

  const apply = (record: SealRecord | UnbindRecord | ReserveRecord): void => {
    if (record.h >= handleCount) return;
    const mark = marks[record.h] ?? 1;
    if (record.k === 'r') {
      marks[record.h] = generationLater(mark, record.m);
      return;
    }
    marks[record.h] = generationLater(mark, record.g);
    blocks.delete(record.h);
    if (record.k === 's') {
      blocks.set(record.h, { generation: record.g, dataLength: record.l, slot: record.s, crc: record.c, tenant: input.tenantOf(record.h) });
      highSlot = Math.max(highSlot, record.s + 1);
    }
  };
  let blocksDiscarded = 0;
  /** A record that failed its checksum, known from its group's marker: its handle is not recovered. */
  const lost = (kind: string, index: number, generation: number, unsynced: boolean): void => {
    if (index >= handleCount) return;
    marks[index] = generationLater(marks[index] ?? 1, generation);
    if (kind === 'r' || !blocks.has(index)) return;
    blocks.delete(index);
    if (!unsynced) blocksDiscarded += 1;
  };
  /**
   * Records were lost and nothing says which handles they were about: no block whose last record
   * came before them can be trusted (one of them may have been freed), and every handle may have
   * shown one Generation past its mark (a lost seal or free moves a Generation by one).
   */
  const unknownLoss = (): void => {
    blocksDiscarded += blocks.size;
    blocks.clear();
    for (let h = 0; h < handleCount; h++) marks[h] = generationPlus(marks[h] ?? 1, 1);
  };

  const raiseMarks = (group: Group): void => {
    for (const record of group.records.values()) {
      if (record.h < handleCount) marks[record.h] = generationLater(marks[record.h] ?? 1, record.k === 'r' ? record.m : record.g);
    }
    const columns = group.marker === undefined ? undefined : markerColumns(group.marker);
    if (columns === undefined) return;
    for (let i = 0; i < columns.h.length; i++) {
      const h = columns.h[i] ?? handleCount;
      if (h < handleCount) marks[h] = generationLater(marks[h] ?? 1, columns.g[i] ?? 1);
    }
  };

  const replayFrom = checkpoint?.journal ?? journals[0] ?? 0;
  const replayed = journals.filter((sequence) => sequence >= replayFrom);
  let tornBytes = 0;
  let recordsDropped = 0;
  let nextGroup = checkpoint?.group;
  const scratch = new Uint8Array(input.slotSize);
  const dataChecks = async (record: SealRecord): Promise<boolean> => {
    if (record.l > input.blockSize || record.s >= input.maxSlots) return false;
    const view = scratch.subarray(0, record.l);
    const got = await input.data.read(view, record.s * input.slotSize);
    return got === record.l && crc32c(view) === record.c;
  };
  const readJournal = async (sequence: number | undefined): Promise<ParsedJournal | undefined> =>
    sequence === undefined ? undefined : parseJournal(await readWhole(files, path.join(directory, sequenceName('journal', sequence))));
  // One journal ahead: a journal started after a failed group names, in its first frame, the
  // groups of the journal before it that never happened.
  let upcoming = await readJournal(replayed[0]);
  if (checkpoint === undefined) {
    const copy = upcoming?.records.find((record): record is MarksRecord => record.k === 'm');
    if (copy !== undefined && copy.m.byteLength === 2 * handleCount) marks.set(u16Column(copy.m));
  }
  for (const [position, sequence] of replayed.entries()) {
    input.progress?.(position, replayed.length);
    const parsed = upcoming as ParsedJournal;
    upcoming = await readJournal(replayed[position + 1]);
    const voided = new Set<number>();
    const first = upcoming?.records[0];
    if (first?.k === 'v' && first.j === sequence) for (const q of first.q) voided.add(q);
    checksumFailures += parsed.badFrames;
    tornBytes += parsed.tornBytes;
    const groups = groupsOf(parsed.records);
    for (const [g, group] of groups.entries()) {
      if (group.q === undefined) {
        // A journal from before group places: its records as they are.
        for (const record of group.records.values()) apply(record);
        continue;
      }
      if (voided.has(group.q)) {
        // A group that failed (answered TIER_ERROR): it changes nothing. Its Generations were never
        // shown, but the marks may rise past them all the same (marks only have to stay above).
        nextGroup = group.q + 1;
        raiseMarks(group);
        continue;
      }
      if (nextGroup !== undefined) {
        // A journal after a failed group starts one group later: that group was never acknowledged.
        const allowed = g === 0 && position > 0 ? 1 : 0;
        if (group.q - nextGroup > allowed) unknownLoss();
      }
      nextGroup = group.q + 1;
      // The last group of a journal may never have been synced (a crash, or the failed group that
      // made the tier start a new journal): nothing in it was acknowledged, and its seals count
      // only if their data is on disk.
      const unsynced = g === groups.length - 1;
      const count = group.marker?.t?.length ?? group.count;
      const complete = count !== undefined && group.records.size === count;
      if (group.marker?.t === undefined && !complete && !unsynced) unknownLoss();
      const places = count ?? Math.max(-1, ...group.records.keys()) + 1;
      for (let i = 0; i < places; i++) {
        const record = group.records.get(i);
        if (record === undefined) {
          const columns = group.marker === undefined ? undefined : markerColumns(group.marker);
          const kinds = group.marker?.t;
          if (columns !== undefined && kinds !== undefined) lost(kinds[i] ?? 's', columns.h[i] ?? handleCount, columns.g[i] ?? 1, unsynced);
          continue;
        }
        if (record.k === 's' && unsynced && !(await dataChecks(record))) {
          recordsDropped += 1;
          lost('s', record.h, record.g, true);
          continue;
        }
        apply(record);
      }
    }
  }

  // The hard cap and the Durable Quotas as configured now: blocks past them are left out,
  // least recently used first within a tenant.
  let blocksOverCapacity = 0;
  const held = new Map<number, number>();
  for (const [index, block] of [...blocks.entries()].reverse()) {
    const count = (held.get(block.tenant) ?? 0) + 1;
    if (block.slot >= input.maxSlots || count > input.durableQuota(block.tenant)) {
      blocks.delete(index);
      blocksOverCapacity += 1;
      continue;
    }
    held.set(block.tenant, count);
  }
  highSlot = Math.min(highSlot, input.maxSlots);

  // kbtp-v1 section 12: an entry that is not recovered restarts just above its mark, with a new
  // batch reserved above that; a new tier starts every entry at Generation 1.
  const resume = new Uint16Array(handleCount);
  for (let h = 0; h < handleCount; h++) {
    const mark = marks[h] ?? 1;
    const block = blocks.get(h);
    if (block !== undefined) {
      resume[h] = block.generation;
      marks[h] = generationLater(mark, block.generation);
    } else if (fresh) {
      resume[h] = 1;
      marks[h] = generationPlus(1, GENERATION_RESERVE_BATCH);
    } else {
      resume[h] = generationPlus(mark, 1);
      marks[h] = generationPlus(mark, GENERATION_RESERVE_BATCH);
    }
  }

  const used = Math.max(0, ...checkpoints, ...journals);
  return {
    blocks,
    resume,
    marks,
    highSlot,
    nextSequence: used + 1,
    nextGroup: nextGroup ?? 0,
    usedCheckpoint,
    report: {
      blocksRecovered: blocks.size,
      recordsDropped,
      tornBytes,
      checksumFailures,
      blocksDiscarded,
      blocksOverCapacity,
      checkpoint: checkpointName,
      journalsReplayed: replayed.length,
      fresh,
    },
  };
}

interface Group {
  /** Undefined for records written before group places existed. */
  q: number | undefined;
  marker: BatchRecord | undefined;
  /** Records by position in the group. */
  records: Map<number, SealRecord | UnbindRecord | ReserveRecord>;
  /** Records in the group, as the records say (when the marker is lost). */
  count: number | undefined;
}

/** The journal's records by group commit, in file order. */
function groupsOf(records: JournalRecord[]): Group[] {
  const groups: Group[] = [];
  let current: Group | undefined;
  let legacy = 0;
  for (const record of records) {
    if (record.k === 'v' || record.k === 'm') continue; // a journal's first frames (see recoverTier)
    if (record.k === 'b') {
      if (record.t === undefined) continue; // a marker from before group places
      current = { q: record.q, marker: record, records: new Map(), count: undefined };
      groups.push(current);
      continue;
    }
    if (record.k === 'g') {
      if (current?.q !== record.q) {
        // Its marker failed its checksum.
        current = { q: record.q, marker: undefined, records: new Map(), count: undefined };
        groups.push(current);
      }
      expandBody(record, current.records);
      current.count = record.t.length;
      continue;
    }
    if (record.q === undefined || record.i === undefined) {
      if (current?.q !== undefined || current === undefined) {
        current = { q: undefined, marker: undefined, records: new Map(), count: undefined };
        groups.push(current);
      }
      current.records.set(legacy++, record);
      continue;
    }
    if (current?.q !== record.q) {
      // Its marker failed its checksum.
      current = { q: record.q, marker: undefined, records: new Map(), count: undefined };
      groups.push(current);
    }
    current.records.set(record.i, record);
    if (record.n !== undefined) current.count = record.n;
  }
  return groups;
}

/** A group's body frame as the records it holds, by position. */
function expandBody(body: GroupBodyRecord, into: Map<number, SealRecord | UnbindRecord | ReserveRecord>): void {
  const h = u32Column(body.h);
  const g = u16Column(body.g);
  const l = u32Column(body.l);
  const s = u32Column(body.s);
  const c = u32Column(body.c);
  for (let i = 0; i < body.t.length; i++) {
    const kind = body.t[i];
    const handle = h[i] ?? 0;
    const generation = g[i] ?? 1;
    if (kind === 's') into.set(i, { k: 's', h: handle, g: generation, l: l[i] ?? 0, s: s[i] ?? 0, c: c[i] ?? 0 });
    else if (kind === 'r') into.set(i, { k: 'r', h: handle, m: generation });
    else into.set(i, { k: 'u', h: handle, g: generation, why: 'free' });
  }
}
