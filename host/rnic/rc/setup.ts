// RC connection setup between kbtp RNICs, the way ibv_rc_pingpong and perftest do it: each side
// sends its QP number, first PSN, GID (and here its UDP port, path MTU, responder resources,
// initiator depth and private data) over a TCP side channel, then both QPs go to RTR/RTS.
// The TCP connection stays open as the connection's control channel: closing it is the
// disconnect request (as an RDMA CM DREQ), so a peer that leaves is noticed at once, while a
// peer that merely stops answering ends its QP through the retry count.
//
// Message (big-endian): "KBRC", version 1, type (1 request, 2 accept, 3 reject), path MTU
// code (1..5 = 256..4096), flags, QPN (4), PSN (4), UDP port (2), IRD (2), ORD (2),
// private-data length (2), GID (16), private data. Flags: bit 0, selective repeat (this side's
// responder places Write packets past a lost one and NAKs each hole, its requester resends a
// NAKed Write packet alone); bit 1, Read responses as ONLY packets (this side's requester takes
// a short Read's responses as one READ RESPONSE ONLY per packet, so its responder may answer so:
// responder.ts). Each is on for the connection when both ends set it. An end that predates the
// flags sent 0 there (the octet was reserved) and ignores it.

import net from 'node:net';
import { randomInt } from 'node:crypto';
import { RnicError } from '../errors.ts';
import type { DisconnectInfo } from '../qp.ts';
import { ipv4MappedGid, parseIpv4 } from '../wire/roce-frame.ts';
import type { RoceEndpoint } from './endpoint.ts';
import { PATH_MTUS, type PathMtu, type RcPathParameters, type RcQueuePair } from './queue-pair.ts';

const MAGIC = 0x4b425243; // "KBRC"
/** How an iWARP initiator's first octets look (RFC 5044 MPA Request key). */
const MPA_REQUEST_KEY = Buffer.from('MPA ID Req Frame', 'latin1');
const VERSION = 1;
const HEADER_LENGTH = 40;
export const MAX_RC_PRIVATE_DATA = 1024;
const TYPE_REQUEST = 1;
const TYPE_ACCEPT = 2;
const TYPE_REJECT = 3;
const FLAG_SELECTIVE_REPEAT = 0x01;
const FLAG_ONLY_READ_RESPONSES = 0x02;
export const DEFAULT_RC_SETUP_TIMEOUT_MS = 10_000;

interface SetupMessage {
  type: number;
  pathMtu: PathMtu;
  qpNumber: number;
  psn: number;
  udpPort: number;
  ird: number;
  ord: number;
  gid: Uint8Array;
  privateData: Uint8Array;
  /** FLAG_* bits. */
  flags: number;
}

/** Path options both ends may set; the smaller path MTU and the tighter limits win. */
export interface RcSetupOptions {
  /** Default 4096 between kbtp RNICs (the IB maximum). */
  pathMtu?: PathMtu;
  privateData?: Uint8Array;
  timeoutMs?: number;
  /** Transport timer and retries (RcPathParameters). */
  ackTimeout?: number;
  ackTimeoutMs?: number;
  retryCount?: number;
  rnrRetry?: number;
  minRnrTimer?: number;
  maxUnackedPackets?: number;
  /**
   * Offer selective repeat to a kbtp peer (default true): on a lossy path a lost Write packet is
   * resent alone instead of with everything sent after it (go-back-N, which rxe and IB require).
   */
  selectiveRepeat?: boolean;
  /**
   * The longest plain RDMA Write, in packets, sent as one RDMA WRITE ONLY per packet (default 16;
   * 1 never): equal datagrams, which the kernel sends as few GSO messages.
   */
  onlyPacketWritesUpTo?: number;
  /**
   * Offer a kbtp peer to answer each other's short Reads with one READ RESPONSE ONLY per packet
   * (default true): equal datagrams, where FIRST and LAST carry an AETH and MIDDLE packets none.
   * Not InfiniBand's form: never with rxe or another IB peer, which do not offer it.
   */
  onlyReadResponses?: boolean;
}

export interface RcConnectOptions extends RcSetupOptions {
  host: string;
  port: number;
}

export interface RcConnectionSummary {
  pathMtu: PathMtu;
  ird: number;
  ord: number;
  peerQpNumber: number;
  peerPrivateData: Uint8Array;
  /** Both ends offered selective repeat (RcSetupOptions.selectiveRepeat). */
  selectiveRepeat: boolean;
  /** Both ends offered Read responses as ONLY packets (RcSetupOptions.onlyReadResponses). */
  onlyReadResponses: boolean;
}

