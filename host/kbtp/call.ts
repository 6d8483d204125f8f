// How long a call of the client library may take and how it gives up: every call runs within
// its { signal, timeoutMs } (bounded()), so nothing the library does can wait forever.
import { AbortedError, TimeoutError, UsageError } from './errors.ts';
import type { DeadlineEntry, Deadlines } from './deadlines.ts';
import { monotonicMs } from '../util/clock.ts';

/** What every call takes: an AbortSignal and a time limit (default: the session's `callTimeoutMs`). */
export interface CallOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
}

export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
export const DEFAULT_CALL_TIMEOUT_MS = 30_000;

/** A time limit in milliseconds as setTimeout takes it; a UsageError otherwise. */
export function checkTimeout(value: number, name: string): number {
  if (typeof value !== 'number' || !(value > 0) || value > 2 ** 31 - 1) {
    throw new UsageError(`${name} ${String(value)} must be a number of milliseconds from 1 to 2^31-1`);
  }
  return value;
}

/**
 * Runs `body` with a deadline and the caller's AbortSignal: the returned promise settles when the
 * body does, when the time is up (TimeoutError) or when the signal fires (AbortedError). The body
 * gets a signal of its own, aborted in either case, so it stops waiting for a slot; work already
 * on the wire finishes in the background and keeps its buffers until then. With `deadlines` (a
 * session's), the deadline is swept by the session's timer instead of one of the call's own.
 * (LOAD, STORE and batches do without the AbortController and the race: slot-call.ts, batch.ts.)
 */
export async function bounded<T>(
  what: string,
  options: { signal?: AbortSignal; timeoutMs: number; deadlines?: Deadlines },
  body: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const caller = options.signal;
  if (caller?.aborted === true) throw new AbortedError(`${what}: aborted`, caller.reason);
  const controller = new AbortController();
  const stopped = new Promise<never>((_, reject) => {
    controller.signal.addEventListener('abort', () => reject(controller.signal.reason as Error), { once: true });
  });
  stopped.catch(() => undefined);
  const onAbort = (): void => controller.abort(new AbortedError(`${what}: aborted`, caller?.reason));
  caller?.addEventListener('abort', onAbort, { once: true });
  const expired = (): void => controller.abort(new TimeoutError(`${what}: no answer within ${options.timeoutMs} ms`));
  const deadlines = options.deadlines;
  let timer: NodeJS.Timeout | undefined;
  let entry: DeadlineEntry | undefined;
  if (deadlines === undefined) timer = setTimeout(expired, options.timeoutMs);
  else {
    entry = { deadline: monotonicMs() + options.timeoutMs, expired, previousDeadline: undefined, nextDeadline: undefined, inDeadlines: false };
    deadlines.add(entry);
  }
  const work = body(controller.signal);
  work.catch(() => undefined);
  try {
    return await Promise.race([work, stopped]);
  } finally {
    if (timer !== undefined) clearTimeout(timer);
    if (entry !== undefined) deadlines?.remove(entry);
    caller?.removeEventListener('abort', onAbort);
  }
}
