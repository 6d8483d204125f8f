// The KBTP initiator library: a session with a target over kbtp's software RNIC.
//
//   const session = await connect('127.0.0.1:7117', { tenant: 'default' });
//   await session.allocStore(42n, bytes, { seal: true });
//   const { data } = await session.load(42n);
//   await session.free(42n);
//   await session.close();
//
// Requests are pipelined up to the credits the target grants; buffers are registered once per
// session and reused; a failed request throws KbtpError carrying the KBTP status name.
import * as K from '../../assembly/kbtp-constants.ts';
import {
  createRnic, Access, WcStatus, wcStatusName, RnicError, RcQueuePair, type Rnic, type AnyQueuePair, type CompletionQueue, type MemoryRegion,
  type WorkCompletion, type SendWorkRequest, type StreamChannel,
} from '../rnic/verbs.ts';
import { encodeRequest, decodeCompletion, statusName, type Completion, type RequestFields } from './wire/messages.ts';
import { encodeHello, decodeHelloAck, type HelloAck } from './wire/hello.ts';
import { DEFAULT_PORT, parseHostPort } from './address.ts';
import * as S from '../../assembly/struct-offsets.ts';
import { decodeRingSlot, decodeTableEntry, type TableEntry } from '../engine/table-entry.ts';

export class KbtpError extends Error {
  readonly statusName: string;
  constructor(readonly status: number, message: string, readonly completion?: Completion) {
    super(`${statusName(status)}: ${message}`);
    this.name = 'KbtpError';
    this.statusName = statusName(status);
  }
}

export interface ConnectOptions {
  tenant?: string;
  secret?: string;
  /** Capabilities to ask for (CAP_DIRECT_LOAD, CAP_DIRECT_ALLOC); granted ones are in `hello`. */
  capabilities?: number;
  /** Most requests in flight, further capped by the target's credits (default 32). */
  pipeline?: number;
  /** Ask for MPA CRC (default false: like siw, loopback does not need it). */
  crc?: boolean;
  /**
   * The RDMA binding the target serves: 'iwarp' (RDMAP over TCP, default) or 'roce' (IB RC over
   * RoCEv2, draft 9.2: unmasked ring counters). Must match the target's --transport.
   */
  transport?: 'iwarp' | 'roce';
  timeoutMs?: number;
}

export interface BlockInfo {
  generation: number;
  dataLength: number;
  blockOffset: bigint;
}

export interface LoadResult extends BlockInfo {
  data: Uint8Array;
}

export type { TableEntry };

const ALL_ONES = 0xffffffffffffffffn;

/**
 * A direct load is valid when both entry reads are identical in all 16 octets, with VALID and
 * SEALED and a Block Offset that is not all ones (draft 6.6, and kbtp-v1 section 12: a demotion
 * or promotion in between changes the Placement Epoch in Flags, so the reads differ).
 */
export function directLoadConsistent(before: TableEntry, after: TableEntry): boolean {
  const bound = K.ENTRY_VALID | K.ENTRY_SEALED;
  return before.flags === after.flags && before.generation === after.generation && before.dataLength === after.dataLength &&
    before.blockOffset === after.blockOffset && (before.flags & bound) === bound && before.blockOffset !== ALL_ONES;
}

const RECV_SLOT = 128;
const CONTROL_SIZE = 256;
const RECV_BASE = 0x10000000;
/** Work request ids of the slots' request Sends (below RECV_BASE, above any post() id in use). */
const SLOT_SEND_BASE = 0x0f000000;

/** The target refused the connection before any session (MPA Reject), with the reason it gave. */
export class TargetRefusedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TargetRefusedError';
  }
}

/** A peer's text, made safe to print: printable ASCII only, bounded. */
function printable(bytes: Uint8Array): string {
  return new TextDecoder().decode(bytes.subarray(0, 200)).replace(/[^\x20-\x7e]/g, '?');
}

/** A target address that cannot be parsed: the caller's mistake, not the network's. */
export class TargetAddressError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TargetAddressError';
  }
}

/** "host:port", "kbtp://host:port" or "host" (default port 7117). */
export function parseTarget(target: string): { host: string; port: number } {
  const address = parseHostPort(target, { defaultPort: DEFAULT_PORT });
  if (address === undefined) throw new TargetAddressError(`"${target}" is not a target address; use host:port, e.g. 127.0.0.1:${DEFAULT_PORT}`);
  return address;
}

