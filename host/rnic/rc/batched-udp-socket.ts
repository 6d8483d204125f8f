// A UDP socket that moves many datagrams per system call and per trip through the kernel's
// stack: sendmmsg with UDP GSO on the way out, recvmmsg with UDP GRO on the way in, called
// through koffi (an FFI with prebuilt binaries in its npm package). node:dgram makes one system
// call, one JS callback, one fresh Buffer and one pass through the stack per datagram, which
// bounds a RoCE link at 4 KiB per datagram far below what the iWARP path moves over TCP
// (bench/udp-batch.ts measures both).
//
// Send: packets queue in one preallocated block of records (mmsghdr, three iovecs per packet,
// destinations, GSO control messages). Small parts are copied into the packet's own octets;
// large ones (a payload in a registered region) are pointed at in place, never copied in user
// space. Consecutive packets to one destination of one size (the last may be shorter, as GSO
// allows) share one message with a UDP_SEGMENT control message: the kernel cuts it into exactly
// those datagrams. At the end of the event-loop turn (host/rnic/turn.ts), or at once when it is
// full, the thread writes the block itself with one non-blocking sendmmsg when no block is with
// the send worker (a cross-thread wake-up costs more than the call on this VM, and a Read's round
// trip would pay it twice); a block the kernel does not take whole, or one filled while the
// worker still writes an earlier one, goes to the send worker thread, which writes it while the
// next block fills. Blocks return to the queue once written.
//
// Receive: a worker thread waits in poll on the same descriptor, then one recvmmsg lets the kernel write
// straight into slots of a SharedArrayBuffer ring (records, source addresses, control messages
// and octets all live there). With UDP_GRO a slot can hold a run of datagrams of one source and
// size, with the size in a control message: they are handed up one by one, so packet
// boundaries are the sender's. The main thread is woken with one message per batch, and only
// when it is not already due to look. Closing shuts the socket down, which wakes the waiting
// worker; poll's 200 ms timeout bounds the wait should a kernel not do so.
//
// Between two sockets of one thread (both ends of a benchmark or test, or any two RNICs one
// thread runs) neither worker is in the way: the thread writes such datagrams itself whatever
// their number, and the receiving socket takes them at the end of the same turn, holding its ring
// from before the write so that its worker, which the datagrams wake, does not take them first;
// that worker then sleeps a moment instead of being woken by every such datagram. This is what a
// loopback TCP pair in one event loop gets for free: a Read's round trip without four thread
// hand-offs.
//
// Little-endian LP64 Linux with glibc only (x86_64, arm64): elsewhere `loadBatchedUdp` says why
// not and the caller keeps node:dgram.

import { createRequire } from 'node:module';
import { lookup } from 'node:dns/promises';
import { isIPv4 } from 'node:net';
import { loadIsal } from '../../util/isal.ts';
import { RnicError } from '../errors.ts';
import { turn, type TurnParticipant } from '../turn.ts';
import { ViewCache } from '../view-cache.ts';
import { parseIpv4 } from '../wire/roce-frame.ts';
import { icrcMaskedPrefix } from '../wire/icrc.ts';
import { socketIcrcHeaders, type PeerAddress } from './link.ts';
import {
  AF_INET,
  SOCK_DGRAM,
  SOCK_CLOEXEC,
  SOL_SOCKET,
  SO_SNDBUF,
  SO_RCVBUF,
  SHUT_RDWR,
  MSG_DONTWAIT,
  MSG_TRUNC,
  EINVAL,
  MMSGHDR,
  MSG_NAME,
  MSG_NAMELEN,
  MSG_IOV,
  MSG_IOVLEN,
  MSG_CONTROL,
  MSG_CONTROLLEN,
  MSG_FLAGS,
  MSG_LEN,
  IOVEC,
  SOCKADDR_IN,
  MAX_PARTS,
  CMSG_ROOM,
  SOL_UDP,
  UDP_SEGMENT,
  UDP_GRO,
  MAX_SEGMENTS,
  MAX_GSO_BYTES,
  SEND_BLOCKS,
  SUBMITTED,
  WRITTEN,
  SEND_CLOSING,
  GSO_OFF_ERRNO,
  SIMULATED_FULL,
  SEND_CALLS,
  MESSAGES_SENT,
  DATAGRAMS_SENT,
  SEND_BLOCKED,
  SEND_ERRORS,
  SENDER_SLEEPING,
  BLOCK_MESSAGES,
  BLOCK_START,
  MESSAGE_PACKETS,
  PRODUCED,
  CONSUMED,
  WAKE_PENDING,
  CLOSING,
  PRODUCER_LOCK,
  PARKED,
  OWN_TAKES,
  VERDICTS_PER_SLOT,
  POLLFD_AT,
  CONTROL_BYTES,
} from './batched-udp-layout.ts';
import { RECEIVE_WORKER, SEND_WORKER, startWorker } from './batched-udp-workers.ts';
import { errnoName, type Libc, loadBatchedUdp, readSockaddrAddress, writeSockaddr } from './batched-udp-libc.ts';
import { IcrcVerdict } from './batched-udp-layout.ts';
export { SEND_BLOCKS, IcrcVerdict } from './batched-udp-layout.ts';

