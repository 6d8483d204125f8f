// The public API of the software RNIC: a verbs-like device object.
//
//   const rnic = createRnic({ observer });                 // one per thread; no shared state
//   const pd = rnic.allocPd();
//   const mr = rnic.registerMemory(pd, sharedArrayBuffer, { access: Access.LocalWrite | Access.RemoteWrite });
//   const cq = rnic.createCq({ depth: 1024 });
//   const qp = rnic.createQp({ pd, sendCq: cq, recvCq: cq, ird: 16, ord: 16 });
//   qp.postRecv({ wrId: 1, sgList: [{ lkey: mr.lkey, offset: 0, length: 4096 }] });
//   await rnic.connect(qp, { host: '127.0.0.1', port, privateData });        // active side
//   const listener = await rnic.listen({ host: '127.0.0.1', port: 0 });      // passive side
//   const request = await listener.next(); await request.accept(qp, { privateData });
//   qp.postSend({ wrId: 2, opcode: 'RDMA_WRITE', sgList: [...], remote: { stag, taggedOffset } });
//   await cq.wait(); const completions = cq.poll();
//
// Wire behaviour follows RFC 5040/5041/5044/6581/7306 and Linux siw: MPA revision 2 with the
// enhanced IRD/ORD word, peer-to-peer RTR (zero-length Write preferred), CRC requested unless
// `crc: false`, markers only when asked. Errors on a connection end that connection with a
// Terminate and flushed completions; they never throw out of the event loop and never touch
// another connection. See docs/RNIC.md for the architecture and the error table.

import type net from 'node:net';
import { SocketChannel, type StreamChannel } from './channel.ts';
import { type ConnectionRequest, DEFAULT_SETUP_TIMEOUT_MS, initiate, receiveRequest, type ConnectionSummary, type InitiatorOptions } from './connection.ts';
import { CompletionQueue, type CompletionQueueOptions } from './cq.ts';
import { RnicError } from './errors.ts';
import { type MemoryRegion, MemoryTable, type ProtectionDomain, type RegisterMemoryOptions } from './memory.ts';
import type { NicObserver } from './nic-observer.ts';
import { QueuePair, type QueuePairOptions } from './qp.ts';
import { RoceEndpoint } from './rc/endpoint.ts';
import type { PacketLink } from './rc/link.ts';
import { openUdpLink, type UdpLinkChoice } from './rc/udp-link-choice.ts';
import { RcListener, type RcListenOptions } from './rc/listener.ts';
import { SetupListener, type SetupListenOptions } from './setup-listener.ts';
import { RcQueuePair, type RcQueuePairOptions } from './rc/queue-pair.ts';
import { connectRc, receiveRcRequest, type RcConnectionRequest, type RcConnectionSummary, type RcConnectOptions, type RcSetupOptions } from './rc/setup.ts';

export { Access, ACCESS_ALL, MemoryRegion, ProtectionDomain, type RegisterMemoryOptions } from './memory.ts';
export { CompletionQueue, copyCompletion, type CompletionQueueOptions } from './cq.ts';
export { QueuePair, type QueuePairOptions, type QpState, type DisconnectInfo, type RtrType } from './qp.ts';
export { ConnectionRequest, type ConnectionSummary, type InitiatorOptions, type ResponderOptions } from './connection.ts';
export { RnicError, type RnicErrorCode, type TerminateInfo } from './errors.ts';
export {
  WcStatus,
  wcStatusName,
  type WorkCompletion,
  type SendWorkRequest,
  type ReceiveWorkRequest,
  type Sge,
  type SendOpcode,
  type WcOpcode,
} from './work.ts';
export type { NicObserver } from './nic-observer.ts';
export { RcQueuePair, type RcQueuePairOptions, type RcPathParameters, type PathMtu } from './rc/queue-pair.ts';
export { RoceEndpoint } from './rc/endpoint.ts';
export { UdpLink, type PacketLink, type PeerAddress, type UdpLinkOptions } from './rc/link.ts';
export { BatchedUdpLink, type BatchedUdpLinkOptions } from './rc/batched-udp-link.ts';
export { openUdpLink, udpLinkKindFromEnvironment, UDP_LINK_ENV, UDP_LINK_KINDS, type UdpLinkChoice, type UdpLinkKind } from './rc/udp-link-choice.ts';
export { ImpairedLink, type Impairments } from './rc/impaired-link.ts';
export { RcListener, type RcListenOptions } from './rc/listener.ts';
export { RcConnectionRequest, type RcConnectionSummary, type RcConnectOptions, type RcSetupOptions } from './rc/setup.ts';
export { SocketChannel, MemoryChannel, type StreamChannel } from './channel.ts';

