// Copies between views of SharedArrayBuffers with the C library's memmove (and their addresses
// for other native code). V8 copies shared
// memory with relaxed atomic word moves (other threads may write it meanwhile, and a torn read
// must not crash), which perf showed as a third of the RC thread on the RoCE receive path
// (v8::internal::relaxed_memmove: a Write's payload from the receive ring into the region, a
// Read Response's into the requester's buffer). memmove moves a 4 KiB packet several times
// faster. Only SharedArrayBuffers qualify: their memory never moves (a plain ArrayBuffer's view
// may live on the V8 heap, and V8 copies plain memory with memmove already). Where koffi does
// not load, TypedArray.set does the copy.

import { loadBatchedUdp } from './batched-udp-libc.ts';

/** Below this many octets the native call costs more than V8's own copy saves. */
const NATIVE_FROM = 512;

type Move = (to: number, from: number, length: number) => void;

let move: Move | null | undefined;
let addressOf: ((view: Uint8Array) => number) | undefined;
/** Address of each SharedArrayBuffer's first octet. */
const bases = new WeakMap<ArrayBufferLike, number>();

function bind(): Move | null {
  const libc = loadBatchedUdp();
  if (libc instanceof Error) {
    move = null;
    return null;
  }
  addressOf = libc.addressOf;
  move = libc.moveBytes;
  return move;
}

/**
 * Address of each shared-memory view's first octet, kept per view. The RC path asks
 * about the same few views packet after packet (the receive ring's cached datagram and payload
 * views, a Write's target, a Read's local buffer), and `view.buffer` is a C++ builtin behind a
 * generic property load: two to four of them per copy cost about 70 ns each (perf: a few percent
 * of the RoCE threads at 1 MiB), a WeakMap lookup keyed by the view about 10 ns. Started over
 * every VIEWS_KEPT new views, so that views made per packet (a Send's scatter) cannot grow it
 * without bound.
 */
let viewAddresses = new WeakMap<Uint8Array, number>();
let viewsKept = 0;
const VIEWS_KEPT = 4096;

/**
 * The address of `view`'s first octet when it lies in a SharedArrayBuffer and koffi loads,
 * else -1: for native code that reads shared memory in place (the ICRC through ISA-L).
 */
export function sharedAddress(view: Uint8Array): number {
  let address = viewAddresses.get(view);
  if (address === undefined) {
    // Plain memory is not kept: a datagram from node:dgram is a new Buffer every time.
    const buffer = view.buffer;
    if (!(buffer instanceof SharedArrayBuffer) || (move === undefined ? bind() : move) === null) return -1;
    address = base(view, buffer) + view.byteOffset;
    if (++viewsKept > VIEWS_KEPT) {
      viewAddresses = new WeakMap();
      viewsKept = 1;
    }
    viewAddresses.set(view, address);
  }
  return address;
}

/**
 * Plain (non-shared) buffers at least this long are used by address: V8 keeps such a buffer's
 * memory outside its heap, where it stays until the buffer is collected or detached (a small
 * typed array's may live on the heap, which moves).
 */
const PLAIN_BY_ADDRESS_FROM = 4096;

/**
 * The address of `view`'s first octet for native code that reads or writes it now: a shared
 * view's (sharedAddress), or one over a plain ArrayBuffer of at least PLAIN_BY_ADDRESS_FROM
 * octets (an application's registered buffer: a KBTP client's load buffers are plain memory);
 * else -1. A plain buffer can be detached (transferred) while registered, which frees or moves
 * its memory: a caller that keeps the address checks `view.length` (0 once detached) before each
 * use, in the same synchronous run as the use.
 */
export function placementAddress(view: Uint8Array): number {
  const shared = sharedAddress(view);
  if (shared >= 0) return shared;
  const buffer = view.buffer;
  if (
    !(buffer instanceof ArrayBuffer) ||
    buffer.byteLength < PLAIN_BY_ADDRESS_FROM ||
    (buffer as { resizable?: boolean }).resizable === true ||
    view.length === 0
  )
    return -1;
  if ((move === undefined ? bind() : move) === null) return -1;
  return base(view, buffer) + view.byteOffset;
}

function base(view: Uint8Array, buffer: ArrayBufferLike): number {
  let address = bases.get(buffer);
  if (address === undefined) {
    address = addressOf!(view) - view.byteOffset;
    bases.set(buffer, address);
  }
  return address;
}

/**
 * memmove between raw addresses in shared memory (both from `sharedAddress`, which binds it: call
 * only after it returned an address). The caller has checked the bounds.
 */
export function moveAt(to: number, from: number, length: number): void {
  move!(to, from, length);
}

/**
 * `target.set(source, offset)`, with memmove where the source lies in shared memory and the target
 * has an address (placementAddress: shared, or a large plain buffer, checked not detached here).
 */
export function copyInto(target: Uint8Array, offset: number, source: Uint8Array): void {
  const length = source.length;
  if (length >= NATIVE_FROM) {
    const to = placementAddress(target);
    const from = to < 0 ? -1 : sharedAddress(source);
    if (from >= 0) {
      // The bounds TypedArray.set enforces: native code must never write past the view.
      if (!(offset >= 0 && offset + length <= target.length)) throw new RangeError(`offset ${offset} + ${length} octets is out of bounds (${target.length})`);
      move!(to + offset, from, length);
      return;
    }
  }
  target.set(source, offset);
}
