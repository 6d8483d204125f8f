// rping's application protocol (rdma-core librdmacm/examples/rping.c) on kbtp's software RNIC,
// so kbtp can be either end of an rping against the Linux kernel's siw.
//
// Per iteration: the client Sends {addr u64, rkey u32, len u32} (big-endian) naming its source
// buffer; the server RDMA Reads `len` octets from it and Sends a 16-octet "go ahead"; the client
// Sends the same record for its sink buffer; the server RDMA Writes strlen(data) + 1 octets of what
// it read into it and Sends "go ahead" again; the client compares source and sink (`-V`). The
// client ends with a disconnect; a server that sees the disconnect between iterations exits 0.
import {
  Access,
  createRnic,
  WcStatus,
  wcStatusName,
  type CompletionQueue,
  type ConnectionRequest,
  type ConnectionSummary,
  type DisconnectInfo,
  type InitiatorOptions,
  type MemoryRegion,
  type QueuePair,
  type ResponderOptions,
  type Rnic,
  type WcOpcode,
  type WorkCompletion,
} from '../../host/rnic/verbs.ts';

/** What rping's protocol needs of a QP: iWARP's QueuePair and RoCE's RcQueuePair both qualify. */
export type RpingQueuePair = Pick<QueuePair, 'postSend' | 'postRecv' | 'whenDisconnected' | 'disconnect'>;

export const RPING_INFO_BYTES = 16;
/** rping's default `-S`. */
export const RPING_DEFAULT_SIZE = 64;
// rping's conn_param: responder_resources = initiator_depth = 1.
const RPING_IRD = 1;
const RPING_ORD = 1;
const DEFAULT_STEP_TIMEOUT_MS = 30_000;

/** The bytes rping's client puts in its source buffer for iteration `ping` (`-S size`). */
export function rpingPattern(ping: number, size: number): Uint8Array {
  const buffer = new Uint8Array(size);
  const prefix = new TextEncoder().encode(`rdma-ping-${ping}: `);
  buffer.set(prefix.subarray(0, size));
  let c = 65 + (ping % 58);
  for (let i = prefix.length; i < size; i++) {
    buffer[i] = c;
    c = c >= 122 ? 65 : c + 1;
  }
  buffer[size - 1] = 0;
  return buffer;
}

export interface RpingInfo {
  readonly address: bigint;
  readonly rkey: number;
  readonly size: number;
}

export function writeRpingInfo(target: Uint8Array, info: RpingInfo): void {
  const view = new DataView(target.buffer, target.byteOffset, RPING_INFO_BYTES);
  view.setBigUint64(0, info.address, false);
  view.setUint32(8, info.rkey, false);
  view.setUint32(12, info.size, false);
}

export function readRpingInfo(source: Uint8Array): RpingInfo {
  const view = new DataView(source.buffer, source.byteOffset, RPING_INFO_BYTES);
  return { address: view.getBigUint64(0, false), rkey: view.getUint32(8, false), size: view.getUint32(12, false) };
}

export class RpingError extends Error {
  override readonly name = 'RpingError';
}

/** The peer ended the connection while this side waited for a completion. */
export class PeerDisconnected extends RpingError {
  constructor(readonly info: DisconnectInfo) {
    super(`connection ended: ${info.reason}: ${info.message}`);
  }
}

/** Completions of one QP in arrival order, with the QP's end surfacing as PeerDisconnected. */
class Completions {
  private ended: DisconnectInfo | undefined;
  private readonly endedPromise: Promise<void>;

  constructor(
    private readonly cq: CompletionQueue,
    qp: RpingQueuePair,
  ) {
    this.endedPromise = qp.whenDisconnected().then((info) => {
      this.ended = info;
    });
  }

