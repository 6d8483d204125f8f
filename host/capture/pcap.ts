// Classic libpcap file reader (not pcapng). Tests decode real captures with it, so it accepts
// both byte orders and both timestamp resolutions and reports truncated files precisely
// instead of returning a partial list silently.

import { FormatError } from '../errors.ts';

export const LINKTYPE_ETHERNET = 1;
export const LINKTYPE_RAW = 101;

export interface PcapRecord {
  /** 0-based index of the record in the file (what tools show as frame number - 1). */
  readonly index: number;
  /** Capture time in microseconds since the epoch (nanosecond files are rounded down). */
  readonly timestampMicros: number;
  /** Length of the packet on the wire; larger than data.length when the snaplen cut it. */
  readonly originalLength: number;
  readonly data: Uint8Array;
}

export interface PcapFile {
  readonly linkType: number;
  readonly snapLength: number;
  readonly nanosecond: boolean;
  readonly records: PcapRecord[];
}

export class PcapFormatError extends FormatError {}

const MAGIC_MICRO = 0xa1b2c3d4;
const MAGIC_NANO = 0xa1b23c4d;
const FILE_HEADER_LENGTH = 24;
const RECORD_HEADER_LENGTH = 16;

export function parsePcap(bytes: Uint8Array): PcapFile {
  if (bytes.length < FILE_HEADER_LENGTH) {
    throw new PcapFormatError(`pcap file is ${bytes.length} bytes, shorter than the 24-byte file header`);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const magicBigEndian = view.getUint32(0, false);
  let littleEndian: boolean;
  let nanosecond: boolean;
  if (magicBigEndian === MAGIC_MICRO || magicBigEndian === MAGIC_NANO) {
    littleEndian = false;
    nanosecond = magicBigEndian === MAGIC_NANO;
  } else {
    const magicLittleEndian = view.getUint32(0, true);
    if (magicLittleEndian !== MAGIC_MICRO && magicLittleEndian !== MAGIC_NANO) {
      throw new PcapFormatError(
        `not a classic pcap file: magic 0x${magicBigEndian.toString(16).padStart(8, '0')} (pcapng and other formats are not supported)`,
      );
    }
    littleEndian = true;
    nanosecond = magicLittleEndian === MAGIC_NANO;
  }
  const snapLength = view.getUint32(16, littleEndian);
  const linkType = view.getUint32(20, littleEndian) & 0x0fffffff;
  const records: PcapRecord[] = [];
  let offset = FILE_HEADER_LENGTH;
  while (offset < bytes.length) {
    if (offset + RECORD_HEADER_LENGTH > bytes.length) {
      throw new PcapFormatError(`record ${records.length} header truncated at byte ${offset}`);
    }
    const seconds = view.getUint32(offset, littleEndian);
    const fraction = view.getUint32(offset + 4, littleEndian);
    const includedLength = view.getUint32(offset + 8, littleEndian);
    const originalLength = view.getUint32(offset + 12, littleEndian);
    const dataStart = offset + RECORD_HEADER_LENGTH;
    if (dataStart + includedLength > bytes.length) {
      throw new PcapFormatError(`record ${records.length} claims ${includedLength} bytes but only ${bytes.length - dataStart} remain`);
    }
    records.push({
      index: records.length,
      timestampMicros: seconds * 1e6 + (nanosecond ? Math.floor(fraction / 1000) : fraction),
      originalLength,
      data: bytes.subarray(dataStart, dataStart + includedLength),
    });
    offset = dataStart + includedLength;
  }
  return { linkType, snapLength, nanosecond, records };
}