// Tuning of this socket (the worker threads get what they need of it through workerData).
/** Octets of small parts a queued packet copies instead of pointing at. */
const COPY_ROOM = 336;
/** A part at least this long is pointed at, not copied: its buffer is off the V8 heap (it cannot move). */
const REFERENCE_AT = 256;
/** Packets queued at most before the queue is written at once. */
export const DEFAULT_SEND_BATCH = 256;
/** How long a packet waits for a send block to come back before it is dropped (a loss to RC). */
const SEND_BLOCK_WAIT_MS = 20;
/** Receive ring: slots and octets per slot (a GRO run reaches 64 KiB). */
export const DEFAULT_RECEIVE_SLOTS = 64;
export const DEFAULT_SLOT_BYTES = 65536;
/** Datagram offsets per receive slot whose views are kept (a GRO run of 4 KiB packets has 16). */
const DATAGRAM_VIEWS_PER_SLOT = 16;
/** Ring slots one recvmmsg fills at most. */
const RECEIVE_BATCH = 32;

/**
 * This thread's open sockets by address and port (module state is per thread). A datagram to
 * one of them is in its kernel queue when sendmmsg returns (loopback delivers inside the call),
 * so the thread can write it itself and take it at once, as a TCP pair in one event loop reads
 * what it wrote in the same loop iteration: no send worker, receive worker or wake-up between.
 */
const sameThread = new Map<number, BatchedUdpSocket>();
const socketKey = (octets: Uint8Array, port: number): number => ((octets[0]! << 24) | (octets[1]! << 16) | (octets[2]! << 8) | octets[3]!) * 65536 + port;

export interface BatchedUdpSocketOptions {
  /** Address to bind (default 127.0.0.1; a name is resolved to its first IPv4 address). */
  host?: string;
  /** Port (default 0: any free port). */
  port?: number;
  /** Socket buffers asked for, both directions (the kernel caps them at its maximum). Default 4 MiB. */
  bufferBytes?: number;
  /** Packets queued at most before the queue is written at once (1..1024, default 256). */
  sendBatch?: number;
  /** Send runs of equal packets as one GSO message (default true; turned off by itself if the kernel refuses). */
  gso?: boolean;
  /** Ask the kernel for GRO runs on receive (default true). */
  gro?: boolean;
  /** Receive ring slots (a power of two, default 64) and octets per slot (default 65536: a larger datagram is dropped and counted). */
  receiveSlots?: number;
  slotBytes?: number;
  /**
   * The receive worker checks every datagram's RoCEv2 ICRC (as a packet from its source to this
   * socket) and hands the verdict up with it, so the thread that runs RC does not (default false).
   */
  checkRoceIcrc?: boolean;
}

/**
 * Receives one datagram. `data` is valid only during the call (its slot is reused after).
 * `icrc` is Unchecked unless the socket checks ICRCs and its worker took the datagram.
 */
export type DatagramReceiver = (data: Uint8Array, from: PeerAddress, icrc: IcrcVerdict) => void;

/** A send error the socket could not recover from by waiting (the datagrams are dropped). */
export type SendErrorHandler = (to: PeerAddress, errno: number) => void;

export interface BatchedUdpStatistics {
  /** sendmmsg calls, the messages they took, and the datagrams in those (GSO runs count each datagram). */
  sendCalls: number;
  messagesSent: number;
  datagramsSent: number;
  /** Times the socket buffer was full (EAGAIN/ENOBUFS): the queue waited and was written again. */
  sendBlocked: number;
  /** Packets dropped because the queue was full while the socket was blocked. */
  sendQueueDrops: number;
  /** Messages that failed with another error (dropped, reported to the error handler). */
  sendErrors: number;
  /** Batches the receive worker handed over, slots in them, and the datagrams those held. */
  receiveBatches: number;
  slotsReceived: number;
  datagramsReceived: number;
  /** Datagrams longer than a receive slot (dropped). */
  truncated: number;
}

export class BatchedUdpSocket implements TurnParticipant {
  readonly stats: BatchedUdpStatistics;
  /** Why the send worker stopped, if it failed (diagnostics). */
  sendWorkerError: string | undefined;
  /** Why the receive worker stopped early, if it did (diagnostics). */
  workerError: string | undefined;
  private receiver: DatagramReceiver | undefined;
  private sendErrorHandler: SendErrorHandler | undefined;
  private closed = false;
  private readonly exited: Promise<void>;
  private readonly sendExited: Promise<void>;
  /** Resolves once both workers run (or have ended). */
  private readonly ready: Promise<void>;

