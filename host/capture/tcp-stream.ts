// Rebuilds the byte stream of each direction of each TCP connection in a capture, the way a
// receiver's TCP would hand it up: ordered by sequence number, retransmissions and overlaps
// collapsed, with any hole reported (a protocol decoder must not silently skip bytes).

import { parsePcap, type PcapFile } from './pcap.ts';
import { decodeTcpSegment, TCP_FIN, TCP_RST, TCP_SYN, type TcpSegment } from './packet.ts';

export interface Endpoint {
  readonly address: string;
  readonly port: number;
}

export interface StreamPiece {
  /** Offset of the piece's first byte in the direction's byte stream. */
  readonly offset: number;
  readonly length: number;
  /** Index of the capture record the bytes came from. */
  readonly recordIndex: number;
}

export interface TcpDirection {
  readonly from: Endpoint;
  readonly to: Endpoint;
  /** Every payload byte in order; bytes of a hole are zero and listed in `holes`. */
  readonly bytes: Uint8Array;
  readonly pieces: StreamPiece[];
  readonly holes: Array<{ offset: number; length: number }>;
  /** True when the direction was seen from its SYN, so offset 0 is the first byte sent. */
  readonly sawSyn: boolean;
  readonly sawFin: boolean;
  readonly sawReset: boolean;
}

export interface TcpConnection {
  /** The endpoint that sent the first SYN (or the first segment seen, without a SYN). */
  readonly initiator: Endpoint;
  readonly responder: Endpoint;
  readonly initiatorToResponder: TcpDirection;
  readonly responderToInitiator: TcpDirection;
  /** Index of the first record that belongs to the connection. */
  readonly firstRecordIndex: number;
}

interface DirectionBuilder {
  from: Endpoint;
  to: Endpoint;
  base: number | undefined; // sequence number of stream offset 0
  sawSyn: boolean;
  sawFin: boolean;
  sawReset: boolean;
  segments: Array<{ sequence: number; payload: Uint8Array; recordIndex: number }>;
}

interface ConnectionBuilder {
  initiator: Endpoint;
  responder: Endpoint;
  forward: DirectionBuilder;
  backward: DirectionBuilder;
  firstRecordIndex: number;
  closed: boolean;
}

export function reassembleTcp(capture: PcapFile | Uint8Array): TcpConnection[] {
  const file = capture instanceof Uint8Array ? parsePcap(capture) : capture;
  const open = new Map<string, ConnectionBuilder>();
  const all: ConnectionBuilder[] = [];
  for (const record of file.records) {
    const segment = decodeTcpSegment(file.linkType, record.data);
    if (segment === undefined) continue;
    const forwardKey = key(segment.sourceAddress, segment.sourcePort, segment.destinationAddress, segment.destinationPort);
    const backwardKey = key(segment.destinationAddress, segment.destinationPort, segment.sourceAddress, segment.sourcePort);
    let connection = open.get(forwardKey) ?? open.get(backwardKey);
    const isFreshSyn = (segment.flags & TCP_SYN) !== 0 && (segment.flags & 0x10) === 0;
    if (connection !== undefined && isFreshSyn && connection.closed) {
      open.delete(forwardKey);
      open.delete(backwardKey);
      connection = undefined;
    }
    if (connection === undefined) {
      const from = { address: segment.sourceAddress, port: segment.sourcePort };
      const to = { address: segment.destinationAddress, port: segment.destinationPort };
      connection = {
        initiator: from,
        responder: to,
        forward: newDirection(from, to),
        backward: newDirection(to, from),
        firstRecordIndex: record.index,
        closed: false,
      };
      open.set(forwardKey, connection);
      all.push(connection);
    }
    const direction = sameEndpoint(connection.initiator, segment.sourceAddress, segment.sourcePort) ? connection.forward : connection.backward;
    addSegment(direction, segment, record.index);
    if ((segment.flags & (TCP_FIN | TCP_RST)) !== 0) connection.closed = true;
  }
  return all.map((connection) => ({
    initiator: connection.initiator,
    responder: connection.responder,
    initiatorToResponder: finish(connection.forward),
    responderToInitiator: finish(connection.backward),
    firstRecordIndex: connection.firstRecordIndex,
  }));
}

function key(sourceAddress: string, sourcePort: number, destinationAddress: string, destinationPort: number): string {
  return `${sourceAddress}|${sourcePort}|${destinationAddress}|${destinationPort}`;
}

function sameEndpoint(endpoint: Endpoint, address: string, port: number): boolean {
  return endpoint.address === address && endpoint.port === port;
}

function newDirection(from: Endpoint, to: Endpoint): DirectionBuilder {
  return { from, to, base: undefined, sawSyn: false, sawFin: false, sawReset: false, segments: [] };
}

function addSegment(direction: DirectionBuilder, segment: TcpSegment, recordIndex: number): void {
  if ((segment.flags & TCP_SYN) !== 0) {
    // The SYN consumes one sequence number; data starts right after it.
    direction.base = (segment.sequence + 1) >>> 0;
    direction.sawSyn = true;
  }
  if ((segment.flags & TCP_FIN) !== 0) direction.sawFin = true;
  if ((segment.flags & TCP_RST) !== 0) direction.sawReset = true;
  if (segment.payload.length === 0) return;
  const dataSequence = (segment.flags & TCP_SYN) !== 0 ? (segment.sequence + 1) >>> 0 : segment.sequence;
  direction.base ??= dataSequence;
  direction.segments.push({ sequence: dataSequence, payload: segment.payload, recordIndex });
}

function finish(direction: DirectionBuilder): TcpDirection {
  const base = direction.base ?? 0;
  const placed = direction.segments
    .map((segment) => ({ offset: (segment.sequence - base) >>> 0, payload: segment.payload, recordIndex: segment.recordIndex }))
    // A segment from before the base (offset wrapped to a huge value) cannot belong to this stream.
    .filter((segment) => segment.offset < 0x80000000)
    .sort((a, b) => a.offset - b.offset || b.payload.length - a.payload.length);
  let length = 0;
  for (const segment of placed) length = Math.max(length, segment.offset + segment.payload.length);
  const bytes = new Uint8Array(length);
  const pieces: StreamPiece[] = [];
  const holes: Array<{ offset: number; length: number }> = [];
  let filled = 0; // every byte below this offset has been written
  for (const segment of placed) {
    const end = segment.offset + segment.payload.length;
    if (end <= filled) continue; // pure retransmission
    if (segment.offset > filled) holes.push({ offset: filled, length: segment.offset - filled });
    const start = Math.max(segment.offset, filled);
    bytes.set(segment.payload.subarray(start - segment.offset), start);
    pieces.push({ offset: start, length: end - start, recordIndex: segment.recordIndex });
    filled = end;
  }
  return {
    from: direction.from,
    to: direction.to,
    bytes,
    pieces,
    holes,
    sawSyn: direction.sawSyn,
    sawFin: direction.sawFin,
    sawReset: direction.sawReset,
  };
}

/** Index of the capture record that carried stream byte `offset`, or -1. */
export function recordIndexAt(direction: TcpDirection, offset: number): number {
  let low = 0;
  let high = direction.pieces.length - 1;
  while (low <= high) {
    const middle = (low + high) >> 1;
    const piece = direction.pieces[middle]!;
    if (offset < piece.offset) high = middle - 1;
    else if (offset >= piece.offset + piece.length) low = middle + 1;
    else return piece.recordIndex;
  }
  return -1;
}
