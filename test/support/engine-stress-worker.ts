// One thread of the engine stress test: random ALLOC_STORE / LOAD / FREE on the shared ring and
// direct allocations (FetchAdd on the partition Head, slot read, block write, BIND) on a
// partition ring, all over the one shared memory, checking every answer it gets.
import { parentPort, workerData } from 'node:worker_threads';
import * as K from '../../assembly/kbtp-constants.ts';
import { Engine, type EngineHandoff } from '../../host/engine/engine.ts';
import { ThreadArena } from '../../host/engine/arena.ts';
import { LoopbackMover } from '../../host/demo/loopback-mover.ts';
import { runToCompletion, RetryLimitError } from '../../host/demo/request-runner.ts';
import { encodeRequest, statusName } from '../../host/kbtp/wire/messages.ts';
import { Random } from '../../host/util/random.ts';

export interface StressJob {
  handoff: EngineHandoff;
  thread: number;
  operations: number;
  seed: number;
  maxRetries: number;
  /** A wait past maxRetries counts as stuck only after this long too (0: at once). */
  minStuckMs: number;
  /** Int32Array over a SharedArrayBuffer: [0] = tenant B's initiator-side usage (bound + tickets held). */
  initiatorUsage: SharedArrayBuffer;
  shared: { first: bigint; count: number };
  direct: { first: bigint; count: number; quota: number };
}

export interface StressReport {
  thread: number;
  operations: number;
  statuses: Record<string, number>;
  directBinds: number;
  reclaimed: number;
  wrongData: number;
  unexpected: string[];
  stuck: string | undefined;
}

const job = workerData as StressJob;
const engine = Engine.attach(job.handoff);
const arena = new ThreadArena(engine, job.thread);
const mover = new LoopbackMover(engine);
const sharedSession = arena.openSession({ tenant: 0, capabilities: 0, credits: 8 });
const directSession = arena.openSession({ tenant: 1, capabilities: K.CAP_DIRECT_ALLOC, credits: 8 });
const usage = new Int32Array(job.initiatorUsage);
const destination = new Uint8Array(16);
const destinationStag = mover.register(destination);
const partition = engine.partitionRing(0);
const directTenant = engine.tenantAddress(1);
const addMask = engine.exports.ringAddMask(partition.order);
const addData = BigInt(K.RING_ADD_DATA_MASKED);
const ALL_ONES = 0xffffffffffffffffn;

const generator = new Random(job.seed);
function random(n: number): number {
  return generator.below(n);
}

const report: StressReport = { thread: job.thread, operations: 0, statuses: {}, directBinds: 0, reclaimed: 0, wrongData: 0, unexpected: [], stuck: undefined };
let requestId = BigInt(job.thread) << 40n;
const payload = new Uint8Array(8);
const payloadView = new DataView(payload.buffer);

function send(session: number, message: Uint8Array): number {
  const outcome = runToCompletion(arena, mover, message, session, job.maxRetries, job.minStuckMs);
  if (outcome.kind !== 'completion') throw new Error(`request ended without a completion (${outcome.kind})`);
  const name = statusName(outcome.completion.status);
  report.statuses[name] = (report.statuses[name] ?? 0) + 1;
  return outcome.completion.status;
}

function expect(status: number, allowed: number[], what: string): void {
  if (!allowed.includes(status) && report.unexpected.length < 20) report.unexpected.push(`${what}: ${statusName(status)}`);
}

function directAllocate(handle: bigint): void {
  // The initiator keeps its own usage (bound + tickets held) within the quota before it takes a ticket.
  const held = Atomics.add(usage, 0, 1);
  if (held >= job.direct.quota) {
    Atomics.sub(usage, 0, 1);
    return;
  }
  const counter = BigInt.asUintN(64, engine.exports.maskedFetchAdd(partition.head, addData, addMask));
  engine.exports.quotaAdjust(directTenant, 1); // as the target does when it sees a one-sided ticket
  const ticket = Number(counter >> 32n);
  const slot = partition.slots + Number(counter & 0xffffffffn);
  let blockOffset = ALL_ONES;
  const started = Date.now();
  for (let spins = 0; ; spins++) {
    // Sequence, then Block Offset, then Sequence again: a 16-octet read is not atomic (draft 6.6).
    const sequence = engine.view.getUint32(slot, false);
    const offset = engine.view.getBigUint64(slot + 8, false);
    if (sequence === ticket && offset !== ALL_ONES && engine.view.getUint32(slot, false) === ticket) {
      blockOffset = offset;
      break;
    }
    if (spins > job.maxRetries && Date.now() - started >= job.minStuckMs) throw new RetryLimitError(spins);
  }
  payloadView.setBigUint64(0, handle, false);
  engine.block(blockOffset, 8).set(payload);
  requestId += 1n;
  const status = send(
    directSession,
    encodeRequest({ opcode: K.OPCODE_BIND, flags: K.FLAG_SEAL, requestId, handle, bind: { ticket, dataLength: 8, blockOffset } }),
  );
  if (status === K.STATUS_SUCCESS) {
    report.directBinds += 1;
    return;
  }
  expect(status, [K.STATUS_ALREADY_VALID], 'BIND');
  // The handle was bound by someone else meanwhile: the ticket stays unbound, and the target
  // reclaims it as it would after the Ticket Timeout.
  const reclaimed = BigInt.asIntN(64, engine.exports.ringAbandon(partition.descriptor, ticket));
  if (reclaimed !== blockOffset && report.unexpected.length < 20) report.unexpected.push(`reclaim of ticket ${ticket} gave ${reclaimed}`);
  report.reclaimed += 1;
  engine.exports.quotaAdjust(directTenant, -1);
  Atomics.sub(usage, 0, 1);
}

function operate(): void {
  const direct = random(10) < 3;
  const range = direct ? job.direct : job.shared;
  const handle = range.first + BigInt(random(range.count));
  const session = direct ? directSession : sharedSession;
  const entry = engine.readEntry(handle);
  requestId += 1n;
  if (entry !== undefined && (entry.flags & K.ENTRY_VALID) !== 0) {
    if (random(2) === 0) {
      destination.fill(0);
      const status = send(
        session,
        encodeRequest({ opcode: K.OPCODE_LOAD, requestId, handle, descriptor: { stag: destinationStag, taggedOffset: 0n, length: destination.length } }),
      );
      expect(status, [K.STATUS_SUCCESS, K.STATUS_NOT_VALID], 'LOAD');
      if (status === K.STATUS_SUCCESS && new DataView(destination.buffer).getBigUint64(0, false) !== handle) report.wrongData += 1;
    } else {
      const status = send(session, encodeRequest({ opcode: K.OPCODE_FREE, requestId, handle }));
      expect(status, [K.STATUS_SUCCESS, K.STATUS_NOT_VALID], 'FREE');
      if (status === K.STATUS_SUCCESS && direct) Atomics.sub(usage, 0, 1);
    }
    return;
  }
  if (direct) {
    directAllocate(handle);
    return;
  }
  payloadView.setBigUint64(0, handle, false);
  const status = send(session, encodeRequest({ opcode: K.OPCODE_ALLOC_STORE, flags: K.FLAG_INLINE | K.FLAG_SEAL, requestId, handle, inline: payload }));
  expect(status, [K.STATUS_SUCCESS, K.STATUS_ALREADY_VALID, K.STATUS_NO_SPACE], 'ALLOC_STORE');
}

try {
  for (; report.operations < job.operations; report.operations++) operate();
} catch (error) {
  if (!(error instanceof RetryLimitError)) throw error;
  report.stuck = error.message;
}
parentPort?.postMessage(report);
