// The end of an event-loop turn: where the RNIC settles what the turn produced. Completion queues
// raise their notifications there (never from inside the receive path, so a handler that posts
// new work cannot re-enter a half-processed FPDU), and channels write everything queued during
// the turn in one system call. A turn is either a delivery (a socket read callback, a write
// completion: the channel brackets it with enter()/leave()) or, for work posted from anywhere
// else (application code, a timer), the rest of the current macrotask, reached through one
// microtask per turn. One Turn per thread: module state is per worker thread. Once a turn is
// settled, the busy poll may spin (host/rnic/busy-poll.ts): the turn's writes are out by then.

import { busyPoll } from './busy-poll.ts';

/** Something with work to settle at the end of the turn. */
export interface TurnParticipant {
  endTurn(): void;
}

class Turn {
  /** Notifications first (their handlers post work), then flushes (they write it). */
  private readonly notifiers: TurnParticipant[] = [];
  private notifierCount = 0;
  private readonly flushers: TurnParticipant[] = [];
  private flusherCount = 0;
  private depth = 0;
  private scheduled = false;
  private finishing = false;
  private readonly finishBound = (): void => {
    this.scheduled = false;
    if (this.depth !== 0) return;
    try {
      this.finish();
    } catch (error) {
      // What queueMicrotask did with an error that escaped: an uncaught exception, not a rejection.
      reportUncaught(error);
    }
  };

  /** A completion queue with a notification to raise. */
  notifyLater(participant: TurnParticipant): void {
    this.notifiers[this.notifierCount++] = participant;
    this.schedule();
  }

  /** A channel with bytes to write. */
  flushLater(participant: TurnParticipant): void {
    this.flushers[this.flusherCount++] = participant;
    this.schedule();
  }

  /** A delivery starts: what it produces is settled when the outermost one leaves. */
  enter(): void {
    this.depth++;
  }

  leave(): void {
    if (--this.depth === 0) this.finish();
  }

  private schedule(): void {
    if (this.depth > 0 || this.scheduled || this.finishing) return;
    this.scheduled = true;
    // A reaction to a settled promise runs in the same microtask queue, in the same order, as
    // queueMicrotask's callback; Node's queueMicrotask also makes an AsyncResource and a bound
    // function per call (about 250 octets with running it, against about 100: issue 16, one per
    // turn started outside a delivery, i.e. per call for a caller awaiting each call).
    void SETTLED.then(this.finishBound);
  }

  private finish(): void {
    if (this.finishing) return; // a delivery inside a flush: the running loop picks its work up
    this.finishing = true;
    let notified = false;
    try {
      while (this.notifierCount > 0 || this.flusherCount > 0) {
        if (this.notifierCount > 0) notified = true;
        // Index loops: a participant enlisted while another runs lands behind it, in this pass.
        for (let i = 0; i < this.notifierCount; i++) {
          const participant = this.notifiers[i]!;
          this.notifiers[i] = NOBODY;
          participant.endTurn();
        }
        this.notifierCount = 0;
        for (let i = 0; i < this.flusherCount; i++) {
          const participant = this.flushers[i]!;
          this.flushers[i] = NOBODY;
          participant.endTurn();
        }
        this.flusherCount = 0;
      }
    } finally {
      this.finishing = false;
      // Participants catch their own errors; should one escape, nothing stays enlisted twice.
      this.notifierCount = 0;
      this.flusherCount = 0;
    }
    busyPoll.turnEnded(notified);
  }
}

const NOBODY: TurnParticipant = { endTurn: () => undefined };

const SETTLED = Promise.resolve();

function reportUncaught(error: unknown): void {
  queueMicrotask(() => {
    throw error;
  });
}

/** This thread's turn. */
export const turn = new Turn();
