// An in-memory file layer that models what a disk keeps when the power goes: file data is
// durable only up to the last datasync, and names (creation, rename, removal) only up to the
// last directory sync. afterPowerLoss() gives the files as the next boot would find them, with
// each write made after the last sync kept, dropped or torn at a sector boundary.
import path from 'node:path';
import type { FileLayer, TierFile } from '../../host/tier/files.ts';
import type { Random } from '../../host/util/random.ts';

const SECTOR = 512;

class Content {
  bytes = new Uint8Array(0);
  durable = new Uint8Array(0);
  pending: Array<{ position: number; data: Uint8Array } | { truncate: number }> = [];

  write(data: Uint8Array, position: number): void {
    const end = position + data.length;
    if (end > this.bytes.length) {
      const grown = new Uint8Array(end);
      grown.set(this.bytes);
      this.bytes = grown;
    }
    this.bytes.set(data, position);
    this.pending.push({ position, data: data.slice() });
  }

  truncate(length: number): void {
    const next = new Uint8Array(length);
    next.set(this.bytes.subarray(0, Math.min(length, this.bytes.length)));
    this.bytes = next;
    this.pending.push({ truncate: length });
  }

  sync(): void {
    this.durable = this.bytes.slice();
    this.pending = [];
  }

  /** What survives a power loss: the durable bytes and some of the unsynced writes, in order. */
  survivor(random: Random | undefined): Content {
    const next = new Content();
    next.bytes = this.durable.slice();
    for (const change of random === undefined ? [] : this.pending) {
      const fate = random?.below(3) ?? 0; // 0 lost, 1 kept, 2 torn
      if (fate === 0) continue;
      if ('truncate' in change) {
        next.truncate(change.truncate);
        continue;
      }
      const keep = fate === 1 ? change.data.length : Math.min(change.data.length, SECTOR * (random?.below(Math.ceil(change.data.length / SECTOR)) ?? 0));
      if (keep > 0) next.write(change.data.subarray(0, keep), change.position);
    }
    next.sync();
    return next;
  }
}

type MetaChange = { kind: 'set'; name: string; content: Content } | { kind: 'remove'; name: string };

/** Test control over failures: throw `code` from an operation on a matching path. */
export interface FaultRule {
  op: 'open' | 'write' | 'read' | 'datasync' | 'truncate' | 'rename' | 'syncDirectory';
  match?: RegExp;
  code: 'ENOSPC' | 'EIO';
  /** Times it fires (all the time when absent). */
  times?: number;
}

export class MemoryFiles implements FileLayer {
  private readonly names = new Map<string, Content>();
  private durableNames = new Map<string, Content>();
  private pendingMeta: MetaChange[] = [];
  readonly faults: FaultRule[] = [];
  readonly calls = { datasync: 0, write: 0 };
  /** Write calls (write or writev) by file path. */
  readonly writesTo = new Map<string, number>();

  private fault(op: FaultRule['op'], file: string): void {
    for (const rule of this.faults) {
      if (rule.op !== op || (rule.match !== undefined && !rule.match.test(file))) continue;
      if (rule.times !== undefined) {
        if (rule.times <= 0) continue;
        rule.times -= 1;
      }
      throw Object.assign(new Error(`${op} ${file}: injected ${rule.code}`), { code: rule.code });
    }
  }

  async open(file: string, create: boolean): Promise<TierFile> {
    this.fault('open', file);
    let content = this.names.get(file);
    if (content === undefined) {
      if (!create) throw Object.assign(new Error(`${file}: no such file`), { code: 'ENOENT' });
      content = new Content();
      this.names.set(file, content);
      this.pendingMeta.push({ kind: 'set', name: file, content });
    }
    return this.handle(file, content);
  }