  // Send queue, in blocks of one layout: message records (sendmmsg takes them as one array), then
  // three iovecs per packet (consecutive packets' iovecs are one run, so a GSO message points at
  // a run), then per message its destination and control message, then per packet its copy room.
  // The offsets below are within a block; `blockAt` is where the block being filled starts.
  private readonly outbound: Uint8Array;
  private readonly outboundWords: Uint32Array;
  private readonly outboundBase: number;
  private readonly blockBytes: number;
  private blockAt = 0;
  private readonly sendControl: Int32Array;
  private readonly iovecsAt: number;
  private readonly namesAt: number;
  private readonly controlsAt: number;
  private readonly copyAt: number;
  private readonly gso: boolean;
  /** Per block, parts pointed at by its packets: kept reachable until the kernel copied them. */
  private readonly pinned: Uint8Array[][];
  /** Per block, its packets (for `pending`). */
  private readonly blockPackets = new Int32Array(SEND_BLOCKS);
  /** Per message of the block being filled: destination, segment size, still open to more. */
  private readonly messageTo: PeerAddress[];
  private readonly messageSegment: Int32Array;
  private readonly messageOpen: Uint8Array;
  /** Where the block being filled keeps its messages' packet counts (the send worker reads them). */
  private messagePacketsAt = MESSAGE_PACKETS;
  private packets = 0;
  private messages = 0;
  /** Blocks handed to the send worker (the one being filled is `submitted % SEND_BLOCKS`). */
  private submitted = 0;
  private flushEnlisted = false;
  /** The sockets of this thread that messages of the block being filled go to (one entry each). */
  private readonly sameThreadPeers: BatchedUdpSocket[] = [];
  /** A socket of this thread wrote datagrams to this one: take them at the end of the turn. */
  private sameThreadPending = false;
  /** This thread holds the receive ring's PRODUCER_LOCK for them (reserveForOwnReceive). */
  private heldForOwnReceive = false;
  /** The last destination's address, parsed once: consecutive packets mostly go to one peer. */
  private lastDestination = '';
  private destinationOctets: Uint8Array = new Uint8Array(4);
  /** Base address of each ArrayBuffer a referenced part lives in (it never moves: off-heap). */
  private readonly bufferAddresses = new WeakMap<ArrayBufferLike, number>();

  // Receive ring.
  private readonly control: Int32Array;
  private readonly ringBytes: Uint8Array;
  private readonly ringWords: Uint32Array;
  /** Where slot 0's octets start in the ring, and the views of datagrams in slots (the same ranges come back turn after turn). */
  private readonly dataAt: number;
  private readonly datagramViews: ViewCache;
  private readonly recordsAt: number;
  private readonly addressesAt: number;
  private readonly receiveControlsAt: number;
  /** Where the worker writes ICRC verdicts, or -1 when it does not check them. */
  private readonly verdictsAt: number;
  private consumed = 0;
  /** A drain is handing datagrams over (a receiver that ends up in receiveNow must not re-enter it). */
  private draining = false;
  /** Address of the ring's first octet (the records the worker filled in hold absolute pointers). */
  private readonly ringBase: number;
  private lastSourceKey = -1;
  private lastSource: PeerAddress = { address: '', port: 0 };

