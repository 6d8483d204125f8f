// A second descriptor for an open file or socket, for threads that each close what they hold.
// The target's workers accept on one listening socket (issue 3: workers cannot be handed a
// socket, but each can listen on a descriptor number). Each worker's server closes its
// descriptor when it stops, so with one number shared by all, the first close freed the number
// and a later worker's close hit whatever the process had opened under it since: a libuv
// watcher in another thread then failed its epoll_ctl and aborted the process (SIGABRT, seen
// within 20-80 start/stop rounds of a two-worker target in one process). With a descriptor of
// its own per worker, every close is its owner's. Node has no dup(), so it goes through koffi
// (a dependency already: the batched UDP socket, ISA-L, the receive window).
import { libcCalls } from './libc.ts';

interface DescriptorCalls {
  dup(fd: number): number;
  errno(): number;
}

const descriptorCalls = libcCalls<DescriptorCalls>(({ koffi, libc }) => ({
  dup: libc.func('int dup(int)') as DescriptorCalls['dup'],
  errno: () => koffi.errno(),
}));

/** A new descriptor number for the open file `fd` refers to (close-on-exec is not copied: fine for threads). */
export function duplicateDescriptor(fd: number): number {
  const libc = descriptorCalls();
  if (libc instanceof Error) throw new Error(`cannot duplicate descriptor ${fd}: ${libc.message}`);
  const copy = libc.dup(fd);
  if (copy < 0) throw new Error(`dup(${fd}) failed: errno ${libc.errno()}`);
  return copy;
}
