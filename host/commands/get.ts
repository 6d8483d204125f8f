// `kbtp get <handle> [file]`: loads a block to a file or standard output.
import { writeFileSync } from 'node:fs';
import type { Command } from '../cli.ts';
import * as K from '../../assembly/kbtp-constants.ts';
import { clientCommand, openSession, parseHandle, TARGET_HELP, EXIT_OK, UsageError, LocalFileError } from './client-common.ts';

const HELP = `usage: kbtp get <handle> [file] [options]

Loads the block of <handle> into the file (standard output when no file is given).

  --allow-unsealed    also return a block that is not sealed yet
${TARGET_HELP}`;

export const command: Command = {
  summary: 'load the block of a handle to a file or standard output',
  run: clientCommand('get', HELP, { 'allow-unsealed': { type: 'boolean' } }, async ({ values, positionals }) => {
    if (positionals.length > 2) throw new UsageError(`unexpected argument "${positionals[2]}"`);
    const handle = parseHandle(positionals[0]);
    const session = await openSession(values, K.CAP_DIRECT_LOAD);
    let result;
    try {
      result = values.direct === true ? await session.directLoad(handle) : await session.load(handle, { allowUnsealed: values['allow-unsealed'] === true });
    } finally {
      await session.close();
    }
    const file = positionals[1];
    if (file !== undefined && file !== '-') {
      try {
        writeFileSync(file, result.data);
      } catch (error) {
        throw new LocalFileError('write', file, error);
      }
    } else await new Promise<void>((resolve, reject) => process.stdout.write(result.data, (error) => (error ? reject(error) : resolve())));
    console.error(`loaded ${result.dataLength} octets from handle ${handle} (generation ${result.generation})`);
    return EXIT_OK;
  }),
};
