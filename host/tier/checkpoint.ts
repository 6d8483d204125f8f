// The checkpoint: the tier's whole index at one point of the journal, so that recovery reads
// one file and replays only the journal written after it. Columns of typed arrays, blocks in
// least-recently-used order (recovery keeps that order for later drops), and the Generation
// marks of every handle (kbtp-v1 section 12). Typed arrays are stored in this machine's byte
// order, which is little-endian on every platform Node ships for.
import { CHECKPOINT_MAGIC, decodeFrame, encodeFrame } from './records.ts';

export const CHECKPOINT_VERSION = 1;

export interface CheckpointBlocks {
  index: Uint32Array;
  generation: Uint16Array;
  dataLength: Uint32Array;
  slot: Uint32Array;
  crc: Uint32Array;
}

export interface Checkpoint {
  blockSize: number;
  slotSize: number;
  handleBase: bigint;
  handleCount: number;
  /** Journal number replay starts from. */
  journal: number;
  /** Slots of the data file ever used (the file's extent). */
  highSlot: number;
  /** Number of the first group commit in that journal (undefined in checkpoints written before it was kept). */
  group?: number | undefined;
  marks: Uint16Array;
  blocks: CheckpointBlocks;
}

const bytesOf = (array: Uint16Array | Uint32Array): Uint8Array => new Uint8Array(array.buffer, array.byteOffset, array.byteLength);

export function encodeCheckpoint(checkpoint: Checkpoint): Buffer {
  const { blocks } = checkpoint;
  return encodeFrame(CHECKPOINT_MAGIC, {
    v: CHECKPOINT_VERSION,
    blockSize: checkpoint.blockSize,
    slotSize: checkpoint.slotSize,
    handleBase: checkpoint.handleBase.toString(),
    handleCount: checkpoint.handleCount,
    journal: checkpoint.journal,
    highSlot: checkpoint.highSlot,
    group: checkpoint.group,
    marks: bytesOf(checkpoint.marks),
    index: bytesOf(blocks.index),
    generation: bytesOf(blocks.generation),
    dataLength: bytesOf(blocks.dataLength),
    slot: bytesOf(blocks.slot),
    crc: bytesOf(blocks.crc),
  });
}

/** Copies octets into a fresh, aligned typed array of `count` elements; undefined if the size is wrong. */
function column<T extends Uint16Array | Uint32Array>(value: unknown, make: (count: number) => T, count: number): T | undefined {
  if (!(value instanceof Uint8Array)) return undefined;
  const array = make(count);
  if (value.byteLength !== array.byteLength) return undefined;
  bytesOf(array).set(value);
  return array;
}

/** Decodes a checkpoint file; a string says what is wrong with it. */
export function decodeCheckpoint(bytes: Uint8Array): Checkpoint | string {
  const frame = decodeFrame(bytes, 0, CHECKPOINT_MAGIC);
  if (!frame.ok) return `bad frame (${frame.reason})`;
  const p = frame.payload as Record<string, unknown>;
  if (typeof p !== 'object' || p === null || p.v !== CHECKPOINT_VERSION) return 'unknown checkpoint version';
  const ints = ['blockSize', 'slotSize', 'handleCount', 'journal', 'highSlot'] as const;
  for (const key of ints) if (!Number.isSafeInteger(p[key]) || (p[key] as number) < 0) return `bad field ${key}`;
  if (p.group !== undefined && (!Number.isSafeInteger(p.group) || (p.group as number) < 0)) return 'bad field group';
  if (typeof p.handleBase !== 'string' || !/^\d+$/.test(p.handleBase)) return 'bad field handleBase';
  const handleCount = p.handleCount as number;
  const marks = column(p.marks, (n) => new Uint16Array(n), handleCount);
  const count = p.index instanceof Uint8Array ? p.index.byteLength / 4 : -1;
  if (marks === undefined || !Number.isInteger(count) || count < 0) return 'bad marks or index';
  const index = column(p.index, (n) => new Uint32Array(n), count);
  const generation = column(p.generation, (n) => new Uint16Array(n), count);
  const dataLength = column(p.dataLength, (n) => new Uint32Array(n), count);
  const slot = column(p.slot, (n) => new Uint32Array(n), count);
  const crc = column(p.crc, (n) => new Uint32Array(n), count);
  if (index === undefined || generation === undefined || dataLength === undefined || slot === undefined || crc === undefined) {
    return 'block columns of different lengths';
  }
  return {
    blockSize: p.blockSize as number,
    slotSize: p.slotSize as number,
    handleBase: BigInt(p.handleBase),
    handleCount,
    journal: p.journal as number,
    highSlot: p.highSlot as number,
    group: p.group as number | undefined,
    marks,
    blocks: { index, generation, dataLength, slot, crc },
  };
}
