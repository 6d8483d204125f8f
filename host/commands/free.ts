// `kbtp free <handle>`: frees the block of a handle.
import type { Command } from '../cli.ts';
import { clientCommand, openSession, parseHandle, TARGET_HELP, EXIT_OK, UsageError } from './client-common.ts';

const HELP = `usage: kbtp free <handle> [options]

Unbinds <handle> and returns its block to the free-block ring.

  --generation N      free only if the entry still has this generation
${TARGET_HELP}`;

export const command: Command = {
  summary: 'free the block of a handle',
  run: clientCommand('free', HELP, { generation: { type: 'string' } }, async ({ values, positionals }) => {
    if (positionals.length > 1) throw new UsageError(`unexpected argument "${positionals[1]}"`);
    const handle = parseHandle(positionals[0]);
    const generation = values.generation === undefined ? 0 : Number(values.generation);
    if (values.generation !== undefined && (!Number.isInteger(generation) || generation < 1 || generation > 0xffff)) {
      throw new UsageError(`--generation must be 1..65535, got ${values.generation}`);
    }
    const session = await openSession(values);
    try {
      const info = await session.free(handle, { generation });
      console.error(`freed handle ${handle} (generation now ${info.generation})`);
    } finally {
      await session.close();
    }
    return EXIT_OK;
  }),
};
