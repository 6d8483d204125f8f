// Where socket reads land when they are not read straight into their destination: one staging
// buffer per thread, shared by every receiver. A read into it is consumed entirely by the commit
// that follows (headers and trailers are copied out, small payloads placed), and reads of
// different sockets never overlap on one thread, so a thousand connections cost 64 KiB of
// staging, not 64 MiB. A receiver fed while another commit is running (in-memory channels wired
// back to back) uses a buffer of its own instead.

import { ViewCache } from './view-cache.ts';

export const STAGING_SIZE = 64 * 1024;
/**
 * Offsets of a staging buffer whose views are kept: the same offsets recur (a stream of like
 * messages lays out each read alike), a view per staged copy was an allocation per message
 * (issue 16), and a read's layout seldom has more.
 */
const STAGING_VIEW_OFFSETS = 256;

export interface StagingBuffer {
  readonly bytes: Uint8Array;
  /** Views of `bytes`' ranges, for copies of staged payload (`set()` needs a view of exactly it). */
  readonly views: ViewCache;
}

export function newStagingBuffer(): StagingBuffer {
  const bytes = new Uint8Array(STAGING_SIZE);
  return { bytes, views: new ViewCache(bytes, STAGING_VIEW_OFFSETS) };
}

let threadStaging: StagingBuffer | undefined;
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
