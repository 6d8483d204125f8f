// MPA connection setup (RFC 5044 §7.1 with the RFC 6581 enhancements): the Request/Reply
// exchange, CRC and marker negotiation, IRD/ORD negotiation, the peer-to-peer ready-to-receive
// choice, private data, timeouts, rejection. When setup succeeds the stream is handed to the
// QP in full operation; when it fails the peer gets a Terminate where the RFCs call for one and
// the caller gets an RnicError saying what went wrong.

import type { StreamChannel, StreamConsumer } from './channel.ts';
import { RnicError, type TerminateInfo } from './errors.ts';
import type { QueuePair, RtrType, StreamParameters } from './qp.ts';
import { encodeTerminateUlpdu, terminateHeaderFor, terminateInfo } from './terminate.ts';
import {
  completeMpaFrame,
  decodeMpaFrameHeader,
  encodeFpdu,
  encodeMpaFrame,
  MPA_ENHANCED_DATA_LENGTH,
  MPA_ERROR_INSUFFICIENT_IRD,
  MPA_ERROR_INVALID_FRAME,
  MPA_ERROR_NO_MATCHING_RTR,
  MPA_FRAME_HEADER_LENGTH,
  MPA_MAX_PRIVATE_DATA,
  MPA_MAX_ULPDU,
  MPA_MIN_MULPDU,
  MPA_REVISION_1,
  MPA_REVISION_2,
  MPA_V2_IRD_ORD_UNNEGOTIATED,
  MpaFrameError,
  type MpaEnhancedData,
  type MpaFrame,
} from './wire/mpa.ts';
import { LLP_ETYPE_MPA, TerminateLayer } from './wire/rdmap.ts';

export const DEFAULT_SETUP_TIMEOUT_MS = 10_000;
/** Highest IRD this RNIC grants when a peer asks for more than the QP requested. */
export const MAX_IRD = 1024;
const RTR_PREFERENCE: readonly RtrType[] = ['write', 'read', 'send'];
const EMPTY = new Uint8Array(0);

/** Options shared by both ends of the MPA exchange. */
export interface MpaOptions {
  /** Ask for CRC (C=1). RFC 5044: CRC is used unless both sides decline. Default true. */
  crc?: boolean;
  /** Ask the peer to insert markers (M=1). Default false (Linux siw refuses markers). */
  markers?: boolean;
  /** Private data for the Request or Reply (at most 508 octets with enhanced setup). */
  privateData?: Uint8Array;
  /** Largest ULPDU this side sends, 128..64768 (default 64768). */
  mulpdu?: number;
  /** Bound on the whole setup (default 10 s). */
  timeoutMs?: number;
}

export interface InitiatorOptions extends MpaOptions {
  /** MPA revision to offer: 2 (RFC 6581 enhanced, default) or 1. */
  revision?: 1 | 2;
  /** Ask for the peer-to-peer model (an RTR message starts the stream). Default true. */
  peerToPeer?: boolean;
  /** RTR messages this side can send, most preferred first (default write, read). */
  rtr?: readonly RtrType[];
  /**
   * Wait this long after the MPA Reply before sending the first FPDU (the RTR, or the ULP's
   * first message); connect resolves after the wait. Default 0. Linux siw as responder switches
   * its socket to RDMA mode only after sending the Reply and can strand an FPDU that arrives in
   * between (docs/INTEROP.md); 50 ms avoids it.
   */
  firstFpduDelayMs?: number;
}

export interface ResponderOptions extends MpaOptions {
  // timeoutMs, when given, bounds the wait for the initiator's RTR after the Reply is sent.
  /** RTR messages this side accepts (default write and read, as Linux siw). */
  acceptRtr?: readonly RtrType[];
}

/** What setup agreed on, as reported to the ULP. */
export interface ConnectionSummary {
  readonly revision: number;
  readonly enhanced: boolean;
  readonly crc: boolean;
  readonly markersOut: boolean;
  readonly markersIn: boolean;
  readonly ird: number;
  readonly ord: number;
  /** The peer's IRD/ORD as it announced them (undefined without enhanced setup). */
  readonly peerIrd?: number;
  readonly peerOrd?: number;
  readonly rtr?: RtrType;
  /** ULP private data the peer sent (the enhanced word removed). */
  readonly privateData: Uint8Array;
  /** Loopback TCP (Rnic.connect): the congestion control set on the socket, or why the host's was kept. */
  readonly congestionControl?: string | Error;
}

