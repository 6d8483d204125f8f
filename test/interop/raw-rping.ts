// One rping iteration spoken with raw FPDUs (raw-iwarp.ts), for probing siw without kbtp's RNIC.
// rping's application protocol (rdma-core librdmacm/examples/rping.c): the client Sends
// {addr u64, rkey u32, len u32} (big-endian) naming its source buffer, the server RDMA Reads it
// and Sends a 16-byte "go ahead"; the client Sends the same record for its sink buffer, the
// server RDMA Writes the data it read (strlen + 1 bytes) into it and Sends "go ahead" again.
import { connect, type Socket } from 'node:net';
import {
  decodeReadRequest,
  describeSegment,
  encodeFpdu,
  encodeTagged,
  encodeUntagged,
  type MpaStreamReader,
  OP_READ_RESPONSE,
  OP_SEND,
  OP_WRITE,
  type ReceivedFpdu,
} from './raw-iwarp.ts';

export const RPING_INFO_BYTES = 16;

export function encodeRpingInfo(addr: bigint, rkey: number, size: number): Buffer {
  const info = Buffer.alloc(RPING_INFO_BYTES);
  info.writeBigUInt64BE(addr, 0);
  info.writeUInt32BE(rkey, 8);
  info.writeUInt32BE(size, 12);
  return info;
}

/** The bytes rping's client puts in its source buffer for iteration `ping` (`-S size`). */
export function rpingPattern(ping: number, size: number): Buffer {
  const buffer = Buffer.alloc(size);
  const prefix = Buffer.from(`rdma-ping-${ping}: `);
  prefix.copy(buffer, 0, 0, Math.min(prefix.length, size));
  let c = 65 + (ping % 58);
  for (let i = prefix.length; i < size; i++) {
    buffer[i] = c;
    c = c >= 122 ? 65 : c + 1;
  }
  buffer[size - 1] = 0;
  return buffer;
}

export function openLoopback(port: number): Promise<Socket> {
  return new Promise((resolveSocket, reject) => {
    const socket = connect({ host: '127.0.0.1', port }, () => {
      socket.off('error', reject);
      socket.setNoDelay(true);
      resolveSocket(socket);
    });
    socket.once('error', reject);
  });
}

export interface RawIterationResult {
  /** Every FPDU siw sent in this iteration, in order. */
  readonly received: ReceivedFpdu[];
  readonly written: Buffer;
}

/**
 * Runs one rping client iteration over an MPA connection already in full operation. `msn` is
 * the QN 0 MSN of this iteration's first Send (1 for the first iteration).
 */
export async function rawRpingIteration(
  socket: Socket,
  reader: MpaStreamReader,
  options: { crc: boolean; msn: number; ping: number; size: number },
): Promise<RawIterationResult> {
  const received: ReceivedFpdu[] = [];
  const next = async (): Promise<ReceivedFpdu> => {
    const fpdu = await reader.readFpdu();
    received.push(fpdu);
    return fpdu;
  };
  const send = (segment: Buffer): void => {
    socket.write(encodeFpdu(segment, options.crc));
  };
  const source = rpingPattern(options.ping, options.size);
  const sourceStag = 0x00c0ffee;
  const sourceTo = 0x7f0000001000n;
  const sinkStag = 0x00beef01;
  const sinkTo = 0x7f0000002000n;

  send(encodeUntagged(OP_SEND, 0, options.msn, 0, encodeRpingInfo(sourceTo, sourceStag, options.size)));
  const readRequestFpdu = await next();
  const request = decodeReadRequest(readRequestFpdu.segment);
  if (request.sourceStag !== sourceStag || request.sourceTo !== sourceTo || request.size !== options.size) {
    throw new Error(
      `siw's Read Request does not match the advertisement: ${JSON.stringify(request, (_k, v: unknown) => (typeof v === 'bigint' ? `0x${v.toString(16)}` : v))}`,
    );
  }
  send(encodeTagged(OP_READ_RESPONSE, request.sinkStag, request.sinkTo, source));

  const goAhead = await next();
  expectSend(goAhead, 'go-ahead after the RDMA Read');

  send(encodeUntagged(OP_SEND, 0, options.msn + 1, 0, encodeRpingInfo(sinkTo, sinkStag, options.size)));
  const chunks: Buffer[] = [];
  for (;;) {
    const write = await next();
    const s = write.segment;
    if (!s.tagged || s.opcode !== OP_WRITE || s.stag !== sinkStag) throw new Error(`expected siw's RDMA Write, got ${describeSegment(s)}`);
    const offset = Number(s.to - sinkTo);
    if (offset !== chunks.reduce((n, c) => n + c.length, 0)) throw new Error(`RDMA Write segment at offset ${offset} out of order`);
    chunks.push(Buffer.from(s.payload));
    if (s.last) break;
  }
  expectSend(await next(), 'go-ahead after the RDMA Write');
  return { received, written: Buffer.concat(chunks) };
}

function expectSend(fpdu: ReceivedFpdu, what: string): void {
  const s = fpdu.segment;
  if (s.tagged || s.opcode !== OP_SEND || s.qn !== 0 || s.payload.length !== RPING_INFO_BYTES) {
    throw new Error(`expected siw's ${what} (16-byte Send on QN 0), got ${describeSegment(s)}`);
  }
}