  private constructor(
    private readonly libc: Libc,
    private readonly fd: number,
    readonly local: PeerAddress,
    private readonly sendBatch: number,
    gso: boolean,
    private readonly slots: number,
    private readonly slotBytes: number,
    checkRoceIcrc: boolean,
  ) {
    this.gso = gso;
    const n = sendBatch;
    this.iovecsAt = n * MMSGHDR;
    this.namesAt = this.iovecsAt + n * MAX_PARTS * IOVEC;
    this.controlsAt = this.namesAt + n * SOCKADDR_IN;
    this.copyAt = this.controlsAt + n * CMSG_ROOM;
    this.blockBytes = this.copyAt + n * COPY_ROOM;
    const blocks = new SharedArrayBuffer(this.blockBytes * SEND_BLOCKS);
    this.outbound = new Uint8Array(blocks);
    this.outboundWords = new Uint32Array(blocks);
    this.outboundBase = libc.addressOf(this.outbound);
    const sendControl = new SharedArrayBuffer((MESSAGE_PACKETS + SEND_BLOCKS * n) * 4);
    this.sendControl = new Int32Array(sendControl);
    this.pinned = [];
    for (let b = 0; b < SEND_BLOCKS; b++) this.pinned.push(new Array<Uint8Array>(n * MAX_PARTS).fill(this.outbound));
    this.messageTo = new Array<PeerAddress>(n).fill(local);
    this.messageSegment = new Int32Array(n);
    this.messageOpen = new Uint8Array(n);
    for (let b = 0; b < SEND_BLOCKS; b++) {
      this.blockAt = b * this.blockBytes;
      for (let i = 0; i < n; i++) {
        const record = i * MMSGHDR;
        this.put64(record + MSG_NAME, this.outboundBase + this.blockAt + this.namesAt + i * SOCKADDR_IN);
        this.outboundWords[(this.blockAt + record + MSG_NAMELEN) >>> 2] = SOCKADDR_IN;
        // UDP_SEGMENT control message: cmsg_len = CMSG_LEN(2), level, type; the size is set per message.
        const cmsg = this.controlsAt + i * CMSG_ROOM;
        this.put64(cmsg, 18);
        this.outboundWords[(this.blockAt + cmsg + 8) >>> 2] = SOL_UDP;
        this.outboundWords[(this.blockAt + cmsg + 12) >>> 2] = UDP_SEGMENT;
      }
    }
    this.blockAt = 0;
    const control = this.sendControl;
    const received = { receiveBatches: 0, slotsReceived: 0, datagramsReceived: 0, truncated: 0, sendQueueDrops: 0 };
    // Send counters live in shared memory (the send worker keeps them); the rest are this thread's.
    this.stats = Object.defineProperties(received, {
      sendCalls: { get: () => Atomics.load(control, SEND_CALLS), enumerable: true },
      messagesSent: { get: () => Atomics.load(control, MESSAGES_SENT), enumerable: true },
      datagramsSent: { get: () => Atomics.load(control, DATAGRAMS_SENT), enumerable: true },
      sendBlocked: { get: () => Atomics.load(control, SEND_BLOCKED), enumerable: true },
      sendErrors: { get: () => Atomics.load(control, SEND_ERRORS), enumerable: true },
    }) as BatchedUdpStatistics;
    const sender = startWorker(
      SEND_WORKER,
      { koffiPath: libc.koffiPath, fd, blockBytes: this.blockBytes, namesAt: this.namesAt, sendBatch: n, control: sendControl, blocks },
      (value: number | { errno: number; address: string; port: number }) => {
        if (typeof value === 'object') this.sendErrorHandler?.({ address: value.address, port: value.port }, value.errno);
      },
      (message) => (this.sendWorkerError = message),
    );
    this.sendExited = sender.exited;

    const records = CONTROL_BYTES;
    const iovecs = records + slots * MMSGHDR;
    const addresses = iovecs + slots * IOVEC;
    const controls = addresses + slots * SOCKADDR_IN;
    const verdicts = controls + slots * CMSG_ROOM;
    const data = verdicts + slots * VERDICTS_PER_SLOT;
    const ring = new SharedArrayBuffer(data + slots * slotBytes);
    this.control = new Int32Array(ring, 0, CONTROL_BYTES / 4);
    this.ringBytes = new Uint8Array(ring);
    this.ringWords = new Uint32Array(ring);
    this.ringBase = libc.addressOf(this.ringBytes);
    this.dataAt = data;
    this.datagramViews = new ViewCache(this.ringBytes, slots * DATAGRAM_VIEWS_PER_SLOT);
    this.recordsAt = records;
    this.addressesAt = addresses;
    this.receiveControlsAt = controls;
    this.verdictsAt = checkRoceIcrc ? verdicts : -1;
    let icrc: { crc32Path: string; icrcPrefix: Uint8Array; isal: boolean } | undefined;
    if (checkRoceIcrc) {
      // The prefix of a packet from anywhere to this socket; the worker patches source and lengths.
      const ip = new Uint8Array(20);
      const udp = new Uint8Array(8);
      socketIcrcHeaders(ip, udp, local, local, 0);
      icrc = {
        crc32Path: createRequire(import.meta.url).resolve('@node-rs/crc32'),
        icrcPrefix: icrcMaskedPrefix(ip, udp),
        isal: !(loadIsal() instanceof Error),
      };
    }
    const receiver = startWorker(
      RECEIVE_WORKER,
      {
        koffiPath: libc.koffiPath,
        fd,
        slots,
        slotBytes,
        batch: Math.min(RECEIVE_BATCH, slots),
        ring,
        pollfd: POLLFD_AT,
        records,
        iovecs,
        addresses,
        controls,
        data,
        verdicts,
        ...icrc,
      },
      (value: number) => {
        if (value === 0) this.drain();
        else this.workerFailed(value);
      },
      // A worker that fails to start (out of memory, koffi missing in it) ends receiving only.
      (message) => (this.workerError = message),
    );
    this.exited = receiver.exited;
    this.ready = Promise.all([receiver.started, sender.started]).then(() => undefined);
  }