/**
 * Reads one MPA Request or Reply, never a byte further; octets that arrive after it (before the
 * next consumer takes over) are held for that consumer, up to a bound.
 */
class MpaFrameReader implements StreamConsumer {
  private readonly header = new Uint8Array(MPA_FRAME_HEADER_LENGTH);
  private privateData: Uint8Array | undefined;
  private have = 0;
  private finished = false;
  private readonly after = new Uint8Array(4096);
  private afterHave = 0;

  constructor(
    private readonly onFrame: (frame: MpaFrame) => void,
    private readonly onError: (error: MpaFrameError) => void,
  ) {}

  readBuffer(): Uint8Array {
    if (this.finished) return this.after.subarray(Math.min(this.afterHave, this.after.length - 1));
    if (this.privateData === undefined) return this.header.subarray(this.have);
    return this.privateData.subarray(this.have - MPA_FRAME_HEADER_LENGTH);
  }

  leftover(): Uint8Array {
    const out = this.after.slice(0, this.afterHave);
    this.afterHave = 0;
    return out;
  }

  commit(length: number): void {
    if (this.finished) {
      this.afterHave = Math.min(this.after.length, this.afterHave + length);
      return;
    }
    this.have += length;
    if (this.privateData === undefined) {
      if (this.have < MPA_FRAME_HEADER_LENGTH) return;
      let pdLength: number;
      try {
        pdLength = decodeMpaFrameHeader(this.header).privateDataLength;
      } catch (error) {
        this.finished = true;
        this.onError(error instanceof MpaFrameError ? error : new MpaFrameError(String(error)));
        return;
      }
      this.privateData = new Uint8Array(pdLength);
    }
    if (this.have < MPA_FRAME_HEADER_LENGTH + this.privateData.length) return;
    this.finished = true;
    this.onFrame(completeMpaFrame(decodeMpaFrameHeader(this.header), this.privateData));
  }
}

/** Anything arriving while no input is allowed is a protocol violation. */
class NoInputExpected implements StreamConsumer {
  private readonly sink = new Uint8Array(64);
  constructor(private readonly onInput: () => void) {}
  readBuffer(): Uint8Array {
    return this.sink;
  }
  commit(): void {
    this.onInput();
  }
}

/**
 * Sends a Terminate with an LLP/MPA error code as a complete FPDU (CRC computed whether or not
 * CRC was negotiated) and closes the channel after it.
 */
export function terminateSetup(channel: StreamChannel, errorCode: number, reason: string): TerminateInfo {
  const header = terminateHeaderFor({ layer: TerminateLayer.Llp, errorType: LLP_ETYPE_MPA, errorCode, reason });
  channel.write([encodeFpdu(encodeTerminateUlpdu(header), true)], 1, undefined);
  channel.end();
  return terminateInfo(header, reason);
}

function checkPrivateData(privateData: Uint8Array, enhanced: boolean): void {
  const room = MPA_MAX_PRIVATE_DATA - (enhanced ? MPA_ENHANCED_DATA_LENGTH : 0);
  if (privateData.length > room) throw new RnicError('EINVAL', `private data of ${privateData.length} octets exceeds the ${room} available`);
}

function checkMulpdu(mulpdu: number): number {
  if (!Number.isInteger(mulpdu) || mulpdu < MPA_MIN_MULPDU || mulpdu > MPA_MAX_ULPDU) {
    throw new RnicError('EINVAL', `mulpdu ${mulpdu} must be an integer in ${MPA_MIN_MULPDU}..${MPA_MAX_ULPDU}`);
  }
  return mulpdu;
}

/** Runs `body` with a deadline; on expiry `onTimeout` cleans up and the promise rejects. */
function withTimeout<T>(timeoutMs: number, what: string, onTimeout: () => void, body: () => Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      // Rejected before the clean-up runs: the clean-up may fail `body` at once, and the race must report the timeout.
      reject(new RnicError('ETIMEDOUT', `${what} did not complete within ${timeoutMs} ms`));
      onTimeout();
    }, timeoutMs);
  });
  return Promise.race([body(), timeout]).finally(() => clearTimeout(timer));
}

function readFrame(channel: StreamChannel): Promise<MpaFrame> {
  return new Promise((resolve, reject) => {
    channel.setEvents({
      onEnd: () => reject(new RnicError('ECONNRESET', 'peer closed the connection during MPA setup')),
      onClose: (error) => reject(new RnicError('ECONNRESET', `connection closed during MPA setup${error !== undefined ? `: ${error.message}` : ''}`)),
    });
    channel.setConsumer(new MpaFrameReader(resolve, reject));
  });
}

