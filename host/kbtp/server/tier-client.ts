// A worker thread's side of the durable tier: asks go to the main thread, answers come back by id.
// A seal's CRC32C is computed here, in the worker that just placed the block's data: the data is
// still in this core's cache, the workers share the work, and the main thread (one for every
// worker, where the group commit runs) is left with the writes.
import { crc32c } from '../../tier/checksum.ts';
import type { Engine } from '../../engine/engine.ts';
import type { TierAsk, TierAnswer, TierToMain } from './tier-messages.ts';

/** What a worker asks; a seal's checksum is added by the client. */
export type TierRequest = Exclude<TierAsk, { op: 'seal' }> | Omit<Extract<TierAsk, { op: 'seal' }>, 'crc'>;

export class TierClient {
  private nextId = 1;
  private readonly waiting = new Map<number, (answer: TierAnswer) => void>();
  /** Asks of this turn of the event loop, posted together when the turn's I/O callbacks are done. */
  private ids: number[] = [];
  private asks: TierAsk[] = [];

  constructor(
    private readonly post: (message: TierToMain) => void,
    private readonly engine: Engine,
  ) {}

  ask(request: TierRequest): Promise<TierAnswer> {
    const id = this.nextId++;
    let ask: TierAsk;
    if (request.op === 'seal') {
      // The staging block (or, for BIND, the pool block): the request holds it until answered.
      const { engine } = this;
      const data =
        request.staging !== 0
          ? engine.bytes.subarray(request.staging, request.staging + request.dataLength)
          : engine.block(request.blockOffset, request.dataLength);
      ask = { ...request, crc: crc32c(data) };
    } else ask = request;
    return new Promise((resolve) => {
      this.waiting.set(id, resolve);
      this.ids.push(id);
      this.asks.push(ask);
      // Posted after the poll phase (setImmediate), not at the end of this callback (a microtask):
      // every socket callback of a turn drains the microtasks, so only setImmediate gathers the
      // asks of all the sockets served in the turn. Each message wakes the main thread (100-200 us
      // of latency and CPU on both sides here); one message a turn also hands the group commit
      // its asks in bursts, so its groups are larger (docs/TIER.md, session 8).
      if (this.ids.length === 1) setImmediate(this.flush);
    });
  }

  private readonly flush = (): void => {
    const message: TierToMain = { type: 'tier', ids: this.ids, asks: this.asks };
    this.ids = [];
    this.asks = [];
    this.post(message);
  };

  /** A message of answers from the main thread (TierToWorker): triples of ask id, ok (1 or 0), outcome. */
  answeredAll(answers: readonly number[]): void {
    for (let i = 0; i + 2 < answers.length; i += 3) this.answered(answers[i] ?? 0, { ok: answers[i + 1] === 1, outcome: answers[i + 2] ?? 0 });
  }

  answered(id: number, answer: TierAnswer): void {
    const resolve = this.waiting.get(id);
    if (resolve === undefined) return;
    this.waiting.delete(id);
    resolve(answer);
  }
}