  /** Opens and binds the socket. Throws RnicError when batching is unavailable here or bind fails. */
  static async open(options: BatchedUdpSocketOptions = {}): Promise<BatchedUdpSocket> {
    const libc = loadBatchedUdp();
    if (libc instanceof Error) throw new RnicError('EINVAL', `batched UDP unavailable: ${libc.message}`);
    const sendBatch = options.sendBatch ?? DEFAULT_SEND_BATCH;
    const slots = options.receiveSlots ?? DEFAULT_RECEIVE_SLOTS;
    const slotBytes = options.slotBytes ?? DEFAULT_SLOT_BYTES;
    if (!Number.isInteger(sendBatch) || sendBatch < 1 || sendBatch > 1024) throw new RnicError('EINVAL', `sendBatch ${sendBatch} must be an integer 1..1024`);
    // A power of two, so the ring index stays continuous where the 32-bit counters wrap.
    if (!Number.isInteger(slots) || slots < 2 || slots > 65536 || (slots & (slots - 1)) !== 0) {
      throw new RnicError('EINVAL', `receiveSlots ${slots} must be a power of two in 2..65536`);
    }
    if (!Number.isInteger(slotBytes) || slotBytes < 64 || slotBytes > 65536 || slotBytes % 8 !== 0) {
      throw new RnicError('EINVAL', `slotBytes ${slotBytes} must be a multiple of 8 in 64..65536`);
    }
    const host = options.host ?? '127.0.0.1';
    const address = isIPv4(host) ? host : (await lookup(host, { family: 4 })).address;
    const port = options.port ?? 0;
    if (!Number.isInteger(port) || port < 0 || port > 65535) throw new RnicError('EINVAL', `port ${port} must be an integer 0..65535`);
    const fd = libc.socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw new RnicError('EINVAL', `socket(AF_INET, SOCK_DGRAM) failed: ${errnoName(libc.errno())}`);
    let socket: BatchedUdpSocket;
    try {
      const sockaddr = new Uint8Array(SOCKADDR_IN);
      writeSockaddr(sockaddr, 0, parseIpv4(address), port);
      if (libc.bind(fd, sockaddr, SOCKADDR_IN) !== 0) {
        throw new RnicError('EINVAL', `cannot bind UDP ${address}:${port}: ${errnoName(libc.errno())}`);
      }
      const length = new Int32Array([SOCKADDR_IN]);
      if (libc.getsockname(fd, sockaddr, length) !== 0) throw new RnicError('EINVAL', `getsockname failed: ${errnoName(libc.errno())}`);
      const value = new Uint8Array(4);
      const view = new DataView(value.buffer);
      view.setInt32(0, options.bufferBytes ?? 4 * 1024 * 1024, true);
      // Capped silently at net.core.{r,w}mem_max: what the kernel grants is enough to work with.
      libc.setsockopt(fd, SOL_SOCKET, SO_RCVBUF, value, 4);
      libc.setsockopt(fd, SOL_SOCKET, SO_SNDBUF, value, 4);
      if (options.gro ?? true) {
        view.setInt32(0, 1, true);
        // A kernel before 5.0 refuses: runs then arrive cut into datagrams, which works as well.
        libc.setsockopt(fd, SOL_UDP, UDP_GRO, value, 4);
      }
      const local = { address: readSockaddrAddress(sockaddr, 0), port: (sockaddr[2]! << 8) | sockaddr[3]! };
      socket = new BatchedUdpSocket(libc, fd, local, sendBatch, options.gso ?? true, slots, slotBytes, options.checkRoceIcrc ?? false);
      sameThread.set(socketKey(sockaddr.subarray(4, 8), local.port), socket);
    } catch (error) {
      libc.close(fd);
      throw error;
    }
    await socket.ready;
    if (socket.workerError !== undefined || socket.sendWorkerError !== undefined) {
      await socket.close(); // closes the descriptor
      const which =
        socket.workerError !== undefined ? `receive worker failed to start: ${socket.workerError}` : `send worker failed to start: ${socket.sendWorkerError}`;
      throw new RnicError('EINVAL', `batched UDP ${which}`);
    }
    return socket;
  }

  setReceiver(receiver: DatagramReceiver): void {
    this.receiver = receiver;
  }

  setSendErrorHandler(handler: SendErrorHandler): void {
    this.sendErrorHandler = handler;
  }

  /** Packets queued and not yet written (a block counts until the send worker finished it). */
  get pending(): number {
    let count = this.packets;
    for (let block = Atomics.load(this.sendControl, WRITTEN); block !== this.submitted; block = (block + 1) | 0) {
      count += this.blockPackets[block % SEND_BLOCKS]!;
    }
    return count;
  }

  /** True while GSO is in use (it turns itself off if the kernel refuses a GSO message). */
  get gsoEnabled(): boolean {
    return this.gso && Atomics.load(this.sendControl, GSO_OFF_ERRNO) === 0;
  }

  /** Why GSO was turned off, if the kernel refused it (diagnostics). */
  get gsoOffReason(): string | undefined {
    const errno = Atomics.load(this.sendControl, GSO_OFF_ERRNO);
    return errno === 0 ? undefined : `sendmsg with UDP_SEGMENT failed: ${errnoName(errno)}`;
  }

