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
// Receive: the thread that runs RC takes its datagrams itself. A libuv poll handle on the
// descriptor (koffi.node.poll) wakes this thread's event loop when the socket is readable, as a
// TCP socket's read does for the iWARP path, and the receive area (batched-udp-receive.ts) takes
// what the kernel holds with non-blocking recvmmsg calls and hands it over.
// Session 7 received through a worker thread that polled the descriptor and woke the RC thread
// with a message per batch: on this VM every such cross-thread wake-up cost 100-200 us, and a
// Read's round trip paid two per direction, where the kernel's own wake-up is one.
//
// Little-endian LP64 Linux with glibc only (x86_64, arm64): elsewhere `loadBatchedUdp` says why
// not and the caller keeps node:dgram.

import { lookup } from 'node:dns/promises';
import { isIPv4 } from 'node:net';
import { RnicError } from '../errors.ts';
import { turn, type TurnParticipant } from '../turn.ts';
import { parseIpv4 } from '../wire/roce-frame.ts';
import type { PacketRun, PeerAddress } from './link.ts';
import {
  AF_INET,
  SOCK_DGRAM,
  SOCK_CLOEXEC,
  SOL_SOCKET,
  SO_SNDBUF,
  SO_RCVBUF,
  MSG_DONTWAIT,
  EINVAL,
  MMSGHDR,
  MSG_NAME,
  MSG_NAMELEN,
  MSG_IOV,
  MSG_IOVLEN,
  MSG_CONTROL,
  MSG_CONTROLLEN,
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
} from './batched-udp-layout.ts';
import {
  DatagramReceiveArea,
  DEFAULT_RECEIVE_SLOTS,
  DEFAULT_SLOT_BYTES,
  type LeanDatagramReceiver,
  type DatagramReceiver,
  type ReceiveStatistics,
  type RunChecker,
} from './batched-udp-receive.ts';
import { SEND_WORKER, startWorker } from './batched-udp-workers.ts';
import { sharedAddress } from './shared-copy.ts';
import { errnoName } from '../../util/libc.ts';
import { type Libc, loadBatchedUdp, type ReadablePoll, readSockaddrAddress, writeSockaddr } from './batched-udp-libc.ts';
export { SEND_BLOCKS } from './batched-udp-layout.ts';

// Tuning of this socket (the worker threads get what they need of it through workerData).
/** Octets of small parts a queued packet copies instead of pointing at. */
const COPY_ROOM = 336;
/** A part at least this long is pointed at, not copied: its buffer is off the V8 heap (it cannot move). */
const REFERENCE_AT = 256;
/** Packets queued at most before the queue is written at once. */
export const DEFAULT_SEND_BATCH = 256;
/** How long a packet waits for a send block to come back before it is dropped (a loss to RC). */
const SEND_BLOCK_WAIT_MS = 20;

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
  /** Receive slots taken per recvmmsg (a power of two, default 64) and octets per slot (default 65536: a larger datagram is dropped and counted). */
  receiveSlots?: number;
  slotBytes?: number;
}

/** A send error the socket could not recover from by waiting (the datagrams are dropped). */
export type SendErrorHandler = (to: PeerAddress, errno: number) => void;

/** The send half's counters and the receive area's. */
export interface BatchedUdpStatistics extends ReceiveStatistics {
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
}

/** This thread's sockets that are receiving, in the order they opened (module state is per thread): receiveThreadNow reads them. */
const receivingHere: BatchedUdpSocket[] = [];

export class BatchedUdpSocket implements TurnParticipant {
  readonly stats: BatchedUdpStatistics;
  /** Why the send worker stopped, if it failed (diagnostics). */
  sendWorkerError: string | undefined;
  /** Why receiving stopped, if it did (a poll or recvmmsg error other than EAGAIN; diagnostics). */
  receiveError: string | undefined;
  private sendErrorHandler: SendErrorHandler | undefined;
  private closed = false;
  private readonly sendExited: Promise<void>;
  /** Resolves once the send worker runs (or has ended). */
  private readonly ready: Promise<void>;
  /** The poll handle that wakes this thread when the socket is readable (until close). */
  private poll: ReadablePoll | undefined;

  // Send queue, in blocks of one layout: message records (sendmmsg takes them as one array), then
  // three iovecs per packet (consecutive packets' iovecs are one run, so a GSO message points at
  // a run), then per message its destination and control message, then per packet its copy room.
  // The offsets below are within a block; `blockAt` is where the block being filled starts.
  private readonly outbound: Uint8Array;
  private readonly outboundWords: Uint32Array;
  private readonly outboundBase: number;
  /** outboundBase as two 32-bit halves: sendRun writes its iovecs' words without a division each. */
  private readonly outboundHigh: number;
  private readonly outboundLow: number;
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
  /** The last destination's address, parsed once: consecutive packets mostly go to one peer. */
  private lastDestination = '';
  private destinationOctets: Uint8Array = new Uint8Array(4);
  /** Base address of each ArrayBuffer a referenced part lives in (it never moves: off-heap). */
  private readonly bufferAddresses = new WeakMap<ArrayBufferLike, number>();

