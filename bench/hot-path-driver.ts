// Drives a target's hot path in this process as fast as it goes: an InProcessTarget serving one
// session over an in-memory LinkedChannel pair, and on the other end a bare initiator QP whose
// work requests, request messages and receive slots are all built once. Each request's
// COMPLETION posts the next one from inside the turn that delivered it, so a run of a million
// requests needs no timer, promise or event-loop turn per request: whatever the run allocates
// is the target's (connection, RNIC transmit and receive, engine calls) and the RNIC's.
import * as K from '../assembly/kbtp-constants.ts';
import { resolveTargetSettings } from '../host/kbtp/server/target-config.ts';
import { InProcessTarget } from '../host/kbtp/server/in-process.ts';
import { encodeHello, decodeHelloAck } from '../host/kbtp/wire/hello.ts';
import { encodeRequest } from '../host/kbtp/wire/messages.ts';
import { createServer, type Server } from 'node:net';
import { LinkedChannel } from '../host/rnic/linked-channel.ts';
import { SocketChannel, type StreamChannel } from '../host/rnic/channel.ts';
import { Access, createRnic, WcStatus, type CompletionQueue, type QueuePair, type Rnic, type WorkCompletion } from '../host/rnic/verbs.ts';

const SLOT = 128;
const RECV_BASE = 1_000_000;

export interface DriveCounts {
  loads: number;
  stores: number;
}

export class HotPathDriver {
  private readonly target: InProcessTarget;
  private readonly rnic: Rnic;
  private readonly cq: CompletionQueue;
  private readonly qp: QueuePair;
  private readonly sendBuffer: Uint8Array;
  private readonly sendView: DataView;
  private readonly receiveBuffer: Uint8Array;
  private readonly receiveView: DataView;
  /** Where LOADs land and STOREs are read from: one block per slot. */
  readonly data: Uint8Array;
  private readonly sends: Array<{ wrId: number; opcode: 'SEND'; signaled: false; sgList: Array<{ lkey: number; offset: number; length: number }> }> = [];
  private readonly receives: Array<{ wrId: number; sgList: Array<{ lkey: number; offset: number; length: number }> }> = [];
  private readonly onCompletion = (completion: WorkCompletion): void => this.completed(completion);
  private nextRequestId = 1;
  private remaining = 0;
  private inFlight = 0;
  private finished: (() => void) | undefined;
  private helloAck: ((bytes: Uint8Array) => void) | undefined;
  /** Requests answered with a status other than SUCCESS, or completions that failed. */
  failures = 0;
  firstFailure = '';
  readonly counts: DriveCounts = { loads: 0, stores: 0 };

  private constructor(
    readonly blockSize: number,
    readonly depth: number,
    private readonly channels: [StreamChannel, StreamChannel],
    /** The loopback listener of a drive over TCP (openOverTcp), closed with the driver. */
    private readonly server?: Server,
  ) {
    const settings = resolveTargetSettings({
      listen: '127.0.0.1:0',
      workers: 1,
      pool: { blockSize, blockCount: depth + 8, handleCount: 64, maxInline: 64 },
      session: { credits: depth },
      tenants: [{ name: 'bench', open: true, quota: depth + 8 }],
    } as never);
    this.target = new InProcessTarget(settings);
    this.rnic = createRnic({ name: 'hot-path-initiator' });
    const pd = this.rnic.allocPd();
    this.cq = this.rnic.createCq({ depth: 8 * depth + 64 });
    this.qp = this.rnic.createQp({ pd, sendCq: this.cq, recvCq: this.cq, maxSendWr: 4 * depth + 8, maxRecvWr: 2 * depth + 8 });
    this.sendBuffer = new Uint8Array(SLOT * depth);
    this.sendView = new DataView(this.sendBuffer.buffer);
    this.receiveBuffer = new Uint8Array(SLOT * (depth + 2));
    this.receiveView = new DataView(this.receiveBuffer.buffer);
    this.data = new Uint8Array(blockSize * depth).map((_, i) => i & 0xff);
    const sendRegion = this.rnic.registerMemory(pd, this.sendBuffer, { access: Access.LocalWrite });
    const receiveRegion = this.rnic.registerMemory(pd, this.receiveBuffer, { access: Access.LocalWrite });
    const dataRegion = this.rnic.registerMemory(pd, this.data, { access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead });
    for (let slot = 0; slot < depth; slot++) {
      this.sends.push({ wrId: slot, opcode: 'SEND', signaled: false, sgList: [{ lkey: sendRegion.stag, offset: slot * SLOT, length: 0 }] });
    }
    for (let i = 0; i < depth + 2; i++) {
      const receive = { wrId: RECV_BASE + i, sgList: [{ lkey: receiveRegion.stag, offset: i * SLOT, length: SLOT }] };
      this.receives.push(receive);
      this.qp.postRecv(receive);
    }
    this.dataStag = dataRegion.stag;
    this.cq.onNotify(() => {
      while (this.cq.drain(this.onCompletion) > 0);
      this.cq.requestNotify();
    });
    this.cq.requestNotify();
  }

  private readonly dataStag: number;

  /** A target with `depth` credits and a session to it, every slot's handle bound to a block. */
  static async open(blockSize: number, depth: number): Promise<HotPathDriver> {
    const driver = new HotPathDriver(blockSize, depth, LinkedChannel.pair());
    await driver.connect();
    return driver;
  }

