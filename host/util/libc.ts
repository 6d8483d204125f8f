// libc through koffi, bound once per thread, for the few calls Node has no API for (setsockopt on
// a TCP socket, dup). The reason is kept when it cannot be bound (not Linux, no koffi), so every
// caller can say why and go on without it.
import { createRequire } from 'node:module';
import { constants } from 'node:os';

export interface BoundLibc {
  koffi: typeof import('koffi');
  libc: ReturnType<typeof import('koffi').load>;
}

let bound: BoundLibc | Error | undefined;

export function bindLibc(): BoundLibc | Error {
  if (bound !== undefined) return bound;
  try {
    if (process.platform !== 'linux') throw new Error(`libc is bound on Linux only (this is ${process.platform})`);
    const require = createRequire(import.meta.url);
    const koffi = require('koffi') as typeof import('koffi');
    bound = { koffi, libc: koffi.load('libc.so.6') };
  } catch (error) {
    bound = error instanceof Error ? error : new Error(String(error));
  }
  return bound;
}

/**
 * Binds a set of libc calls once per thread, on first use: `make` declares them from the bound
 * library. Where libc cannot be bound, or a declaration fails, every call of the returned
 * function answers the same Error, so each caller can say why and go on without the calls.
 */
export function libcCalls<T>(make: (bound: BoundLibc) => T): () => T | Error {
  let calls: T | Error | undefined;
  return () => {
    if (calls !== undefined) return calls;
    const bound = bindLibc();
    try {
      calls = bound instanceof Error ? bound : make(bound);
    } catch (error) {
      calls = error instanceof Error ? error : new Error(String(error));
    }
    return calls;
  };
}

/**
 * errno numbers by name, as this platform's Node has them; where two names share a number
 * (EAGAIN and EWOULDBLOCK, ENOTSUP and EOPNOTSUPP) the first Node lists, the usual one.
 */
const ERRNO_NAMES = new Map<number, string>();
for (const [name, value] of Object.entries(constants.errno)) if (!ERRNO_NAMES.has(value)) ERRNO_NAMES.set(value, name);

/** The name of an errno (ECONNRESET), or `errno N` where the platform names none: for messages. */
export function errnoName(errno: number): string {
  return ERRNO_NAMES.get(errno) ?? `errno ${errno}`;
}