  /**
   * The next completion with `opcode`; successful completions of other opcodes (the client's
   * own Send completions) are skipped, failed ones end the wait.
   */
  async expect(opcode: WcOpcode, what: string, timeoutMs = DEFAULT_STEP_TIMEOUT_MS): Promise<WorkCompletion> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const [completion] = this.cq.poll(1);
      if (completion !== undefined) {
        if (completion.status === WcStatus.WrFlushError && this.ended) throw new PeerDisconnected(this.ended);
        if (completion.status !== WcStatus.Success) {
          throw new RpingError(
            `${what}: ${completion.opcode} completion failed: ${wcStatusName(completion.status)}${completion.error ? ` (${completion.error})` : ''}`,
          );
        }
        if (completion.opcode === opcode) return completion;
        continue;
      }
      if (this.ended) throw new PeerDisconnected(this.ended);
      const remaining = deadline - Date.now();
      if (remaining <= 0) throw new RpingError(`${what}: no ${opcode} completion within ${timeoutMs} ms`);
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([this.cq.wait(), this.endedPromise, new Promise<void>((resolve) => (timer = setTimeout(resolve, remaining)))]);
      clearTimeout(timer);
    }
  }
}

interface Buffers {
  readonly recv: MemoryRegion;
  readonly send: MemoryRegion;
  /** Client: the source the server reads. Server: unused. */
  readonly start: MemoryRegion;
  /** Client: the sink the server writes. Server: where the Read lands and the Write comes from. */
  readonly rdma: MemoryRegion;
}

// Tagged offsets like a process's virtual addresses (rping advertises raw pointers), so the
// 64-bit TO path is exercised rather than small zero-based offsets.
const TAGGED_BASE = 0x7f3a_5000_0000n;

function setUp<Q extends RpingQueuePair = QueuePair>(
  rnic: Rnic,
  size: number,
  createQp: (options: Parameters<Rnic['createQp']>[0]) => Q = (options) => rnic.createQp(options) as unknown as Q,
): { qp: Q; cq: CompletionQueue; buffers: Buffers } {
  const pd = rnic.allocPd();
  const cq = rnic.createCq({ depth: 64 });
  const qp = createQp({ pd, sendCq: cq, recvCq: cq, ird: RPING_IRD, ord: RPING_ORD, maxSendWr: 16, maxRecvWr: 2 });
  const region = (bytes: number, access: number, slot: number): MemoryRegion =>
    rnic.registerMemory(pd, new ArrayBuffer(bytes), { access, taggedOffsetBase: TAGGED_BASE + BigInt(slot) * 0x10_0000n });
  const remote = Access.LocalWrite | Access.RemoteRead | Access.RemoteWrite;
  const buffers = {
    recv: region(RPING_INFO_BYTES, Access.LocalWrite, 0),
    send: region(RPING_INFO_BYTES, 0, 1),
    start: region(size, remote, 2),
    rdma: region(size, remote, 3),
  };
  qp.postRecv({ wrId: 1, sgList: [{ lkey: buffers.recv.lkey, offset: 0, length: RPING_INFO_BYTES }] });
  return { qp, cq, buffers };
}

function repostRecv(qp: RpingQueuePair, buffers: Buffers): void {
  qp.postRecv({ wrId: 1, sgList: [{ lkey: buffers.recv.lkey, offset: 0, length: RPING_INFO_BYTES }] });
}

function postSendBuffer(qp: RpingQueuePair, buffers: Buffers): void {
  qp.postSend({ wrId: 2, opcode: 'SEND', sgList: [{ lkey: buffers.send.lkey, offset: 0, length: RPING_INFO_BYTES }] });
}

async function closeQp(qp: QueuePair, timeoutMs = 10_000): Promise<DisconnectInfo | undefined> {
  qp.disconnect();
  let timer: NodeJS.Timeout | undefined;
  const info = await Promise.race([qp.whenDisconnected(), new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), timeoutMs)))]);
  clearTimeout(timer);
  return info;
}

