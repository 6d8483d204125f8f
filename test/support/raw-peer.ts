// A hand-driven iWARP peer for the error tests: it performs the MPA exchange itself and then
// sends whatever bytes a test wants, well-formed or not, and reads back what the RNIC answers.
import net from 'node:net';
import { encodeFpdu, encodeMpaFrame, decodeMpaFrame, decodeFpdu, MPA_FRAME_HEADER_LENGTH } from '../../host/rnic/wire/mpa.ts';
import { encodeTaggedHeader, encodeUntaggedHeader, DDP_VERSION } from '../../host/rnic/wire/ddp.ts';
import { decodeRdmapSegment, rdmapControl, RdmapOpcode, type RdmapSegment, type TerminateHeader } from '../../host/rnic/wire/rdmap.ts';

export interface RawPeerOptions {
  crc?: boolean;
  /** Bytes to send instead of a well-formed MPA Request. */
  request?: Uint8Array;
  ird?: number;
  ord?: number;
  /** Send the zero-length Write RTR after the Reply (default true); false stalls setup there. */
  rtr?: boolean;
}

export class RawPeer {
  private received: Buffer = Buffer.alloc(0);
  private waiters: Array<() => void> = [];
  private isClosed = false;
  crc = false;
  /** Octets of FPDUs skipped while looking for a Terminate. */
  skipped = 0;

  private constructor(readonly socket: net.Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.received = this.received.length === 0 ? chunk : Buffer.concat([this.received, chunk]);
      this.wake();
    });
    socket.on('close', () => {
      this.isClosed = true;
      this.wake();
    });
    socket.on('error', () => undefined);
  }

  private wake(): void {
    for (const waiter of this.waiters.splice(0)) waiter();
  }

  private async need(length: number, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (this.received.length < length) {
      if (this.isClosed) return false;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`raw peer: waited ${timeoutMs} ms for ${length} octets, have ${this.received.length}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return true;
  }

  private take(length: number): Buffer {
    const out = this.received.subarray(0, length);
    this.received = this.received.subarray(length);
    return out;
  }

  static async open(port: number, options: RawPeerOptions = {}): Promise<RawPeer> {
    const socket = net.connect({ host: '127.0.0.1', port, allowHalfOpen: true });
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    const peer = new RawPeer(socket);
    if (options.request !== undefined) {
      socket.write(options.request);
      return peer;
    }
    socket.write(
      encodeMpaFrame({
        kind: 'request',
        markers: false,
        crc: options.crc ?? false,
        reject: false,
        enhanced: true,
        revision: 2,
        enhancedData: { peerToPeer: true, sendRtr: false, writeRtr: true, readRtr: false, ird: options.ird ?? 16, ord: options.ord ?? 16 },
        privateData: new Uint8Array(0),
      }),
    );
    await peer.need(MPA_FRAME_HEADER_LENGTH, 5000);
    const pdLength = peer.received.readUInt16BE(18);
    await peer.need(MPA_FRAME_HEADER_LENGTH + pdLength, 5000);
    const reply = decodeMpaFrame(peer.take(MPA_FRAME_HEADER_LENGTH + pdLength));
    if (reply.reject) throw new Error('raw peer: rejected');
    peer.crc = (options.crc ?? false) || reply.crc;
    if (options.rtr === false) return peer;
    // Zero-length RDMA Write RTR.
    const rtr = new Uint8Array(14);
    encodeTaggedHeader(rtr, 0, { last: true, ddpVersion: DDP_VERSION, rdmapControl: rdmapControl(RdmapOpcode.RdmaWrite), stag: 0, taggedOffset: 0n });
    peer.sendUlpdu(rtr);
    return peer;
  }

  /** Frames and sends one ULPDU (CRC as negotiated; `corruptCrc` flips a CRC bit). */
  sendUlpdu(ulpdu: Uint8Array, corruptCrc = false): void {
    const fpdu = encodeFpdu(ulpdu, this.crc);
    if (corruptCrc) fpdu[fpdu.length - 1]! ^= 0x01;
    this.socket.write(fpdu);
  }

  sendRaw(bytes: Uint8Array): void {
    this.socket.write(bytes);
  }

  /** The next whole FPDU the RNIC sent. */
  async nextSegment(timeoutMs = 5000): Promise<RdmapSegment | undefined> {
    if (!(await this.need(2, timeoutMs))) return undefined;
    const ulpduLength = this.received.readUInt16BE(0);
    const total = 2 + ulpduLength + (-(2 + ulpduLength) & 3) + 4;
    if (!(await this.need(total, timeoutMs))) return undefined;
    const fpdu = decodeFpdu(this.take(total));
    return decodeRdmapSegment(fpdu!.ulpdu);
  }

  private replayed: TerminateHeader | undefined;

  /** Makes the next `terminate()` return `header` again (a test looked at it already). */
  replay(header: TerminateHeader): void {
    this.replayed = header;
  }

  /** Skips FPDUs until a Terminate arrives and returns its header. */
  async terminate(timeoutMs = 5000): Promise<TerminateHeader> {
    if (this.replayed !== undefined) {
      const header = this.replayed;
      this.replayed = undefined;
      return header;
    }
    for (;;) {
      const segment = await this.nextSegment(timeoutMs);
      if (segment === undefined) throw new Error('raw peer: connection closed without a Terminate');
      if (segment.opcode === RdmapOpcode.Terminate) return segment.terminate!;
      this.skipped += segment.payload.length;
    }
  }

  /** Resolves when the RNIC closed the connection. */
  async closed(timeoutMs = 5000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!this.isClosed && !this.socket.readableEnded) {
      if (Date.now() > deadline) throw new Error('raw peer: connection still open');
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }

  destroy(): void {
    this.socket.destroy();
  }
}

export function tagged(opcode: number, stag: number, taggedOffset: bigint, payload: Uint8Array, last = true): Uint8Array {
  const ulpdu = new Uint8Array(14 + payload.length);
  encodeTaggedHeader(ulpdu, 0, { last, ddpVersion: DDP_VERSION, rdmapControl: rdmapControl(opcode), stag, taggedOffset });
  ulpdu.set(payload, 14);
  return ulpdu;
}

export function untagged(
  opcode: number,
  queue: number,
  msn: number,
  body: Uint8Array,
  options: { reserved?: number; offset?: number; last?: boolean } = {},
): Uint8Array {
  const ulpdu = new Uint8Array(18 + body.length);
  encodeUntaggedHeader(ulpdu, 0, {
    last: options.last ?? true,
    ddpVersion: DDP_VERSION,
    rdmapControl: rdmapControl(opcode),
    reserved: options.reserved ?? 0,
    queueNumber: queue,
    messageSequenceNumber: msn,
    messageOffset: options.offset ?? 0,
  });
  ulpdu.set(body, 18);
  return ulpdu;
}