  /** What the descriptor receives (its own half: batched-udp-receive.ts). */
  private readonly receiveArea: DatagramReceiveArea;
  private readonly onReadable = (status: number): void => this.readable(status);

  private constructor(
    private readonly libc: Libc,
    private readonly fd: number,
    readonly local: PeerAddress,
    private readonly sendBatch: number,
    gso: boolean,
    slots: number,
    slotBytes: number,
    /**
     * SO_RCVBUF as the kernel granted it (PacketLink.receiveBufferBytes: with UDP GRO a run of
     * packets waits as one skb, so the packets' own octets are nearly all it is charged);
     * undefined if it would not say.
     */
    readonly receiveBufferBytes: number | undefined,
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
    this.outboundHigh = Math.floor(this.outboundBase / 4294967296);
    this.outboundLow = this.outboundBase - this.outboundHigh * 4294967296;
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
    this.receiveArea = new DatagramReceiveArea(libc, fd, slots, slotBytes, (reason) => this.stopReceiving(reason));
    const received = this.receiveArea.stats;
    // Send counters live in shared memory (the send worker keeps them); the rest are this thread's.
    this.stats = Object.defineProperties(received, {
      sendQueueDrops: { value: 0, writable: true, enumerable: true },
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

    this.ready = sender.started;
  }

  /** Opens and binds the socket. Throws RnicError when batching is unavailable here or bind fails. */
  static async open(options: BatchedUdpSocketOptions = {}): Promise<BatchedUdpSocket> {
    const libc = loadBatchedUdp();
    if (libc instanceof Error) throw new RnicError('EINVAL', `batched UDP unavailable: ${libc.message}`);
    const pollReadable = libc.pollReadable;
    if (pollReadable === undefined)
      throw new RnicError(
        'EINVAL',
        'batched UDP unavailable: koffi.node.poll is missing (package.json pins the koffi that has it) or koffi cannot be kept loaded',
      );
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
      // Capped silently at net.core.{r,w}mem_max: RC sizes its windows to what was granted (receiveBufferBytes).
      libc.setsockopt(fd, SOL_SOCKET, SO_RCVBUF, value, 4);
      libc.setsockopt(fd, SOL_SOCKET, SO_SNDBUF, value, 4);
      const granted = new Int32Array([4]);
      const receiveBufferBytes = libc.getsockopt(fd, SOL_SOCKET, SO_RCVBUF, value, granted) === 0 ? view.getInt32(0, true) : undefined;
      if (options.gro ?? true) {
        view.setInt32(0, 1, true);
        // A kernel before 5.0 refuses: runs then arrive cut into datagrams, which works as well.
        libc.setsockopt(fd, SOL_UDP, UDP_GRO, value, 4);
      }
      const local = { address: readSockaddrAddress(sockaddr, 0), port: (sockaddr[2]! << 8) | sockaddr[3]! };
      socket = new BatchedUdpSocket(libc, fd, local, sendBatch, options.gso ?? true, slots, slotBytes, receiveBufferBytes);
    } catch (error) {
      libc.close(fd);
      throw error;
    }
    try {
      socket.poll = pollReadable(fd, socket.onReadable);
      receivingHere.push(socket);
    } catch (error) {
      await socket.close(); // closes the descriptor
      throw new RnicError('EINVAL', `batched UDP cannot watch its socket: ${error instanceof Error ? error.message : String(error)}`);
    }
    await socket.ready;
    if (socket.sendWorkerError !== undefined) {
      await socket.close();
      throw new RnicError('EINVAL', `batched UDP send worker failed to start: ${socket.sendWorkerError}`);
    }
    return socket;
  }

  /** Asked before the receiver about every datagram (undefined: none). */
  setLeanReceiver(receiver: LeanDatagramReceiver | undefined): void {
    this.receiveArea.leanReceiver = receiver;
  }

  setReceiver(receiver: DatagramReceiver): void {
    this.receiveArea.receiver = receiver;
  }

  /** Asked about each GRO run before its datagrams are handed over (undefined: none). */
  setRunChecker(checker: RunChecker | undefined): void {
    this.receiveArea.runChecker = checker;
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
    if (this.closed || !this.blockReady()) return;
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
    this.enqueue(to, length, packet, vectors);
  }

  /**
   * Queues the datagrams of `run` (header, payload and trailer each) as as many calls of `send`
   * would (headers and trailers copied now, the payload pointed at), without a call per datagram:
   * RC sends the middle packets of a message so, equal datagrams that GSO carries in few
   * messages. A header and a trailer together fit the copy room (336 octets).
   */
  sendRun(to: PeerAddress, run: PacketRun): void {
    if (this.closed) return;
    const { headers, headerLength, payload, segment, count, trailers, trailerLength } = run;
    if (
      headerLength + trailerLength > COPY_ROOM ||
      payload.length < count * segment ||
      headers.length < count * headerLength ||
      trailers.length < count * trailerLength
    ) {
      throw new RangeError(`a run of ${count} datagrams does not fit its parts`);
    }
    const payloadAddress = this.addressOf(payload);
    const payloadHigh = Math.floor(payloadAddress / 4294967296);
    const payloadLow = payloadAddress - payloadHigh * 4294967296;
    const bytes = this.outbound;
    for (let i = 0; i < count; i++) {
      if (!this.blockReady()) return;
      const blockAt = this.blockAt;
      const packet = this.packets;
      const vectors = this.iovecsAt + packet * MAX_PARTS * IOVEC;
      const copyAt = this.copyAt + packet * COPY_ROOM;
      // Header and trailer side by side in the packet's copy room: short copies, no builtin call.
      const headerAt = blockAt + copyAt;
      const headerFrom = i * headerLength;
      for (let b = 0; b < headerLength; b++) bytes[headerAt + b] = headers[headerFrom + b]!;
      const trailerAt = headerAt + headerLength;
      const trailerFrom = i * trailerLength;
      for (let b = 0; b < trailerLength; b++) bytes[trailerAt + b] = trailers[trailerFrom + b]!;
      // The three iovecs, word by word (put64's division per value was most of this loop's time).
      this.putAddress(vectors, this.outboundHigh, this.outboundLow, headerAt);
      this.putLength(vectors + 8, headerLength);
      this.putAddress(vectors + IOVEC, payloadHigh, payloadLow, i * segment);
      this.putLength(vectors + IOVEC + 8, segment);
      this.putAddress(vectors + 2 * IOVEC, this.outboundHigh, this.outboundLow, trailerAt);
      this.putLength(vectors + 2 * IOVEC + 8, trailerLength);
      this.pinned[this.submitted % SEND_BLOCKS]![packet * MAX_PARTS + 1] = payload;
      this.enqueue(to, headerLength + segment + trailerLength, packet, vectors);
    }
  }

  /**
   * True when a packet can be queued: the block being filled has room, or (first packet of a
   * block) the next block is back from the send worker. Otherwise the packet is dropped and
   * counted (every block is still being written: a full socket buffer), a loss to RC.
   */
  private blockReady(): boolean {
    if (this.packets !== 0 || this.blockFree()) return true;
    this.stats.sendQueueDrops++;
    return false;
  }

  /**
   * Adds the packet whose iovecs were just written at `vectors` (`length` octets to `to`) to the
   * block: it joins the open message if it continues its run (same peer, the run's size or
   * shorter, which ends the run, within GSO's limits), else starts a message. Writes the block
   * once it is full, else makes sure the turn's end does.
   */
  private enqueue(to: PeerAddress, length: number, packet: number, vectors: number): void {
    const blockAt = this.blockAt;
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
      } catch {
        Atomics.add(this.sendControl, SEND_ERRORS, 1);
        this.sendErrorHandler?.(to, EINVAL);
        this.pinned[this.submitted % SEND_BLOCKS]!.fill(this.outbound, packet * MAX_PARTS, packet * MAX_PARTS + MAX_PARTS);
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

  /** End of the turn: everything queued goes out. */
  endTurn(): void {
    this.flushEnlisted = false;
    this.flush();
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
    // When nothing is with the worker this thread writes the block itself, whatever its size (one
    // non-blocking sendmmsg): handing it over costs a cross-thread wake-up, 100-200 us on this VM,
    // which every Read round trip and every Write window would pay (session 7: a responder on a
    // thread of its own, 16 KiB to 1 MiB Reads, +20-30 % and less CPU per GiB than with a threshold
    // of 4 packets); and an acknowledgement is in the peer's socket before the turn ends (RC's ACK
    // timer relies on that: see Requester.expire).
    if (Atomics.load(control, WRITTEN) === this.submitted && Atomics.load(control, SIMULATED_FULL) === 0) {
      // Nothing is with the worker, so writing here keeps the order; anything the kernel does
      // not take at once (a full buffer, an error) goes to the worker, which handles it.
      const taken = this.libc.sendmmsg(this.fd, this.outboundBase + this.blockAt, this.messages, MSG_DONTWAIT);
      Atomics.add(control, SEND_CALLS, 1);
      if (taken > 0) {
        let datagrams = 0;
        for (let m = 0; m < taken; m++) datagrams += control[this.messagePacketsAt + m]!;
        Atomics.add(control, DATAGRAMS_SENT, datagrams);
        Atomics.add(control, MESSAGES_SENT, taken);
        start = taken;
      }
      if (start === this.messages) {
        // Written: the block is filled again from the front (its pointed-at parts released).
        this.pinned[block]!.fill(this.outbound, 0, this.packets * MAX_PARTS);
        this.packets = 0;
        this.messages = 0;
        return;
      }
    }
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
   * Hands the receiver, now, the datagrams that have reached this socket (as many as one
   * readable event takes). Callers that judge silence (an ACK timer, a peer's close) call it
   * first: the readable event waits for the event loop, which a long turn can delay.
   */
  receiveNow(): void {
    this.receiveArea.receive();
  }

  /**
   * receiveNow, after the same for every other socket of this thread whose last read brought
   * datagrams: a peer served by this thread (both ends of a pair in one process) answers what was
   * just sent to it, and the answer is in this socket, before the event loop turns. An idle
   * socket is left to its readable event (a read of it here would cost an empty system call).
   */
  receiveThreadNow(): void {
    for (let i = 0; i < receivingHere.length; i++) {
      const socket = receivingHere[i]!;
      if (socket !== this && socket.receiveArea.busy) socket.receiveArea.receive();
    }
    this.receiveArea.receive();
  }

  /** The poll handle's callback (koffi calls it from the event loop; nothing may escape it). */
  private readable(status: number): void {
    try {
      this.stats.readableEvents++;
      if (status < 0) this.stopReceiving(`poll failed: ${errnoName(-status)}`);
      else this.receiveArea.receive();
    } catch (error) {
      // An exception escaping koffi's poll callback leaves the process spinning (koffi 3.3.4):
      // report it as an uncaught exception, from a callback of Node's own.
      setImmediate(() => {
        throw error;
      });
    }
  }

  /** Receiving cannot go on (the descriptor is unusable): stop watching it, say why. */
  private stopReceiving(reason: string): void {
    this.receiveError = reason;
    this.leaveReceivingHere();
    this.poll?.close();
    this.poll = undefined;
  }

  private leaveReceivingHere(): void {
    const index = receivingHere.indexOf(this);
    if (index >= 0) receivingHere.splice(index, 1);
  }

  /** Test hook: the next `count` sendmmsg calls are answered as if the socket buffer were full (EAGAIN). */
  simulateFullSocket(count: number): void {
    Atomics.store(this.sendControl, SIMULATED_FULL, count);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.flush();
    this.closed = true;
    this.receiveArea.closed = true;
    this.leaveReceivingHere();
    // Before the descriptor closes (libuv requires it), and so that nothing keeps the event loop waiting.
    this.poll?.close();
    this.poll = undefined;
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
    // Only now: the descriptor's number could otherwise be reused while the send worker still writes to it.
    this.libc.close(this.fd);
  }

  private writeDestination(offset: number, to: PeerAddress): void {
    if (to.address !== this.lastDestination) {
      this.destinationOctets = parseIpv4(to.address);
      this.lastDestination = to.address;
    }
    writeSockaddr(this.outbound, offset, this.destinationOctets, to.port);
  }

  private addressOf(part: Uint8Array): number {
    // Kept per view (see sharedAddress): a payload in shared memory, the common case, costs no `buffer` look-up.
    const shared = sharedAddress(part);
    if (shared >= 0) return shared;
    const buffer = part.buffer;
    let base = this.bufferAddresses.get(buffer);
    if (base === undefined) {
      base = this.libc.addressOf(part) - part.byteOffset;
      this.bufferAddresses.set(buffer, base);
    }
    return base + part.byteOffset;
  }

  /** Writes the address `high` * 2^32 + `low` + `add` (`add` below 2^32) at `offset` within the block being filled. */
  private putAddress(offset: number, high: number, low: number, add: number): void {
    const word = (this.blockAt + offset) >>> 2;
    const sum = low + add;
    const carry = sum >= 4294967296 ? 1 : 0;
    this.outboundWords[word] = sum - carry * 4294967296;
    this.outboundWords[word + 1] = high + carry;
  }

  /** Writes a length below 2^32 as a 64-bit value at `offset` within the block being filled. */
  private putLength(offset: number, value: number): void {
    const word = (this.blockAt + offset) >>> 2;
    this.outboundWords[word] = value;
    this.outboundWords[word + 1] = 0;
  }

  /** Writes a 64-bit value at `offset` within the block being filled. */
  private put64(offset: number, value: number): void {
    const word = (this.blockAt + offset) >>> 2;
    this.outboundWords[word] = value % 4294967296;
    this.outboundWords[word + 1] = Math.floor(value / 4294967296);
  }
}
