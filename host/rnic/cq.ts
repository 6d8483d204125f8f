// Completion queues. Completions are polled; a consumer that does not want to spin arms the CQ
// (optionally for solicited completions only) and awaits the next notification, or drains it
// from a notification listener. Notifications are raised at the end of the event-loop turn
// (./turn.ts), never from inside the receive path, so a handler that posts new work cannot
// re-enter a half-processed FPDU. Completions sit in a fixed ring of records that are rewritten
// in place: adding, holding and draining them allocates nothing. drain() hands its handler the
// ring's record (valid during the call); poll() returns copies a caller may keep.

import type { NicObserver } from './nic-observer.ts';
import type { WcOpcode, WcStatus, WorkCompletion } from './work.ts';
import { RnicError } from './errors.ts';
import { turn, type TurnParticipant } from './turn.ts';

export interface CompletionQueueOptions {
  /** Most completions held before the CQ overruns (default 4096). */
  depth?: number;
  /** Event queue number reported to the observer for this CQ's notifications (default 0). */
  eventQueue?: number;
}

/** A completion as the ring holds it: every field present (unused ones undefined), reused. */
class CompletionRecord implements WorkCompletion {
  wrId: bigint | number = 0;
  status: WcStatus = 0;
  opcode: WcOpcode = 'RECV';
  qpNumber = 0;
  byteLength = 0;
  immediate: bigint | undefined = undefined;
  invalidatedStag: number | undefined = undefined;
  solicited: boolean | undefined = undefined;
  atomicResult: bigint | undefined = undefined;
  error: string | undefined = undefined;
}

/** A completion a caller may keep: a plain object with only the fields that apply. */
export function copyCompletion(completion: WorkCompletion): WorkCompletion {
  const copy: { -readonly [K in keyof WorkCompletion]: WorkCompletion[K] } = {
    wrId: completion.wrId,
    status: completion.status,
    opcode: completion.opcode,
    qpNumber: completion.qpNumber,
    byteLength: completion.byteLength,
  };
  if (completion.immediate !== undefined) copy.immediate = completion.immediate;
  if (completion.invalidatedStag !== undefined) copy.invalidatedStag = completion.invalidatedStag;
  if (completion.solicited !== undefined) copy.solicited = completion.solicited;
  if (completion.atomicResult !== undefined) copy.atomicResult = completion.atomicResult;
  if (completion.error !== undefined) copy.error = completion.error;
  return copy;
}

/** Who waits for which completions: any, or solicited (and failed) ones added after `since`. */
type Waiter = { solicitedOnly: boolean; since: number; resolve: () => void };

export class CompletionQueue implements TurnParticipant {
  readonly depth: number;
  readonly eventQueue: number;
  /**
   * Ring of records, `head` the oldest, `count` held. One more record than `depth`: the record
   * drain() is handing out is never rewritten by a completion its handler causes.
   */
  private readonly ring: CompletionRecord[];
  private head = 0;
  private count = 0;
  private waiters: Waiter[] = [];
  /** Arming (one-shot): none, any completion, or a solicited one, counted from `armedSince`. */
  private armed: 'none' | 'any' | 'solicited' = 'none';
  private armedSince = 0;
  private notifyScheduled = false;
  /** Completions ever added, and those that were solicited or failed (which always notify). */
  private added = 0;
  private solicitedAdded = 0;
  private listeners: Array<() => void> = [];
  /** Set when more completions arrived than `depth`; the CQ is unusable afterwards. */
  overrun = false;

  constructor(
    readonly number: number,
    private readonly observer: NicObserver | undefined,
    options: CompletionQueueOptions = {},
  ) {
    this.depth = options.depth ?? 4096;
    this.eventQueue = options.eventQueue ?? 0;
    if (!Number.isInteger(this.depth) || this.depth < 1) throw new RnicError('EINVAL', `CQ depth ${this.depth} must be a positive integer`);
    this.ring = Array.from({ length: this.depth + 1 }, () => new CompletionRecord());
  }

  get size(): number {
    return this.count;
  }

  /** Adds a completion (its fields are copied); false when the CQ overran (it is dropped). */
  push(completion: WorkCompletion): boolean {
    const record = this.add(
      completion.wrId,
      completion.status,
      completion.opcode,
      completion.qpNumber,
      completion.byteLength,
      completion.solicited,
      completion.error,
    );
    if (record === undefined) return false;
    record.immediate = completion.immediate;
    record.invalidatedStag = completion.invalidatedStag;
    record.atomicResult = completion.atomicResult;
    return true;
  }

