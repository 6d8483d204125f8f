// Where socket reads land when they are not read straight into their destination: one staging
// buffer per thread, shared by every receiver. A read into it is consumed entirely by the commit
// that follows (headers and trailers are copied out, small payloads placed), and reads of
// different sockets never overlap on one thread, so a thousand connections cost 256 KiB of
// staging, not 256 MiB. A receiver fed while another commit is running (in-memory channels wired
// back to back) uses a buffer of its own instead.

import { ViewCache } from './view-cache.ts';
import { sharedAddress } from './rc/shared-copy.ts';

/**
 * What one read may take. A pipelined batch of requests arrives as one writev (kbtp bench
 * --in-flight 8: eight 16 KiB STOREs, or eight LOADs' RDMA Writes and COMPLETIONs, ~131 KiB):
 * with 64 KiB each took 3 reads, each its own delivery and turn, and on the target 3 writes of
 * COMPLETIONs (issue 16, strace -f -c); now one read and one writev per batch.
 */
export const STAGING_SIZE = 256 * 1024;
/**
 * Offsets of a staging buffer whose views are kept: the same offsets recur (a stream of like
 * messages lays out each read alike), a view per staged copy was an allocation per message
 * (issue 16), and a read's layout seldom has more.
 */
const STAGING_VIEW_OFFSETS = 256;

/**
 * Reads into a staging buffer start at its first octet and take what the stream's next pieces
 * need (a prefix, a message's end and the next prefix): one length after another at the same
 * offset, more than a ViewCache set keeps for one offset. Lengths up to this have a view each,
 * made once (issue 16: with blocks of 64 KiB and more, a view per staged read).
 */
const READ_VIEW_LENGTHS = 1024;

export interface StagingBuffer {
  readonly bytes: Uint8Array;
  /** Views of `bytes`' ranges, for copies of staged payload (`set()` needs a view of exactly it). */
  readonly views: ViewCache;
  /** `bytes[0, length)`, the buffer a read of `length` octets fills. */
  readView(length: number): Uint8Array;
}

class Staging implements StagingBuffer {
  readonly views: ViewCache;
  private readonly heads: Array<Uint8Array | undefined> = [];

  constructor(readonly bytes: Uint8Array = new Uint8Array(STAGING_SIZE)) {
    this.views = new ViewCache(bytes, STAGING_VIEW_OFFSETS);
    // Packed, so the lookup needs no hole check.
    for (let i = 0; i <= READ_VIEW_LENGTHS; i++) this.heads.push(undefined);
  }

  readView(length: number): Uint8Array {
    if (length === STAGING_SIZE) return this.bytes;
    if (length > READ_VIEW_LENGTHS) return this.views.view(0, length);
    let view = this.heads[length];
    if (view === undefined) {
      view = this.bytes.subarray(0, length);
      this.heads[length] = view;
    }
    return view;
  }
}

export function newStagingBuffer(): StagingBuffer {
  return new Staging();
}

let threadStaging: StagingBuffer | undefined;

/**
 * The thread's staging octets when they lie in a SharedArrayBuffer (stageInSharedMemory), else
 * undefined: copyPayload moves staged payload bound for shared memory with memmove then.
 */
export let sharedMemoryStaging: Uint8Array | undefined;

/**
 * Puts this thread's staging buffer in a SharedArrayBuffer (on, where libc's memmove binds through
 * koffi; plain memory otherwise) or in plain memory (off). For a
 * target's worker thread, where staged payload goes to shared memory (request contexts, the
 * pool): V8 copies into a SharedArrayBuffer with relaxed word moves (octet by octet when the two
 * disagree in alignment mod 8, hence payload-copy.ts's bounce buffer), about 1 us per 16 KiB
 * inline STORE with the bounce; between two SharedArrayBuffers memmove (rc/shared-copy.ts) takes
 * about 0.45 (issue 16). Not for a client's thread: its payload goes to plain memory, and V8 copies
 * out of a SharedArrayBuffer as slowly as into one.
 */
export function stageInSharedMemory(on: boolean): void {
  const shared = on ? new Uint8Array(new SharedArrayBuffer(STAGING_SIZE)) : undefined;
  // Without memmove (no koffi, not Linux) V8 would copy shared to shared, octet by octet when
  // misaligned: plain staging and payload-copy.ts's bounce buffer are faster then.
  const moved = shared !== undefined && sharedAddress(shared) >= 0 ? shared : undefined;
  const bytes = moved ?? new Uint8Array(STAGING_SIZE);
  threadStaging = new Staging(bytes);
  sharedMemoryStaging = moved;
}
/** Commits in progress on this thread; a nested one (bytes fed from inside a commit) needs its own buffer. */
let commitDepth = 0;

/** The thread's shared staging buffer, or undefined while a commit is running (use a buffer of your own). */
export function sharedStagingBuffer(): StagingBuffer | undefined {
  if (commitDepth !== 0) return undefined;
  if (threadStaging === undefined) threadStaging = newStagingBuffer();
  return threadStaging;
}

/** Brackets the consumption of a staged read (see sharedStagingBuffer). */
export function commitStarted(): void {
  commitDepth++;
}

export function commitEnded(): void {
  commitDepth--;
}
