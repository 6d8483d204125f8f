// Maintenance of the durable tier while it serves (the appliance's scheduled jobs and SIGHUP):
// scrub and repair of block data, a checkpoint on demand with the data file's free tail given
// back, and new tenants' ranges and Durable Quotas. Each runs as the committer between two group
// commits (GroupCommit.exclusive), so no slot is taken or given back under it.
import { crc32c } from './checksum.ts';
import { errorCode } from './files.ts';
import { TierError, type CheckpointResult, type ScrubResult, type TierTenant } from './tier-types.ts';
import { tenantLookup } from './tenant-lookup.ts';
import { GroupCommit, type Op } from './group-commit.ts';

export abstract class TierMaintenance extends GroupCommit {
  /**
   * Re-reads up to `maxBlocks` blocks in slot order from `fromSlot` and checks their CRC32C, while
   * the tier serves. A block that changed during its read (freed, its slot reused) is not a
   * failure; one still the same that fails is counted and returned, for the caller to repair or
   * give up. Reads that fail with an I/O error are returned apart: they may be passing.
   */
  async scrub(fromSlot: number, maxBlocks: number): Promise<ScrubResult> {
    if (this.closed) throw new TierError('CLOSED', 'the durable tier is closed');
    const high = this.highSlot;
    const owner = new Int32Array(high).fill(-1);
    for (const [index, block] of this.blocks) if (block.slot < high) owner[block.slot] = index;
    const scratch = new Uint8Array(this.sizing.slotSize);
    const result: ScrubResult = { checked: 0, corrupt: [], unreadable: [], nextSlot: 0, highSlot: high };
    let slot = Math.min(Math.max(0, fromSlot), high);
    for (; slot < high && result.checked < maxBlocks; slot++) {
      // Closing (the node stops): the slice ends here, and a read the close cut short is no finding.
      if (this.closed) break;
      const index = owner[slot] ?? -1;
      const block = index < 0 ? undefined : this.blocks.get(index);
      if (block === undefined || block.slot !== slot) continue;
      const view = scratch.subarray(0, block.dataLength);
      let got: number;
      try {
        got = await this.data.read(view, slot * this.sizing.slotSize);
      } catch {
        if (this.closed) break;
        if (this.blocks.get(index) !== block) continue;
        this.counters.readErrors += 1;
        result.unreadable.push({ index, generation: block.generation });
        continue;
      }
      result.checked += 1;
      if (got === block.dataLength && crc32c(view) === block.crc) continue;
      if (this.blocks.get(index) !== block) continue;
      this.counters.checksumFailures += 1;
      result.corrupt.push({ index, generation: block.generation });
    }
    result.nextSlot = slot >= high ? 0 : slot;
    return result;
  }

  /**
   * Rewrites a block's slot from a good copy of its data (the pool's, for a resident block whose
   * copy on the tier failed a scrub). Only when the copy matches the CRC32C the block was sealed
   * with and the tier still holds that block; false otherwise.
   */
  repair(index: number, generation: number, data: Uint8Array): Promise<boolean> {
    return this.exclusive(async () => {
      const block = this.blocks.get(index);
      if (block === undefined || block.generation !== generation || block.dataLength !== data.length || crc32c(data) !== block.crc) return false;
      try {
        await this.data.write(data, block.slot * this.sizing.slotSize);
        await this.data.datasync();
      } catch (error) {
        this.counters.writeErrors += 1;
        throw new TierError(errorCode(error) === 'ENOSPC' ? 'ENOSPC' : 'EIO', `repairing block of handle index ${index}: ${String(error)}`);
      }
      this.counters.fsyncs += 1;
      return true;
    });
  }

  /**
   * Writes a checkpoint now (recovery then replays nothing older; older journals go) and gives the
   * free slots at the end of the data file back to the file system. Nothing is written when no
   * record was journalled since the last checkpoint and no slot can be given back.
   */
  checkpoint(): Promise<CheckpointResult> {
    return this.exclusive(async () => {
      let high = 0;
      for (const block of this.blocks.values()) high = Math.max(high, block.slot + 1);
      const trimmedSlots = this.highSlot - high;
      if (trimmedSlots === 0 && this.journalSize === this.journalHeader && !this.needsCheckpoint)
        return { written: false, trimmedSlots: 0, journal: this.journalSequence };
      if (trimmedSlots > 0) {
        // Slots past the last block are forgotten: a later seal takes them again through highSlot.
        this.highSlot = high;
        this.freeSlots.keepBelow(high);
      }
      try {
        await this.writeCheckpoint();
        // The checkpoint that no longer names them is durable; only now may the file shrink.
        if (trimmedSlots > 0) {
          await this.data.truncate(high * this.sizing.slotSize);
          await this.data.datasync();
          this.counters.fsyncs += 1;
        }
      } catch (error) {
        this.counters.writeErrors += 1;
        this.needsCheckpoint = true;
        throw new TierError(errorCode(error) === 'ENOSPC' ? 'ENOSPC' : 'EIO', `checkpoint: ${String(error)}`);
      }
      return { written: true, trimmedSlots, journal: this.journalSequence };
    });
  }

  /**
   * Replaces the tenants' store ranges and Durable Quotas while serving (SIGHUP). A tenant now over
   * its quota has its least recently used blocks that live on the tier alone dropped at once;
   * blocks also resident in the pool stay until they are demoted and the tenant seals again.
   */
  setTenants(tenants: TierTenant[]): Promise<{ dropped: number; overQuota: number }> {
    return this.exclusive(async () => {
      const lookup = tenantLookup(tenants);
      this.options.tenants = tenants;
      this.tenantOf = lookup;
      this.tenantHeld.length = 0;
      this.tenantDropsInFlight.length = 0;
      for (let i = 0; i < tenants.length; i++) {
        this.tenantHeld.push(0);
        this.tenantDropsInFlight.push(0);
      }
      for (const [index, block] of this.blocks) {
        block.tenant = lookup(index);
        if (block.tenant >= 0) this.tenantHeld[block.tenant] = (this.tenantHeld[block.tenant] ?? 0) + 1;
      }
      // Seals queued under the old ranges count against the new ones.
      for (const op of [...this.queue, ...this.waiting]) if (op.kind === 'seal') op.tenant = lookup(op.index);
      let dropped = 0;
      let overQuota = 0;
      for (const [position, tenant] of tenants.entries()) {
        let excess = (this.tenantHeld[position] ?? 0) - tenant.durableQuota;
        while (excess > 0) {
          const batch: Op[] = [];
          while (batch.length < Math.min(excess, this.maxBatch)) {
            if (!this.claimDrop(position, batch)) break;
          }
          if (batch.length === 0) break;
          if (this.journalFull(batch.length)) await this.writeCheckpoint();
          const before = this.counters.drops;
          await this.commit(batch);
          const done = this.counters.drops - before;
          dropped += done;
          excess -= done;
          if (done === 0) break;
        }
        overQuota += Math.max(0, excess);
      }
      return { dropped, overQuota };
    });
  }
}