  private handle(file: string, content: Content): TierFile {
    const files = this;
    return {
      path: file,
      async write(data, position) {
        files.fault('write', file);
        files.calls.write += 1;
        files.writesTo.set(file, (files.writesTo.get(file) ?? 0) + 1);
        content.write(data, position);
      },
      async writev(data, position) {
        files.fault('write', file);
        files.calls.write += 1;
        files.writesTo.set(file, (files.writesTo.get(file) ?? 0) + 1);
        let offset = position;
        for (const part of data) {
          content.write(part, offset);
          offset += part.length;
        }
      },
      async read(into, position) {
        files.fault('read', file);
        const available = Math.max(0, Math.min(into.length, content.bytes.length - position));
        into.set(content.bytes.subarray(position, position + available));
        return available;
      },
      async datasync() {
        files.fault('datasync', file);
        files.calls.datasync += 1;
        content.sync();
      },
      async size() {
        return content.bytes.length;
      },
      async truncate(length) {
        files.fault('truncate', file);
        content.truncate(length);
      },
      async close() {},
    };
  }

  async list(directory: string): Promise<string[]> {
    const prefix = directory.endsWith('/') ? directory : `${directory}/`;
    return [...this.names.keys()]
      .filter((name) => name.startsWith(prefix) && !name.slice(prefix.length).includes('/'))
      .map((name) => name.slice(prefix.length));
  }

  async exists(file: string): Promise<boolean> {
    return this.names.has(file);
  }

  async rename(from: string, to: string): Promise<void> {
    this.fault('rename', from);
    const content = this.names.get(from);
    if (content === undefined) throw Object.assign(new Error(`${from}: no such file`), { code: 'ENOENT' });
    this.names.delete(from);
    this.names.set(to, content);
    this.pendingMeta.push({ kind: 'remove', name: from }, { kind: 'set', name: to, content });
  }

  async remove(file: string): Promise<void> {
    if (!this.names.delete(file)) return;
    this.pendingMeta.push({ kind: 'remove', name: file });
  }

  async syncDirectory(directory: string): Promise<void> {
    this.fault('syncDirectory', directory);
    this.durableNames = new Map(this.names);
    this.pendingMeta = [];
  }

  async makeDirectory(): Promise<void> {}

  /** Total octets of the files in `directory`. */
  bytesIn(directory: string): number {
    let total = 0;
    for (const [name, content] of this.names) if (path.dirname(name) === directory) total += content.bytes.length;
    return total;
  }

  /** Direct access to a file's bytes (for corrupting them). */
  contentOf(file: string): Uint8Array {
    const content = this.names.get(file);
    if (content === undefined) throw new Error(`${file}: no such file`);
    return content.bytes;
  }

  /** The files as they are (a process crash: the page cache survives). */
  afterCrash(): MemoryFiles {
    return this.rebuild(this.names, [], undefined, true);
  }

  /**
   * The files after a power loss: the last synced names and data, plus a random prefix of the
   * later name changes and a random selection of later writes (kept, dropped or torn).
   */
  afterPowerLoss(random: Random): MemoryFiles {
    const keepMeta = random.below(this.pendingMeta.length + 1);
    return this.rebuild(this.durableNames, this.pendingMeta.slice(0, keepMeta), random, false);
  }

  private rebuild(base: Map<string, Content>, meta: MetaChange[], random: Random | undefined, everything: boolean): MemoryFiles {
    const names = new Map(base);
    for (const change of meta) {
      if (change.kind === 'set') names.set(change.name, change.content);
      else names.delete(change.name);
    }
    const next = new MemoryFiles();
    const survivors = new Map<Content, Content>();
    for (const [name, content] of names) {
      let survivor = survivors.get(content);
      if (survivor === undefined) {
        if (everything) {
          survivor = new Content();
          survivor.bytes = content.bytes.slice();
          survivor.sync();
        } else {
          survivor = content.survivor(random);
        }
        survivors.set(content, survivor);
      }
      next.names.set(name, survivor);
    }
    next.durableNames = new Map(next.names);
    return next;
  }
}