function enhancedWord(qpIrd: number, qpOrd: number, flags: Omit<MpaEnhancedData, 'ird' | 'ord'>): MpaEnhancedData {
  return { ...flags, ird: qpIrd, ord: qpOrd };
}

/** What RFC 6581 setup settled: the QP's IRD/ORD and the ready-to-receive message. */
interface Negotiated {
  ird: number;
  ord: number;
  /** Initiator: the RTR it sends. Responder: the one it chose, if any. */
  rtr?: RtrType;
  /** Responder: the RTR types it announces and accepts as the first message. */
  acceptRtr?: Set<RtrType>;
}

/**
 * The IRD/ORD and RTR rules of RFC 6581, one place for both sides. `peer` is the other side's
 * enhanced word (undefined without enhanced setup); `rtrTypes` the RTR types this side offers
 * (initiator, in preference order) or accepts (responder); undefined when this side does not use
 * the peer-to-peer model. Returns the MPA error code and reason when setup must end.
 */
function negotiate(
  qp: QueuePair,
  role: StreamParameters['role'],
  peer: MpaEnhancedData | undefined,
  rtrTypes: readonly RtrType[] | undefined,
): Negotiated | { errorCode: number; reason: string } {
  let ird = qp.requestedIrd;
  let ord = qp.requestedOrd;
  if (peer === undefined) return { ird, ord };
  // Our IRD must cover the peer's ORD (raise it; an IRD slot costs us nothing), our ORD must not
  // exceed its IRD. 0x3FFF means "the ULP negotiates": leave ours alone.
  if (peer.ord !== MPA_V2_IRD_ORD_UNNEGOTIATED && peer.ord > ird) {
    if (peer.ord > MAX_IRD) {
      const peerRole = role === 'initiator' ? 'responder' : 'initiator';
      return { errorCode: MPA_ERROR_INSUFFICIENT_IRD, reason: `${peerRole} ORD ${peer.ord} exceeds the IRD limit ${MAX_IRD}` };
    }
    ird = peer.ord;
  }
  if (peer.ird !== MPA_V2_IRD_ORD_UNNEGOTIATED) ord = Math.min(ord, peer.ird);
  if (rtrTypes === undefined || !peer.peerToPeer) return { ird, ord };
  const peerTypes = new Set<RtrType>([
    ...(peer.writeRtr ? ['write' as const] : []),
    ...(peer.readRtr ? ['read' as const] : []),
    ...(peer.sendRtr ? ['send' as const] : []),
  ]);
  if (role === 'initiator') {
    const rtr = rtrTypes.find((type) => peerTypes.has(type));
    if (rtr === undefined) return { errorCode: MPA_ERROR_NO_MATCHING_RTR, reason: 'responder accepts none of the ready-to-receive messages offered' };
    return { ird, ord, rtr };
  }
  const chosen = RTR_PREFERENCE.find((type) => peerTypes.has(type) && rtrTypes.includes(type));
  // With no common type, announce what we accept; the initiator then ends with 2/0/7.
  const acceptRtr = new Set(chosen !== undefined ? [chosen] : rtrTypes);
  // A Read RTR takes one inbound read slot.
  if (acceptRtr.has('read') && ird === 0) ird = 1;
  return { ird, ord, acceptRtr, ...(chosen !== undefined ? { rtr: chosen } : {}) };
}

/**
 * Active side: sends the MPA Request on a connected channel, validates the Reply, negotiates,
 * sends the RTR and puts `qp` in full operation.
 */
