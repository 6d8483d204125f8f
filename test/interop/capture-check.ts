// Decodes an interop run's capture completely with kbtp's own decoders (host/capture for pcap and
// TCP reassembly, host/rnic/wire for MPA, DDP and RDMAP): every byte of every iWARP connection
// must belong to an MPA Request/Reply or to an FPDU that decodes, and with CRC negotiated every
// FPDU's CRC must verify. Anything left over is reported, so a test can demand zero problems.
import { readFileSync } from 'node:fs';
import { reassembleTcp, type TcpConnection, type TcpDirection } from '../../host/capture/tcp-stream.ts';
import { completeMpaFrame, decodeFpdu, decodeMpaFrameHeader, MPA_FRAME_HEADER_LENGTH, type MpaFrame } from '../../host/rnic/wire/mpa.ts';
import { decodeRdmapSegment, rdmapOpcodeName, type RdmapSegment } from '../../host/rnic/wire/rdmap.ts';

export interface DirectionReport {
  readonly frame: MpaFrame | undefined;
  readonly segments: RdmapSegment[];
  /** FPDUs whose CRC field matched the CRC32c of their bytes. */
  readonly crcVerified: number;
  readonly problems: string[];
}

export interface ConnectionReport {
  readonly label: string;
  readonly initiatorToResponder: DirectionReport;
  readonly responderToInitiator: DirectionReport;
  /** True when either MPA frame set C (RFC 5044: then both sides generate and check CRC). */
  readonly crcNegotiated: boolean;
  readonly problems: string[];
}

export interface CaptureReport {
  readonly connections: ConnectionReport[];
  readonly problems: string[];
}

/** Every TCP connection of `pcapPath` that involves `iwarpPort`, decoded as MPA in both directions. */
export function decodeIwarpCapture(pcapPath: string, iwarpPort: number): CaptureReport {
  const connections = reassembleTcp(new Uint8Array(readFileSync(pcapPath)))
    .filter((c) => c.initiator.port === iwarpPort || c.responder.port === iwarpPort)
    .map(decodeConnection);
  return { connections, problems: connections.flatMap((c) => c.problems.map((p) => `${c.label}: ${p}`)) };
}

function decodeConnection(connection: TcpConnection): ConnectionReport {
  const label = `${connection.initiator.address}:${connection.initiator.port} -> ${connection.responder.address}:${connection.responder.port}`;
  // CRC use is decided by both frames, so the frames are read before any FPDU is judged.
  const requestFrame = readFrame(connection.initiatorToResponder);
  const replyFrame = readFrame(connection.responderToInitiator);
  const crcNegotiated = (requestFrame.frame?.crc ?? false) || (replyFrame.frame?.crc ?? false);
  const rejected = replyFrame.frame?.reject ?? false;
  // A side inserts markers when the *other* side's frame set M (RFC 5044 §7.1.2).
  const forward = decodeDirection(connection.initiatorToResponder, requestFrame, 'request', crcNegotiated, rejected, replyFrame.frame?.markers ?? false);
  const backward = decodeDirection(connection.responderToInitiator, replyFrame, 'reply', crcNegotiated, rejected, requestFrame.frame?.markers ?? false);
  return {
    label,
    initiatorToResponder: forward,
    responderToInitiator: backward,
    crcNegotiated,
    problems: [...forward.problems.map((p) => `initiator: ${p}`), ...backward.problems.map((p) => `responder: ${p}`)],
  };
}

function readFrame(direction: TcpDirection): { frame: MpaFrame | undefined; length: number; problem?: string } {
  if (direction.bytes.length === 0) return { frame: undefined, length: 0 };
  try {
    const header = decodeMpaFrameHeader(direction.bytes);
    const length = MPA_FRAME_HEADER_LENGTH + header.privateDataLength;
    if (direction.bytes.length < length) return { frame: undefined, length: 0, problem: `MPA frame cut short (${direction.bytes.length} of ${length} octets)` };
    return { frame: completeMpaFrame(header, direction.bytes.subarray(MPA_FRAME_HEADER_LENGTH, length)), length };
  } catch (error) {
    return { frame: undefined, length: 0, problem: `MPA frame: ${(error as Error).message}` };
  }
}

function decodeDirection(
  direction: TcpDirection,
  start: { frame: MpaFrame | undefined; length: number; problem?: string },
  expected: 'request' | 'reply',
  crcNegotiated: boolean,
  rejected: boolean,
  markers: boolean,
): DirectionReport {
  const problems: string[] = [];
  const segments: RdmapSegment[] = [];
  let crcVerified = 0;
  if (!direction.sawSyn) problems.push('capture does not start at the SYN');
  for (const hole of direction.holes) problems.push(`${hole.length} octets missing at stream offset ${hole.offset}`);
  if (start.problem) problems.push(start.problem);
  if (direction.bytes.length === 0 || !start.frame) return { frame: start.frame, segments, crcVerified, problems };
  if (start.frame.kind !== expected) problems.push(`starts with an MPA ${start.frame.kind}, expected a ${expected}`);
  let offset = start.length;
  const bytes = direction.bytes;
  if (markers && !rejected && offset < bytes.length) {
    // siw never inserts markers, so an interop capture should not contain any.
    problems.push(`markers in effect: ${bytes.length - offset} octets of marked FPDUs not decoded`);
    return { frame: start.frame, segments, crcVerified, problems };
  }
  while (offset < bytes.length) {
    const fpdu = decodeFpdu(bytes.subarray(offset));
    if (!fpdu) {
      problems.push(`${bytes.length - offset} trailing octets at stream offset ${offset} are not a whole FPDU`);
      break;
    }
    if (rejected) problems.push(`FPDU after a rejected MPA exchange at stream offset ${offset}`);
    if (fpdu.crc === fpdu.computedCrc) crcVerified++;
    else if (crcNegotiated)
      problems.push(`CRC mismatch at stream offset ${offset}: carried 0x${fpdu.crc.toString(16)}, computed 0x${fpdu.computedCrc.toString(16)}`);
    try {
      segments.push(decodeRdmapSegment(fpdu.ulpdu));
    } catch (error) {
      problems.push(`FPDU at stream offset ${offset}: ${(error as Error).message}`);
    }
    offset += fpdu.length;
  }
  return { frame: start.frame, segments, crcVerified, problems };
}

/** "Send, RDMA Read Request, ..." for assertions and logs. */
export function opcodeSequence(segments: readonly RdmapSegment[]): string[] {
  return segments.map((s) => rdmapOpcodeName(s.opcode));
}
