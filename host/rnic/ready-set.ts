// The descriptors of one thread's TCP channels in an epoll set of the busy poll's own (issue 16),
// asked with a zero timeout whether any of them has bytes to read. libc's epoll calls go through
// koffi with numbers and a preallocated event buffer: a call allocates nothing on the JavaScript
// heap (measured, session 17: 0.006 octets per call over 100,000 calls, about 1.4 us each on the
// PVM guest), where koffi.node.poll's callback builds an events object per wake-up. The set is
// level-triggered and separate from libuv's: asking it consumes nothing, so libuv's own epoll
// still finds the descriptor ready. Each registration carries its descriptor's number, so a look
// that finds one ready also tells whose it is (readyOwner), for the poll to read it at once.

import { libcCalls } from '../util/libc.ts';

const EPOLL_CLOEXEC = 0o2000000;
const EPOLL_CTL_ADD = 1;
const EPOLL_CTL_DEL = 2;
const EPOLLIN = 0x001;

const CLOCK_MONOTONIC = 1;
/**
 * Where epoll_event's 64-bit data starts: the struct is packed on x86-64 (u32 events, then the
 * data at 4) and naturally aligned elsewhere (arm64: at 8).
 */
const EVENT_DATA_OFFSET = process.arch === 'x64' ? 4 : 8;

/** How a look ended (lookFor). */
export const READY = 1;
export const FOUND = 2;
export const GAVE_UP = 3;
export const FAILED = 4;

interface EpollCalls {
  create(flags: number): number;
  /** clock_gettime: glibc answers CLOCK_MONOTONIC from the vDSO (about 50 ns here, no system call). */
  clock(id: number, into: Int32Array): number;
  ctl(epfd: number, op: number, fd: number, event: Uint8Array): number;
  wait(epfd: number, events: Uint8Array, maxEvents: number, timeoutMs: number): number;
  close(fd: number): number;
  errno(): number;
}

const bindEpoll = libcCalls<EpollCalls>(({ koffi, libc }) => ({
  create: libc.func('int epoll_create1(int)') as EpollCalls['create'],
  ctl: libc.func('int epoll_ctl(int, int, int, void *)') as EpollCalls['ctl'],
  wait: libc.func('int epoll_wait(int, void *, int, int)') as EpollCalls['wait'],
  close: libc.func('int close(int)') as EpollCalls['close'],
  clock: libc.func('int clock_gettime(int, void *)') as EpollCalls['clock'],
  errno: () => koffi.errno(),
}));

/** A thread's watched descriptors, each with its owner; opened on the first use, closed when the thread exits. */
export class ReadySet<Owner extends object> {
  private epfd = -1;
  private epoll: EpollCalls | undefined;
  /** Why the set cannot be used (bound once), or undefined. */
  private failure: Error | undefined;
  /** Who watches each descriptor: a channel closing late must not unwatch its number's next owner. */
  private readonly owners = new Map<number, Owner>();
  /** epoll_event: u32 events, then 64-bit data (12 octets packed on x86-64, 16 on arm64). */
  private readonly event = new Uint8Array(new ArrayBuffer(16));
  private readonly events = new Uint8Array(new ArrayBuffer(16));
  /** struct timespec: seconds (64 bits, low half first on little-endian) then nanoseconds. */
  private readonly time = new Int32Array(new ArrayBuffer(16));
  /** How long the last lookFor() waited, in nanoseconds. */
  waitedNs = 0;

  /** The descriptors watched (open channels of this thread). */
  get size(): number {
    return this.owners.size;
  }

  /** Why the set could not be opened, if it could not. */
  get problem(): Error | undefined {
    return this.failure;
  }

  /** Opens the epoll set and adds what is already watched; false (and `problem`) when it cannot. */
  open(): boolean {
    if (this.epfd >= 0) return true;
    if (this.failure !== undefined) return false;
    const epoll = bindEpoll();
    if (epoll instanceof Error) {
      this.failure = epoll;
      return false;
    }
    const epfd = epoll.create(EPOLL_CLOEXEC);
    if (epfd < 0) {
      this.failure = new Error(`epoll_create1 failed (errno ${epoll.errno()})`);
      return false;
    }
    this.epoll = epoll;
    this.epfd = epfd;
    for (const fd of this.owners.keys()) this.add(fd);
    // A worker thread's descriptor would outlive the thread; the process's own closes with it.
    process.once('exit', () => this.close());
    return true;
  }