export async function connect(target: string, options: ConnectOptions = {}): Promise<KbtpSession> {
  const { host, port } = parseTarget(target);
  const rnic = createRnic({ name: 'initiator' });
  const session = new KbtpSession(rnic, options);
  try {
    const timeoutMs = options.timeoutMs ?? 10_000;
    await session.open((qp) => (qp instanceof RcQueuePair ? rnic.connectRc(qp, { host, port, timeoutMs }) : rnic.connect(qp, { host, port, crc: options.crc ?? false, timeoutMs })),
      `${host}:${port}`, options);
  } catch (error) {
    await rnic.close();
    throw error;
  }
  return session;
}

/** A session over a stream that is already connected (an in-process LinkedChannel, a test's socket). */
export async function connectChannel(channel: StreamChannel, options: ConnectOptions = {}): Promise<KbtpSession> {
  const rnic = createRnic({ name: 'initiator' });
  const session = new KbtpSession(rnic, options);
  try {
    const establish = (qp: AnyQueuePair): Promise<unknown> =>
      qp instanceof RcQueuePair
        ? Promise.reject(new RnicError('EINVAL', 'a stream channel carries the iWARP binding only'))
        : rnic.connectChannel(qp, channel, { crc: options.crc ?? false, timeoutMs: options.timeoutMs ?? 10_000 });
    await session.open(establish, 'the target', options);
  } catch (error) {
    await rnic.close();
    throw error;
  }
  return session;
}

interface Waiter {
  resolve(completion: WorkCompletion): void;
  reject(error: Error): void;
}

export class KbtpSession {
  private readonly pd;
  private readonly cq: CompletionQueue;
  private readonly qp: AnyQueuePair;
  private readonly transport: 'iwarp' | 'roce';
  private readonly receiveDepth: number;
  private readonly receiveBuffer: Uint8Array;
  private readonly receiveRegion: MemoryRegion;
  private readonly control = new Uint8Array(CONTROL_SIZE);
  private readonly controlRegion: MemoryRegion;
  private sendBuffer = new Uint8Array(0);
  private sendRegion: MemoryRegion | undefined;
  private dataBuffer = new Uint8Array(0);
  private dataRegion: MemoryRegion | undefined;
  private slotSize = 0;
  private messageSize = 0;
  private readonly freeSlots: number[] = [];
  private readonly slotWaiters: Array<() => void> = [];
  private readonly pending = new Map<bigint, { resolve(c: Completion): void; reject(e: Error): void }>();
  private readonly sendWaiters = new Map<number, Waiter>();
  private readonly onCompletionBound = (completion: WorkCompletion): void => this.onCompletion(completion);
  /** Each slot's request Send, rewritten in place (unsignaled: the COMPLETION answers it; a failure flushes it). */
  private slotSends: Array<{ wrId: number; opcode: 'SEND'; signaled: false; sgList: Array<{ lkey: number; offset: number; length: number }> }> = [];
  private nextRequestId = 1n;
  private nextWrId = 1;
  private helloWaiter: ((ack: HelloAck) => void) | undefined;
  private failure: Error | undefined;
  private closing = false;
  /** The target's HELLO_ACK: block size, credits, granted capabilities and STags. */
  hello!: HelloAck;

  constructor(private readonly rnic: Rnic, options: ConnectOptions) {
    this.pd = rnic.allocPd();
    this.receiveDepth = Math.max(2, (options.pipeline ?? 32) + 2);
    this.cq = rnic.createCq({ depth: 4 * this.receiveDepth + 64 });
    this.transport = options.transport ?? 'iwarp';
    const queues = { pd: this.pd, sendCq: this.cq, recvCq: this.cq, maxRecvWr: this.receiveDepth, maxSendWr: 4 * this.receiveDepth + 16 };
    this.qp = this.transport === 'roce' ? rnic.createRcQp(queues) : rnic.createQp(queues);
    this.receiveBuffer = new Uint8Array(RECV_SLOT * this.receiveDepth);
    this.receiveRegion = rnic.registerMemory(this.pd, this.receiveBuffer, { access: Access.LocalWrite });
    this.controlRegion = rnic.registerMemory(this.pd, this.control, { access: Access.LocalWrite });
  }

