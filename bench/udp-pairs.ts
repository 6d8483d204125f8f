// Plain UDP socket pairs moving datagrams of one RoCE packet's size (4112 octets: BTH, 4 KiB,
// ICRC at path MTU 4096) with a bounded window: what a RoCE link's UDP layer itself carries,
// without the RC transport. One pair through node:dgram (one send, one callback and one Buffer
// per datagram), one through BatchedUdpSocket (sendmmsg + GSO per turn, recvmmsg + GRO when
// the socket is readable). Used by bench/rnic.ts (rows "udp" and "udp-batched") and bench/udp-batch.ts.

import dgram from 'node:dgram';
import { BatchedUdpSocket } from '../host/rnic/rc/batched-udp-socket.ts';
import { ONLY_READ_RESPONSES_UP_TO } from '../host/rnic/rc/responder.ts';
import { ONLY_PACKET_WRITES_UP_TO } from '../host/rnic/rc/send-queue.ts';

export const ROCE_PACKET = 12 + 4096 + 4;
/** What a RoCE packet's headers add to a MIDDLE's 12 (BTH): a Write FIRST's RETH, a Read Response FIRST's or LAST's AETH. */
const RETH_EXTRA = 16;
const AETH_EXTRA = 4;

/**
 * The datagrams' sizes: all a MIDDLE's (uniform), or those of RC messages of `size` octets at path
 * MTU 4096 between kbtp RNICs: a Write's FIRST longer by its RETH, a Read's FIRST and LAST longer by
 * their AETH, and every packet of a short Write or Read so (ONLY packets: requester-transmit.ts,
 * responder.ts). GSO sends a run of equal datagrams (the last may be shorter) as one message, so a
 * FIRST costs the kernel a message of its own where a uniform stream costs a quarter of one per
 * 16 KiB.
 */
export type DatagramShape = { kind: 'uniform' } | { kind: 'write' | 'read'; size: number };
export const UNIFORM: DatagramShape = { kind: 'uniform' };
const WINDOW = 128;
export const CREDIT_EVERY = 64;

/** A socket pair; `onData` and `onCredit` replace the previous handler, so a pair serves many runs. */
export interface UdpPair {
  send(datagram: Uint8Array): void;
  sendCredit(): void;
  onData(handler: () => void): void;
  onCredit(handler: () => void): void;
  /**
   * A pair whose receiver runs on another thread (bench/rnic-udp-threads.ts) counts and credits
   * there: `startRun` tells it a run of `count` datagrams begins, `arrived` how many came since;
   * `onData` and `sendCredit` then go unused.
   */
  startRun?(count: number): void;
  arrived?(): number;
  /** Datagrams in flight at most (default WINDOW). */
  window?: number;
  close(): Promise<void>;
}

const NOTHING = (): void => undefined;

export async function dgramPair(): Promise<UdpPair> {
  const open = async (): Promise<dgram.Socket> => {
    const socket = dgram.createSocket('udp4');
    await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
    socket.setRecvBufferSize(4 << 20);
    socket.setSendBufferSize(4 << 20);
    return socket;
  };
  const sender = await open();
  const receiver = await open();
  const senderPort = sender.address().port;
  const receiverPort = receiver.address().port;
  const credit = Buffer.alloc(4);
  let data = NOTHING;
  let credited = NOTHING;
  receiver.on('message', () => data());
  sender.on('message', () => credited());
  return {
    send: (datagram) => sender.send(datagram, receiverPort, '127.0.0.1'),
    sendCredit: () => receiver.send(credit, senderPort, '127.0.0.1'),
    onData: (handler) => (data = handler),
    onCredit: (handler) => (credited = handler),
    close: async () => {
      await Promise.all([sender, receiver].map((socket) => new Promise<void>((resolve) => socket.close(() => resolve()))));
    },
  };
}