export interface RnicOptions {
  /** Receives the SRAM-model hooks; with none set the RNIC makes no observer calls at all. */
  observer?: NicObserver;
  /** A name for logs and errors (default "rnic<N>"). */
  name?: string;
}

/** Where an RNIC connect goes, and the MPA options (the KBTP session's options are kbtp's ConnectOptions). */
export interface RnicConnectOptions extends InitiatorOptions {
  host: string;
  port: number;
  /** TCP congestion control of a loopback connection (default null: the host's; socket-window.ts). */
  loopbackCongestionControl?: string | null;
}

export interface ListenOptions extends SetupListenOptions {
  /** Bound on each connection's MPA setup (default 10 s). */
  timeoutMs?: number;
}

/** A queue pair of either binding: the verbs the KBTP target and initiator use are the same. */
export type AnyQueuePair = QueuePair | RcQueuePair;
/** A passive-side connection request of either binding. */
export type AnyConnectionRequest = ConnectionRequest | RcConnectionRequest;

let nextDeviceId = 1;

export class Rnic {
  readonly id: number;
  readonly name: string;
  readonly observer: NicObserver | undefined;
  readonly memory: MemoryTable;
  private readonly queuePairs = new Map<number, QueuePair>();
  private nextQpNumber = 1;
  private nextCqNumber = 1;
  private readonly listeners = new Set<Listener>();
  private readonly rcQueuePairs = new Map<number, RcQueuePair>();
  private readonly rcListeners = new Set<RcListener>();
  private roce: RoceEndpoint | undefined;

  constructor(options: RnicOptions = {}) {
    this.id = nextDeviceId++;
    this.name = options.name ?? `rnic${this.id}`;
    this.observer = options.observer;
    this.memory = new MemoryTable(this.id, this.observer);
  }

  /** Allocates a protection domain (ibv_alloc_pd). */
  allocPd(): ProtectionDomain {
    return this.memory.allocatePd();
  }

  /**
   * Registers a memory region over an ArrayBuffer, a SharedArrayBuffer (e.g. a
   * WebAssembly.Memory's buffer) or a view of one (ibv_reg_mr). The region's STag serves as
   * both lkey and rkey; its key byte is random unless given.
   */
  registerMemory(pd: ProtectionDomain, memory: ArrayBufferLike | ArrayBufferView, options: RegisterMemoryOptions): MemoryRegion {
    return this.memory.register(pd, memory, options);
  }

  /** Deregisters (ibv_dereg_mr): the STag stops resolving at once. */
  deregisterMemory(region: MemoryRegion): void {
    this.memory.deregister(region);
  }

  /** Invalidates an STag at once (the synchronous form of a LOCAL_INV work request). */
  invalidate(region: MemoryRegion): void {
    this.memory.invalidate(region.stag, region.pd);
  }

  /** Makes an invalidated region's STag valid again (a re-registration keeping the STag). */
  revalidate(region: MemoryRegion): void {
    this.memory.revalidate(region);
  }

  /** Creates a completion queue (ibv_create_cq). */
  createCq(options: CompletionQueueOptions = {}): CompletionQueue {
    return new CompletionQueue(this.nextCqNumber++, this.observer, options);
  }