export interface RpingClientOptions {
  readonly host: string;
  readonly port: number;
  /** `-C`: iterations (default 1). */
  readonly count?: number;
  /** `-S`: ping size in octets (default 64). */
  readonly size?: number;
  /** `-V`: compare what came back with what was sent (default true). */
  readonly validate?: boolean;
  /** MPA options for the connect (CRC, markers, revision, peer-to-peer/RTR...). */
  readonly mpa?: InitiatorOptions;
  /**
   * Pause between the connection being established and the first Send. Linux 6.1 siw as
   * responder can lose an FPDU that arrives right after its MPA Reply (docs/INTEROP.md); rping's
   * own client never sends that early. Default 0.
   */
  readonly settleMs?: number;
  readonly stepTimeoutMs?: number;
  /** Receives rping's verbose lines ("ping data: ..."). */
  readonly log?: (line: string) => void;
}

export interface RpingClientReport {
  readonly connection: ConnectionSummary;
  readonly iterations: number;
  readonly disconnect: DisconnectInfo | undefined;
}

/** kbtp as `rping -c`: connects, runs `count` validated iterations, disconnects. */
export async function runRpingClient(options: RpingClientOptions): Promise<RpingClientReport> {
  const size = options.size ?? RPING_DEFAULT_SIZE;
  const count = options.count ?? 1;
  const rnic = createRnic({ name: 'rping-client' });
  const { qp, cq, buffers } = setUp(rnic, size);
  try {
    // siw as responder can miss an FPDU sent right after its Reply (docs/INTEROP.md): the RNIC holds the first one.
    const connection = await rnic.connect(qp, { ...options.mpa, host: options.host, port: options.port, firstFpduDelayMs: options.settleMs ?? 0 });
    await runRpingClientIterations(qp, cq, buffers, { ...options, size, count });
    const disconnect = await closeQp(qp);
    return { connection, iterations: count, disconnect };
  } finally {
    qp.disconnect();
    await rnic.close();
  }
}

/** rping -c's iterations on a connected QP: `count` pings, each validated when `validate` (default true). */
export async function runRpingClientIterations(
  qp: RpingQueuePair,
  cq: CompletionQueue,
  buffers: Buffers,
  options: { size?: number; count?: number; validate?: boolean; stepTimeoutMs?: number; log?: (line: string) => void },
): Promise<void> {
  const size = options.size ?? RPING_DEFAULT_SIZE;
  const count = options.count ?? 1;
  const completions = new Completions(cq, qp);
  const step = options.stepTimeoutMs ?? DEFAULT_STEP_TIMEOUT_MS;
  for (let ping = 0; ping < count; ping++) {
    buffers.start.bytes.set(rpingPattern(ping, size));
    writeRpingInfo(buffers.send.bytes, { address: buffers.start.taggedOffsetAt(0), rkey: buffers.start.rkey, size });
    postSendBuffer(qp, buffers);
    await completions.expect('RECV', `ping ${ping}: go-ahead after the server's RDMA Read`, step);
    repostRecv(qp, buffers);

    buffers.rdma.bytes.fill(0);
    writeRpingInfo(buffers.send.bytes, { address: buffers.rdma.taggedOffsetAt(0), rkey: buffers.rdma.rkey, size });
    postSendBuffer(qp, buffers);
    await completions.expect('RECV', `ping ${ping}: go-ahead after the server's RDMA Write`, step);
    repostRecv(qp, buffers);

    if ((options.validate ?? true) && !equalBytes(buffers.start.bytes, buffers.rdma.bytes)) {
      throw new RpingError(`ping ${ping}: data mismatch: sent "${printable(buffers.start.bytes)}", got back "${printable(buffers.rdma.bytes)}"`);
    }
    options.log?.(`ping data: ${printable(buffers.rdma.bytes)}`);
  }
}

export interface RpingServerOptions {
  /** `-S`: the server's buffer size; a client advertising more is an error (default 64). */
  readonly size?: number;
  /** MPA options for the accept (CRC, markers, accepted RTRs...). */
  readonly mpa?: ResponderOptions;
  readonly stepTimeoutMs?: number;
  /** Receives rping's verbose lines ("server ping data: ..."). */
  readonly log?: (line: string) => void;
}