  /**
   * The same drive over a TCP connection on 127.0.0.1 (SocketChannel at both ends, the target's
   * real path through the kernel), to see what the socket channel and Node's net module add.
   */
  static async openOverTcp(blockSize: number, depth: number): Promise<HotPathDriver> {
    const server = createServer();
    const accepted = new Promise<SocketChannel>((resolve) => server.once('connection', (socket) => resolve(new SocketChannel(socket))));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const address = server.address();
    if (address === null || typeof address === 'string') throw new Error('the loopback listener has no port');
    const initiatorEnd = await SocketChannel.connect('127.0.0.1', address.port, 5000);
    const driver = new HotPathDriver(blockSize, depth, [await accepted, initiatorEnd], server);
    await driver.connect();
    return driver;
  }

  private async connect(): Promise<void> {
    const [targetEnd, initiatorEnd] = this.channels;
    const served = this.target.serve(targetEnd);
    await this.rnic.connectChannel(this.qp, initiatorEnd, { crc: false });
    await served;
    const hello = encodeHello({
      version: K.KBTP_VERSION,
      requestId: 0n,
      capabilities: 0,
      initiatorCredits: this.depth + 2,
      tenant: 'bench',
      credential: new Uint8Array(0),
    });
    const ack = new Promise<Uint8Array>((resolve) => (this.helloAck = resolve));
    this.sendBuffer.set(hello, 0);
    this.sends[0]!.sgList[0]!.length = hello.length;
    this.qp.postSend(this.sends[0]!);
    const answer = decodeHelloAck(await ack);
    if (answer.status !== K.STATUS_SUCCESS) throw new Error(`HELLO refused: status ${answer.status}`);
    // Bind each slot's handle: ALLOC_STORE from the slot's block (an RDMA Read by the target).
    for (let slot = 0; slot < this.depth; slot++) this.encode(slot, K.OPCODE_ALLOC_STORE);
    await this.run(this.depth, 0);
    if (this.failures > 0) throw new Error(`preparing the blocks failed: ${this.firstFailure}`);
    this.counts.loads = 0;
    this.counts.stores = 0;
  }

  /** Writes slot `slot`'s request message: `opcode` on handle `slot`, descriptor naming the slot's block. */
  private encode(slot: number, opcode: number): void {
    const message = encodeRequest({
      opcode,
      requestId: 0n,
      handle: BigInt(slot),
      descriptor: { stag: this.dataStag, taggedOffset: BigInt(slot * this.blockSize), length: this.blockSize },
    });
    this.sendBuffer.set(message, slot * SLOT);
    this.sends[slot]!.sgList[0]!.length = message.length;
  }

  /**
   * Runs `count` requests with `depth` in flight; every `storeEvery`-th request of a slot is a
   * STORE (0: LOADs only). Resolves when all are answered.
   */
  run(count: number, storeEvery: number): Promise<void> {
    this.remaining = count;
    this.storeEvery = storeEvery;
    const done = new Promise<void>((resolve) => (this.finished = resolve));
    const start = Math.min(this.depth, count);
    for (let slot = 0; slot < start; slot++) this.post(slot);
    return done;
  }

  private storeEvery = 0;
  private rounds = 0;

  private post(slot: number): void {
    this.remaining--;
    this.inFlight++;
    const offset = slot * SLOT;
    // Patch the request in place: opcode and request id (the id names the slot for the answer).
    const store = this.storeEvery > 0 && this.rounds++ % this.storeEvery === 0;
    if (this.sendBuffer[offset + 1] !== K.OPCODE_ALLOC_STORE) {
      this.sendBuffer[offset + 1] = store ? K.OPCODE_STORE : K.OPCODE_LOAD;
      // The blocks stay unsealed so that STOREs may overwrite them; LOADs say they accept that.
      this.sendView.setUint16(offset + 2, store ? 0 : K.FLAG_ALLOW_UNSEALED, false);
    }
    this.sendView.setUint32(offset + 4, 0, false);
    this.sendView.setUint32(offset + 8, this.nextRequestId++ * 256 + slot, false);
    this.qp.postSend(this.sends[slot]!);
  }

  private completed(completion: WorkCompletion): void {
    if (completion.status !== WcStatus.Success) {
      this.fail(`${completion.opcode} completion: status ${completion.status} ${completion.error ?? ''}`);
      return;
    }
    const id = Number(completion.wrId);
    if (id < RECV_BASE) return; // unsignaled Sends complete only when they fail
    const index = id - RECV_BASE;
    const offset = index * SLOT;
    this.qp.postRecv(this.receives[index]!);
    if (this.helloAck !== undefined) {
      const resolve = this.helloAck;
      this.helloAck = undefined;
      resolve(this.receiveBuffer.slice(offset, offset + completion.byteLength));
      return;
    }
    const opcode = this.receiveView.getUint16(offset + 2, false) & 0xff;
    const status = this.receiveView.getUint16(offset + 22, false);
    const slot = this.receiveView.getUint32(offset + 8, false) & 0xff;
    if (status !== K.STATUS_SUCCESS) this.fail(`request opcode 0x${opcode.toString(16)} on handle ${slot}: status ${status}`);
    if (opcode === K.OPCODE_LOAD) this.counts.loads++;
    else this.counts.stores++;
    // After the ALLOC_STORE that bound it, a slot alternates LOADs and STOREs.
    if (opcode === K.OPCODE_ALLOC_STORE) this.sendBuffer[slot * SLOT + 1] = K.OPCODE_LOAD;
    this.inFlight--;
    if (this.remaining > 0) this.post(slot);
    else if (this.inFlight === 0) this.finished?.();
  }

  private fail(reason: string): void {
    if (this.failures++ === 0) this.firstFailure = reason;
  }

  async close(): Promise<void> {
    this.qp.disconnect();
    await this.rnic.close();
    await this.target.stop();
    if (this.server !== undefined) await new Promise<void>((resolve) => this.server!.close(() => resolve()));
  }
}