  /** Creates a queue pair (ibv_create_qp); it gets the next QP number of this RNIC. */
  createQp(options: QueuePairOptions): QueuePair {
    if (options.pd.deviceId !== this.id) throw new RnicError('EINVAL', 'protection domain belongs to another RNIC');
    const qpNumber = this.allocateQpNumber(1);
    const qp = new QueuePair(qpNumber, this.memory, this.observer, options, (destroyed) => {
      if (this.queuePairs.delete(destroyed.qpNumber)) this.observer?.queuePairDestroyed(destroyed.qpNumber);
    });
    this.queuePairs.set(qpNumber, qp);
    this.observer?.queuePairCreated(qpNumber);
    return qp;
  }

  /** QP numbers are 24-bit like a hardware RNIC's; skip any still in use after a wrap. */
  private allocateQpNumber(lowest: number): number {
    let qpNumber = Math.max(this.nextQpNumber, lowest);
    while (this.queuePairs.has(qpNumber) || this.rcQueuePairs.has(qpNumber) || qpNumber < lowest) qpNumber = (qpNumber + 1) & 0xffffff || 1;
    this.nextQpNumber = (qpNumber + 1) & 0xffffff || 1;
    return qpNumber;
  }

  /**
   * Opens this RNIC's RoCEv2 port: a kernel UDP socket (default 127.0.0.1, any free port; the
   * batched link where koffi loads, else node:dgram, or as `udpLink` / $KBTP_ROCE_UDP say) or
   * the given link. One per RNIC; later calls return the same endpoint.
   */
  async openRoce(options: UdpLinkChoice & { link?: PacketLink } = {}): Promise<RoceEndpoint> {
    if (this.roce === undefined) {
      const link = options.link ?? (await openUdpLink(options));
      // Two calls raced: the second link is not needed (a batched one's worker would keep the process alive).
      if (this.roce !== undefined && options.link === undefined) await link.close();
      else this.roce ??= new RoceEndpoint(link);
    }
    return this.roce;
  }

  get roceEndpoint(): RoceEndpoint | undefined {
    return this.roce;
  }

  /** Creates an RC queue pair for RoCEv2 (QP numbers 0 and 1 are the IB special QPs: never used). */
  createRcQp(options: RcQueuePairOptions): RcQueuePair {
    if (options.pd.deviceId !== this.id) throw new RnicError('EINVAL', 'protection domain belongs to another RNIC');
    const qpNumber = this.allocateQpNumber(2);
    const qp = new RcQueuePair(qpNumber, this.memory, this.observer, options, (destroyed) => {
      this.roce?.detach(destroyed);
      if (this.rcQueuePairs.delete(destroyed.qpNumber)) this.observer?.queuePairDestroyed(destroyed.qpNumber);
    });
    this.rcQueuePairs.set(qpNumber, qp);
    this.observer?.queuePairCreated(qpNumber);
    return qp;
  }

  /** Active RC setup over a TCP side channel to host:port (opens the RoCE port if needed). */
  async connectRc(qp: RcQueuePair, options: RcConnectOptions): Promise<RcConnectionSummary> {
    return connectRc(await this.openRoce(), qp, options);
  }

  /** Passive RC setup: a side-channel listener yielding connection requests. */
  async listenRc(options: RcListenOptions = {}, onRequest?: (request: RcConnectionRequest) => void): Promise<RcListener> {
    const listener = new RcListener(await this.openRoce(), options, onRequest);
    await listener.start();
    this.rcListeners.add(listener);
    return listener;
  }

  /** Passive RC setup for a side-channel socket accepted elsewhere (e.g. a worker's shared listener). */
  async acceptRcSocket(socket: net.Socket, options: RcSetupOptions = {}): Promise<RcConnectionRequest> {
    return receiveRcRequest(await this.openRoce(), socket, options);
  }

  queuePair(qpNumber: number): QueuePair | undefined {
    return this.queuePairs.get(qpNumber);
  }

  get queuePairCount(): number {
    return this.queuePairs.size;
  }

