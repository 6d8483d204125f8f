// What a worker thread asks of the durable tier, which lives in the target's main thread (one
// tier, one group commit for all workers), and the answers. Block data never travels in these
// messages: the tier reads and writes the pool in the shared memory directly. A seal carries the
// CRC32C of its data, computed by the worker (tier-client.ts).

export type TierAsk =
  | { op: 'seal'; index: number; generation: number; blockOffset: bigint; dataLength: number; staging: number; crc: number }
  | { op: 'unbind'; index: number; generation: number; why: 'free' | 'lost' | 'undo' }
  | { op: 'reserve'; index: number; generation: number }
  | { op: 'fetch'; index: number; blockOffset: bigint };

/** `outcome` is S.FETCH_* for a fetch. */
export interface TierAnswer {
  ok: boolean;
  outcome: number;
}

/**
 * A worker's asks of one turn of its event loop (tier-client.ts), `ids[i]` naming `asks[i]`: one
 * message, so one wake-up of the main thread, for all the seals its sockets brought in that turn.
 */
export type TierToMain = { type: 'tier'; ids: number[]; asks: TierAsk[] };
/**
 * The main thread's answers to one worker, as triples: ask id, 1 when ok (else 0), outcome. A group
 * commit settles all of its asks at once, and one message per worker and group (tier-answers.ts)
 * costs the main thread one post and the worker one wake-up, instead of one per ask.
 */
export type TierToWorker = { type: 'tier'; answers: number[] };