export async function initiate(qp: QueuePair, channel: StreamChannel, options: InitiatorOptions = {}): Promise<ConnectionSummary> {
  const revision = options.revision ?? MPA_REVISION_2;
  if (revision !== MPA_REVISION_1 && revision !== MPA_REVISION_2) throw new RnicError('EINVAL', `MPA revision ${String(revision)} must be 1 or 2`);
  const enhanced = revision === MPA_REVISION_2;
  const privateData = options.privateData ?? EMPTY;
  checkPrivateData(privateData, enhanced);
  const mulpdu = checkMulpdu(options.mulpdu ?? MPA_MAX_ULPDU);
  const wantCrc = options.crc ?? true;
  const wantMarkers = options.markers ?? false;
  const peerToPeer = enhanced && (options.peerToPeer ?? true);
  const offered = new Set<RtrType>(peerToPeer ? (options.rtr ?? ['write', 'read']) : []);
  for (const type of offered) if (!RTR_PREFERENCE.includes(type)) throw new RnicError('EINVAL', `unknown RTR type ${String(type)}`);
  if (peerToPeer && offered.size === 0) throw new RnicError('EINVAL', 'peer-to-peer setup needs at least one RTR type');
  const timeoutMs = options.timeoutMs ?? DEFAULT_SETUP_TIMEOUT_MS;
  const firstFpduDelayMs = options.firstFpduDelayMs ?? 0;
  if (!Number.isFinite(firstFpduDelayMs) || firstFpduDelayMs < 0)
    throw new RnicError('EINVAL', `firstFpduDelayMs ${firstFpduDelayMs} must be a non-negative number`);
  qp.beginConnecting();
  const fail = (code: RnicError['errno'], message: string, terminate?: TerminateInfo): RnicError => {
    const error = new RnicError(code, message, terminate);
    qp.connectFailed({ reason: terminate !== undefined ? 'terminate-sent' : 'connection-lost', message, ...(terminate !== undefined ? { terminate } : {}) });
    channel.end();
    return error;
  };
  try {
    return await withTimeout(
      timeoutMs,
      'MPA setup (waiting for the Reply)',
      () => channel.destroy(),
      async () => {
        const request: MpaFrame = {
          kind: 'request',
          markers: wantMarkers,
          crc: wantCrc,
          reject: false,
          enhanced,
          revision,
          ...(enhanced
            ? {
                enhancedData: enhancedWord(qp.requestedIrd, qp.requestedOrd, {
                  peerToPeer,
                  sendRtr: offered.has('send'),
                  writeRtr: offered.has('write'),
                  readRtr: offered.has('read'),
                }),
              }
            : {}),
          privateData,
        };
        channel.write([encodeMpaFrame(request)], 1, undefined);
        let reply: MpaFrame;
        try {
          reply = await readFrame(channel);
        } catch (error) {
          if (error instanceof MpaFrameError) {
            const info = terminateSetup(channel, MPA_ERROR_INVALID_FRAME, `invalid MPA Reply: ${error.message}`);
            throw fail('EPROTO', info.reason!, info);
          }
          throw error;
        }
        if (reply.kind !== 'reply') {
          const info = terminateSetup(channel, MPA_ERROR_INVALID_FRAME, 'expected an MPA Reply, got an MPA Request (both sides initiated?)');
          throw fail('EPROTO', info.reason!, info);
        }
        if (reply.reject) {
          qp.peerPrivateData = reply.privateData;
          throw fail(
            'ECONNREFUSED',
            `peer rejected the connection (MPA Reply with R=1${reply.privateData.length > 0 ? `, ${reply.privateData.length} octets of private data` : ''})`,
          );
        }
        if (reply.revision !== MPA_REVISION_1 && reply.revision !== MPA_REVISION_2) {
          const info = terminateSetup(channel, MPA_ERROR_INVALID_FRAME, `MPA Reply revision ${reply.revision} is not 1 or 2`);
          throw fail('EPROTO', info.reason!, info);
        }
        if (enhanced && (reply.revision !== MPA_REVISION_2 || reply.enhancedData === undefined)) {
          const info = terminateSetup(channel, MPA_ERROR_INVALID_FRAME, 'enhanced MPA Request answered without the RFC 6581 IRD/ORD word');
          throw fail('EPROTO', info.reason!, info);
        }
        const peer = reply.enhancedData;
        const negotiated = negotiate(qp, 'initiator', peer, peerToPeer ? (options.rtr ?? ['write', 'read']) : undefined);
        if ('errorCode' in negotiated) {
          const info = terminateSetup(channel, negotiated.errorCode, negotiated.reason);
          throw fail('EPROTO', info.reason!, info);
        }
        const { ird, ord, rtr } = negotiated;
        const parameters: StreamParameters = {
          role: 'initiator',
          crc: wantCrc || reply.crc,
          markersOut: reply.markers,
          markersIn: wantMarkers,
          mulpdu,
          ird,
          ord,
          ...(rtr !== undefined ? { sendRtr: rtr } : {}),
        };
        qp.peerPrivateData = reply.privateData;
        if (firstFpduDelayMs > 0) {
          // Bytes the responder sends meanwhile (it should send none) are held by the frame reader.
          await new Promise((resolve) => setTimeout(resolve, firstFpduDelayMs));
          if (channel.closed) throw new RnicError('ECONNRESET', 'connection closed while holding the first FPDU');
        }
        qp.enterRdmaMode(channel, parameters);
        return {
          revision: reply.revision,
          enhanced: peer !== undefined,
          crc: parameters.crc,
          markersOut: parameters.markersOut,
          markersIn: parameters.markersIn,
          ird,
          ord,
          ...(peer !== undefined ? { peerIrd: peer.ird, peerOrd: peer.ord } : {}),
          ...(rtr !== undefined ? { rtr } : {}),
          privateData: reply.privateData,
        };
      },
    );
  } catch (error) {
    if (error instanceof RnicError) {
      qp.connectFailed({ reason: 'connection-lost', message: error.message });
      // A Terminate or a rejection already closed the channel gracefully; do not cut it short.
      if (error.terminate === undefined && error.errno !== 'ECONNREFUSED') channel.destroy();
      throw error;
    }
    throw fail('EPROTO', `MPA setup failed: ${error instanceof Error ? error.message : String(error)}`);
  }
}

