// Copies of received payload into its destination. A target's pool and request contexts are
// WebAssembly shared memory, and V8 copies into a SharedArrayBuffer word by word only when
// source and destination agree in alignment mod 8, else octet by octet: a 16 KiB inline STORE's
// payload took 10-20 us to place instead of ~0.7 (issue 16, session 4). Such copies go through a
// bounce buffer laid out with the destination's alignment: two fast copies instead of one slow one.

import { setBytes, subarrayOf } from './uint8-methods.ts';
import { ViewCache } from './view-cache.ts';
import { sharedMemoryStaging } from './receive-staging.ts';
import { copyInto } from './rc/shared-copy.ts';

const ALIGNMENT = 8;
/** Shorter misaligned copies are cheap enough either way. */
const BOUNCE_MIN = 256;
/** The bounce buffer's first size: a whole staging read's payload fits. */
const BOUNCE_INITIAL = 64 * 1024;

/** Copies out of staging in shared memory (receive-staging.ts stageInSharedMemory), for tests. */
export let sharedMoves = 0;

/** This thread's bounce buffer, made on first use and grown to the longest copy seen. */
let bounce: Uint8Array | undefined;
/** Views of `bounce`, by alignment skew and length. */
let bounceViews: ViewCache | undefined;

/**
 * Copies `length` octets of `source` from `from` into `target` at `at`. `sourceViews`, when the
 * source is a buffer read into over and over (a staging buffer), supplies the view of the range
 * without allocating one per copy.
 */
export function copyPayload(target: Uint8Array, at: number, source: Uint8Array, from: number, length: number, sourceViews?: ViewCache): void {
  const piece = sourceViews !== undefined ? sourceViews.view(from, length) : subarrayOf.call(source, from, from + length);
  if (source === sharedMemoryStaging && length >= BOUNCE_MIN) {
    // Staged in shared memory (a target's thread, receive-staging.ts): memmove into shared memory.
    sharedMoves++;
    copyInto(target, at, piece);
    return;
  }
  if (length < BOUNCE_MIN) {
    // Short: no alignment to work out (byteOffset is a builtin call each in optimized code).
    setBytes.call(target, piece, at);
    return;
  }
  const skew = (target.byteOffset + at) % ALIGNMENT;
  if (skew === (source.byteOffset + from) % ALIGNMENT || !(target.buffer instanceof SharedArrayBuffer)) {
    setBytes.call(target, piece, at);
    return;
  }
  if (bounce === undefined || bounceViews === undefined || bounce.length < skew + length) {
    bounce = new Uint8Array(Math.max(BOUNCE_INITIAL, length) + ALIGNMENT);
    bounceViews = new ViewCache(bounce, ALIGNMENT);
  }
  bounce.set(piece, skew);
  target.set(bounceViews.view(skew, length), at);
}
