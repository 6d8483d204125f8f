// One thread of the demo: attaches to the engine created by the main thread and runs the
// requests it is sent, moving data with the loopback mover, and reports each completion.
import { parentPort, workerData } from 'node:worker_threads';
import { Engine, type EngineHandoff } from '../engine/engine.ts';
import { ThreadArena } from '../engine/arena.ts';
import { LoopbackMover } from '../demo/loopback-mover.ts';
import { runToCompletion } from '../demo/request-runner.ts';
import { encodeRequest, statusName } from '../kbtp/wire/messages.ts';
import * as K from '../../assembly/kbtp-constants.ts';
import { createHash } from 'node:crypto';
import { InternalError } from '../errors.ts';

export type DemoTask =
  | { op: 'store'; handle: bigint; text: string; viaRead: boolean }
  | { op: 'load'; handle: bigint; capacity: number }
  | { op: 'free'; handle: bigint };

export interface DemoResult {
  thread: number;
  op: string;
  handle: bigint;
  status: string;
  generation: number;
  dataLength: number;
  blockOffset: bigint;
  data?: string;
  sha256?: string;
}

const { handoff, thread } = workerData as { handoff: EngineHandoff; thread: number };
const engine = Engine.attach(handoff);
const arena = new ThreadArena(engine, thread);
const mover = new LoopbackMover(engine);
const session = arena.openSession({ tenant: 0, capabilities: 0, credits: 16 });
let requestId = BigInt(thread) << 32n;

parentPort?.on('message', (tasks: DemoTask[]) => {
  const results: DemoResult[] = [];
  for (const task of tasks) {
    requestId += 1n;
    let message: Uint8Array;
    let destination: Uint8Array | undefined;
    if (task.op === 'store') {
      const data = new TextEncoder().encode(task.text);
      message = task.viaRead
        ? encodeRequest({
            opcode: K.OPCODE_ALLOC_STORE,
            flags: K.FLAG_SEAL,
            requestId,
            handle: task.handle,
            descriptor: { stag: mover.register(data), taggedOffset: 0n, length: data.length },
          })
        : encodeRequest({ opcode: K.OPCODE_ALLOC_STORE, flags: K.FLAG_INLINE | K.FLAG_SEAL, requestId, handle: task.handle, inline: data });
    } else if (task.op === 'load') {
      destination = new Uint8Array(task.capacity);
      message = encodeRequest({
        opcode: K.OPCODE_LOAD,
        requestId,
        handle: task.handle,
        descriptor: { stag: mover.register(destination), taggedOffset: 0n, length: destination.length },
      });
    } else {
      message = encodeRequest({ opcode: K.OPCODE_FREE, requestId, handle: task.handle });
    }
    const outcome = runToCompletion(arena, mover, message, session);
    if (outcome.kind !== 'completion') throw new InternalError(`demo request ended without a completion (${outcome.kind})`);
    const { completion } = outcome;
    const result: DemoResult = {
      thread,
      op: task.op,
      handle: task.handle,
      status: statusName(completion.status),
      generation: completion.generation,
      dataLength: completion.dataLength,
      blockOffset: completion.blockOffset,
    };
    if (destination !== undefined && completion.status === K.STATUS_SUCCESS) {
      const loaded = destination.subarray(0, completion.dataLength);
      result.data = new TextDecoder().decode(loaded);
      result.sha256 = createHash('sha256').update(loaded).digest('hex').slice(0, 16);
    }
    results.push(result);
  }
  parentPort?.postMessage(results);
});
