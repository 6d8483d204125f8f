// Checks kbtp's memory against what a decoded RoCEv2 capture says the peer asked of it: each
// request is taken once (the first packet of each PSN; retransmissions are duplicates), in PSN
// order, and replayed on a copy of the memory as it was before the run:
//   - RDMA Write: the octets land at their virtual address;
//   - RDMA Read: kbtp's Read Response octets equal the memory at the requested address;
//   - FetchAdd / CmpSwap: applied in order; each Atomic Acknowledge carries the value the replay
//     had there before the operation.
// The replayed memory must then equal kbtp's memory octet for octet.
import type { RoceCapture, RocePacket } from '../../host/capture/roce.ts';
import { IbOpcode } from '../../host/rnic/wire/ib-opcodes.ts';

export interface ReplayReport {
  readonly writes: number;
  readonly reads: number;
  readonly fetchAdds: number;
  readonly compareSwaps: number;
  readonly problems: string[];
}

const MASK24 = 0xffffff;

/** First packet of each PSN from `from`, in PSN order starting at the first one seen. */
function requestsFrom(capture: RoceCapture, from: string, opcodes: (opcode: number) => boolean): RocePacket[] {
  const first = new Map<number, RocePacket>();
  for (const packet of capture.packets) {
    if (packet.udp.ip.sourceAddress !== from || !opcodes(packet.headers.opcode)) continue;
    if (!first.has(packet.headers.psn)) first.set(packet.headers.psn, packet);
  }
  const packets = [...first.values()];
  const base = packets[0]?.headers.psn ?? 0;
  return packets.sort((a, b) => ((a.headers.psn - base) & MASK24) - ((b.headers.psn - base) & MASK24));
}

export function replayAgainstMemory(
  capture: RoceCapture,
  peerAddress: string,
  kbtpAddress: string,
  before: Uint8Array,
  after: Uint8Array,
  baseAddress: bigint,
): ReplayReport {
  const memory = before.slice();
  const view = new DataView(memory.buffer);
  const problems: string[] = [];
  const offsetOf = (va: bigint, length: number, what: string): number | undefined => {
    const offset = Number(va - baseAddress);
    if (offset < 0 || offset + length > memory.length) {
      problems.push(`${what} at 0x${va.toString(16)} (+${length}) is outside the region`);
      return undefined;
    }
    return offset;
  };
  const isRequest = (op: number): boolean =>
    (op >= IbOpcode.RdmaWriteFirst && op <= IbOpcode.RdmaReadRequest) || op === IbOpcode.CompareSwap || op === IbOpcode.FetchAdd;
  const responses = new Map<number, RocePacket>();
  for (const packet of requestsFrom(
    capture,
    kbtpAddress,
    (op) => op >= IbOpcode.RdmaReadResponseFirst && op <= IbOpcode.AtomicAcknowledge && op !== IbOpcode.Acknowledge,
  )) {
    responses.set(packet.headers.psn, packet);
  }
  let writes = 0;
  let reads = 0;
  let fetchAdds = 0;
  let compareSwaps = 0;
  let writeCursor: number | undefined;
  for (const packet of requestsFrom(capture, peerAddress, isRequest)) {
    const h = packet.headers;
    switch (h.opcode) {
      case IbOpcode.RdmaWriteFirst:
      case IbOpcode.RdmaWriteOnly: {
        writes++;
        writeCursor = offsetOf(h.virtualAddress, h.dmaLength, 'Write');
        if (writeCursor !== undefined) memory.set(packet.payload, writeCursor);
        writeCursor = writeCursor === undefined ? undefined : writeCursor + packet.payload.length;
        break;
      }
      case IbOpcode.RdmaWriteMiddle:
      case IbOpcode.RdmaWriteLast:
        if (writeCursor !== undefined) {
          memory.set(packet.payload, writeCursor);
          writeCursor += packet.payload.length;
        }
        break;
      case IbOpcode.RdmaReadRequest: {
        reads++;
        const offset = offsetOf(h.virtualAddress, h.dmaLength, 'Read');
        if (offset === undefined) break;
        let cursor = offset;
        for (let i = 0; cursor < offset + h.dmaLength; i++) {
          const response = responses.get((h.psn + i) & MASK24);
          if (response === undefined) {
            problems.push(`Read at PSN ${h.psn}: no response packet ${i} in the capture`);
            break;
          }
          const expected = memory.subarray(cursor, cursor + response.payload.length);
          if (Buffer.compare(expected, response.payload) !== 0) problems.push(`Read at PSN ${h.psn}: response packet ${i} differs from the memory`);
          cursor += response.payload.length;
          if (response.payload.length === 0) break;
        }
        break;
      }
      case IbOpcode.FetchAdd:
      case IbOpcode.CompareSwap: {
        const offset = offsetOf(h.virtualAddress, 8, 'atomic');
        if (offset === undefined) break;
        const original = view.getBigUint64(offset, true);
        if (h.opcode === IbOpcode.FetchAdd) {
          fetchAdds++;
          view.setBigUint64(offset, BigInt.asUintN(64, original + h.swapOrAdd), true);
        } else {
          compareSwaps++;
          if (original === h.compare) view.setBigUint64(offset, h.swapOrAdd, true);
        }
        const ack = responses.get(h.psn);
        if (ack === undefined || ack.headers.opcode !== IbOpcode.AtomicAcknowledge) problems.push(`atomic at PSN ${h.psn}: no Atomic Acknowledge`);
        else if (ack.headers.originalData !== original)
          problems.push(`atomic at PSN ${h.psn}: acknowledged 0x${ack.headers.originalData.toString(16)}, replay had 0x${original.toString(16)}`);
        break;
      }
    }
  }
  const differing = memory.findIndex((octet, i) => octet !== after[i]);
  if (differing >= 0) problems.push(`kbtp's memory differs from the replay at offset ${differing}`);
  return { writes, reads, fetchAdds, compareSwaps, problems: problems.slice(0, 20) };
}