  /**
   * Queues one datagram made of `first`, `second` and `third` (empty parts are skipped). Parts
   * shorter than 256 octets are copied now; longer ones are read by the kernel when the send
   * worker writes the block, so they must stay unchanged until then (RC keeps a payload until
   * its acknowledgement).
   */
  send(to: PeerAddress, first: Uint8Array, second: Uint8Array, third: Uint8Array): void {
    if (this.closed) return;
    if (this.packets === 0 && !this.blockFree()) {
      // Every block is still being written (a full socket buffer): a lost packet to RC.
      this.stats.sendQueueDrops++;
      return;
    }
    const pinned = this.pinned[this.submitted % SEND_BLOCKS]!;
    const blockAt = this.blockAt;
    const packet = this.packets;
    const vectors = this.iovecsAt + packet * MAX_PARTS * IOVEC;
    let copyAt = this.copyAt + packet * COPY_ROOM;
    const copyEnd = copyAt + COPY_ROOM;
    let length = 0;
    for (let p = 0; p < MAX_PARTS; p++) {
      const part = p === 0 ? first : p === 1 ? second : third;
      const partLength = part.length;
      const vector = vectors + p * IOVEC;
      if (partLength === 0) {
        this.put64(vector, this.outboundBase);
      } else if (partLength < REFERENCE_AT && copyAt + partLength <= copyEnd) {
        this.outbound.set(part, blockAt + copyAt);
        this.put64(vector, this.outboundBase + blockAt + copyAt);
        copyAt += partLength;
      } else {
        this.put64(vector, this.addressOf(part));
        pinned[packet * MAX_PARTS + p] = part;
      }
      this.put64(vector + 8, partLength);
      length += partLength;
    }
    // Join the open message if this packet continues its run: same peer, the run's size (or
    // shorter, which ends the run), within GSO's limits.
    const last = this.messages - 1;
    const packets = this.sendControl;
    const lastPackets = this.messagePacketsAt + last;
    if (
      last >= 0 &&
      this.messageOpen[last] === 1 &&
      this.messageTo[last] === to &&
      length <= this.messageSegment[last]! &&
      packets[lastPackets]! < MAX_SEGMENTS &&
      (packets[lastPackets]! + 1) * this.messageSegment[last]! <= MAX_GSO_BYTES &&
      this.gsoEnabled
    ) {
      const count = ++packets[lastPackets]!;
      const record = last * MMSGHDR;
      this.put64(record + MSG_IOVLEN, count * MAX_PARTS);
      if (count === 2) {
        this.put64(record + MSG_CONTROL, this.outboundBase + blockAt + this.controlsAt + last * CMSG_ROOM);
        this.put64(record + MSG_CONTROLLEN, CMSG_ROOM);
      }
      if (length < this.messageSegment[last]!) this.messageOpen[last] = 0;
    } else {
      const message = this.messages;
      try {
        this.writeDestination(blockAt + this.namesAt + message * SOCKADDR_IN, to);
        const peer = sameThread.get(socketKey(this.destinationOctets, to.port));
        if (peer !== undefined && !this.sameThreadPeers.includes(peer)) this.sameThreadPeers.push(peer);
      } catch {
        Atomics.add(this.sendControl, SEND_ERRORS, 1);
        this.sendErrorHandler?.(to, EINVAL);
        pinned.fill(this.outbound, packet * MAX_PARTS, packet * MAX_PARTS + MAX_PARTS);
        return;
      }
      const record = message * MMSGHDR;
      this.put64(record + MSG_IOV, this.outboundBase + blockAt + vectors);
      this.put64(record + MSG_IOVLEN, MAX_PARTS);
      this.put64(record + MSG_CONTROL, 0);
      this.put64(record + MSG_CONTROLLEN, 0);
      const cmsg = blockAt + this.controlsAt + message * CMSG_ROOM;
      this.outbound[cmsg + 16] = length & 0xff;
      this.outbound[cmsg + 17] = length >>> 8;
      this.messageTo[message] = to;
      packets[this.messagePacketsAt + message] = 1;
      this.messageSegment[message] = length;
      this.messageOpen[message] = 1;
      this.messages = message + 1;
    }
    this.packets = packet + 1;
    if (this.packets === this.sendBatch) this.flush();
    else if (!this.flushEnlisted) {
      this.flushEnlisted = true;
      turn.flushLater(this);
    }
  }

  /** End of the turn: everything queued goes out, and what this thread wrote to this socket comes in. */
  endTurn(): void {
    this.flushEnlisted = false;
    this.flush();
    if (this.sameThreadPending) {
      this.sameThreadPending = false;
      this.receiveOwn();
    }
  }

  /**
   * A socket of this thread is about to write to this one: the ring is held for this thread
   * (PRODUCER_LOCK) until receiveOwn takes them, so that the worker, which the datagrams wake,
   * does not take them first and hand them over a wake-up later. Not held if the worker is
   * receiving right now (it then hands them over itself).
   */
  private reserveForOwnReceive(): void {
    if (this.closed || this.heldForOwnReceive) return;
    if (Atomics.compareExchange(this.control, PRODUCER_LOCK, 0, 1) === 0) this.heldForOwnReceive = true;
  }

  /** A socket of this thread has written datagrams to this one: they are taken at the end of this turn. */
  private expectSameThread(): void {
    this.sameThreadPending = true;
    if (!this.flushEnlisted) {
      this.flushEnlisted = true;
      turn.flushLater(this);
    }
  }

  /**
   * True when the block to fill next is back from the send worker; waits for it up to
   * SEND_BLOCK_WAIT_MS (the worker is writing, or waiting out a full socket buffer).
   */
  private blockFree(): boolean {
    const control = this.sendControl;
    const deadline = performance.now() + SEND_BLOCK_WAIT_MS;
    for (;;) {
      const written = Atomics.load(control, WRITTEN);
      if (((this.submitted - written) | 0) < SEND_BLOCKS) break;
      const left = deadline - performance.now();
      if (left <= 0 || Atomics.load(control, SEND_CLOSING) !== 0) return false;
      Atomics.wait(control, WRITTEN, written, left);
    }
    // The block was written: release what its packets pointed at.
    const block = this.submitted % SEND_BLOCKS;
    this.pinned[block]!.fill(this.outbound, 0, this.blockPackets[block]! * MAX_PARTS);
    this.blockPackets[block] = 0;
    this.blockAt = block * this.blockBytes;
    this.messagePacketsAt = MESSAGE_PACKETS + block * this.sendBatch;
    return true;
  }

