// MPA markers (RFC 5044 §4.3): when the peer asked for them (M=1), a 4-octet marker sits at
// every 512th octet of the full-operation stream, pointing back to the start of the FPDU it
// lies in. They exist for out-of-order placement by hardware; an in-order receiver only has to
// remove them, and the CRC covers the markers inside the FPDU.

import { CRC_LENGTH, crc32cUpdate, writeCrc } from './crc.ts';
import { fpduPadding, MPA_LENGTH_FIELD, MpaFrameError } from './mpa.ts';

export const MARKER_INTERVAL = 512;
export const MARKER_LENGTH = 4;

export function encodeMarker(fpduPointer: number): Uint8Array {
  return new Uint8Array([0, 0, (fpduPointer >> 8) & 0xff, fpduPointer & 0xfc]);
}

/** FPDUPTR of a marker; its two low bits are always treated as zero. */
export function decodeMarker(bytes: Uint8Array, offset = 0): number {
  return ((bytes[offset + 2]! << 8) | bytes[offset + 3]!) & 0xfffc;
}

export interface MarkedFpdu {
  readonly bytes: Uint8Array;
  /** Stream offset (relative to the start of full operation) after this FPDU. */
  readonly nextStreamOffset: number;
}

/**
 * Frames a ULPDU at stream offset `streamOffset` (relative to the first full-operation octet
 * of this direction), inserting markers at every 512-octet boundary. A marker at the FPDU's
 * first position belongs to it (FPDUPTR 0) and starts the CRC; a marker right after the PAD
 * also belongs to it. Reproduces RFC 5044 figures 5 and 6 byte for byte.
 */
export function encodeFpduWithMarkers(ulpdu: Uint8Array, streamOffset: number, crc: boolean): MarkedFpdu {
  if (ulpdu.length > 0xffff) throw new MpaFrameError(`ULPDU of ${ulpdu.length} octets does not fit ULPDU_Length`);
  if (streamOffset % 4 !== 0) throw new MpaFrameError(`FPDUs start 4-aligned; stream offset ${streamOffset} is not`);
  const padding = fpduPadding(ulpdu.length);
  const bodyLength = MPA_LENGTH_FIELD + ulpdu.length + padding;
  const body = new Uint8Array(bodyLength);
  body[0] = ulpdu.length >> 8;
  body[1] = ulpdu.length & 0xff;
  body.set(ulpdu, MPA_LENGTH_FIELD);
  // Worst case one marker per 512 octets plus the leading and trailing ones.
  const out = new Uint8Array(bodyLength + CRC_LENGTH + MARKER_LENGTH * (Math.ceil(bodyLength / MARKER_INTERVAL) + 2));
  let written = 0;
  let offset = streamOffset;
  if (offset % MARKER_INTERVAL === 0) {
    out.set(encodeMarker(0), written);
    written += MARKER_LENGTH;
    offset += MARKER_LENGTH;
  }
  const fpduStart = offset;
  let consumed = 0;
  while (consumed < bodyLength) {
    const untilMarker = MARKER_INTERVAL - (offset % MARKER_INTERVAL);
    if (untilMarker === MARKER_INTERVAL && offset !== fpduStart) {
      out.set(encodeMarker(offset - fpduStart), written);
      written += MARKER_LENGTH;
      offset += MARKER_LENGTH;
      continue;
    }
    const run = Math.min(untilMarker, bodyLength - consumed);
    out.set(body.subarray(consumed, consumed + run), written);
    written += run;
    offset += run;
    consumed += run;
  }
  if (offset % MARKER_INTERVAL === 0) {
    out.set(encodeMarker(offset - fpduStart), written);
    written += MARKER_LENGTH;
    offset += MARKER_LENGTH;
  }
  if (crc) writeCrc(out, written, crc32cUpdate(0, out.subarray(0, written)));
  written += CRC_LENGTH;
  offset += CRC_LENGTH;
  return { bytes: out.slice(0, written), nextStreamOffset: offset };
}

export interface StrippedStream {
  /** The stream with every marker removed. */
  readonly bytes: Uint8Array;
  /** FPDUPTR of each marker, in stream order, with its stream offset. */
  readonly markers: Array<{ streamOffset: number; fpduPointer: number }>;
}

/** Removes markers from a full-operation stream that starts at marker position 0. */
export function stripMarkers(stream: Uint8Array): StrippedStream {
  const markerCount = Math.ceil(stream.length / MARKER_INTERVAL);
  const out = new Uint8Array(Math.max(0, stream.length - markerCount * MARKER_LENGTH) + MARKER_LENGTH);
  const markers: Array<{ streamOffset: number; fpduPointer: number }> = [];
  let written = 0;
  for (let offset = 0; offset < stream.length; offset += MARKER_INTERVAL) {
    if (offset + MARKER_LENGTH > stream.length) throw new MpaFrameError(`stream ends inside the marker at ${offset}`);
    markers.push({ streamOffset: offset, fpduPointer: decodeMarker(stream, offset) });
    const chunk = stream.subarray(offset + MARKER_LENGTH, Math.min(stream.length, offset + MARKER_INTERVAL));
    out.set(chunk, written);
    written += chunk.length;
  }
  return { bytes: out.slice(0, written), markers };
}
