// Idle records (calls, batches) kept for reuse. A plain array used as a stack with push/pop frees
// its storage each time it empties (V8 trims the backing store), so a pool that cycles one record
// allocated that storage again on every call (about 60 octets per batch, issue 16): this one
// keeps its slots and a count.

export class RecordPool<T> {
  private readonly records: Array<T | undefined> = [];
  private idle = 0;

  /** An idle record, or undefined when there is none. */
  take(): T | undefined {
    if (this.idle === 0) return undefined;
    const record = this.records[--this.idle];
    this.records[this.idle] = undefined;
    return record;
  }

  /** Keeps `record` for a later take(). */
  give(record: T): void {
    if (this.idle === this.records.length) this.records.push(record);
    else this.records[this.idle] = record;
    this.idle++;
  }
}
