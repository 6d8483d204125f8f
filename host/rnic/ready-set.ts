// The descriptors of one thread's TCP channels in an epoll set of the busy poll's own (issue 16),
// asked with a zero timeout whether any of them has bytes to read. libc's epoll calls go through
// koffi with numbers and a preallocated event buffer: a call allocates nothing on the JavaScript
// heap (measured, session 17: 0.006 octets per call over 100,000 calls, about 1.4 us each on the
// PVM guest), where koffi.node.poll's callback builds an events object per wake-up. The set is
// level-triggered and separate from libuv's: asking it consumes nothing, so libuv's own epoll
// still finds the descriptor ready and reads it as usual.

import { bindLibc } from '../util/libc.ts';

const EPOLL_CLOEXEC = 0o2000000;
const EPOLL_CTL_ADD = 1;
const EPOLL_CTL_DEL = 2;
const EPOLLIN = 0x001;

const CLOCK_MONOTONIC = 1;

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

let calls: EpollCalls | Error | undefined;

function bindEpoll(): EpollCalls | Error {
  if (calls !== undefined) return calls;
  const bound = bindLibc();
  if (bound instanceof Error) {
    calls = bound;
    return calls;
  }
  try {
    const { koffi, libc } = bound;
    calls = {
      create: libc.func('int epoll_create1(int)') as EpollCalls['create'],
      ctl: libc.func('int epoll_ctl(int, int, int, void *)') as EpollCalls['ctl'],
      wait: libc.func('int epoll_wait(int, void *, int, int)') as EpollCalls['wait'],
      close: libc.func('int close(int)') as EpollCalls['close'],
      clock: libc.func('int clock_gettime(int, void *)') as EpollCalls['clock'],
      errno: () => koffi.errno(),
    };
  } catch (error) {
    calls = error instanceof Error ? error : new Error(String(error));
  }
  return calls;
}

/** A thread's watched descriptors; opened on the first use, closed when the thread exits. */
export class ReadySet {
  private epfd = -1;
  private epoll: EpollCalls | undefined;
  /** Why the set cannot be used (bound once), or undefined. */
  private failure: Error | undefined;
  /** Who watches each descriptor: a channel closing late must not unwatch its number's next owner. */
  private readonly owners = new Map<number, object>();
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

  watch(fd: number, owner: object): void {
    this.owners.set(fd, owner);
    if (this.epfd >= 0) this.add(fd);
  }

  /** Stops watching `fd` if `owner` still owns it (a descriptor closed is dropped by the kernel anyway). */
  unwatch(fd: number, owner: object): void {
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
    if (ready !== 0) {
      this.waitedNs = 0;
      return ready > 0 ? READY : FAILED;
    }
    epoll.clock(CLOCK_MONOTONIC, time);
    const seconds = time[0]!;
    const nanoseconds = time[2]!;
    let waited = 0;
    do {
      ready = epoll.wait(this.epfd, this.events, 1, 0);
      epoll.clock(CLOCK_MONOTONIC, time);
      // Under 2^30 for any wait shorter than a second: a small integer.
      waited = (time[0]! - seconds) * 1_000_000_000 + (time[2]! - nanoseconds);
    } while (ready === 0 && waited < budgetNs);
    this.waitedNs = waited;
    return ready > 0 ? FOUND : ready === 0 ? GAVE_UP : FAILED;
  }

  /** The monotonic clock (hrtime's, CLOCK_MONOTONIC) in milliseconds, into `into[index]`; the set must be open. */
  nowInto(into: Float64Array, index: number): void {
    const time = this.time;
    this.epoll!.clock(CLOCK_MONOTONIC, time);
    into[index] = (time[0]! + time[1]! * 4294967296) * 1000 + time[2]! / 1e6;
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
    // Failing, the descriptor is not watched: EEXIST means it already is, EBADF that it has closed.
    this.epoll!.ctl(this.epfd, EPOLL_CTL_ADD, fd, event);
  }
}