  async open(establish: (qp: AnyQueuePair) => Promise<unknown>, where: string, options: ConnectOptions): Promise<void> {
    for (let i = 0; i < this.receiveDepth; i++) this.postReceive(i);
    // Completions are drained from the CQ's notification at the end of each turn: no promise per wake-up.
    this.cq.onNotify(() => this.drainCompletions());
    this.cq.requestNotify();
    void this.qp.whenDisconnected().then((info) => this.fail(new Error(`connection to the target lost (${info.reason}: ${info.message})`)));
    try {
      await establish(this.qp);
    } catch (error) {
      // A target that refuses says why in the MPA Reject's private data (its session limits, a drain).
      const reason = this.qp.peerPrivateData;
      if (error instanceof RnicError && error.code === 'ECONNREFUSED' && reason !== undefined && reason.length > 0) {
        throw new TargetRefusedError(`${where} refused the connection: ${printable(reason)}`);
      }
      throw error;
    }
    const secret = new TextEncoder().encode(options.secret ?? '');
    const hello = encodeHello({ version: K.KBTP_VERSION, requestId: 0n, capabilities: options.capabilities ?? 0,
      initiatorCredits: this.receiveDepth, tenant: options.tenant ?? 'default', credential: secret });
    const ack = new Promise<HelloAck>((resolve, reject) => {
      this.helloWaiter = resolve;
      this.pending.set(0n, { resolve: () => undefined, reject });
    });
    this.control.set(hello);
    this.qp.postSend({ wrId: 0, opcode: 'SEND', sgList: [{ lkey: this.controlRegion.stag, offset: 0, length: hello.length }] });
    const answer = await ack;
    this.pending.delete(0n);
    if (answer.status !== K.STATUS_SUCCESS) {
      const tenant = options.tenant ?? 'default';
      const why: Record<number, string> = {
        [K.STATUS_AUTH_FAILED]: `the target refused the session of tenant '${tenant}' (unknown tenant or wrong secret)`,
        [K.STATUS_TOO_MANY_REQUESTS]: `tenant '${tenant}' already has as many sessions as the target allows it; try again later`,
        [K.STATUS_SHUTTING_DOWN]: 'the target is shutting down',
      };
      throw new KbtpError(answer.status, why[answer.status] ?? `the target refused the session of tenant '${tenant}'`);
    }
    this.hello = answer;
    const depth = Math.min(this.receiveDepth - 2, answer.targetCredits);
    this.messageSize = K.HEADER_SIZE + 2 * K.DESCRIPTOR_SIZE + answer.maxInline;
    this.slotSize = Math.ceil(answer.blockSize / 64) * 64;
    this.sendBuffer = new Uint8Array(this.messageSize * depth);
    this.sendRegion = this.rnic.registerMemory(this.pd, this.sendBuffer, { access: Access.LocalWrite });
    this.dataBuffer = new Uint8Array(this.slotSize * depth + 64 * depth);
    this.dataRegion = this.rnic.registerMemory(this.pd, this.dataBuffer, { access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead });
    for (let slot = 0; slot < depth; slot++) {
      this.freeSlots.push(slot);
      this.slotSends.push({ wrId: SLOT_SEND_BASE + slot, opcode: 'SEND', signaled: false, sgList: [{ lkey: this.sendRegion.stag, offset: slot * this.messageSize, length: 0 }] });
    }
  }

  /** Requests that may be in flight at once. */
  get depth(): number {
    return this.sendBuffer.length / Math.max(1, this.messageSize);
  }

  private postReceive(index: number): void {
    if (this.failure !== undefined) return;
    this.qp.postRecv({ wrId: RECV_BASE + index, sgList: [{ lkey: this.receiveRegion.stag, offset: index * RECV_SLOT, length: RECV_SLOT }] });
  }

  private drainCompletions(): void {
    while (this.cq.drain(this.onCompletionBound) > 0);
    if (this.failure === undefined) this.cq.requestNotify();
  }

  private onCompletion(completion: WorkCompletion): void {
    const id = Number(completion.wrId);
    if (id >= RECV_BASE) {
      if (completion.status !== WcStatus.Success) return;
      const index = id - RECV_BASE;
      const bytes = this.receiveBuffer.slice(index * RECV_SLOT, index * RECV_SLOT + completion.byteLength);
      this.postReceive(index);
      this.deliver(bytes);
      return;
    }
    const waiter = this.sendWaiters.get(id);
    if (waiter === undefined) return;
    this.sendWaiters.delete(id);
    if (completion.status === WcStatus.Success) waiter.resolve(completion);
    else waiter.reject(new Error(`${completion.opcode} failed: ${wcStatusName(completion.status)}${completion.error === undefined ? '' : ` (${completion.error})`}`));
  }

