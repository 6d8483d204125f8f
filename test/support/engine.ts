// Shared pieces of the engine tests.
import { Engine } from '../../host/engine/engine.ts';
import { ThreadArena } from '../../host/engine/arena.ts';
import { LoopbackMover } from '../../host/demo/loopback-mover.ts';
import { runToCompletion } from '../../host/demo/request-runner.ts';
import { encodeRequest, type RequestFields, type Completion } from '../../host/kbtp/wire/messages.ts';
import type { EngineConfig } from '../../host/engine/config.ts';

export interface Rig {
  engine: Engine;
  arena: ThreadArena;
  mover: LoopbackMover;
  /** Runs one request; returns its COMPLETION. */
  send(session: number, fields: Omit<RequestFields, 'requestId'> & { requestId?: bigint }): Completion;
}

export function rig(config: EngineConfig): Rig {
  const engine = Engine.create(config);
  const arena = new ThreadArena(engine, 0);
  const mover = new LoopbackMover(engine);
  let requestId = 0n;
  return {
    engine,
    arena,
    mover,
    send(session, fields) {
      requestId += 1n;
      const outcome = runToCompletion(arena, mover, encodeRequest({ requestId, ...fields }), session, 1000);
      if (outcome.kind !== 'completion') throw new Error(`expected a completion, got ${outcome.kind}`);
      return outcome.completion;
    },
  };
}

export function hex(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString('hex');
}
