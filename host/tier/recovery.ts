// Warm restart: the newest checkpoint that passes its checksum, then every journal written after
// it, record by record, up to the first torn frame (point in time). Seals of the last group
// commit (after its batch marker) may have reached the journal without their data: their data is
// read and checked before they count. A checkpoint that fails its checksum is skipped for the one
// before it, whose journals are kept for exactly that case.
import { crc32c } from '@node-rs/crc32';
import path from 'node:path';
import type { FileLayer, TierFile } from './files.ts';
import { decodeCheckpoint, type Checkpoint } from './checkpoint.ts';
import { parseJournal, type JournalRecord, type SealRecord } from './records.ts';
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
  /** Number of the checkpoint recovery started from (-1: none); it is kept as the fallback of the next. */
  usedCheckpoint: number;
  report: Omit<RecoveryReport, 'seconds'>;
}

export class TierConfigMismatchError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TierConfigMismatchError';
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
    // checkpoint is bad, where the journals alone say what was shown.
    marks.fill(1);
  }

  const apply = (record: JournalRecord): void => {
    if (record.k === 'b' || record.h >= handleCount) return;
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

  const replayFrom = checkpoint?.journal ?? journals[0] ?? 0;
  const replayed = journals.filter((sequence) => sequence >= replayFrom);
  let tornBytes = 0;
  let recordsDropped = 0;
  const scratch = new Uint8Array(input.slotSize);
  const dataChecks = async (record: SealRecord): Promise<boolean> => {
    if (record.l > input.blockSize || record.s >= input.maxSlots) return false;
    const view = scratch.subarray(0, record.l);
    const got = await input.data.read(view, record.s * input.slotSize);
    return got === record.l && crc32c(view) === record.c;
  };
  for (const [position, sequence] of replayed.entries()) {
    const parsed = parseJournal(await readWhole(files, path.join(directory, sequenceName('journal', sequence))));
    checksumFailures += parsed.badFrames;
    tornBytes += parsed.tornBytes;
    const last = position === replayed.length - 1;
    for (const [i, record] of parsed.records.entries()) {
      const unsure = (last && i >= parsed.lastBatchStart) || i >= parsed.firstAfterCorruption;
      if (record.k === 's' && unsure && !(await dataChecks(record))) {
        recordsDropped += 1;
        continue;
      }
      apply(record);
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
    usedCheckpoint,
    report: {
      blocksRecovered: blocks.size,
      recordsDropped,
      tornBytes,
      checksumFailures,
      blocksOverCapacity,
      checkpoint: checkpointName,
      journalsReplayed: replayed.length,
      fresh,
    },
  };
}