/** One perftest run kbtp served: its memory before and after, and the two QPs on the wire. */
export interface ServedPerftestRun {
  readonly name: 'write' | 'read' | 'fetch-add' | 'compare-swap';
  readonly before: Uint8Array;
  readonly after: Uint8Array;
  readonly kbtpQp: number;
  readonly clientQp: number;
}

/**
 * Replays each run's own QP pair from the capture against kbtp's memory (the runs' QPs follow each
 * other on the wire) and returns the problems, with the count of requests replayed per run; also
 * checks that the check can fail (one octet of kbtp's memory off must be reported).
 */
export function replayPerftestRuns(
  capture: RoceCapture,
  runs: readonly ServedPerftestRun[],
  clientAddress: string,
  kbtpAddress: string,
  taggedBase: bigint,
): { problems: string[]; requests: Record<string, number>; tamperNoticed: boolean[] } {
  const problems: string[] = [];
  const requests: Record<string, number> = {};
  const tamperNoticed: boolean[] = [];
  for (const run of runs) {
    const ofRun = capture.packets.filter((packet) =>
      packet.udp.ip.sourceAddress === clientAddress ? packet.headers.destQp === run.kbtpQp : packet.headers.destQp === run.clientQp,
    );
    const qpPackets = { ...capture, packets: ofRun };
    const replay = replayAgainstMemory(qpPackets, clientAddress, kbtpAddress, run.before, run.after, taggedBase);
    problems.push(...replay.problems.map((problem) => `${run.name}: ${problem}`));
    requests[run.name] = { write: replay.writes, read: replay.reads, 'fetch-add': replay.fetchAdds, 'compare-swap': replay.compareSwaps }[run.name];
    const tampered = run.after.slice();
    tampered[tampered.length - 1]! ^= 1;
    tamperNoticed.push(replayAgainstMemory(qpPackets, clientAddress, kbtpAddress, run.before, tampered, taggedBase).problems.length > 0);
  }
  return { problems, requests, tamperNoticed };
}
