// Where everything lives in the engine's one shared memory. The host computes it once; the
// engine reads the addresses from its descriptor. docs/ENGINE.md draws the picture.
import {
  ENGINE_SIZE,
  RING_DESCRIPTOR_SIZE,
  TENANT_SIZE,
  SESSION_SIZE,
  REQUEST_HEADER_SIZE,
  SLOT_SIZE,
  ENTRY_SIZE,
  DEFERRED_ENTRY_SIZE,
} from '../../assembly/struct-offsets.ts';
import { HEADER_SIZE, DESCRIPTOR_SIZE } from '../../assembly/kbtp-constants.ts';
import { EngineConfigError, type ResolvedEngineConfig } from './config.ts';

export const WASM_PAGE = 65536;
export const MAX_PAGES = 65536; // a 32-bit memory: 4 GiB

export interface RingLayout {
  descriptor: number;
  /** Head counter, immediately followed by the slots: one STag covers both (the Ring STag). */
  head: number;
  slots: number;
  order: number;
  deferredList: number;
  abandoned: number;
  firstBlock: number;
  blocks: number;
}

export interface EngineLayout {
  heapBase: number;
  engine: number;
  rings: RingLayout[]; // [0] is the shared ring, then one per partition
  tenants: number;
  sessions: number;
  requests: number;
  requestSize: number;
  handleLocks: number;
  /** One u32 per handle: the Generation mark of the durable tier (kbtp-v1 section 12). */
  generationMarks: number;
  /** One u32 per handle: when a request last used it (host-side least-recently-used order). */
  handleStamps: number;
  /** u32 counter the stamps are taken from. */
  lruClock: number;
  /** One u32 per staging block: 1 while a request holds it. */
  stagingFlags: number;
  /** Staging blocks, right after the pool so that one local registration covers both. */
  staging: number;
  stagingBytes: number;
  blockRings: number;
  table: number;
  pool: number;
  poolBytes: number;
  totalBytes: number;
  pages: number;
}

/** Largest request a session can send: a header, two descriptors and Max Inline octets. */
export function maxRequestSize(maxInline: number): number {
  return HEADER_SIZE + 2 * DESCRIPTOR_SIZE + maxInline;
}

export function computeLayout(config: ResolvedEngineConfig, heapBase: number): EngineLayout {
  let cursor = heapBase;
  const take = (bytes: number, alignment: number): number => {
    cursor = Math.ceil(cursor / alignment) * alignment;
    const address = cursor;
    cursor += bytes;
    return address;
  };
  const engine = take(ENGINE_SIZE, 64);
  const ringSpecs = [
    { order: config.ringOrder, firstBlock: 0, blocks: config.sharedBlocks },
    ...config.partitions.map((partition) => ({ order: partition.ringOrder, firstBlock: partition.firstBlock, blocks: partition.blocks })),
  ];
  const descriptors = ringSpecs.map(() => take(RING_DESCRIPTOR_SIZE, 64));
  const tenants = take(TENANT_SIZE * Math.max(1, config.tenants.length), 64);
  const sessions = take(SESSION_SIZE * config.threads * config.sessionsPerThread, 64);
  const requestSize = Math.ceil((REQUEST_HEADER_SIZE + maxRequestSize(config.maxInline)) / 64) * 64;
  const requestBytes = requestSize * config.threads * config.requestsPerThread;
  const requests = take(requestBytes, 64);
  const handleLocks = take(4 * config.handleCount, 64);
  const generationMarks = take(4 * config.handleCount, 64);
  const handleStamps = take(4 * config.handleCount, 64);
  const lruClock = take(64, 64);
  const stagingFlags = take(4 * Math.max(1, config.stagingBlocks), 64);
  const blockRings = take(4 * config.blockCount, 64);
  const rings: RingLayout[] = ringSpecs.map((spec, index) => {
    const slotCount = 2 ** spec.order;
    // Head alone on its cache line right before slot 0.
    const head = take(64 + SLOT_SIZE * slotCount, 64);
    return {
      descriptor: descriptors[index] ?? 0,
      head,
      slots: head + 64,
      order: spec.order,
      deferredList: take(DEFERRED_ENTRY_SIZE * slotCount, 64),
      abandoned: take(8 * slotCount, 64),
      firstBlock: spec.firstBlock,
      blocks: spec.blocks,
    };
  });
  const table = take(ENTRY_SIZE * config.handleCount, 64);
  const poolBytes = config.blockSize * config.blockCount;
  const pool = take(poolBytes, 4096);
  const stagingBytes = config.blockSize * config.stagingBlocks;
  const staging = take(stagingBytes, 1);
  const totalBytes = cursor;
  const pages = Math.ceil(totalBytes / WASM_PAGE);
  if (pages > MAX_PAGES) {
    const gib = (totalBytes / 2 ** 30).toFixed(2);
    throw new EngineConfigError(
      'blockSize * blockCount',
      `the engine needs ${gib} GiB, over the 4 GiB a 32-bit WebAssembly memory allows`,
      requestBytes > poolBytes
        ? `the request contexts take ${(requestBytes / 2 ** 30).toFixed(2)} GiB (Max Inline x 2 x credits x sessions): lower Max Inline, credits or sessions`
        : 'use fewer or smaller blocks, or fewer handles',
    );
  }
  return {
    heapBase,
    engine,
    rings,
    tenants,
    sessions,
    requests,
    requestSize,
    handleLocks,
    generationMarks,
    handleStamps,
    lruClock,
    stagingFlags,
    staging,
    stagingBytes,
    blockRings,
    table,
    pool,
    poolBytes,
    totalBytes,
    pages,
  };
}
