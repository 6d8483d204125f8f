// The receive half of the batched UDP socket (batched-udp-socket.ts): the area one non-blocking
// recvmmsg lets the kernel write into (per slot a message record, one iovec, a source address, a
// control message and its octets; shared memory, so it never moves and ISA-L reads a datagram's
// ICRC in place), and the hand-over of what it holds. With UDP_GRO a slot can hold a run of
// datagrams of one source and size, with the size in a control message: they are handed up one by
// one, so packet boundaries are the sender's. A wake-up takes at most a few batches and leaves the
// rest to the next pass of the event loop (the poll is level-triggered), so a flood cannot starve
// the thread's other work.

import { turn } from '../turn.ts';
import { ViewCache } from '../view-cache.ts';
import type { PeerAddress } from './link.ts';
import {
  CMSG_ROOM,
  EAGAIN,
  EINTR,
  IOVEC,
  MMSGHDR,
  MSG_CONTROL,
  MSG_CONTROLLEN,
  MSG_DONTWAIT,
  MSG_FLAGS,
  MSG_IOV,
  MSG_IOVLEN,
  MSG_LEN,
  MSG_NAME,
  MSG_NAMELEN,
  MSG_TRUNC,
  SOCKADDR_IN,
  SOL_UDP,
  UDP_GRO,
} from './batched-udp-layout.ts';
import { clockBatch } from './deadline.ts';
import { errnoName } from '../../util/libc.ts';
import { type Libc, readSockaddrAddress } from './batched-udp-libc.ts';

/** Receive area: slots (one recvmmsg fills at most all of them) and octets per slot (a GRO run reaches 64 KiB). */
export const DEFAULT_RECEIVE_SLOTS = 64;
export const DEFAULT_SLOT_BYTES = 65536;
/** Datagram offsets per receive slot whose views are kept (a GRO run of 4 KiB packets has 16). */
const DATAGRAM_VIEWS_PER_SLOT = 16;
/** recvmmsg calls one readable event makes at most before the event loop gets its turn again. */
const RECEIVE_CALLS_PER_WAKE = 4;

/**
 * Receives one datagram. `data` is valid only during the call (its slot is reused after).
 * `checked`: the run checker passed the GRO run it came in (RunChecker).
 */
export type DatagramReceiver = (data: Uint8Array, from: PeerAddress, checked: boolean) => void;

/**
 * Asked first about every datagram, as `area[at, at + length)` (the receive area) at the raw
 * address `address`: returns true when it took the datagram, false to have it handed to the
 * DatagramReceiver. For a receiver that takes most datagrams without a view of each.
 */
export type LeanDatagramReceiver = (area: Uint8Array, at: number, address: number, length: number, from: PeerAddress, checked: boolean) => boolean;

/**
 * Asked about each GRO run of `count` (2..RUN_CHECK_DATAGRAMS) datagrams of `length` octets from
 * `from`, back to back at `area[at..]` (raw address `address`), before they are handed over one
 * by one: its answer goes with each of them (`checked`). For a receiver that can check a run's
 * datagrams with one call (the RoCE link: their ICRCs).
 */
export type RunChecker = (area: Uint8Array, at: number, address: number, length: number, count: number, from: PeerAddress) => boolean;
/** Datagrams one run check covers at most (a longer GRO run is checked in parts). */
export const RUN_CHECK_DATAGRAMS = 16;

/** The receive half's counters (part of BatchedUdpStatistics). */
export interface ReceiveStatistics {
  /** Readable events (the poll handle woke this thread) and recvmmsg calls, empty ones (EAGAIN) too. */
  readableEvents: number;
  receiveCalls: number;
  /** recvmmsg calls that returned datagrams, the slots they filled, and the datagrams those held. */
  receiveBatches: number;
  slotsReceived: number;
  datagramsReceived: number;
  /** Datagrams longer than a receive slot (dropped). */
  truncated: number;
  /** Run checks made (RunChecker), those passed, and the datagrams those covered. */
  runChecks: number;
  runChecksPassed: number;
  datagramsInPassedRuns: number;
}