export async function batchedPair(): Promise<UdpPair> {
  const sender = await BatchedUdpSocket.open();
  const receiver = await BatchedUdpSocket.open();
  const credit = new Uint8Array(4);
  const empty = new Uint8Array(0);
  return {
    send: (datagram) => sender.send(receiver.local, datagram, empty, empty),
    sendCredit: () => receiver.send(sender.local, credit, empty, empty),
    onData: (handler) => receiver.setReceiver(handler),
    onCredit: (handler) => sender.setReceiver(handler),
    close: async () => {
      await Promise.all([sender.close(), receiver.close()]);
    },
  };
}

/**
 * Sends `count` datagrams, at most WINDOW beyond the receiver's last credit (one per 64 arrived;
 * a loopback socket drops what overflows its buffer), so it measures what the sockets carry, not
 * how much the kernel can discard. Returns the datagrams that arrived.
 */
export async function pump(pair: UdpPair, count: number, shape: DatagramShape = UNIFORM): Promise<number> {
  // Off-heap like a registered region, so the batched sender points at it instead of copying.
  const datagram = new Uint8Array(new SharedArrayBuffer(ROCE_PACKET)).fill(0x5a);
  const longer = new Uint8Array(new SharedArrayBuffer(ROCE_PACKET + (shape.kind === 'write' ? RETH_EXTRA : AETH_EXTRA))).fill(0x5a);
  const perMessage = shape.kind === 'uniform' ? 1 : Math.max(1, Math.ceil(shape.size / 4096));
  const isLonger = (index: number): boolean => {
    if (shape.kind === 'uniform') return false;
    const position = index % perMessage;
    if (shape.kind === 'write') return perMessage <= ONLY_PACKET_WRITES_UP_TO || position === 0;
    return perMessage <= ONLY_READ_RESPONSES_UP_TO || position === 0 || position === perMessage - 1;
  };
  let received = 0;
  const elsewhere = pair.arrived?.bind(pair);
  const arrived = elsewhere ?? ((): number => received);
  const window = pair.window ?? WINDOW;
  let acknowledged = 0;
  let sent = 0;
  let finish: () => void = () => undefined;
  const done = new Promise<void>((resolve) => (finish = resolve));
  const fill = (): void => {
    while (sent < count && sent - acknowledged < window) {
      pair.send(isLonger(sent) ? longer : datagram);
      sent++;
    }
  };
  pair.startRun?.(count);
  if (elsewhere === undefined) {
    pair.onData(() => {
      received++;
      if (received === count) finish();
      else if (received % CREDIT_EVERY === 0) pair.sendCredit();
    });
  }
  pair.onCredit(() => {
    acknowledged += CREDIT_EVERY;
    if (elsewhere !== undefined && elsewhere() >= count) finish();
    else fill();
  });
  // A datagram the kernel dropped would stall the window: top it up from a timer, and end once
  // everything was sent and nothing more arrives.
  let lastReceived = -1;
  const refill = setInterval(() => {
    const now = arrived();
    if (now >= count || (sent === count && now === lastReceived)) finish();
    lastReceived = now;
    acknowledged = Math.max(acknowledged, now);
    fill();
  }, 20);
  fill();
  await done;
  clearInterval(refill);
  pair.onCredit(() => undefined);
  return Math.min(arrived(), count);
}

/**
 * Moves `total` octets in ROCE_PACKET datagrams over an open pair; returns Gbit/s of what arrived.
 * A RoCE shape (`shape`) counts each datagram's 4096 octets of payload, as the RDMA rows do.
 */
export async function udpPairRun(pair: UdpPair, total: number, shape: DatagramShape = UNIFORM): Promise<number> {
  const octets = shape.kind === 'uniform' ? ROCE_PACKET : 4096;
  const count = Math.ceil(total / octets);
  const started = process.hrtime.bigint();
  const received = await pump(pair, count, shape);
  const elapsed = process.hrtime.bigint() - started;
  return (received * octets * 8) / Number(elapsed);
}