/** A received MPA Request waiting for the ULP's accept or reject. */
export class ConnectionRequest {
  private decided = false;
  private readonly expiry: NodeJS.Timeout;

  constructor(
    private readonly channel: StreamChannel,
    /** The Request as received. */
    readonly frame: MpaFrame,
    private readonly startedAt: number,
    private readonly timeoutMs: number,
  ) {
    // A ULP that never decides must not hold the connection forever.
    this.expiry = setTimeout(
      () => {
        if (!this.decided) {
          this.decided = true;
          channel.destroy();
        }
      },
      Math.max(0, startedAt + timeoutMs - Date.now()),
    );
    this.expiry.unref();
    channel.setConsumer(
      new NoInputExpected(() => {
        if (this.decided) return;
        this.decided = true;
        clearTimeout(this.expiry);
        terminateSetup(channel, MPA_ERROR_INVALID_FRAME, 'initiator sent data before the MPA Reply');
      }),
    );
    channel.setEvents({ onEnd: () => channel.destroy(), onClose: () => undefined });
  }

  /** ULP private data of the Request (the enhanced word removed). */
  get privateData(): Uint8Array {
    return this.frame.privateData;
  }
  /** The initiator's IRD and ORD (undefined without enhanced setup). */
  get ird(): number | undefined {
    return this.frame.enhancedData?.ird;
  }
  get ord(): number | undefined {
    return this.frame.enhancedData?.ord;
  }
  get remoteAddress(): string | undefined {
    return this.channel.remoteAddress;
  }
  get remotePort(): number | undefined {
    return this.channel.remotePort;
  }
  get pending(): boolean {
    return !this.decided;
  }

  /**
   * Accepts on `qp`: negotiates, sends the Reply and resolves once the stream is established
   * (in the peer-to-peer model: once the initiator's RTR arrived).
   */
  async accept(qp: QueuePair, options: ResponderOptions = {}): Promise<ConnectionSummary> {
    this.claim();
    const request = this.frame;
    const enhanced = request.enhanced && request.revision === MPA_REVISION_2 && request.enhancedData !== undefined;
    const privateData = options.privateData ?? EMPTY;
    try {
      checkPrivateData(privateData, enhanced);
      checkMulpdu(options.mulpdu ?? MPA_MAX_ULPDU);
    } catch (error) {
      this.channel.destroy();
      throw error;
    }
    const channel = this.channel;
    qp.beginConnecting();
    const wantCrc = options.crc ?? true;
    const wantMarkers = options.markers ?? false;
    const peer = enhanced ? request.enhancedData : undefined;
    const negotiated = negotiate(qp, 'responder', peer, peer?.peerToPeer === true ? (options.acceptRtr ?? ['write', 'read']) : undefined);
    if ('errorCode' in negotiated) {
      const info = terminateSetup(channel, negotiated.errorCode, negotiated.reason);
      qp.connectFailed({ reason: 'terminate-sent', message: info.reason!, terminate: info });
      throw new RnicError('EPROTO', info.reason!, info);
    }
    const { ird, ord, acceptRtr, rtr: chosen } = negotiated;
    let replyWord: MpaEnhancedData | undefined;
    if (peer !== undefined) {
      replyWord = {
        peerToPeer: peer.peerToPeer,
        sendRtr: acceptRtr?.has('send') ?? false,
        writeRtr: acceptRtr?.has('write') ?? false,
        readRtr: acceptRtr?.has('read') ?? false,
        ird: peer.ord === MPA_V2_IRD_ORD_UNNEGOTIATED ? MPA_V2_IRD_ORD_UNNEGOTIATED : ird,
        ord: peer.ird === MPA_V2_IRD_ORD_UNNEGOTIATED ? MPA_V2_IRD_ORD_UNNEGOTIATED : ord,
      };
    }
    const reply: MpaFrame = {
      kind: 'reply',
      markers: wantMarkers,
      crc: wantCrc || request.crc,
      reject: false,
      enhanced,
      revision: enhanced ? MPA_REVISION_2 : MPA_REVISION_1,
      ...(replyWord !== undefined ? { enhancedData: replyWord } : {}),
      privateData,
    };
    const parameters: StreamParameters = {
      role: 'responder',
      crc: wantCrc || request.crc,
      markersOut: request.markers,
      markersIn: wantMarkers,
      mulpdu: options.mulpdu ?? MPA_MAX_ULPDU,
      ird,
      ord,
      ...(acceptRtr !== undefined ? { acceptRtr } : {}),
    };
    qp.peerPrivateData = request.privateData;
    // The QP must own the stream before the Reply leaves: the RTR can follow at once.
    qp.enterRdmaMode(channel, parameters);
    channel.write([encodeMpaFrame(reply)], 1, undefined);
    // The wait for the RTR: its own bound when the ULP gives one, else what is left of the setup's.
    const remaining = options.timeoutMs ?? Math.max(1, this.startedAt + this.timeoutMs - Date.now());
    await withTimeout(
      remaining,
      'MPA setup (waiting for the ready-to-receive message)',
      () => qp.disconnect(),
      () => qp.whenEstablished(),
    );
    return {
      revision: reply.revision,
      enhanced,
      crc: parameters.crc,
      markersOut: parameters.markersOut,
      markersIn: parameters.markersIn,
      ird,
      ord,
      ...(request.enhancedData !== undefined ? { peerIrd: request.enhancedData.ird, peerOrd: request.enhancedData.ord } : {}),
      ...(chosen !== undefined ? { rtr: chosen } : {}),
      privateData: request.privateData,
    };
  }