/**
 * What one socket's descriptor receives: recvmmsg into the area, then each datagram to the lean
 * receiver, else the receiver, one batch a turn. `onStop` hears why receiving cannot go on.
 */
export class DatagramReceiveArea {
  readonly stats: ReceiveStatistics = {
    readableEvents: 0,
    receiveCalls: 0,
    receiveBatches: 0,
    slotsReceived: 0,
    datagramsReceived: 0,
    truncated: 0,
    runChecks: 0,
    runChecksPassed: 0,
    datagramsInPassedRuns: 0,
  };
  receiver: DatagramReceiver | undefined;
  leanReceiver: LeanDatagramReceiver | undefined;
  runChecker: RunChecker | undefined;
  /** Set when the socket closes: nothing more is read or handed over. */
  closed = false;
  /** The last receive() handed datagrams over (receiveThreadNow reads such a socket for another). */
  busy = true;
  /** Handing datagrams over (a receiver that ends up in receiveNow must not re-enter it). */
  private receiving = false;
  private readonly ringBytes: Uint8Array;
  private readonly ringWords: Uint32Array;
  /** Where slot 0's octets start, and the views of datagrams in slots (the same ranges come back batch after batch). */
  private readonly dataAt: number;
  private readonly datagramViews: ViewCache;
  private readonly addressesAt: number;
  private readonly receiveControlsAt: number;
  /** Address of the area's first octet (its records hold absolute pointers). */
  private readonly ringBase: number;
  private lastSourceKey = -1;
  private lastSource: PeerAddress = { address: '', port: 0 };

  constructor(
    private readonly libc: Libc,
    private readonly fd: number,
    private readonly slots: number,
    private readonly slotBytes: number,
    private readonly onStop: (reason: string) => void,
  ) {
    const iovecs = slots * MMSGHDR;
    const addresses = iovecs + slots * IOVEC;
    const controls = addresses + slots * SOCKADDR_IN;
    const data = controls + slots * CMSG_ROOM;
    const area = new SharedArrayBuffer(data + slots * slotBytes);
    this.ringBytes = new Uint8Array(area);
    this.ringWords = new Uint32Array(area);
    this.ringBase = libc.addressOf(this.ringBytes);
    this.dataAt = data;
    this.datagramViews = new ViewCache(this.ringBytes, slots * DATAGRAM_VIEWS_PER_SLOT);
    this.addressesAt = addresses;
    this.receiveControlsAt = controls;
    for (let i = 0; i < slots; i++) {
      const record = i * MMSGHDR;
      this.putRing64(record + MSG_NAME, this.ringBase + addresses + i * SOCKADDR_IN);
      this.putRing64(record + MSG_IOV, this.ringBase + iovecs + i * IOVEC);
      this.putRing64(record + MSG_IOVLEN, 1);
      this.putRing64(record + MSG_CONTROL, this.ringBase + controls + i * CMSG_ROOM);
      this.putRing64(iovecs + i * IOVEC, this.ringBase + data + i * slotBytes);
      this.putRing64(iovecs + i * IOVEC + 8, slotBytes);
    }
  }

  /** Takes what the kernel holds for this socket, a batch per recvmmsg, each batch one turn. */
  receive(): void {
    if (this.closed || this.receiving) return; // inside a delivery: the batch under way is handed over first
    const words = this.ringWords;
    this.busy = false;
    for (let call = 0; call < RECEIVE_CALLS_PER_WAKE; call++) {
      // The kernel overwrites both lengths with what it wrote: give every slot its full room again.
      for (let i = 0; i < this.slots; i++) {
        const record = i * MMSGHDR;
        words[(record + MSG_NAMELEN) >>> 2] = SOCKADDR_IN;
        words[(record + MSG_CONTROLLEN) >>> 2] = CMSG_ROOM;
        words[((record + MSG_CONTROLLEN) >>> 2) + 1] = 0;
      }
      const got = this.libc.recvmmsg(this.fd, this.ringBase, this.slots, MSG_DONTWAIT, 0);
      this.stats.receiveCalls++;
      if (got <= 0) {
        const errno = got < 0 ? this.libc.errno() : EAGAIN;
        if (errno !== EAGAIN && errno !== EINTR) this.onStop(`recvmmsg failed: ${errnoName(errno)}`);
        return;
      }
      this.busy = true;
      this.deliver(got);
      if (got < this.slots || this.closed) return;
    }
  }