  /** Writes the block being filled here (nothing with the send worker) or hands it to the send worker, which writes it with as few sendmmsg calls as the kernel allows. */
  flush(): void {
    if (this.messages === 0 || this.closed) return;
    const control = this.sendControl;
    const block = this.submitted % SEND_BLOCKS;
    let start = 0;
    const peers = this.sameThreadPeers;
    // When nothing is with the worker this thread writes the block itself, whatever its size (one
    // non-blocking sendmmsg): handing it over costs a cross-thread wake-up, 100-200 us on this VM,
    // which every Read round trip and every Write window would pay (session 7: a responder on a
    // thread of its own, 16 KiB to 1 MiB Reads, +20-30 % and less CPU per GiB than with a threshold
    // of 4 packets); and an acknowledgement is in the peer's socket before the turn ends (RC's ACK
    // timer relies on that: see Requester.expire). Datagrams to this thread's own sockets are
    // taken by them at the end of the turn (expectSameThread).
    if (Atomics.load(control, WRITTEN) === this.submitted && Atomics.load(control, SIMULATED_FULL) === 0) {
      // Nothing is with the worker, so writing here keeps the order; anything the kernel does
      // not take at once (a full buffer, an error) goes to the worker, which handles it.
      for (let p = 0; p < peers.length; p++) peers[p]!.reserveForOwnReceive();
      const taken = this.libc.sendmmsg(this.fd, this.outboundBase + this.blockAt, this.messages, MSG_DONTWAIT);
      Atomics.add(control, SEND_CALLS, 1);
      if (taken > 0) {
        let datagrams = 0;
        for (let m = 0; m < taken; m++) datagrams += control[this.messagePacketsAt + m]!;
        Atomics.add(control, DATAGRAMS_SENT, datagrams);
        Atomics.add(control, MESSAGES_SENT, taken);
        start = taken;
      }
      for (let p = 0; p < peers.length; p++) peers[p]!.expectSameThread();
      peers.length = 0;
      if (start === this.messages) {
        // Written: the block is filled again from the front (its pointed-at parts released).
        this.pinned[block]!.fill(this.outbound, 0, this.packets * MAX_PARTS);
        this.packets = 0;
        this.messages = 0;
        return;
      }
    }
    peers.length = 0;
    control[BLOCK_START + block] = start;
    control[BLOCK_MESSAGES + block] = this.messages;
    this.blockPackets[block] = this.packets;
    this.submitted = (this.submitted + 1) | 0;
    Atomics.store(control, SUBMITTED, this.submitted);
    if (Atomics.load(control, SENDER_SLEEPING) === 1) Atomics.notify(control, SUBMITTED);
    this.packets = 0;
    this.messages = 0;
  }

  /**
   * Hands the receiver, now, every datagram that has reached this socket: those the worker has
   * published and those still in the kernel's queue, taken here on the main thread. Callers that
   * judge silence (an ACK timer, a peer's close) call it first: the worker's hand-over is a
   * thread switch, which a loaded machine can delay past any timer. Waits at most ~200 ms for a
   * worker in the middle of its own receive (it holds the ring for microseconds unless preempted).
   */
  receiveNow(): void {
    if (this.closed || this.draining) return; // inside a delivery: the drain under way hands everything over

    const control = this.control;
    let waited = 0;
    while (!this.heldForOwnReceive && Atomics.compareExchange(control, PRODUCER_LOCK, 0, 1) !== 0) {
      if (waited++ >= 20) {
        this.drain();
        return;
      }
      Atomics.wait(control, PRODUCER_LOCK, 1, 10);
    }
    this.heldForOwnReceive = false;
    this.takeLocked();
    this.drain();
  }

  /**
   * Takes what this thread's own sockets wrote to this one, unless the worker is taking
   * datagrams right now (then it hands them over itself: nothing here waits for it).
   */
  private receiveOwn(): void {
    if (this.closed || this.draining) return;
    if (!this.heldForOwnReceive && Atomics.compareExchange(this.control, PRODUCER_LOCK, 0, 1) !== 0) return;
    this.heldForOwnReceive = false;
    this.takeLocked();
    this.drain();
  }

  /** With PRODUCER_LOCK held: moves every datagram the kernel holds into the ring (as far as it has room), then releases the lock. */
  private takeLocked(): void {
    const control = this.control;
    try {
      for (;;) {
        const produced = Atomics.load(control, PRODUCED);
        const free = this.slots - ((produced - this.consumed) | 0);
        const start = (produced >>> 0) % this.slots;
        const count = Math.min(free, this.slots - start, RECEIVE_BATCH);
        if (count === 0) break;
        for (let i = start; i < start + count; i++) {
          const record = this.recordsAt + i * MMSGHDR;
          this.ringWords[(record + MSG_NAMELEN) >>> 2] = SOCKADDR_IN;
          this.ringWords[(record + MSG_CONTROLLEN) >>> 2] = CMSG_ROOM;
          this.ringWords[((record + MSG_CONTROLLEN) >>> 2) + 1] = 0;
        }
        const got = this.libc.recvmmsg(this.fd, this.ringBase + this.recordsAt + start * MMSGHDR, count, MSG_DONTWAIT, 0);
        if (got <= 0) break;
        Atomics.add(control, OWN_TAKES, 1); // a parked worker stays parked while this thread takes
        // Taken here, not by the worker: nothing checked their ICRCs (the receiver does).
        if (this.verdictsAt >= 0) this.ringBytes.fill(0, this.verdictsAt + start * VERDICTS_PER_SLOT, this.verdictsAt + (start + got) * VERDICTS_PER_SLOT);
        Atomics.store(control, PRODUCED, (produced + got) | 0);
        if (got < count) break;
      }
    } finally {
      Atomics.store(control, PRODUCER_LOCK, 0);
      Atomics.notify(control, PRODUCER_LOCK);
    }
  }

