// Decodes one direction of a recorded MPA stream (for example a TCP direction reassembled from
// a capture): the MPA Request or Reply, then every FPDU with its CRC, as DDP/RDMAP segments.
// Offline tools and the capture tests use it; the live receive path is ../receive.ts.

import { decodeFpdu, decodeMpaFrame, decodeMpaFrameHeader, MPA_FRAME_HEADER_LENGTH, type MpaFrame } from './mpa.ts';
import { stripMarkers } from './markers.ts';
import { decodeRdmapSegment, type RdmapSegment } from './rdmap.ts';
import { ProtocolError } from '../../errors.ts';

export interface DecodedFpduRecord {
  /** Offset of the FPDU's length field in the (marker-free) full-operation stream. */
  readonly offset: number;
  readonly ulpduLength: number;
  readonly padding: Uint8Array;
  readonly crc: number;
  readonly computedCrc: number;
  readonly segment: RdmapSegment;
}

export interface DecodedMpaStream {
  readonly frame: MpaFrame;
  /** Octets the MPA frame occupied. */
  readonly frameLength: number;
  readonly fpdus: DecodedFpduRecord[];
  /** Octets at the end that do not form a whole FPDU (a truncated capture). */
  readonly trailing: number;
}

export interface StreamDecodeOptions {
  /** The sender inserted markers in full operation. */
  markers?: boolean;
}

export function decodeMpaStream(bytes: Uint8Array, options: StreamDecodeOptions = {}): DecodedMpaStream {
  const header = decodeMpaFrameHeader(bytes);
  const frameLength = MPA_FRAME_HEADER_LENGTH + header.privateDataLength;
  if (bytes.length < frameLength) throw new ProtocolError(`stream ends inside the MPA frame (${bytes.length} of ${frameLength} octets)`);
  const frame = decodeMpaFrame(bytes.subarray(0, frameLength));
  let body = bytes.subarray(frameLength);
  if (options.markers === true) body = stripMarkers(body).bytes;
  const fpdus: DecodedFpduRecord[] = [];
  let offset = 0;
  for (;;) {
    const fpdu = decodeFpdu(body.subarray(offset));
    if (fpdu === undefined) break;
    fpdus.push({
      offset,
      ulpduLength: fpdu.ulpdu.length,
      padding: fpdu.padding,
      crc: fpdu.crc,
      computedCrc: fpdu.computedCrc,
      segment: decodeRdmapSegment(fpdu.ulpdu),
    });
    offset += fpdu.length;
  }
  return { frame, frameLength, fpdus, trailing: body.length - offset };
}