  /**
   * Active side (rdma_connect): opens TCP to host:port, runs the MPA exchange and resolves
   * once `qp` is in full operation. Rejects with RnicError ECONNREFUSED (peer rejected),
   * ETIMEDOUT, EPROTO (bad Reply; a Terminate was sent) or ECONNRESET.
   */
  async connect(qp: QueuePair, options: RnicConnectOptions): Promise<ConnectionSummary> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_SETUP_TIMEOUT_MS;
    const started = Date.now();
    let channel: SocketChannel;
    try {
      channel = await SocketChannel.connect(options.host, options.port, timeoutMs, options.loopbackCongestionControl);
    } catch (error) {
      // A timeout is the channel's own RnicError; a refusal or unreachable host is Node's errno error.
      const code = error instanceof RnicError ? error.errno : (error as NodeJS.ErrnoException).code;
      throw new RnicError(
        code === 'ETIMEDOUT' ? 'ETIMEDOUT' : 'ECONNREFUSED',
        `TCP connection to ${options.host}:${options.port} failed: ${error instanceof Error ? error.message : String(error)}`,
      );
    }
    const summary = await initiate(qp, channel, { ...options, timeoutMs: Math.max(1, timeoutMs - (Date.now() - started)) });
    return channel.congestionControl === undefined ? summary : { ...summary, congestionControl: channel.congestionControl };
  }

  /** Active side over a channel that is already connected (tests, custom transports). */
  connectChannel(qp: QueuePair, channel: StreamChannel, options: InitiatorOptions = {}): Promise<ConnectionSummary> {
    return initiate(qp, channel, options);
  }

  /**
   * Passive side (rdma_listen): listens on TCP and yields one ConnectionRequest per valid MPA
   * Request, through `listener.next()` or the `onRequest` callback.
   */
  async listen(options: ListenOptions = {}, onRequest?: (request: ConnectionRequest) => void): Promise<Listener> {
    const listener = new Listener(this, options, onRequest);
    await listener.start();
    this.listeners.add(listener);
    listener.onClose(() => this.listeners.delete(listener));
    return listener;
  }

  /**
   * Passive side for a socket accepted elsewhere (for example by a worker sharing a listening
   * handle): reads the MPA Request and resolves with the request to accept or reject.
   */
  acceptSocket(socket: net.Socket, timeoutMs = DEFAULT_SETUP_TIMEOUT_MS): Promise<ConnectionRequest> {
    return receiveRequest(new SocketChannel(socket), timeoutMs);
  }

  /** Passive side over a channel that is already connected (tests, custom transports). */
  acceptChannel(channel: StreamChannel, timeoutMs = DEFAULT_SETUP_TIMEOUT_MS): Promise<ConnectionRequest> {
    return receiveRequest(channel, timeoutMs);
  }

  /** Closes every listener and destroys every QP. */
  async close(): Promise<void> {
    await Promise.all([...this.listeners, ...this.rcListeners].map((listener) => listener.close()));
    for (const qp of [...this.queuePairs.values()]) qp.destroy();
    for (const qp of [...this.rcQueuePairs.values()]) qp.destroy();
    const roce = this.roce;
    this.roce = undefined;
    await roce?.close();
  }
}

/** Creates an RNIC instance (the device). Each worker thread creates its own. */
export function createRnic(options: RnicOptions = {}): Rnic {
  return new Rnic(options);
}

/** The iWARP listener: each TCP connection's MPA Request becomes a ConnectionRequest. */
export class Listener extends SetupListener<ConnectionRequest> {
  constructor(rnic: Rnic, options: ListenOptions, onRequest: ((request: ConnectionRequest) => void) | undefined) {
    const timeoutMs = options.timeoutMs ?? DEFAULT_SETUP_TIMEOUT_MS;
    // An MPA stream is its TCP connection: closing waits for the server's connections to end.
    super(options, (socket) => rnic.acceptSocket(socket, timeoutMs), onRequest, 'MPA Request', true);
  }
}