  get opened(): boolean {
    return this.epfd >= 0;
  }

  watch(fd: number, owner: Owner): void {
    this.owners.set(fd, owner);
    if (this.epfd >= 0) this.add(fd);
  }

  /** Stops watching `fd` if `owner` still owns it (a descriptor closed is dropped by the kernel anyway). */
  unwatch(fd: number, owner: Owner): void {
    if (this.owners.get(fd) !== owner) return;
    this.owners.delete(fd);
    // EBADF or ENOENT when the descriptor is already closed: the kernel removed it then.
    if (this.epfd >= 0) this.epoll!.ctl(this.epfd, EPOLL_CTL_DEL, fd, this.event);
  }

  /**
   * Looks, without waiting in the kernel, until a watched descriptor has bytes (or an end, or an
   * error) to read or `budgetNs` nanoseconds have passed: READY when one had at the first look,
   * FOUND when one came later, GAVE_UP, or FAILED when a look failed (EINTR: a signal). Small
   * integers only, the clock included (clock_gettime into an Int32Array, not hrtime's BigInt):
   * nothing here is boxed even where V8 has not optimized it (the hrtime clock in such a loop
   * allocated about 80 octets a spin in one test process of three).
   */
  lookFor(budgetNs: number): number {
    const epoll = this.epoll!;
    const time = this.time;
    let ready = epoll.wait(this.epfd, this.events, 1, 0);
    let outcome = READY;
    let waited = 0;
    if (ready === 0) {
      epoll.clock(CLOCK_MONOTONIC, time);
      const seconds = time[0]!;
      const nanoseconds = time[2]!;
      do {
        ready = epoll.wait(this.epfd, this.events, 1, 0);
        epoll.clock(CLOCK_MONOTONIC, time);
        // Under 2^30 for any wait shorter than a second: a small integer.
        waited = (time[0]! - seconds) * 1_000_000_000 + (time[2]! - nanoseconds);
      } while (ready === 0 && waited < budgetNs);
      outcome = ready === 0 ? GAVE_UP : FOUND;
    }
    this.waitedNs = waited;
    // One comparison every call makes: optimized code that met a comparison no call had made
    // before fell back to the interpreter at it, over and over (session 18: a hundred times in
    // one run of test/rnic/busy-poll).
    return ready < 0 ? FAILED : outcome;
  }

  /**
   * The owner of the descriptor the last lookFor() found ready (READY or FOUND), or undefined
   * when it is no longer watched. Only valid right after such a look.
   */
  readyOwner(): Owner | undefined {
    const events = this.events;
    const at = EVENT_DATA_OFFSET;
    const fd = events[at]! | (events[at + 1]! << 8) | (events[at + 2]! << 16) | (events[at + 3]! << 24);
    return this.owners.get(fd);
  }

  /**
   * The monotonic clock (CLOCK_MONOTONIC, hrtime's) in microseconds, wrapping at 2^31 (about 36
   * minutes): compare two readings by their difference, `(later - earlier) | 0`. A small integer,
   * so nothing is boxed even in unoptimized code. The set must be open.
   */
  nowUs(): number {
    const time = this.time;
    this.epoll!.clock(CLOCK_MONOTONIC, time);
    const nanoseconds = time[2]!;
    return (Math.imul(time[0]!, 1_000_000) + (nanoseconds - (nanoseconds % 1000)) / 1000) | 0;
  }

  close(): void {
    if (this.epfd < 0) return;
    this.epoll!.close(this.epfd);
    this.epfd = -1;
  }

  private add(fd: number): void {
    const event = this.event;
    event.fill(0);
    event[0] = EPOLLIN; // the low octet of the little-endian u32 (Linux on x64 and arm64)
    // The data field holds the descriptor (little-endian, as the events), for readyOwner().
    const at = EVENT_DATA_OFFSET;
    event[at] = fd & 0xff;
    event[at + 1] = (fd >>> 8) & 0xff;
    event[at + 2] = (fd >>> 16) & 0xff;
    event[at + 3] = (fd >>> 24) & 0xff;
    // Failing, the descriptor is not watched: EEXIST means it already is, EBADF that it has closed.
    this.epoll!.ctl(this.epfd, EPOLL_CTL_ADD, fd, event);
  }
}
