// The TCP receive window a connection starts with. Linux starts a socket's receive buffer at
// net.ipv4.tcp_rmem's default (128 KiB: a window of about 64 KiB) and grows it only as the
// application reads, once per measured round trip. A peer whose first messages are larger than
// that (a 256 KiB inline STORE, a 1 MiB Read Response) is held back by the window for its first
// few requests, and BBR, the congestion control of many Linux hosts, counts those
// window-limited rounds as the path's capacity: it leaves STARTUP, and from then on paces the
// sender close to the rate its copies reach, each paced segment waiting for a timer (issue 16:
// a 256 KiB STORE x1 row ran at p50 103-440 us in that mode against 70-120 us without it; in a
// network namespace whose tcp_rmem default was 4 MiB no connection left STARTUP). Node offers
// no setsockopt for TCP, so the call goes through koffi (a dependency already, for the batched
// UDP socket and ISA-L).
//
// SO_RCVBUF would fix the buffer's size and turn autotuning off for good (and is capped at
// net.core.rmem_max); SO_RCVLOWAT raises the buffer so that the window can hold the low-water
// mark and leaves autotuning on (Linux tcp_set_rcvlowat, since 4.18). The mark itself goes back
// to 1 at once, so reads are woken as before. On a listening socket the buffer is what each
// accepted connection inherits, its first window included.
import { bindLibc } from '../util/libc.ts';

const SOL_SOCKET = 1;
const SO_RCVBUF = 8;
const SO_RCVLOWAT = 18;

interface SocketCalls {
  setsockopt(fd: number, level: number, name: number, value: Int32Array, length: number): number;
  getsockopt(fd: number, level: number, name: number, value: Int32Array, length: Int32Array): number;
  errno(): number;
}

let calls: SocketCalls | Error | undefined;

function socketCalls(): SocketCalls | Error {
  if (calls !== undefined) return calls;
  const bound = bindLibc();
  calls =
    bound instanceof Error
      ? bound
      : {
          setsockopt: bound.libc.func('int setsockopt(int, int, int, void *, uint32_t)') as SocketCalls['setsockopt'],
          getsockopt: bound.libc.func('int getsockopt(int, int, int, void *, void *)') as SocketCalls['getsockopt'],
          errno: () => bound.koffi.errno(),
        };
  return calls;
}

function intOption(libc: SocketCalls, fd: number, name: number): number | Error {
  const value = new Int32Array(1);
  const length = new Int32Array([4]);
  if (libc.getsockopt(fd, SOL_SOCKET, name, value, length) !== 0) return new Error(`getsockopt(${name}) on descriptor ${fd}: errno ${libc.errno()}`);
  return value[0]!;
}

function setIntOption(libc: SocketCalls, fd: number, name: number, value: number): Error | undefined {
  if (libc.setsockopt(fd, SOL_SOCKET, name, new Int32Array([value]), 4) !== 0)
    return new Error(`setsockopt(${name}, ${value}) on descriptor ${fd}: errno ${libc.errno()}`);
  return undefined;
}

/**
 * Lets TCP socket `fd` (a listener: every connection it accepts) offer a receive window of at
 * least `window` octets from the start (the kernel caps it at half of tcp_rmem's maximum),
 * autotuning left on. Returns the receive buffer now in effect (SO_RCVBUF), or why nothing was
 * changed (no koffi, not Linux, a descriptor that is not a TCP socket).
 */
export function widenReceiveWindow(fd: number, window: number): number | Error {
  const libc = socketCalls();
  if (libc instanceof Error) return libc;
  const raised = setIntOption(libc, fd, SO_RCVLOWAT, window);
  if (raised !== undefined) return raised;
  const restored = setIntOption(libc, fd, SO_RCVLOWAT, 1);
  if (restored !== undefined) return restored;
  return intOption(libc, fd, SO_RCVBUF);
}

/** SO_RCVBUF and SO_RCVLOWAT of socket `fd` (for checks and diagnostics), or why they cannot be read. */
export function receiveBufferOf(fd: number): { buffer: number; lowWater: number } | Error {
  const libc = socketCalls();
  if (libc instanceof Error) return libc;
  const buffer = intOption(libc, fd, SO_RCVBUF);
  if (buffer instanceof Error) return buffer;
  const lowWater = intOption(libc, fd, SO_RCVLOWAT);
  if (lowWater instanceof Error) return lowWater;
  return { buffer, lowWater };
}
