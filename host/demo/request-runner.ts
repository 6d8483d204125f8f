// Drives one request through the engine's program with a synchronous data mover: run, carry out
// the data operation, complete. A busy handle or a slot still being filled by another thread is
// retried here; the real target yields to its event loop instead.
import { ACTION_SEND, ACTION_DATA, ACTION_DATA_AND_SEND, ACTION_RETRY, ACTION_GOODBYE, ACTION_NONE } from '../../assembly/struct-offsets.ts';
import { decodeCompletion, type Completion } from '../kbtp/wire/messages.ts';
import type { ThreadArena } from '../engine/arena.ts';
import type { LoopbackMover } from './loopback-mover.ts';
import { InternalError } from '../errors.ts';

/** A request that kept being retried: another thread held its handle or ring slot for too long. */
export class RetryLimitError extends InternalError {
  constructor(retries: number) {
    super(`request still waiting after ${retries} retries (handle busy or ring slot never filled)`);
  }
}

export type RunOutcome = { kind: 'completion'; completion: Completion; invalidateStag: number } | { kind: 'goodbye' } | { kind: 'failed' };

/**
 * `maxRetries` bounds the retries; with `minWaitMs` the request is given up only once it has also
 * waited that long, since the thread it waits for may just be descheduled on a loaded machine.
 */
export function runToCompletion(
  arena: ThreadArena,
  mover: LoopbackMover,
  message: Uint8Array,
  session: number,
  maxRetries = 10_000_000,
  minWaitMs = 0,
): RunOutcome {
  const request = arena.acquireRequest(session);
  const started = minWaitMs > 0 ? Date.now() : 0;
  try {
    arena.place(request, message);
    let action = arena.run(request);
    let retries = 0;
    while (action === ACTION_RETRY) {
      if (++retries > maxRetries && (minWaitMs === 0 || Date.now() - started >= minWaitMs)) throw new RetryLimitError(retries);
      action = arena.run(request);
    }
    if (action === ACTION_DATA || action === ACTION_DATA_AND_SEND) {
      const op = arena.dataOperation(request);
      const moved = mover.carryOut(op.kind, op.local, op.length, op.stag, op.remoteOffset);
      const after = arena.complete(request, moved);
      // With DATA_AND_SEND the COMPLETION was written before the data moved; it goes out if the data did.
      action = action === ACTION_DATA ? after : moved ? ACTION_SEND : ACTION_NONE;
    }
    if (action === ACTION_SEND) {
      return { kind: 'completion', completion: decodeCompletion(arena.completion(request).slice()), invalidateStag: arena.invalidateStag(request) };
    }
    if (action === ACTION_GOODBYE) return { kind: 'goodbye' };
    if (action === ACTION_NONE) return { kind: 'failed' };
    throw new InternalError(`engine returned unknown action ${action}`);
  } finally {
    arena.releaseRequest(request);
  }
}