  private deliver(bytes: Uint8Array): void {
    if (bytes[1] === K.OPCODE_HELLO_ACK && this.helloWaiter !== undefined) {
      const waiter = this.helloWaiter;
      this.helloWaiter = undefined;
      try {
        waiter(decodeHelloAck(bytes));
      } catch (error) {
        this.fail(error instanceof Error ? error : new Error(String(error)));
      }
      return;
    }
    let completion: Completion;
    try {
      completion = decodeCompletion(bytes);
    } catch (error) {
      this.fail(new Error(`the target sent a malformed message: ${(error as Error).message}`));
      return;
    }
    const pending = this.pending.get(completion.requestId);
    if (pending === undefined) return;
    this.pending.delete(completion.requestId);
    pending.resolve(completion);
  }

  private fail(error: Error): void {
    if (this.failure !== undefined) return;
    this.failure = this.closing ? new Error('session closed') : error;
    for (const pending of this.pending.values()) pending.reject(this.failure);
    this.pending.clear();
    for (const waiter of this.sendWaiters.values()) waiter.reject(this.failure);
    this.sendWaiters.clear();
    for (const wake of this.slotWaiters.splice(0)) wake();
  }

  private async takeSlot(): Promise<number> {
    for (;;) {
      if (this.failure !== undefined) throw this.failure;
      const slot = this.freeSlots.pop();
      if (slot !== undefined) return slot;
      await new Promise<void>((resolve) => this.slotWaiters.push(resolve));
    }
  }

  private giveSlot(slot: number): void {
    this.freeSlots.push(slot);
    this.slotWaiters.shift()?.();
  }

  private stagingOffset(slot: number): number {
    return slot * this.slotSize;
  }

  /** Scratch octets of a slot for one-sided reads (entries, slots, FetchAdd results). */
  private scratchOffset(slot: number): number {
    return this.depth * this.slotSize + slot * 64;
  }

  private post(wr: Omit<SendWorkRequest, 'wrId'>): Promise<WorkCompletion> {
    if (this.failure !== undefined) return Promise.reject(this.failure);
    const wrId = this.nextWrId;
    this.nextWrId = this.nextWrId + 1 >= SLOT_SEND_BASE ? 1 : this.nextWrId + 1;
    return new Promise((resolve, reject) => {
      this.sendWaiters.set(wrId, { resolve, reject });
      this.qp.postSend({ ...wr, wrId });
    });
  }

  /** Sends one request from `slot` and waits for its COMPLETION. */
  private async request(slot: number, fields: Omit<RequestFields, 'requestId'>): Promise<Completion> {
    const requestId = this.nextRequestId++;
    const message = encodeRequest({ ...fields, requestId });
    const offset = slot * this.messageSize;
    this.sendBuffer.set(message, offset);
    if (this.failure !== undefined) throw this.failure;
    const answer = new Promise<Completion>((resolve, reject) => this.pending.set(requestId, { resolve, reject }));
    // The COMPLETION implies the Send arrived, so the slot (and its send bytes) is reused only after it.
    const send = this.slotSends[slot]!;
    send.sgList[0]!.length = message.length;
    this.qp.postSend(send);
    const completion = await answer;
    if (completion.status !== K.STATUS_SUCCESS) {
      throw new KbtpError(completion.status, this.describeFailure(fields.handle, completion.status), completion);
    }
    return completion;
  }

  /** What a failed request's status means for its handle, with the numbers that explain it. */
  private describeFailure(handle: bigint, status: number): string {
    const { tableBaseHandle: base, tableHandleCount: count, storeFirst, storeCount } = this.hello;
    if (status === K.STATUS_OUT_OF_RANGE) {
      return `handle ${handle} is outside the target's table (handles ${base}..${base + count - 1n})`;
    }
    if (status === K.STATUS_ACCESS_DENIED) {
      return `handle ${handle} is outside this tenant's ${storeCount === 0n ? 'store range (it has none)' : `store range ${storeFirst}..${storeFirst + storeCount - 1n}`} or load scope`;
    }
    return `handle ${handle}`;
  }

  private info(completion: Completion): BlockInfo {
    return { generation: completion.generation, dataLength: completion.dataLength, blockOffset: completion.blockOffset };
  }

