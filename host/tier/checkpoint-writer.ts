// Checkpoints of the durable tier: the whole index as it is durable now, written beside a new
// journal that exists (and whose directory entry is durable) before the checkpoint naming it is
// renamed into place; the checkpoint before it and its journals are kept for a fallback
// (docs/TIER.md, "Checkpoints and recovery").
import path from 'node:path';
import type { TierFile } from './files.ts';
import { columnBytes, encodeFrame, JOURNAL_MAGIC } from './records.ts';
import { encodeCheckpoint, type Checkpoint } from './checkpoint.ts';
import { sequenceName, CHECKPOINT_PATTERN, JOURNAL_PATTERN } from './recovery.ts';
import { TierState } from './tier-state.ts';

export abstract class CheckpointWriter extends TierState {
  /**
   * Writes the index as it is durable now and starts a new journal: the new journal exists (and
   * its directory entry is durable) before the checkpoint that names it is renamed into place.
   */
  protected async writeCheckpoint(): Promise<void> {
    const { directory } = this.options;
    const sequence = this.journalSequence + (this.journal === undefined ? 0 : 1);
    const count = this.blocks.size;
    const columns = {
      index: new Uint32Array(count),
      generation: new Uint16Array(count),
      dataLength: new Uint32Array(count),
      slot: new Uint32Array(count),
      crc: new Uint32Array(count),
    };
    let i = 0;
    for (const [index, block] of this.blocks) {
      columns.index[i] = index;
      columns.generation[i] = block.generation;
      columns.dataLength[i] = block.dataLength;
      columns.slot[i] = block.slot;
      columns.crc[i] = block.crc;
      i += 1;
    }
    const checkpoint: Checkpoint = {
      blockSize: this.options.blockSize,
      slotSize: this.sizing.slotSize,
      handleBase: this.options.handleBase,
      handleCount: this.options.handleCount,
      journal: sequence,
      highSlot: this.highSlot,
      group: this.groupSequence,
      marks: this.marks,
      blocks: columns,
    };
    const bytes = encodeCheckpoint(checkpoint);
    const journal = await this.files.open(path.join(directory, sequenceName('journal', sequence)), true);
    // The journal's first frames, durable before the checkpoint that names it: the failed groups of
    // the journal it follows, named void (VoidRecord), then a copy of the marks (MarksRecord).
    const header = Buffer.concat([
      ...(this.voidGroups.length === 0 ? [] : [encodeFrame(JOURNAL_MAGIC, { k: 'v', j: this.journalSequence, q: [...this.voidGroups] })]),
      encodeFrame(JOURNAL_MAGIC, { k: 'm', m: columnBytes(this.marks) }),
    ]);
    try {
      await journal.truncate(0);
      await journal.write(header, 0);
      await journal.datasync();
      this.counters.fsyncs += 1;
      const temporary = path.join(directory, `${sequenceName('checkpoint', sequence)}.tmp`);
      const file = await this.files.open(temporary, true);
      try {
        await file.truncate(0);
        await file.write(bytes, 0);
        await file.datasync();
      } finally {
        await file.close();
      }
      await this.files.rename(temporary, path.join(directory, sequenceName('checkpoint', sequence)));
      await this.files.syncDirectory(directory);
      this.counters.fsyncs += 2;
    } catch (error) {
      await journal.close().catch(() => undefined);
      throw error;
    }
    const oldJournal = this.journal as TierFile | undefined;
    this.retainedBytes = oldJournal === undefined ? 0 : this.checkpointBytes + this.journalSize;
    this.journal = journal;
    this.journalSequence = sequence;
    this.journalSize = header.length;
    this.journalHeader = header.length;
    this.voidGroups = [];
    this.checkpointBytes = bytes.length;
    this.needsCheckpoint = false;
    await oldJournal?.close().catch(() => undefined);
    // Keep the checkpoint before this one and the journals after it: a checkpoint that fails its
    // checksum at the next start falls back to them. Everything older goes.
    const keepFrom = this.previousCheckpoint >= 0 ? this.previousCheckpoint : sequence;
    this.previousCheckpoint = sequence;
    for (const name of await this.files.list(directory)) {
      const checkpointMatch = CHECKPOINT_PATTERN.exec(name);
      const journalMatch = JOURNAL_PATTERN.exec(name);
      const number = Number(checkpointMatch?.[1] ?? journalMatch?.[1] ?? NaN);
      if ((Number.isFinite(number) && number < keepFrom) || name.endsWith('.tmp')) {
        await this.files.remove(path.join(directory, name)).catch(() => undefined);
      }
    }
  }
}
