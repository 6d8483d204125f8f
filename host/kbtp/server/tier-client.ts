// A worker thread's side of the durable tier: asks go to the main thread, answers come back by id.
import type { TierAsk, TierAnswer, TierToMain } from './tier-messages.ts';

export class TierClient {
  private nextId = 1;
  private readonly waiting = new Map<number, (answer: TierAnswer) => void>();

  constructor(private readonly post: (message: TierToMain) => void) {}

  ask(ask: TierAsk): Promise<TierAnswer> {
    const id = this.nextId++;
    return new Promise((resolve) => {
      this.waiting.set(id, resolve);
      this.post({ type: 'tier', id, ask });
    });
  }

  answered(id: number, answer: TierAnswer): void {
    const resolve = this.waiting.get(id);
    if (resolve === undefined) return;
    this.waiting.delete(id);
    resolve(answer);
  }
}
