// `kbtp put <handle> [file]`: stores a block (ALLOC_STORE, or STORE with --mapped).
import { readFileSync } from 'node:fs';
import type { Command } from '../cli.ts';
import * as K from '../../assembly/kbtp-constants.ts';
import { clientCommand, openSession, parseHandle, TARGET_HELP, EXIT_OK, UsageError, InputError, LocalFileError } from './client-common.ts';

const HELP = `usage: kbtp put <handle> [file] [options]

Stores the file (standard input when no file is given) as the block of <handle>: an unmapped
store (allocate, write, bind) by default, sealed unless --no-seal.

  --mapped            store into an already bound, unsealed handle (Block Mapped Store)
  --no-seal           leave the block unsealed (loads then need --allow-unsealed)
${TARGET_HELP}`;

async function readInput(file: string | undefined): Promise<Uint8Array> {
  if (file !== undefined && file !== '-') {
    try {
      return readFileSync(file);
    } catch (error) {
      throw new LocalFileError('read', file, error);
    }
  }
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

export const command: Command = {
  summary: 'store a file or standard input as the block of a handle',
  run: clientCommand('put', HELP, { mapped: { type: 'boolean' }, 'no-seal': { type: 'boolean' } }, async ({ values, positionals }) => {
    if (positionals.length > 2) throw new UsageError(`unexpected argument "${positionals[2]}"`);
    const handle = parseHandle(positionals[0]);
    const data = await readInput(positionals[1]);
    const session = await openSession(values, K.CAP_DIRECT_ALLOC);
    try {
      if (data.length > session.hello.blockSize) {
        throw new InputError(
          `${data.length} octets do not fit the target's ${session.hello.blockSize}-octet blocks; store at most ${session.hello.blockSize} octets per handle`,
        );
      }
      const seal = values['no-seal'] !== true;
      const info =
        values.mapped === true
          ? await session.store(handle, data, { seal })
          : values.direct === true
            ? await session.directAllocStore(handle, data, { seal })
            : await session.allocStore(handle, data, { seal });
      console.error(`stored ${data.length} octets at handle ${handle} (generation ${info.generation}, block 0x${info.blockOffset.toString(16)})`);
    } finally {
      await session.close();
    }
    return EXIT_OK;
  }),
};