function encode(message: SetupMessage): Uint8Array {
  const bytes = new Uint8Array(HEADER_LENGTH + message.privateData.length);
  const view = new DataView(bytes.buffer);
  view.setUint32(0, MAGIC);
  bytes[4] = VERSION;
  bytes[5] = message.type;
  bytes[6] = PATH_MTUS.indexOf(message.pathMtu) + 1;
  bytes[7] = message.flags;
  view.setUint32(8, message.qpNumber);
  view.setUint32(12, message.psn);
  view.setUint16(16, message.udpPort);
  view.setUint16(18, message.ird);
  view.setUint16(20, message.ord);
  view.setUint16(22, message.privateData.length);
  bytes.set(message.gid, 24);
  bytes.set(message.privateData, HEADER_LENGTH);
  return bytes;
}

/** Reads one setup message from `socket` (or fails with a clear reason). */
function readMessage(socket: net.Socket, timeoutMs: number): Promise<SetupMessage> {
  return new Promise((resolve, reject) => {
    let buffered = Buffer.alloc(0);
    const finish = (error: Error | undefined, message?: SetupMessage): void => {
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('close', onClose);
      socket.off('error', onError);
      socket.pause();
      if (error !== undefined) reject(error);
      else resolve(message!);
    };
    const onData = (chunk: Buffer): void => {
      buffered = Buffer.concat([buffered, chunk]);
      // The magic is checked as soon as it is there: an iWARP client's MPA Request (20 octets
      // and private data, shorter than a setup message) must be refused at once, not after the
      // setup timeout with the client still waiting for its MPA Reply.
      if (buffered.length >= MPA_REQUEST_KEY.length && buffered.subarray(0, MPA_REQUEST_KEY.length).equals(MPA_REQUEST_KEY)) {
        finish(new RnicError('EPROTO', 'the peer sent an MPA Request: an iWARP client at a RoCE (IB RC) setup port; both ends need the same --transport'));
        return;
      }
      if (buffered.length >= 5 && (buffered.readUInt32BE(0) !== MAGIC || buffered[4] !== VERSION)) {
        finish(new RnicError('EPROTO', 'the peer did not send a kbtp RC setup message (wrong magic or version)'));
        return;
      }
      if (buffered.length < HEADER_LENGTH) return;
      const view = new DataView(buffered.buffer, buffered.byteOffset, buffered.length);
      const length = view.getUint16(22);
      if (length > MAX_RC_PRIVATE_DATA) {
        finish(new RnicError('EPROTO', `RC setup private data of ${length} octets exceeds ${MAX_RC_PRIVATE_DATA}`));
        return;
      }
      if (buffered.length < HEADER_LENGTH + length) return;
      if (buffered.length > HEADER_LENGTH + length) {
        finish(new RnicError('EPROTO', 'the peer sent more than one setup message'));
        return;
      }
      const pathMtu = PATH_MTUS[buffered[6]! - 1];
      const type = buffered[5]!;
      if (pathMtu === undefined || type < TYPE_REQUEST || type > TYPE_REJECT) {
        finish(new RnicError('EPROTO', `RC setup message with type ${type} and path MTU code ${buffered[6]}`));
        return;
      }
      finish(undefined, {
        type,
        pathMtu,
        qpNumber: view.getUint32(8) & 0xffffff,
        psn: view.getUint32(12) & 0xffffff,
        udpPort: view.getUint16(16),
        ird: view.getUint16(18),
        ord: view.getUint16(20),
        gid: new Uint8Array(buffered.subarray(24, 40)),
        privateData: new Uint8Array(buffered.subarray(HEADER_LENGTH)),
        flags: buffered[7]!,
      });
    };
    const onClose = (): void => finish(new RnicError('ECONNRESET', 'the peer closed the side channel during RC setup'));
    const onError = (error: Error): void => finish(new RnicError('ECONNRESET', `RC setup side channel: ${error.message}`));
    const timer = setTimeout(() => finish(new RnicError('ETIMEDOUT', `no RC setup message within ${timeoutMs} ms`)), timeoutMs);
    socket.on('data', onData);
    socket.on('close', onClose);
    socket.on('error', onError);
    socket.resume();
  });
}

function gidAddress(gid: Uint8Array): string {
  if (gid.subarray(0, 10).some((octet) => octet !== 0) || gid[10] !== 0xff || gid[11] !== 0xff) {
    throw new RnicError('EPROTO', 'the peer GID is not an IPv4-mapped RoCEv2 GID');
  }
  return Array.from(gid.subarray(12, 16)).join('.');
}

function checkPrivateData(privateData: Uint8Array): void {
  if (privateData.length > MAX_RC_PRIVATE_DATA) throw new RnicError('EINVAL', `private data of ${privateData.length} octets exceeds ${MAX_RC_PRIVATE_DATA}`);
}

