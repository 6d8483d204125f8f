// Writes straight to a TCP socket's libuv handle, past Node's Writable stream. For a 16 KiB LOAD
// the Writable path (cork/uncork, a Buffer made for every Uint8Array chunk, the buffered-request
// list, _writev's {chunk, encoding} array, a WriteWrap, the afterWrite nextTick) cost the target
// about as much CPU per request as all of the RNIC's own JavaScript (docs/BENCH.md, issue 16). The
// handle's writev takes the chunks as they are; the kernel takes them at once almost always, and
// then nothing is allocated and the write is complete when the call returns. When the kernel
// buffer is full, libuv queues the rest and reports completion later through the request object,
// as it does for Node's own writes.
//
// The handle API is Node's (net.Socket uses it the same way, lib/internal/stream_base_commons.js);
// its WriteWrap constructor and state array come from process.binding('stream_wrap'), which Node
// 20 still exposes. Where any of it is missing, HandleWriter.for() answers undefined and the
// caller keeps using socket.write.

import type net from 'node:net';
import { getSystemErrorName } from 'node:util';
import { RnicError } from './errors.ts';

/** A libuv write request as Node's stream handles take it. */
interface WriteRequest {
  oncomplete: (this: WriteRequest, status: number) => void;
  /** Keeps the chunk list of a queued write alive until libuv is done with it. */
  chunks: Uint8Array[] | undefined;
  writer: HandleWriter | undefined;
  bytes: number;
}

interface StreamHandle {
  writev(request: WriteRequest, chunks: Uint8Array[], allBuffers: boolean): number;
  writeBuffer(request: WriteRequest, chunk: Uint8Array): number;
}

interface StreamWrapBinding {
  WriteWrap: new () => WriteRequest;
  streamBaseState: Int32Array;
  kBytesWritten: number;
  kLastWriteWasAsync: number;
}

function loadBinding(): StreamWrapBinding | undefined {
  try {
    const binding = (process as unknown as { binding(name: string): Partial<StreamWrapBinding> }).binding('stream_wrap');
    if (
      typeof binding.WriteWrap === 'function' &&
      binding.streamBaseState instanceof Int32Array &&
      typeof binding.kBytesWritten === 'number' &&
      typeof binding.kLastWriteWasAsync === 'number'
    ) {
      return binding as StreamWrapBinding;
    }
  } catch {
    // No binding (a future Node, or a runtime that refuses it): socket.write serves instead.
  }
  return undefined;
}

const binding = loadBinding();

/** A negative libuv status as the error a socket would report. */
export function writeError(status: number): RnicError {
  let name = 'EIO';
  try {
    name = getSystemErrorName(status);
  } catch {
    // Not an errno Node knows: EIO says enough.
  }
  return new RnicError('ECONNRESET', `write failed: ${name}`);
}

const EMPTY = new Uint8Array(0);

/**
 * Drops a kept list's references. A loop rather than Array fill(), which optimized code reaches
 * only through a call into the runtime's C++ (issue 16: in the target's profile once per writev).
 */
function forgetChunks(list: Uint8Array[], count: number): void {
  for (let i = 0; i < count; i++) list[i] = EMPTY;
}

/** What HandleWriter.write did. */
export const WRITE_DONE = 0;
export const WRITE_QUEUED = 1;

function onQueuedWriteComplete(this: WriteRequest, status: number): void {
  const writer = this.writer;
  this.writer = undefined;
  this.chunks = undefined;
  writer?.queuedWriteDone(this.bytes, status);
}

/** An entry of the order queue: a write libuv still holds (it reports it through oncomplete). */
const HELD = 1;

/**
 * One socket's direct writer. Completions are reported in the order of the writes: libuv queues a
 * write behind any it still holds, but a write it finished may still await its callback (libuv
 * defers it to the next loop iteration) when the next one goes out at once, so a write that
 * completes at once while an earlier one is unreported waits for it.
 */