  private checkLength(data: Uint8Array): void {
    if (data.length > this.hello.blockSize) {
      throw new KbtpError(K.STATUS_LENGTH_ERROR, `${data.length} octets do not fit a ${this.hello.blockSize}-octet block`);
    }
  }

  /** Block Load (draft 6.1): the target RDMA-writes the block into a registered buffer, then completes. */
  /**
   * With `into`, the block is copied into that buffer (it must hold the block) and `data` is a
   * view of it: a caller that reuses its buffer then allocates nothing per load, which matters
   * for large blocks, where fresh memory costs more in page faults than the copy itself.
   */
  async load(handle: bigint, options: { generation?: number; allowUnsealed?: boolean; into?: Uint8Array } = {}): Promise<LoadResult> {
    const slot = await this.takeSlot();
    try {
      const completion = await this.request(slot, {
        opcode: K.OPCODE_LOAD, handle, generation: options.generation ?? 0,
        flags: options.allowUnsealed === true ? K.FLAG_ALLOW_UNSEALED : 0,
        descriptor: { stag: this.dataRegion?.stag ?? 0, taggedOffset: BigInt(this.stagingOffset(slot)), length: this.hello.blockSize },
      });
      const start = this.stagingOffset(slot);
      const block = this.dataBuffer.subarray(start, start + completion.dataLength);
      if (options.into === undefined) return { ...this.info(completion), data: block.slice() };
      if (options.into.length < block.length) {
        throw new KbtpError(K.STATUS_LENGTH_ERROR, `handle ${handle}: the ${block.length}-octet block does not fit the ${options.into.length}-octet buffer given`);
      }
      options.into.set(block);
      return { ...this.info(completion), data: options.into.subarray(0, block.length) };
    } finally {
      this.giveSlot(slot);
    }
  }

  private async storeRequest(opcode: number, handle: bigint, data: Uint8Array, options: { seal?: boolean; generation?: number }): Promise<BlockInfo> {
    this.checkLength(data);
    const slot = await this.takeSlot();
    try {
      const seal = options.seal === true ? K.FLAG_SEAL : 0;
      if (data.length <= this.hello.maxInline) {
        return this.info(await this.request(slot, { opcode, handle, generation: options.generation ?? 0, flags: K.FLAG_INLINE | seal, inline: data }));
      }
      // The target pulls the data with RDMA Read from the registered staging slot.
      this.dataBuffer.set(data, this.stagingOffset(slot));
      return this.info(await this.request(slot, {
        opcode, handle, generation: options.generation ?? 0, flags: seal,
        descriptor: { stag: this.dataRegion?.stag ?? 0, taggedOffset: BigInt(this.stagingOffset(slot)), length: data.length },
      }));
    } finally {
      this.giveSlot(slot);
    }
  }

  /** Block Mapped Store (draft 6.2) into a bound, unsealed handle. */
  store(handle: bigint, data: Uint8Array, options: { seal?: boolean; generation?: number } = {}): Promise<BlockInfo> {
    return this.storeRequest(K.OPCODE_STORE, handle, data, options);
  }

  /** Block Unmapped Store (draft 6.3): allocate, write and bind in one round trip. */
  allocStore(handle: bigint, data: Uint8Array, options: { seal?: boolean; generation?: number } = {}): Promise<BlockInfo> {
    return this.storeRequest(K.OPCODE_ALLOC_STORE, handle, data, options);
  }

  /** Block Free (draft 6.4). */
  async free(handle: bigint, options: { generation?: number } = {}): Promise<BlockInfo> {
    const slot = await this.takeSlot();
    try {
      return this.info(await this.request(slot, { opcode: K.OPCODE_FREE, handle, generation: options.generation ?? 0 }));
    } finally {
      this.giveSlot(slot);
    }
  }

  private requireCapability(capability: number, name: string): void {
    if ((this.hello.capabilities & capability) === 0) {
      throw new KbtpError(K.STATUS_NOT_SUPPORTED, `${name} was not granted to this session (ask for it in connect() and be trusted for it)`);
    }
  }

  private async readRemote(stag: number, taggedOffset: bigint, localOffset: number, length: number): Promise<void> {
    await this.post({ opcode: 'RDMA_READ', sgList: [{ lkey: this.dataRegion?.stag ?? 0, offset: localOffset, length }], remote: { stag, taggedOffset } });
  }

