// Loads a Mooncake-format trace (one JSON object a line with hash_ids, the prefix block ids of a
// request) into flat typed arrays: block ids of every request back to back, plus where each
// request starts.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { FileError, FormatError } from '../errors.ts';

export interface BlockTrace {
  readonly requests: number;
  /** Block ids of request r are blockIds[starts[r] .. starts[r + 1]). */
  readonly starts: Uint32Array;
  readonly blockIds: Uint32Array;
  readonly distinctBlocks: number;
}

/** The repository's copy of the Mooncake trace (origin and license: test/fixtures/README.md). */
export const REPOSITORY_TRACE = join('test', 'fixtures', 'traces', 'mooncake-conversation.jsonl');

/** The repository's trace, found from the source tree (host/sram/) or from the build (dist/host/sram/). */
export function defaultTracePath(): string | undefined {
  const here = dirname(fileURLToPath(import.meta.url));
  const candidates = [resolve(here, '..', '..', REPOSITORY_TRACE), resolve(here, '..', '..', '..', REPOSITORY_TRACE)];
  return candidates.find((path) => existsSync(path));
}

export function parseBlockTrace(text: string, source: string, maxRequests = Infinity): BlockTrace {
  const starts: number[] = [0];
  const ids: number[] = [];
  const lines = text.split('\n');
  for (let index = 0; index < lines.length && starts.length - 1 < maxRequests; index++) {
    const line = lines[index]!.trim();
    if (line === '') continue;
    let record: unknown;
    try {
      record = JSON.parse(line);
    } catch {
      throw new FormatError(`${source}:${index + 1}: not a JSON object; each line must be {"hash_ids": [...], ...}`);
    }
    const hashIds = (record as { hash_ids?: unknown } | null)?.hash_ids;
    if (!Array.isArray(hashIds)) throw new FormatError(`${source}:${index + 1}: missing "hash_ids" array`);
    for (const id of hashIds) {
      if (typeof id !== 'number' || !Number.isInteger(id) || id < 0 || id > 0xffffffff) {
        throw new FormatError(`${source}:${index + 1}: hash id ${JSON.stringify(id)} is not an integer in 0..2^32-1`);
      }
      ids.push(id);
    }
    starts.push(ids.length);
  }
  const blockIds = Uint32Array.from(ids);
  return { requests: starts.length - 1, starts: Uint32Array.from(starts), blockIds, distinctBlocks: new Set(blockIds).size };
}

export function loadBlockTrace(path: string, maxRequests = Infinity): BlockTrace {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new FileError(`cannot read trace ${path} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}); pass --trace <file.jsonl>`, {
      cause: error,
    });
  }
  return parseBlockTrace(text, path, maxRequests);
}
