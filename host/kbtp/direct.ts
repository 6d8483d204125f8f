// The one-sided paths of a session (draft 6.6, kbtp-v1 sections 3 and 12): reading the block
// table and the pool through their STags (DIRECT_LOAD), and taking a block from the free-block
// ring with a FetchAdd and writing it (DIRECT_ALLOC). The session (session.ts) runs each within a
// call's { signal, timeoutMs } and provides its slots and registered memory through DirectHost.
import * as K from '../../assembly/kbtp-constants.ts';
import * as S from '../../assembly/struct-offsets.ts';
import type { SendWorkRequest, WorkCompletion } from '../rnic/verbs.ts';
import { decodeRingSlot, decodeTableEntry, type TableEntry } from '../engine/table-entry.ts';
import type { HelloAck } from './wire/hello.ts';
import { KbtpStatusError } from './errors.ts';

/** A Block Offset of all ones: no block (a free ring slot, a block on the durable tier alone). */
export const ALL_ONES = 0xffffffffffffffffn;

/**
 * A direct load is valid when both entry reads are identical in all 16 octets, with VALID and
 * SEALED and a Block Offset that is not all ones (draft 6.6, and kbtp-v1 section 12: a demotion
 * or promotion in between changes the Placement Epoch in Flags, so the reads differ).
 */
export function directLoadConsistent(before: TableEntry, after: TableEntry): boolean {
  const bound = K.ENTRY_VALID | K.ENTRY_SEALED;
  return (
    before.flags === after.flags &&
    before.generation === after.generation &&
    before.dataLength === after.dataLength &&
    before.blockOffset === after.blockOffset &&
    (before.flags & bound) === bound &&
    before.blockOffset !== ALL_ONES
  );
}

/** What the one-sided paths need of their session (implemented by KbtpSession). */
export interface DirectHost {
  readonly hello: HelloAck;
  readonly transport: 'iwarp' | 'roce';
  /** The registered data area: each slot's staging block, then 64 scratch octets per slot. */
  readonly dataBuffer: Uint8Array;
  readonly dataStag: number;
  /** A free slot; waits for one until `signal` fires. */
  takeSlot(signal: AbortSignal): Promise<number>;
  giveSlot(slot: number): void;
  stagingOffset(slot: number): number;
  /** Scratch octets of a slot for one-sided reads (entries, slots, FetchAdd results). */
  scratchOffset(slot: number): number;
  /** Posts a one-sided work request and waits for its completion. */
  post(wr: Omit<SendWorkRequest, 'wrId'>): Promise<WorkCompletion>;
  /** A KbtpStatusError (LENGTH_ERROR) when `data` does not fit a block. */
  checkLength(data: Uint8Array): void;
}

function requireCapability(host: DirectHost, capability: number, name: string): void {
  if ((host.hello.capabilities & capability) === 0) {
    throw new KbtpStatusError(K.STATUS_NOT_SUPPORTED, `${name} was not granted to this session (ask for it in connect() and be trusted for it)`);
  }
}

async function readRemote(host: DirectHost, stag: number, taggedOffset: bigint, localOffset: number, length: number): Promise<void> {
  await host.post({ opcode: 'RDMA_READ', sgList: [{ lkey: host.dataStag, offset: localOffset, length }], remote: { stag, taggedOffset } });
}

/** One RDMA Read of the table entry of `handle` through the Table STag (DIRECT_LOAD). */
export async function readEntry(host: DirectHost, handle: bigint, signal: AbortSignal): Promise<TableEntry> {
  requireCapability(host, K.CAP_DIRECT_LOAD, 'DIRECT_LOAD');
  const { tableBaseHandle, tableHandleCount, tableStag, tableOffset } = host.hello;
  if (handle < tableBaseHandle || handle - tableBaseHandle >= tableHandleCount) {
    throw new KbtpStatusError(
      K.STATUS_OUT_OF_RANGE,
      `handle ${handle} is outside the target's table (handles ${tableBaseHandle}..${tableBaseHandle + tableHandleCount - 1n})`,
    );
  }
  const slot = await host.takeSlot(signal);
  try {
    const scratch = host.scratchOffset(slot);
    await readRemote(host, tableStag, tableOffset + BigInt(S.ENTRY_SIZE) * (handle - tableBaseHandle), scratch, S.ENTRY_SIZE);
    return decodeTableEntry(new DataView(host.dataBuffer.buffer, scratch, S.ENTRY_SIZE), 0);
  } finally {
    host.giveSlot(slot);
  }
}