export class HandleWriter {
  /** Octets of queued writes the kernel has not taken yet. */
  queuedBytes = 0;
  /** The request of the writes that complete at once: libuv keeps none of them, so it is reused. */
  private request: WriteRequest;
  /** Exact-length chunk lists by count: the handle reads the list's length, and reuse avoids an array per write. */
  private readonly lists: Uint8Array[][] = [];
  /** From the oldest unreported write on: HELD, 0 (done at once) or a negative errno (failed at once). */
  private readonly order: number[] = [];
  private orderHead = 0;

  private constructor(
    private readonly socket: net.Socket,
    private readonly wrap: StreamWrapBinding,
    private readonly reportDone: (error: Error | undefined) => void,
  ) {
    this.request = this.newRequest();
  }

  /**
   * A writer for `socket`, or undefined when this runtime offers no handle to write to.
   * `reportDone` runs, in write order, for every write write() answered WRITE_QUEUED.
   */
  static for(socket: net.Socket, reportDone: (error: Error | undefined) => void): HandleWriter | undefined {
    if (binding === undefined) return undefined;
    const handle = (socket as unknown as { _handle: Partial<StreamHandle> | null })._handle;
    if (handle === null || typeof handle.writev !== 'function' || typeof handle.writeBuffer !== 'function') return undefined;
    return new HandleWriter(socket, binding, reportDone);
  }

  private newRequest(): WriteRequest {
    const request = new this.wrap.WriteWrap();
    request.oncomplete = onQueuedWriteComplete;
    request.chunks = undefined;
    request.writer = undefined;
    request.bytes = 0;
    return request;
  }

  /**
   * Writes `chunks[0..count)` (count >= 1). Returns WRITE_DONE when the kernel took every octet,
   * a negative errno when the write failed at once, or WRITE_QUEUED when its outcome comes later
   * through `reportDone` (libuv holds part of it, or an earlier write is still unreported).
   */
  write(chunks: readonly Uint8Array[], count: number): number {
    const handle = (this.socket as unknown as { _handle: StreamHandle | null })._handle;
    const request = this.request;
    let list: Uint8Array[] | undefined;
    let status: number;
    if (handle === null) {
      status = -9; // EBADF: the socket was closed under us
    } else if (count === 1) {
      status = handle.writeBuffer(request, chunks[0]!);
    } else {
      list = this.lists[count];
      if (list === undefined) {
        list = new Array<Uint8Array>(count);
        if (count < 256) this.lists[count] = list;
      }
      for (let i = 0; i < count; i++) list[i] = chunks[i]!;
      status = handle.writev(request, list, true);
    }
    const state = this.wrap.streamBaseState;
    if (status === 0 && state[this.wrap.kLastWriteWasAsync] !== 0) {
      // libuv owns this request until it completes; later writes get a fresh one.
      const bytes = state[this.wrap.kBytesWritten]!;
      request.writer = this;
      request.bytes = bytes;
      request.chunks = list === undefined ? [chunks[0]!] : list.slice();
      if (list !== undefined) forgetChunks(list, count);
      this.queuedBytes += bytes;
      this.request = this.newRequest();
      this.order.push(HELD);
      return WRITE_QUEUED;
    }
    // Done with the chunks either way; the kept list must not hold them until its next use.
    if (list !== undefined) forgetChunks(list, count);
    if (this.orderHead < this.order.length) {
      this.order.push(status);
      return WRITE_QUEUED;
    }
    return status === 0 ? WRITE_DONE : status;
  }

  /** libuv finished the oldest held write (status 0) or gave it up: report it and the finished writes behind it. */
  queuedWriteDone(bytes: number, status: number): void {
    this.queuedBytes -= bytes;
    this.orderHead++; // the oldest entry is that write: libuv completes in order
    this.reportDone(status === 0 ? undefined : writeError(status));
    // reportDone may write again (appending behind): read the queue afresh every step.
    while (this.orderHead < this.order.length && this.order[this.orderHead] !== HELD) {
      const done = this.order[this.orderHead++]!;
      this.reportDone(done === 0 ? undefined : writeError(done));
    }
    if (this.orderHead === this.order.length) {
      this.order.length = 0;
      this.orderHead = 0;
    }
  }
}