export interface RpingServerReport {
  readonly connection: ConnectionSummary;
  readonly iterations: number;
  readonly disconnect: DisconnectInfo;
}

/**
 * kbtp as `rping -s` for one incoming connection: accepts `request`, serves iterations until the
 * client disconnects between two of them (which is success, as for rping).
 */
export async function runRpingServer(request: ConnectionRequest, options: RpingServerOptions = {}): Promise<RpingServerReport> {
  const size = options.size ?? RPING_DEFAULT_SIZE;
  const rnic = createRnic({ name: 'rping-server' });
  const { qp, cq, buffers } = setUp(rnic, size);
  try {
    const connection = await request.accept(qp, options.mpa);
    const served = await serveRpingIterations(qp, cq, buffers, options);
    return { connection, ...served };
  } finally {
    qp.disconnect();
    await rnic.close();
  }
}

/** rping's CQ, buffers (either side) and a QP made by `createQp` (e.g. an RC QP for RoCE). */
export function rpingResources<Q extends RpingQueuePair>(rnic: Rnic, size: number, createQp: (options: Parameters<Rnic['createQp']>[0]) => Q) {
  return setUp(rnic, size, createQp);
}

/**
 * rping -s's loop on a connected QP: serves iterations until the client disconnects between two
 * of them (success, as for rping).
 */
export async function serveRpingIterations(
  qp: RpingQueuePair,
  cq: CompletionQueue,
  buffers: Buffers,
  options: Omit<RpingServerOptions, 'mpa'> = {},
): Promise<{ iterations: number; disconnect: DisconnectInfo }> {
  const size = options.size ?? RPING_DEFAULT_SIZE;
  const completions = new Completions(cq, qp);
  const step = options.stepTimeoutMs ?? DEFAULT_STEP_TIMEOUT_MS;
  let iterations = 0;
  for (;;) {
    try {
      await completions.expect('RECV', `iteration ${iterations}: the client's source advertisement`, step);
    } catch (error) {
      if (error instanceof PeerDisconnected) return { iterations, disconnect: error.info };
      throw error;
    }
    const source = readRpingInfo(buffers.recv.bytes);
    repostRecv(qp, buffers);
    if (source.size > size) throw new RpingError(`client advertises ${source.size} octets, the server buffer holds ${size}`);
    qp.postSend({
      wrId: 3,
      opcode: 'RDMA_READ',
      sgList: [{ lkey: buffers.rdma.lkey, offset: 0, length: source.size }],
      remote: { stag: source.rkey, taggedOffset: source.address },
    });
    await completions.expect('RDMA_READ', `iteration ${iterations}: RDMA Read of the client's source`, step);
    options.log?.(`server ping data: ${printable(buffers.rdma.bytes.subarray(0, source.size))}`);
    buffers.send.bytes.fill(0);
    postSendBuffer(qp, buffers);

    await completions.expect('RECV', `iteration ${iterations}: the client's sink advertisement`, step);
    const sink = readRpingInfo(buffers.recv.bytes);
    repostRecv(qp, buffers);
    const nul = buffers.rdma.bytes.indexOf(0);
    const length = nul < 0 ? size : nul + 1; // rping writes strlen(rdma_buf) + 1
    if (length > sink.size) throw new RpingError(`client's sink holds ${sink.size} octets, the echo is ${length}`);
    qp.postSend({
      wrId: 4,
      opcode: 'RDMA_WRITE',
      sgList: [{ lkey: buffers.rdma.lkey, offset: 0, length }],
      remote: { stag: sink.rkey, taggedOffset: sink.address },
    });
    await completions.expect('RDMA_WRITE', `iteration ${iterations}: RDMA Write of the echo`, step);
    postSendBuffer(qp, buffers);
    iterations++;
  }
}

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function printable(bytes: Uint8Array): string {
  const nul = bytes.indexOf(0);
  return new TextDecoder('latin1').decode(nul < 0 ? bytes : bytes.subarray(0, nul));
}