  /** Rejects: an MPA Reply with R=1 and optional private data, then the connection closes. */
  reject(privateData: Uint8Array = EMPTY): void {
    this.claim();
    const request = this.frame;
    const enhanced = request.enhanced && request.revision === MPA_REVISION_2;
    checkPrivateData(privateData, false);
    const reply: MpaFrame = {
      kind: 'reply',
      markers: false,
      crc: request.crc,
      reject: true,
      enhanced: false,
      revision: enhanced ? MPA_REVISION_2 : Math.min(request.revision, MPA_REVISION_2),
      privateData,
    };
    this.channel.write([encodeMpaFrame(reply)], 1, undefined);
    this.channel.end();
  }

  private claim(): void {
    if (this.decided) throw new RnicError('EINVAL', 'this connection request was already accepted, rejected or timed out');
    this.decided = true;
    clearTimeout(this.expiry);
  }
}

/**
 * Passive side: reads and validates the MPA Request on a freshly accepted channel. A malformed
 * Request or a wrong key gets a Terminate (LLP / MPA / 0x04) and a close.
 */
export async function receiveRequest(channel: StreamChannel, timeoutMs = DEFAULT_SETUP_TIMEOUT_MS): Promise<ConnectionRequest> {
  const startedAt = Date.now();
  return withTimeout(
    timeoutMs,
    'MPA setup (waiting for the Request)',
    () => channel.destroy(),
    async () => {
      let frame: MpaFrame;
      try {
        frame = await readFrame(channel);
      } catch (error) {
        if (error instanceof MpaFrameError) {
          const info = terminateSetup(channel, MPA_ERROR_INVALID_FRAME, `invalid MPA Request: ${error.message}`);
          throw new RnicError('EPROTO', info.reason!, info);
        }
        channel.destroy();
        throw error;
      }
      const invalid = (reason: string): never => {
        const info = terminateSetup(channel, MPA_ERROR_INVALID_FRAME, reason);
        throw new RnicError('EPROTO', reason, info);
      };
      if (frame.kind !== 'request') invalid('expected an MPA Request, got an MPA Reply');
      if (frame.revision !== MPA_REVISION_1 && frame.revision !== MPA_REVISION_2) invalid(`MPA Request revision ${frame.revision} is not 1 or 2`);
      if (frame.enhanced && frame.revision === MPA_REVISION_2 && frame.enhancedData === undefined) {
        invalid('enhanced MPA Request without the 4-octet IRD/ORD word');
      }
      return new ConnectionRequest(channel, frame, startedAt, timeoutMs);
    },
  );
}
