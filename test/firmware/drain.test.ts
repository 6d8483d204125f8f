// The appliance's drain (f177ffc): new requests get SHUTTING_DOWN as soon as /readyz says
// "draining", even while a scheduled job is still running. management.test.ts sees this through a
// real daemon only when the machine is loaded enough for a job to be running at SIGTERM; the
// scenario holds a job open deterministically, in a process of its own (see drain-scenario.ts).
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runProgram } from '../support/program.ts';

const SCENARIO = fileURLToPath(new URL('./drain-scenario.ts', import.meta.url));

test('drain: new requests get SHUTTING_DOWN at once, while a running job is still waited for', async () => {
  const run = await runProgram(process.execPath, ['--import', 'tsx', SCENARIO]);
  assert.is(run.code, 0, run.stderr);
  assert.match(run.stdout.toString(), /^drain: SHUTTING_DOWN while a scheduled job was still running/);
});

test.run();