  private decodeEntry(offset: number): TableEntry {
    return decodeTableEntry(new DataView(this.dataBuffer.buffer, offset, S.ENTRY_SIZE), 0);
  }

  /** One RDMA Read of the table entry of `handle` through the Table STag (DIRECT_LOAD). */
  async directReadEntry(handle: bigint): Promise<TableEntry> {
    this.requireCapability(K.CAP_DIRECT_LOAD, 'DIRECT_LOAD');
    const { tableBaseHandle, tableHandleCount, tableStag, tableOffset } = this.hello;
    if (handle < tableBaseHandle || handle - tableBaseHandle >= tableHandleCount) {
      throw new KbtpError(K.STATUS_OUT_OF_RANGE, `handle ${handle} is outside the target's table (handles ${tableBaseHandle}..${tableBaseHandle + tableHandleCount - 1n})`);
    }
    const slot = await this.takeSlot();
    try {
      const scratch = this.scratchOffset(slot);
      await this.readRemote(tableStag, tableOffset + BigInt(S.ENTRY_SIZE) * (handle - tableBaseHandle), scratch, S.ENTRY_SIZE);
      return this.decodeEntry(scratch);
    } finally {
      this.giveSlot(slot);
    }
  }

  /** One RDMA Read of `length` octets of a block through the Pool STag (DIRECT_LOAD). */
  async directReadBlock(blockOffset: bigint, length: number): Promise<Uint8Array> {
    this.requireCapability(K.CAP_DIRECT_LOAD, 'DIRECT_LOAD');
    if (length > this.hello.blockSize) throw new KbtpError(K.STATUS_LENGTH_ERROR, `${length} octets exceed the block size`);
    const slot = await this.takeSlot();
    try {
      const start = this.stagingOffset(slot);
      if (length > 0) await this.readRemote(this.hello.poolStag, blockOffset, start, length);
      return this.dataBuffer.slice(start, start + length);
    } finally {
      this.giveSlot(slot);
    }
  }

  /**
   * Direct Load (draft 6.6): the entry, the block, and the entry again, each read after the
   * previous one completed; the data is valid when both entry reads agree in all 16 octets with
   * VALID and SEALED and a real Block Offset. A block on the durable tier alone (Block Offset all
   * ones) or one that kept moving is loaded with LOAD instead, which brings it back into the pool
   * (kbtp-v1 section 12). A change in between is retried at most `attempts` times.
   */
  async directLoad(handle: bigint, options: { attempts?: number } = {}): Promise<LoadResult> {
    for (let attempt = 0; attempt < (options.attempts ?? 4); attempt++) {
      const before = await this.directReadEntry(handle);
      if ((before.flags & K.ENTRY_VALID) === 0) throw new KbtpError(K.STATUS_NOT_VALID, `handle ${handle} is not bound`);
      if ((before.flags & K.ENTRY_SEALED) === 0) throw new KbtpError(K.STATUS_NOT_SEALED, `handle ${handle} is not sealed`);
      if (before.blockOffset === ALL_ONES) break;
      const data = await this.directReadBlock(before.blockOffset, before.dataLength);
      const after = await this.directReadEntry(handle);
      if (directLoadConsistent(before, after)) return { generation: before.generation, dataLength: before.dataLength, blockOffset: before.blockOffset, data };
    }
    return this.load(handle);
  }

  /**
   * Direct Allocation (draft 6.6) in one call: take a block one-sidedly, RDMA-write the data into
   * it, and BIND it to `handle`.
   */
  async directAllocStore(handle: bigint, data: Uint8Array, options: { seal?: boolean } = {}): Promise<BlockInfo & { ticket: number }> {
    this.checkLength(data);
    const taken = await this.directTakeBlock();
    await this.directWrite(taken.blockOffset, data);
    return { ...(await this.bind(handle, taken.ticket, taken.blockOffset, data.length, options)), ticket: taken.ticket };
  }

