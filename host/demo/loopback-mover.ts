// Carries out the engine's data operations inside one process: initiator buffers are plain
// byte arrays registered under an STag. It stands in for the RNIC where none is wanted
// (the demo, engine tests, benchmarks); the RDMA target uses the real RNIC instead.
import { OP_WRITE_TO_INITIATOR, OP_READ_FROM_INITIATOR } from '../../assembly/struct-offsets.ts';
import type { Engine } from '../engine/engine.ts';

export class LoopbackMover {
  private readonly buffers = new Map<number, Uint8Array>();
  private nextStag = 0x100;

  constructor(private readonly engine: Engine) {}

  /** Registers an initiator buffer; the returned STag names it with tagged offset 0. */
  register(buffer: Uint8Array): number {
    const stag = this.nextStag;
    this.nextStag += 0x100; // index in the upper 24 bits, key byte 0, as RNIC STags are built
    this.buffers.set(stag, buffer);
    return stag;
  }

  invalidate(stag: number): boolean {
    return this.buffers.delete(stag);
  }

  /**
   * Moves `length` octets between the pool address `local` and the initiator buffer.
   * Returns false, as an RNIC would report a remote access error, on an unknown STag or a range
   * outside the buffer.
   */
  carryOut(kind: number, local: number, length: number, stag: number, remoteOffset: bigint): boolean {
    const buffer = this.buffers.get(stag);
    if (buffer === undefined || remoteOffset < 0n || remoteOffset + BigInt(length) > BigInt(buffer.length)) return false;
    const offset = Number(remoteOffset);
    const pool = this.engine.bytes;
    if (kind === OP_WRITE_TO_INITIATOR) buffer.set(pool.subarray(local, local + length), offset);
    else if (kind === OP_READ_FROM_INITIATOR) pool.set(buffer.subarray(offset, offset + length), local);
    else return false;
    return true;
  }
}