  /** Hands the `count` slots recvmmsg filled to the receiver, as one turn. */
  private deliver(count: number): void {
    this.stats.receiveBatches++;
    const words = this.ringWords;
    this.receiving = true;
    turn.enter();
    clockBatch.begin();
    try {
      for (let slot = 0; slot < count && !this.closed; slot++) {
        this.stats.slotsReceived++;
        const record = slot * MMSGHDR;
        const length = words[(record + MSG_LEN) >>> 2]!;
        if ((words[(record + MSG_FLAGS) >>> 2]! & MSG_TRUNC) !== 0 || length > this.slotBytes) {
          this.stats.truncated++;
          continue;
        }
        const receiver = this.receiver;
        if (receiver === undefined) continue;
        // A GRO run says its datagram size in a UDP_GRO control message; otherwise one datagram.
        let segment = length;
        const cmsg = this.receiveControlsAt + slot * CMSG_ROOM;
        if (
          words[(record + MSG_CONTROLLEN) >>> 2]! >= 20 &&
          words[(cmsg + 8) >>> 2] === SOL_UDP &&
          words[(cmsg + 12) >>> 2] === UDP_GRO &&
          words[(cmsg + 16) >>> 2]! > 0
        ) {
          segment = words[(cmsg + 16) >>> 2]!;
        }
        const from = this.source(this.addressesAt + slot * SOCKADDR_IN);
        const slotAt = this.dataAt + slot * this.slotBytes;
        const lean = this.leanReceiver;
        const runChecker = this.runChecker;
        // Datagrams of the full segment size (a GRO run's last may be shorter), checked in parts.
        const whole = segment < length ? Math.floor(length / segment) : 0;
        let checkedUntil = 0;
        let checked = false;
        let offset = 0;
        do {
          const end = Math.min(offset + segment, length);
          this.stats.datagramsReceived++;
          try {
            const at = slotAt + offset;
            if (offset >= checkedUntil) {
              checked = false;
              const count = Math.min(RUN_CHECK_DATAGRAMS, whole - offset / segment);
              if (runChecker !== undefined && count >= 2) {
                checkedUntil = offset + count * segment;
                this.stats.runChecks++;
                checked = runChecker(this.ringBytes, at, this.ringBase + at, segment, count, from);
                if (checked) {
                  this.stats.runChecksPassed++;
                  this.stats.datagramsInPassedRuns += count;
                }
              }
            }
            if (lean === undefined || !lean(this.ringBytes, at, this.ringBase + at, end - offset, from, checked))
              receiver(this.datagramViews.view(at, end - offset), from, checked);
          } catch {
            // A receiver's bug must not stop receiving: the datagram counts as lost.
          }
          offset = end;
        } while (offset < length);
      }
    } finally {
      this.receiving = false;
      clockBatch.end();
      turn.leave();
    }
  }

  /** The datagram's source; the same object while it does not change. */
  private source(offset: number): PeerAddress {
    const bytes = this.ringBytes;
    const port = (bytes[offset + 2]! << 8) | bytes[offset + 3]!;
    const host = ((bytes[offset + 4]! << 24) | (bytes[offset + 5]! << 16) | (bytes[offset + 6]! << 8) | bytes[offset + 7]!) >>> 0;
    const key = host * 65536 + port;
    if (key !== this.lastSourceKey) {
      this.lastSourceKey = key;
      this.lastSource = { address: readSockaddrAddress(bytes, offset), port };
    }
    return this.lastSource;
  }

  /** Writes a 64-bit value at `offset` within the receive area. */
  private putRing64(offset: number, value: number): void {
    this.ringWords[offset >>> 2] = value % 4294967296;
    this.ringWords[(offset >>> 2) + 1] = Math.floor(value / 4294967296);
  }
}