  /**
   * Adds a completion from its fields, allocating nothing; returns its record (for the rare
   * fields: immediate, invalidated STag, atomic result), or undefined when the CQ overran.
   */
  add(
    wrId: bigint | number,
    status: WcStatus,
    opcode: WcOpcode,
    qpNumber: number,
    byteLength: number,
    solicited: boolean | undefined,
    error: string | undefined,
  ): CompletionRecord | undefined {
    if (this.count >= this.depth) {
      this.overrun = true;
      return undefined;
    }
    const record = this.ring[(this.head + this.count) % this.ring.length]!;
    record.wrId = wrId;
    record.status = status;
    record.opcode = opcode;
    record.qpNumber = qpNumber;
    record.byteLength = byteLength;
    record.solicited = solicited;
    record.error = error;
    record.immediate = undefined;
    record.invalidatedStag = undefined;
    record.atomicResult = undefined;
    this.count++;
    this.observer?.completionQueue(this.number);
    this.added++;
    if (solicited === true || status !== 0) this.solicitedAdded++;
    if (!this.notifyScheduled && (this.waiters.length > 0 || this.armed !== 'none')) {
      this.notifyScheduled = true;
      turn.notifyLater(this);
    }
    return record;
  }

  /** Removes and returns up to `max` completions, oldest first. */
  poll(max = 16): WorkCompletion[] {
    const out: WorkCompletion[] = [];
    while (out.length < max) {
      const completion = this.take();
      if (completion === undefined) break;
      out.push(copyCompletion(completion));
    }
    return out;
  }

  /**
   * Hands up to `max` completions, oldest first, to `handler`; returns how many. The polling
   * form for a hot path: no array is built, and the handler gets the ring's record, valid until
   * it returns (copyCompletion() keeps one).
   */
  drain(handler: (completion: WorkCompletion) => void, max = this.depth): number {
    let handled = 0;
    while (handled < max) {
      const completion = this.take();
      if (completion === undefined) break;
      handled++;
      handler(completion);
    }
    return handled;
  }

  private take(): CompletionRecord | undefined {
    if (this.count === 0) return undefined;
    const completion = this.ring[this.head]!;
    this.head = (this.head + 1) % this.ring.length;
    this.count--;
    return completion;
  }

  /** Raises the notification the turn collected (TurnParticipant). */
  endTurn(): void {
    this.notify();
  }

  /**
   * Arms the CQ (ibv_req_notify_cq): the next completion added (a solicited or failed one when
   * `solicitedOnly`) raises one notification to the `onNotify` listeners. Arming is one-shot;
   * arming for any completion overrides a solicited-only arming.
   */
  requestNotify(solicitedOnly = false): void {
    if (this.armed === 'any') return;
    if (this.armed === 'none') this.armedSince = solicitedOnly ? this.solicitedAdded : this.added;
    else if (!solicitedOnly) this.armedSince = this.added;
    this.armed = solicitedOnly ? (this.armed === 'none' ? 'solicited' : this.armed) : 'any';
  }

  /** Registers a notification listener; returns a function that removes it. */
  onNotify(listener: () => void): () => void {
    this.listeners.push(listener);
    return () => {
      this.listeners = this.listeners.filter((item) => item !== listener);
    };
  }

  /**
   * The awaitable notification: resolves once the CQ holds a completion (at once if it already
   * does). With `solicitedOnly`, waits for a solicited or failed completion added after the call.
   */
  wait(solicitedOnly = false): Promise<void> {
    if (!solicitedOnly && this.size > 0) return Promise.resolve();
    return new Promise((resolve) => {
      this.waiters.push({ solicitedOnly, since: solicitedOnly ? this.solicitedAdded : this.added, resolve });
    });
  }

  /**
   * Resolves every pending wait() without a completion: a consumer that stops polling (its
   * connection is over) wakes its own loop this way instead of faking a completion.
   */
  releaseWaiters(): void {
    for (const waiter of this.waiters.splice(0)) waiter.resolve();
  }

  private notify(): void {
    this.notifyScheduled = false;
    let raised = false;
    if (this.armed !== 'none') {
      const fire = this.armed === 'any' ? this.added > this.armedSince : this.solicitedAdded > this.armedSince;
      if (fire) {
        this.armed = 'none';
        raised = true;
        // removal replaces the array (onNotify), so this one stays as it was
        const listeners = this.listeners;
        for (let i = 0; i < listeners.length; i++) {
          const listener = listeners[i]!;
          try {
            listener();
          } catch (error) {
            // A listener's bug must not stop the other listeners; report it outside this call.
            queueMicrotask(() => {
              throw error;
            });
          }
        }
      }
    }
    if (this.waiters.length > 0) {
      const remaining: Waiter[] = [];
      for (const waiter of this.waiters) {
        const ready = waiter.solicitedOnly ? this.solicitedAdded > waiter.since : this.size > 0 || this.added > waiter.since;
        if (ready) {
          raised = true;
          waiter.resolve();
        } else {
          remaining.push(waiter);
        }
      }
      this.waiters = remaining;
    }
    if (raised) this.observer?.eventQueue(this.eventQueue);
  }
}