function pathFor(own: RcSetupOptions, peer: SetupMessage, pathMtu: PathMtu, ird: number, ord: number, sendPsn: number): RcPathParameters {
  return {
    peer: { address: gidAddress(peer.gid), port: peer.udpPort },
    destQpNumber: peer.qpNumber,
    sendPsn,
    receivePsn: peer.psn,
    pathMtu,
    ird,
    ord,
    ...(own.ackTimeout === undefined ? {} : { timeout: own.ackTimeout }),
    ...(own.ackTimeoutMs === undefined ? {} : { timeoutMs: own.ackTimeoutMs }),
    ...(own.retryCount === undefined ? {} : { retryCount: own.retryCount }),
    ...(own.rnrRetry === undefined ? {} : { rnrRetry: own.rnrRetry }),
    ...(own.minRnrTimer === undefined ? {} : { minRnrTimer: own.minRnrTimer }),
    ...(own.maxUnackedPackets === undefined ? {} : { maxUnackedPackets: own.maxUnackedPackets }),
    ...(own.onlyPacketWritesUpTo === undefined ? {} : { onlyPacketWritesUpTo: own.onlyPacketWritesUpTo }),
    ...(ownFlags(own) & peer.flags & FLAG_SELECTIVE_REPEAT ? { selectiveRepeat: true } : {}),
    ...(ownFlags(own) & peer.flags & FLAG_ONLY_READ_RESPONSES ? { onlyReadResponses: true } : {}),
  };
}

/** The flags this side's setup message carries. */
function ownFlags(own: RcSetupOptions): number {
  return (own.selectiveRepeat === false ? 0 : FLAG_SELECTIVE_REPEAT) | (own.onlyReadResponses === false ? 0 : FLAG_ONLY_READ_RESPONSES);
}

/** Binds the QP's life to the side channel: either end closing it ends the other. */
function tie(qp: RcQueuePair, endpoint: RoceEndpoint, socket: net.Socket): void {
  endpoint.attach(qp);
  socket.setNoDelay(true);
  socket.on('error', () => undefined); // 'close' follows and reports it
  socket.on('data', () => undefined); // nothing more is expected; drain anything
  socket.resume();
  socket.on('close', () => {
    // Packets the peer sent before it closed (a NAK, the last ACK) count first.
    if (qp.state === 'rts') qp.receiveNow();
    if (qp.state === 'rts') qp.enterError({ reason: 'peer-closed', message: 'the peer closed the connection' });
  });
  qp.onLeaveRts = (_info: DisconnectInfo) => {
    socket.end();
    setTimeout(() => socket.destroy(), 1000).unref();
  };
  qp.once('disconnected', () => setTimeout(() => endpoint.detach(qp), 0));
}