/** One RDMA Read of `length` octets of a block through the Pool STag (DIRECT_LOAD). */
export async function readBlock(host: DirectHost, blockOffset: bigint, length: number, signal: AbortSignal): Promise<Uint8Array> {
  requireCapability(host, K.CAP_DIRECT_LOAD, 'DIRECT_LOAD');
  if (length > host.hello.blockSize) throw new KbtpStatusError(K.STATUS_LENGTH_ERROR, `${length} octets exceed the block size`);
  const slot = await host.takeSlot(signal);
  try {
    const start = host.stagingOffset(slot);
    if (length > 0) await readRemote(host, host.hello.poolStag, blockOffset, start, length);
    return host.dataBuffer.slice(start, start + length);
  } finally {
    host.giveSlot(slot);
  }
}

/**
 * FetchAdd on the session's Head, then read the slot of the ticket until it holds the ticket and
 * a block, and once more to confirm both (a 16-octet read is not atomic). The ticket counts
 * against the quota until it is bound; unbound past the Ticket Timeout, the target reclaims it.
 */
export async function takeBlock(host: DirectHost, signal: AbortSignal): Promise<{ ticket: number; blockOffset: bigint }> {
  requireCapability(host, K.CAP_DIRECT_ALLOC, 'DIRECT_ALLOC');
  const { ringStag, headOffset, ringOffset, partitionRingOrder, ticketTimeoutMs } = host.hello;
  const slot = await host.takeSlot(signal);
  try {
    const scratch = host.scratchOffset(slot);
    // Draft 3.3 masked counters over iWARP (RFC 7306); draft 9.2 plain 64-bit adds over IB/RoCE.
    const masked = host.transport === 'iwarp';
    const atomic = masked
      ? { add: BigInt(K.RING_ADD_DATA_MASKED), addMask: (1n << 63n) | (1n << 31n) | (1n << BigInt(partitionRingOrder + 3)) }
      : { add: BigInt(K.RING_ADD_DATA_UNMASKED) };
    const added = await host.post({
      opcode: 'ATOMIC_FETCH_ADD',
      remote: { stag: ringStag, taggedOffset: headOffset },
      atomic,
      sgList: [{ lkey: host.dataStag, offset: scratch, length: 8 }],
    });
    const counter = BigInt.asUintN(64, added.atomicResult ?? 0n);
    const ticket = Number(counter >> 32n);
    const slotOffset = masked
      ? counter & ((1n << BigInt(partitionRingOrder + 4)) - 1n)
      : (BigInt(ticket) & ((1n << BigInt(partitionRingOrder)) - 1n)) * BigInt(S.SLOT_SIZE);
    const view = new DataView(host.dataBuffer.buffer, scratch, S.SLOT_SIZE);
    const deadline = Date.now() + ticketTimeoutMs;
    let blockOffset = ALL_ONES;
    for (;;) {
      await readRemote(host, ringStag, ringOffset + slotOffset, scratch, S.SLOT_SIZE);
      const read = decodeRingSlot(view, 0);
      const ready = read.sequence === ticket && read.blockOffset !== ALL_ONES;
      if (ready && blockOffset === read.blockOffset) return { ticket, blockOffset }; // the same on a second read
      if (ready) {
        blockOffset = read.blockOffset;
        continue;
      }
      blockOffset = ALL_ONES;
      if (Date.now() > deadline) throw new KbtpStatusError(K.STATUS_NO_SPACE, `ticket ${ticket}: no block arrived within the ticket timeout`);
      // An abandoned ticket is the target's to reclaim after its Ticket Timeout.
      signal.throwIfAborted();
      await new Promise((resolve) => setImmediate(resolve));
    }
  } finally {
    host.giveSlot(slot);
  }
}

/** RDMA-writes `data` into a block taken with takeBlock (through the Partition STag). */
export async function writeBlock(host: DirectHost, blockOffset: bigint, data: Uint8Array, signal: AbortSignal): Promise<void> {
  requireCapability(host, K.CAP_DIRECT_ALLOC, 'DIRECT_ALLOC');
  host.checkLength(data);
  if (data.length === 0) return;
  const slot = await host.takeSlot(signal);
  try {
    host.dataBuffer.set(data, host.stagingOffset(slot));
    await host.post({
      opcode: 'RDMA_WRITE',
      sgList: [{ lkey: host.dataStag, offset: host.stagingOffset(slot), length: data.length }],
      remote: { stag: host.hello.partitionStag, taggedOffset: blockOffset },
    });
  } finally {
    host.giveSlot(slot);
  }
}
