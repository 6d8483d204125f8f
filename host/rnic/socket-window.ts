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
import { libcCalls } from '../util/libc.ts';

const SOL_SOCKET = 1;
const SO_RCVBUF = 8;
const SO_RCVLOWAT = 18;
const IPPROTO_TCP = 6;
const TCP_CONGESTION = 13;
/**
 * The congestion control to name for kbtp's loopback connections when BBR's pacing hurts (the
 * target's loopbackCongestionControl setting, the initiator's connect option; both keep the
 * host's unless told): built into every Linux kernel and allowed to every user
 * (net.ipv4.tcp_allowed_congestion_control).
 */
export const LOOPBACK_CONGESTION_CONTROL = 'reno';
const CONGESTION_NAME_MAX = 16; // TCP_CA_NAME_MAX

interface SocketCalls {
  setsockopt(fd: number, level: number, name: number, value: Int32Array | Uint8Array, length: number): number;
  getsockopt(fd: number, level: number, name: number, value: Int32Array | Uint8Array, length: Int32Array): number;
  errno(): number;
}

const socketCalls = libcCalls<SocketCalls>(({ koffi, libc }) => ({
  setsockopt: libc.func('int setsockopt(int, int, int, void *, uint32_t)') as SocketCalls['setsockopt'],
  getsockopt: libc.func('int getsockopt(int, int, int, void *, void *)') as SocketCalls['getsockopt'],
  errno: () => koffi.errno(),
}));

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

/** A host name or address on this machine's loopback (IPv4-mapped IPv6 addresses included). */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^(::ffff:)?127\./.test(host);
}

/**
 * Gives TCP socket `fd` (a listener: every connection it accepts) congestion control `name`
 * (e.g. LOOPBACK_CONGESTION_CONTROL), for connections over loopback only. BBR, the default of many Linux
 * hosts, paces a loopback connection from a timer once it leaves STARTUP (a 256 KiB STORE row
 * with 8 in flight always does: its receiver's queue fills). The paced segments leave from
 * timer softirqs on whichever CPU the timer fired, the loopback device queues each on the
 * backlog of the CPU that sent it, and the two CPUs deliver them out of order: the receiver's
 * out-of-order queue and duplicate ACKs make the sender retransmit (200-400 spurious fast
 * retransmissions per 3 s row, undone by DSACK), and every segment waits for a timer (issue 16,
 * docs/BENCH.md, session 13). Reno keeps no pacing timer and doubled those rows; but it halves
 * its window at each of those retransmissions, and with 16 sessions x 1 in flight it halved the
 * 256 KiB STORE row instead: hence an option, off by default. Returns the congestion control
 * now in effect, or why nothing was changed.
 */
export function useLoopbackCongestionControl(fd: number, name: string): string | Error {
  const libc = socketCalls();
  if (libc instanceof Error) return libc;
  const encoded = new TextEncoder().encode(name);
  if (encoded.length >= CONGESTION_NAME_MAX) return new Error(`"${name}" is longer than a congestion control's name may be`);
  if (libc.setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, encoded, encoded.length) !== 0)
    return new Error(`setsockopt(TCP_CONGESTION, ${name}) on descriptor ${fd}: errno ${libc.errno()}`);
  return congestionControlOf(fd);
}

/** The congestion control of TCP socket `fd` (TCP_CONGESTION), or why it cannot be read. */
export function congestionControlOf(fd: number): string | Error {
  const libc = socketCalls();
  if (libc instanceof Error) return libc;
  const value = new Uint8Array(CONGESTION_NAME_MAX);
  const length = new Int32Array([CONGESTION_NAME_MAX]);
  if (libc.getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, value, length) !== 0)
    return new Error(`getsockopt(TCP_CONGESTION) on descriptor ${fd}: errno ${libc.errno()}`);
  const end = value.indexOf(0);
  return new TextDecoder().decode(value.subarray(0, end < 0 ? Math.min(length[0]!, CONGESTION_NAME_MAX) : end));
}