/** Active side: connects the side channel, exchanges QP information, brings `qp` to RTS. */
export async function connectRc(endpoint: RoceEndpoint, qp: RcQueuePair, options: RcConnectOptions): Promise<RcConnectionSummary> {
  const privateData = options.privateData ?? new Uint8Array(0);
  checkPrivateData(privateData);
  const timeoutMs = options.timeoutMs ?? DEFAULT_RC_SETUP_TIMEOUT_MS;
  qp.beginConnecting();
  const socket = await new Promise<net.Socket>((resolve, reject) => {
    const socket = net.connect({ host: options.host, port: options.port });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new RnicError('ETIMEDOUT', `side channel to ${options.host}:${options.port} not connected within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.once('connect', () => {
      clearTimeout(timer);
      resolve(socket);
    });
    socket.once('error', (error) => {
      clearTimeout(timer);
      reject(new RnicError('ECONNREFUSED', `side channel to ${options.host}:${options.port} failed: ${error.message}`));
    });
  }).catch((error: unknown) => {
    qp.connectFailed({ reason: 'connection-lost', message: (error as Error).message });
    throw error;
  });
  const sendPsn = randomInt(0x1000000);
  const pathMtu = options.pathMtu ?? 4096;
  try {
    socket.write(
      encode({
        type: TYPE_REQUEST,
        pathMtu,
        qpNumber: qp.qpNumber,
        psn: sendPsn,
        udpPort: endpoint.local.port,
        ird: qp.requestedIrd,
        ord: qp.requestedOrd,
        gid: ipv4MappedGid(parseIpv4(endpoint.local.address)),
        privateData,
        flags: ownFlags(options),
      }),
    );
    const reply = await readMessage(socket, timeoutMs);
    qp.peerPrivateData = reply.privateData;
    if (reply.type === TYPE_REJECT) throw new RnicError('ECONNREFUSED', `${options.host}:${options.port} rejected the connection`);
    if (reply.type !== TYPE_ACCEPT) throw new RnicError('EPROTO', `expected an accept or reject, got message type ${reply.type}`);
    const agreedMtu = Math.min(pathMtu, reply.pathMtu) as PathMtu;
    const ord = Math.min(qp.requestedOrd, reply.ird);
    const path = pathFor(options, reply, agreedMtu, qp.requestedIrd, ord, sendPsn);
    tie(qp, endpoint, socket);
    qp.activate(endpoint.link, path);
    return {
      pathMtu: agreedMtu,
      ird: qp.requestedIrd,
      ord,
      peerQpNumber: reply.qpNumber,
      peerPrivateData: reply.privateData,
      selectiveRepeat: path.selectiveRepeat === true,
      onlyReadResponses: path.onlyReadResponses === true,
    };
  } catch (error) {
    socket.destroy();
    qp.connectFailed({ reason: 'connection-lost', message: (error as Error).message });
    throw error;
  }
}

/** A connection request waiting for accept() or reject(). */
export class RcConnectionRequest {
  private settled = false;

  constructor(
    private readonly endpoint: RoceEndpoint,
    private readonly socket: net.Socket,
    private readonly request: SetupMessage,
    private readonly defaults: RcSetupOptions,
  ) {}

  get privateData(): Uint8Array {
    return this.request.privateData;
  }

  /** The initiator's limits. */
  get ird(): number {
    return this.request.ird;
  }

  get ord(): number {
    return this.request.ord;
  }

  get remoteAddress(): string | undefined {
    return this.socket.remoteAddress;
  }

  get remotePort(): number | undefined {
    return this.socket.remotePort;
  }

  get pending(): boolean {
    return !this.settled;
  }

  /** Brings `qp` to RTS towards the initiator and answers with our QP information. */
  async accept(qp: RcQueuePair, options: RcSetupOptions = {}): Promise<RcConnectionSummary> {
    if (this.settled) throw new RnicError('EINVAL', 'connection request already answered');
    this.settled = true;
    const merged = { ...this.defaults, ...options };
    const privateData = merged.privateData ?? new Uint8Array(0);
    checkPrivateData(privateData);
    qp.beginConnecting();
    const pathMtu = Math.min(merged.pathMtu ?? 4096, this.request.pathMtu) as PathMtu;
    const ord = Math.min(qp.requestedOrd, this.request.ird);
    const sendPsn = randomInt(0x1000000);
    let path: RcPathParameters;
    try {
      path = pathFor(merged, this.request, pathMtu, qp.requestedIrd, ord, sendPsn);
    } catch (error) {
      this.socket.destroy();
      qp.connectFailed({ reason: 'connection-lost', message: (error as Error).message });
      throw error;
    }
    qp.peerPrivateData = this.request.privateData;
    tie(qp, this.endpoint, this.socket);
    qp.activate(this.endpoint.link, path);
    this.socket.write(
      encode({
        type: TYPE_ACCEPT,
        pathMtu,
        qpNumber: qp.qpNumber,
        psn: sendPsn,
        udpPort: this.endpoint.local.port,
        ird: qp.requestedIrd,
        ord,
        gid: ipv4MappedGid(parseIpv4(this.endpoint.local.address)),
        privateData,
        flags: ownFlags(merged),
      }),
    );
    return {
      pathMtu,
      ird: qp.requestedIrd,
      ord,
      peerQpNumber: this.request.qpNumber,
      peerPrivateData: this.request.privateData,
      selectiveRepeat: path.selectiveRepeat === true,
      onlyReadResponses: path.onlyReadResponses === true,
    };
  }

  reject(privateData: Uint8Array = new Uint8Array(0)): void {
    if (this.settled) return;
    this.settled = true;
    checkPrivateData(privateData);
    this.socket.end(
      encode({ type: TYPE_REJECT, pathMtu: 4096, qpNumber: 0, psn: 0, udpPort: 0, ird: 0, ord: 0, gid: new Uint8Array(16), privateData, flags: 0 }),
    );
  }
}

/** Passive side for a side-channel socket accepted by any server. */
export async function receiveRcRequest(endpoint: RoceEndpoint, socket: net.Socket, options: RcSetupOptions = {}): Promise<RcConnectionRequest> {
  try {
    const request = await readMessage(socket, options.timeoutMs ?? DEFAULT_RC_SETUP_TIMEOUT_MS);
    if (request.type !== TYPE_REQUEST) throw new RnicError('EPROTO', `expected a connection request, got message type ${request.type}`);
    gidAddress(request.gid);
    return new RcConnectionRequest(endpoint, socket, request, options);
  } catch (error) {
    socket.destroy();
    throw error;
  }
}
