// The file layer under the durable tier. Every byte the tier reads or writes goes through this
// interface, so tests can put a layer in between that fails any write, sync or read
// (test/tier/faulty-files.ts) or that forgets whatever was not synced when the power goes
// (test/tier/power-loss-files.ts), and replay recovery against what is left.
import fs from 'node:fs/promises';
import path from 'node:path';
import { FileError } from '../errors.ts';

export interface TierFile {
  readonly path: string;
  /** Writes all of `data` at `position`. */
  write(data: Uint8Array, position: number): Promise<void>;
  /** Writes the buffers back to back starting at `position` (one system call where possible). */
  writev(data: readonly Uint8Array[], position: number): Promise<void>;
  /** Reads up to into.length octets at `position`; returns how many there were. */
  read(into: Uint8Array, position: number): Promise<number>;
  /** fdatasync: the file's data (and its size) is on stable storage when this resolves. */
  datasync(): Promise<void>;
  size(): Promise<number>;
  truncate(length: number): Promise<void>;
  close(): Promise<void>;
}

export interface FileLayer {
  /** Opens a file for reading and writing, creating it (empty) when `create` and it is missing. */
  open(file: string, create: boolean): Promise<TierFile>;
  /** Names in the directory (not paths). */
  list(directory: string): Promise<string[]>;
  exists(file: string): Promise<boolean>;
  rename(from: string, to: string): Promise<void>;
  remove(file: string): Promise<void>;
  /** Makes creations, renames and removals in the directory durable. */
  syncDirectory(directory: string): Promise<void>;
  makeDirectory(directory: string): Promise<void>;
}

/** An error of the file layer with the errno code the operating system gave (ENOSPC, EIO, ...). */
export function errorCode(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : 'EIO';
}

class NodeFile implements TierFile {
  constructor(
    readonly path: string,
    private readonly handle: fs.FileHandle,
  ) {}

  async write(data: Uint8Array, position: number): Promise<void> {
    let done = 0;
    while (done < data.length) {
      const { bytesWritten } = await this.handle.write(data, done, data.length - done, position + done);
      if (bytesWritten === 0) throw new FileError(`${this.path}: short write`); // errorCode() reads it as EIO
      done += bytesWritten;
    }
  }

  async writev(data: readonly Uint8Array[], position: number): Promise<void> {
    const total = data.reduce((sum, part) => sum + part.length, 0);
    const { bytesWritten } = await this.handle.writev(data as Uint8Array[], position);
    if (bytesWritten === total) return;
    // A short vectored write: finish part by part.
    let offset = 0;
    for (const part of data) {
      const end = offset + part.length;
      if (end > bytesWritten) {
        const skip = Math.max(0, bytesWritten - offset);
        await this.write(part.subarray(skip), position + offset + skip);
      }
      offset = end;
    }
  }

  async read(into: Uint8Array, position: number): Promise<number> {
    let done = 0;
    while (done < into.length) {
      const { bytesRead } = await this.handle.read(into, done, into.length - done, position + done);
      if (bytesRead === 0) break;
      done += bytesRead;
    }
    return done;
  }

  datasync(): Promise<void> {
    return this.handle.datasync();
  }

  async size(): Promise<number> {
    return (await this.handle.stat()).size;
  }

  truncate(length: number): Promise<void> {
    return this.handle.truncate(length);
  }

  close(): Promise<void> {
    return this.handle.close();
  }
}

/** The real file system. */
export const nodeFiles: FileLayer = {
  async open(file, create) {
    // 'r+' never truncates; a missing file is created first when asked.
    try {
      return new NodeFile(file, await fs.open(file, 'r+'));
    } catch (error) {
      if (!create || errorCode(error) !== 'ENOENT') throw error;
      return new NodeFile(file, await fs.open(file, 'w+'));
    }
  },
  list: (directory) => fs.readdir(directory),
  async exists(file) {
    try {
      await fs.stat(file);
      return true;
    } catch (error) {
      if (errorCode(error) === 'ENOENT') return false;
      throw error;
    }
  },
  rename: (from, to) => fs.rename(from, to),
  remove: (file) => fs.rm(file, { force: true }),
  async syncDirectory(directory) {
    const handle = await fs.open(directory, 'r');
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  },
  async makeDirectory(directory) {
    await fs.mkdir(directory, { recursive: true });
    // The new directory's own entry must survive power loss too.
    await nodeFiles.syncDirectory(path.dirname(path.resolve(directory)));
  },
};
