// One read(2) of a socket into a caller's buffer, synchronously, for the busy poll's reader (issue
// 16): when the poll finds a channel's descriptor ready, the channel reads it there instead of
// going back through the rest of libuv's loop iteration and two more epoll calls to have libuv
// read it. Through koffi with numbers and a typed array: nothing is allocated per call (the
// array's own memory is passed, at its offset), and a failure is a negative errno, not a thrown
// Error as fs.readSync's EAGAIN would be.
import { constants } from 'node:os';
import { libcCalls } from '../util/libc.ts';

interface ReadCalls {
  read(fd: number, into: Uint8Array, length: number): number;
  errno(): number;
}

const readCalls = libcCalls<ReadCalls>(({ koffi, libc }) => ({
  read: libc.func('long read(int, void *, size_t)') as ReadCalls['read'],
  errno: () => koffi.errno(),
}));

/**
 * Reads what `fd` has, up to `into.length` octets: the count (0 at the end of the stream), or
 * minus the errno (-EAGAIN when nothing is waiting). Throws where libc cannot be bound in this thread (no koffi, not Linux).
 */
export function readSocket(fd: number, into: Uint8Array): number {
  const calls = readCalls();
  if (calls instanceof Error) throw calls;
  const length = calls.read(fd, into, into.length);
  return length >= 0 ? length : -calls.errno();
}

export const EAGAIN = constants.errno.EAGAIN;