  /**
   * FetchAdd on the session's Head, then read the slot of the ticket until it holds the ticket and
   * a block, and once more to confirm both (a 16-octet read is not atomic). The ticket counts
   * against the quota until it is bound; unbound past the Ticket Timeout, the target reclaims it.
   */
  async directTakeBlock(): Promise<{ ticket: number; blockOffset: bigint }> {
    this.requireCapability(K.CAP_DIRECT_ALLOC, 'DIRECT_ALLOC');
    const { ringStag, headOffset, ringOffset, partitionRingOrder, ticketTimeoutMs } = this.hello;
    const slot = await this.takeSlot();
    try {
      const scratch = this.scratchOffset(slot);
      // Draft 3.3 masked counters over iWARP (RFC 7306); draft 9.2 plain 64-bit adds over IB/RoCE.
      const masked = this.transport === 'iwarp';
      const atomic = masked
        ? { add: BigInt(K.RING_ADD_DATA_MASKED), addMask: (1n << 63n) | (1n << 31n) | (1n << BigInt(partitionRingOrder + 3)) }
        : { add: BigInt(K.RING_ADD_DATA_UNMASKED) };
      const added = await this.post({ opcode: 'ATOMIC_FETCH_ADD', remote: { stag: ringStag, taggedOffset: headOffset },
        atomic, sgList: [{ lkey: this.dataRegion?.stag ?? 0, offset: scratch, length: 8 }] });
      const counter = BigInt.asUintN(64, added.atomicResult ?? 0n);
      const ticket = Number(counter >> 32n);
      const slotOffset = masked
        ? counter & ((1n << BigInt(partitionRingOrder + 4)) - 1n)
        : (BigInt(ticket) & ((1n << BigInt(partitionRingOrder)) - 1n)) * BigInt(S.SLOT_SIZE);
      const view = new DataView(this.dataBuffer.buffer, scratch, S.SLOT_SIZE);
      const deadline = Date.now() + ticketTimeoutMs;
      let blockOffset = ALL_ONES;
      for (;;) {
        await this.readRemote(ringStag, ringOffset + slotOffset, scratch, S.SLOT_SIZE);
        const read = decodeRingSlot(view, 0);
        const ready = read.sequence === ticket && read.blockOffset !== ALL_ONES;
        if (ready && blockOffset === read.blockOffset) return { ticket, blockOffset }; // the same on a second read
        if (ready) {
          blockOffset = read.blockOffset;
          continue;
        }
        blockOffset = ALL_ONES;
        if (Date.now() > deadline) throw new KbtpError(K.STATUS_NO_SPACE, `ticket ${ticket}: no block arrived within the ticket timeout`);
        await new Promise((resolve) => setImmediate(resolve));
      }
    } finally {
      this.giveSlot(slot);
    }
  }

  /** RDMA-writes `data` into a block taken with directTakeBlock (through the Partition STag). */
  async directWrite(blockOffset: bigint, data: Uint8Array): Promise<void> {
    this.requireCapability(K.CAP_DIRECT_ALLOC, 'DIRECT_ALLOC');
    this.checkLength(data);
    if (data.length === 0) return;
    const slot = await this.takeSlot();
    try {
      this.dataBuffer.set(data, this.stagingOffset(slot));
      await this.post({ opcode: 'RDMA_WRITE', sgList: [{ lkey: this.dataRegion?.stag ?? 0, offset: this.stagingOffset(slot), length: data.length }],
        remote: { stag: this.hello.partitionStag, taggedOffset: blockOffset } });
    } finally {
      this.giveSlot(slot);
    }
  }

  /** BIND (kbtp-v1 section 3): binds a one-sidedly taken and written block to `handle`. */
  async bind(handle: bigint, ticket: number, blockOffset: bigint, dataLength: number, options: { seal?: boolean } = {}): Promise<BlockInfo> {
    const slot = await this.takeSlot();
    try {
      return this.info(await this.request(slot, { opcode: K.OPCODE_BIND, handle, flags: options.seal === true ? K.FLAG_SEAL : 0,
        bind: { ticket, dataLength, blockOffset } }));
    } finally {
      this.giveSlot(slot);
    }
  }

  /** GOODBYE, then waits for the target to finish and close (at most `timeoutMs`). */
  async close(timeoutMs = 5000): Promise<void> {
    if (this.failure === undefined && !this.closing && this.sendRegion !== undefined) {
      this.closing = true;
      const goodbye = encodeRequest({ opcode: K.OPCODE_GOODBYE, requestId: this.nextRequestId++, handle: 0n });
      this.control.set(goodbye);
      this.qp.postSend({ wrId: 0, opcode: 'SEND', sgList: [{ lkey: this.controlRegion.stag, offset: 0, length: goodbye.length }] });
      await Promise.race([this.qp.whenDisconnected(), new Promise((resolve) => setTimeout(resolve, timeoutMs).unref())]);
    }
    this.closing = true;
    this.qp.disconnect();
    await this.rnic.close();
  }
}
