// The main thread's answers to one worker's tier asks (tier-messages.ts), gathered while a group
// commit settles its requests and posted as one message. Every answer of a group is settled in the
// same run of microtasks (group-commit.ts applyDurable), so a flush queued behind the first one
// goes out after the last. One post per ask cost the main thread a message each (strace of a
// 256 KiB bench row: the process's write calls fell by ~0.8 per tier request); on the loaded
// machine of session 6 the effect on CPU time and throughput stayed within the noise
// (docs/notes/2026-12-01/issue-12-session6.md).
import type { TierAnswer, TierToWorker } from './tier-messages.ts';

export class TierAnswers {
  private pending: number[] = [];

  constructor(private readonly post: (message: TierToWorker) => void) {}

  add(id: number, answer: TierAnswer): void {
    this.pending.push(id, answer.ok ? 1 : 0, answer.outcome);
    if (this.pending.length === 3) queueMicrotask(() => this.flush());
  }

  private flush(): void {
    const answers = this.pending;
    this.pending = [];
    this.post({ type: 'tier', answers });
  }
}