  /** Test hook: the next `count` sendmmsg calls are answered as if the socket buffer were full (EAGAIN). */
  simulateFullSocket(count: number): void {
    Atomics.store(this.sendControl, SIMULATED_FULL, count);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.flush();
    this.closed = true;
    const key = socketKey(parseIpv4(this.local.address), this.local.port);
    if (sameThread.get(key) === this) sameThread.delete(key);
    // The send worker writes what was submitted, then ends; a socket that stays full is given
    // up after a second (what was left is lost, as in any close of a UDP socket).
    Atomics.store(this.sendControl, SEND_CLOSING, 1);
    Atomics.notify(this.sendControl, SUBMITTED);
    const giveUp = setTimeout(() => {
      Atomics.store(this.sendControl, SEND_CLOSING, 2);
      Atomics.notify(this.sendControl, SEND_CLOSING);
    }, 1000);
    await this.sendExited;
    clearTimeout(giveUp);
    Atomics.store(this.control, CLOSING, 1);
    Atomics.notify(this.control, PARKED);
    if (this.heldForOwnReceive) {
      this.heldForOwnReceive = false;
      Atomics.store(this.control, PRODUCER_LOCK, 0);
      Atomics.notify(this.control, PRODUCER_LOCK);
    }
    // Wakes the worker from poll (Linux wakes waiters on a shut-down UDP socket) or from waiting
    // for ring space; poll's timeout covers a kernel that would not.
    this.libc.shutdown(this.fd, SHUT_RDWR);
    Atomics.notify(this.control, CONSUMED);
    await this.exited;
    // Only now: the descriptor's number could otherwise be reused while the worker still reads it.
    this.libc.close(this.fd);
  }

  /** Hands every datagram the worker has published to the receiver, as one turn. */
  private drain(): void {
    Atomics.store(this.control, WAKE_PENDING, 0);
    if (this.closed || this.draining) return;
    const produced = Atomics.load(this.control, PRODUCED);
    let consumed = this.consumed;
    if (consumed === produced) return;
    this.stats.receiveBatches++;
    const slots = this.slots;
    const words = this.ringWords;
    this.draining = true;
    turn.enter();
    try {
      while (consumed !== produced) {
        const slot = ((consumed >>> 0) % slots) | 0;
        consumed = (consumed + 1) | 0;
        this.stats.slotsReceived++;
        const record = this.recordsAt + slot * MMSGHDR;
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
        const verdicts = this.verdictsAt + slot * VERDICTS_PER_SLOT;
        let offset = 0;
        let index = 0;
        do {
          const end = Math.min(offset + segment, length);
          const verdict = this.verdictsAt >= 0 && index < VERDICTS_PER_SLOT ? (this.ringBytes[verdicts + index]! as IcrcVerdict) : IcrcVerdict.Unchecked;
          index++;
          this.stats.datagramsReceived++;
          try {
            receiver(this.datagramViews.view(slotAt + offset, end - offset), from, verdict);
          } catch {
            // A receiver's bug must not stop the ring: the datagram counts as lost.
          }
          offset = end;
        } while (offset < length);
      }
    } finally {
      this.consumed = consumed;
      Atomics.store(this.control, CONSUMED, consumed);
      Atomics.notify(this.control, CONSUMED);
      this.draining = false;
      turn.leave();
    }
  }

  private workerFailed(errno: number): void {
    this.workerError = `recvmmsg failed: ${errnoName(errno)}`;
    this.drain();
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

  private writeDestination(offset: number, to: PeerAddress): void {
    if (to.address !== this.lastDestination) {
      this.destinationOctets = parseIpv4(to.address);
      this.lastDestination = to.address;
    }
    writeSockaddr(this.outbound, offset, this.destinationOctets, to.port);
  }

  private addressOf(part: Uint8Array): number {
    const buffer = part.buffer;
    let base = this.bufferAddresses.get(buffer);
    if (base === undefined) {
      base = this.libc.addressOf(part) - part.byteOffset;
      this.bufferAddresses.set(buffer, base);
    }
    return base + part.byteOffset;
  }

  /** Writes a 64-bit value at `offset` within the block being filled. */
  private put64(offset: number, value: number): void {
    const word = (this.blockAt + offset) >>> 2;
    this.outboundWords[word] = value % 4294967296;
    this.outboundWords[word + 1] = Math.floor(value / 4294967296);
  }
}
