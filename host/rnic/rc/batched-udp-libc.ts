// libc's socket calls as the batched UDP socket and its workers' parents use them, bound through
// koffi (prebuilt binaries in its npm package), with the IPv4 sockaddr layout (errno names for
// its errors: host/util/libc.ts). Kept apart from the socket so that other users of the binding
// (shared-copy.ts's memmove, the link choice's probe) need not load the socket's machinery.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import { AF_INET } from './batched-udp-layout.ts';

export interface Libc {
  socket(domain: number, type: number, protocol: number): number;
  bind(fd: number, address: Uint8Array, length: number): number;
  getsockname(fd: number, address: Uint8Array, length: Int32Array): number;
  setsockopt(fd: number, level: number, name: number, value: Uint8Array, length: number): number;
  getsockopt(fd: number, level: number, name: number, value: Uint8Array, length: Int32Array): number;
  close(fd: number): number;
  sendmmsg(fd: number, vector: number, count: number, flags: number): number;
  recvmmsg(fd: number, vector: number, count: number, flags: number, timeout: number): number;
  /** Returns its first argument: the address of a typed array's first octet. */
  addressOf(target: Uint8Array): number;
  /** memmove between raw addresses (shared-copy.ts). */
  moveBytes(to: number, from: number, length: number): void;
  errno(): number;
  koffiPath: string;
  /**
   * Watches `fd` for readability on the calling thread's own event loop (a libuv poll handle:
   * koffi.node.poll), or undefined when this koffi has no such call (the batched socket then
   * cannot receive, and the link choice falls back to node:dgram).
   */
  pollReadable: ((fd: number, onReadable: (status: number) => void) => ReadablePoll) | undefined;
}

/** A libuv poll handle on a descriptor (koffi's PollHandle, as far as the socket uses it). */
export interface ReadablePoll {
  /** Stops watching and releases the handle (the event loop no longer waits for it). */
  close(): void;
}

// koffi.node.poll is undocumented in koffi 3.3 (its changelog says it may change), which is why
// package.json pins koffi's exact version. Its callback gets (status, events), although
// index.d.ts declares only the events: the shape below is what koffi 3.3.4's uv.cc passes.
type KoffiPoll = (fd: number, options: { readable: boolean }, callback: (status: number) => void) => ReadablePoll | null;

let loaded: Libc | Error | undefined;

/**
 * Binds libc through koffi once per thread. Returns the reason as an Error when this platform
 * or installation cannot batch (no koffi, not Linux, not little-endian 64-bit, no glibc).
 */
export function loadBatchedUdp(): Libc | Error {
  if (loaded !== undefined) return loaded;
  try {
    if (process.platform !== 'linux') throw new Error(`batched UDP needs Linux (this is ${process.platform})`);
    if (os.endianness() !== 'LE' || (process.arch !== 'x64' && process.arch !== 'arm64')) {
      throw new Error(`batched UDP needs x64 or arm64 (this is ${process.arch})`);
    }
    const require = createRequire(import.meta.url);
    const koffiPath = require.resolve('koffi');
    const koffi = require(koffiPath) as typeof import('koffi');
    const libc = koffi.load('libc.so.6');
    const socket = libc.func('int socket(int, int, int)') as Libc['socket'];
    const bind = libc.func('int bind(int, void *, uint32_t)') as Libc['bind'];
    const getsockname = libc.func('int getsockname(int, void *, void *)') as Libc['getsockname'];
    const setsockopt = libc.func('int setsockopt(int, int, int, void *, uint32_t)') as Libc['setsockopt'];
    const getsockopt = libc.func('int getsockopt(int, int, int, void *, void *)') as Libc['getsockopt'];
    const close = libc.func('int close(int)') as Libc['close'];
    const sendmmsg = libc.func('int sendmmsg(int, intptr_t, unsigned int, int)') as Libc['sendmmsg'];
    const recvmmsg = libc.func('int recvmmsg(int, intptr_t, unsigned int, int, intptr_t)') as Libc['recvmmsg'];
    const memmove = libc.func('intptr_t memmove(void *, void *, size_t)') as (a: Uint8Array, b: Uint8Array, n: number) => number | bigint;
    const addressOf = (target: Uint8Array): number => Number(memmove(target, target, 0));
    // Declared void: the result (its first argument) is not needed, and a returned address could come back as a BigInt.
    const moveBytes = libc.func('void memmove(intptr_t, intptr_t, size_t)') as Libc['moveBytes'];
    const poll = (koffi as unknown as { node?: { poll?: unknown } }).node?.poll;
    const pollReadable =
      typeof poll === 'function' && keepKoffiLoaded(koffi, libc)
        ? (fd: number, onReadable: (status: number) => void): ReadablePoll => {
            const handle = (poll as KoffiPoll)(fd, { readable: true }, onReadable);
            if (handle === null) throw new Error(`koffi.node.poll refused descriptor ${fd}`);
            return handle;
          }
        : undefined;
    loaded = {
      socket,
      bind,
      getsockname,
      setsockopt,
      getsockopt,
      close,
      sendmmsg,
      recvmmsg,
      addressOf,
      moveBytes,
      errno: () => koffi.errno(),
      koffiPath,
      pollReadable,
    };
  } catch (error) {
    loaded = error instanceof Error ? error : new Error(String(error));
  }
  return loaded;
}

export function writeSockaddr(target: Uint8Array, offset: number, address: Uint8Array, port: number): void {
  target[offset] = AF_INET; // sa_family is in host order: little-endian here
  target[offset + 1] = 0;
  target[offset + 2] = port >>> 8;
  target[offset + 3] = port & 0xff;
  target.set(address, offset + 4);
}

export function readSockaddrAddress(source: Uint8Array, offset: number): string {
  return `${source[offset + 4]}.${source[offset + 5]}.${source[offset + 6]}.${source[offset + 7]}`;
}

const RTLD_NOW = 2;
const RTLD_NOLOAD = 4;
const RTLD_NODELETE = 0x1000;

/**
 * Keeps koffi's native binary mapped until the process ends. A worker thread that ends (or is
 * terminated) with a poll handle open has it closed during its teardown, and libuv calls the
 * handle's close callback, which is koffi's code, after Node unloaded the addon if no other
 * thread had loaded it: the process dies of SIGSEGV (koffi 3.3.4, Node 20). dlopen with
 * RTLD_NODELETE on the loaded binary (RTLD_NOLOAD: only its flags change) prevents the unload.
 * False when the binary cannot be pinned: then the socket is not used (node:dgram is).
 */
function keepKoffiLoaded(koffi: typeof import('koffi'), libc: ReturnType<typeof koffi.load>): boolean {
  try {
    const binary = readFileSync('/proc/self/maps', 'utf8')
      .split('\n')
      .map((line) => line.slice(line.indexOf('/')))
      .find((path) => path.endsWith('/koffi.node'));
    if (binary === undefined) return false;
    let dlopen: (path: string, flags: number) => unknown;
    try {
      dlopen = libc.func('void *dlopen(const char *, int)') as typeof dlopen;
    } catch {
      // glibc before 2.34 keeps dlopen in libdl.
      dlopen = koffi.load('libdl.so.2').func('void *dlopen(const char *, int)') as typeof dlopen;
    }
    return dlopen(binary, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) !== null;
  } catch {
    return false;
  }
}
