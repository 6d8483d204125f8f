// The durable tier's scheduled maintenance (docs/APPLIANCE.md, "Scheduled jobs"):
// - tierScrub re-reads the next slice of the tier each run and checks every block's CRC32C, so
//   that a disk going bad shows up before a LOAD needs the block. A corrupt copy of a resident
//   block is rewritten from the pool; a corrupt block on the tier alone is given up durably, as a
//   LOAD that found it would. Slices follow each other through the data file, pass after pass.
// - tierCheckpoint writes a checkpoint, so a crash replays at most the journal since then and
//   older journals go, and gives the free tail of the data file back to the file system.
// A run that finds corruption throws (the scheduler logs and counts it: an operator should
// look at the disk), after it has done what it could.
import type { TierHost } from '../host/kbtp/server/tier-host.ts';
import type { ApplianceMetrics } from './metrics.ts';
import { CheckFailedError } from '../host/errors.ts';

export class TierMaintenance {
  private nextSlot = 0;
  private pass = 1;
  private checkedThisPass = 0;
  private lastHighSlot = 0;

  constructor(
    private readonly metrics: ApplianceMetrics,
    private readonly blocksPerRun: number,
  ) {}

  /** Where the scrub is: its pass and how far through it (0 to 1, as of the last run). */
  progress(): { pass: number; progress: number } {
    return { pass: this.pass, progress: this.lastHighSlot === 0 ? 0 : Math.min(1, this.nextSlot / this.lastHighSlot) };
  }

  async scrub(tier: TierHost): Promise<string> {
    const from = this.nextSlot;
    const report = await tier.scrub(from, this.blocksPerRun);
    this.metrics.scrubbedBlocks.inc(report.checked);
    this.checkedThisPass += report.checked;
    const pass = this.pass;
    const through = report.nextSlot === 0 ? report.highSlot : report.nextSlot;
    let where = `pass ${pass}: ${report.checked} blocks checked in slots ${from}-${Math.max(from, through - 1)} of ${report.highSlot}`;
    if (report.nextSlot === 0) {
      where += `; pass complete (${this.checkedThisPass} blocks)`;
      this.metrics.scrubPasses.inc();
      this.metrics.scrubProgress.set(0);
      this.pass += 1;
      this.checkedThisPass = 0;
    } else {
      const ratio = report.highSlot === 0 ? 0 : report.nextSlot / report.highSlot;
      this.metrics.scrubProgress.set(ratio);
      where += ` (${(ratio * 100).toFixed(1)} % of the pass)`;
    }
    this.nextSlot = report.nextSlot;
    this.lastHighSlot = report.highSlot;
    for (const outcome of ['repaired', 'unbound', 'deferred'] as const) if (report[outcome] > 0) this.metrics.scrubCorrupt.inc({ outcome }, report[outcome]);
    if (report.unreadable.length > 0) this.metrics.scrubCorrupt.inc({ outcome: 'unreadable' }, report.unreadable.length);
    if (report.corrupt.length === 0 && report.unreadable.length === 0) return `${where}, all good`;
    const indices = (list: ReadonlyArray<{ index: number }>): string =>
      `${list
        .slice(0, 5)
        .map((bad) => bad.index)
        .join(', ')}${list.length > 5 ? ', ...' : ''}`;
    const found: string[] = [];
    if (report.corrupt.length > 0) {
      found.push(
        `${report.corrupt.length} blocks failed their checksum (handle indices ${indices(report.corrupt)}): ` +
          `${report.repaired} rewritten from the pool, ${report.unbound} given up (not VALID any more), ${report.deferred} left for the next pass`,
      );
    }
    if (report.unreadable.length > 0)
      found.push(`${report.unreadable.length} blocks could not be read (I/O error; handle indices ${indices(report.unreadable)})`);
    // A check kbtp runs on itself found a fault: the run counts as failed, so it is seen.
    throw new CheckFailedError(`${where}; ${found.join('; ')}: check the disk of the data directory`);
  }

  async checkpoint(tier: TierHost, blockSize: number): Promise<string> {
    const result = await tier.checkpoint();
    if (!result.written) return 'nothing journalled since the last checkpoint';
    const slotBytes = Math.ceil(blockSize / 4096) * 4096;
    const trimmedBytes = result.trimmedSlots * slotBytes;
    this.metrics.trimmedBytes.inc(trimmedBytes);
    const trimmed = result.trimmedSlots === 0 ? '' : `; ${result.trimmedSlots} free slots (${(trimmedBytes / 2 ** 20).toFixed(1)} MiB) given back`;
    return `checkpoint written, journal ${result.journal} started${trimmed}`;
  }
}
