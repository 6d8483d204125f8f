// The objects the 16 KiB request path reads on every request keep V8's fast property layout
// (issue 16). An object in dictionary mode is read through a hash lookup: optimized code then
// calls the generic LoadIC for each of its properties instead of loading a field. A session's
// slot host had getters in an object literal, which put it in dictionary mode, and a call read
// it several times per request (the client's profile of session 9 showed the generic LoadIC).
// %HasFastProperties answers it directly, without a timing.
import v8 from 'node:v8';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { openInProcessSession } from './in-process-session.ts';

v8.setFlagsFromString('--allow-natives-syntax');
const hasFastProperties = new Function('object', 'return %HasFastProperties(object)') as (object: object) => boolean;

test('a session keeps the host its calls and batches read per request in fast mode, also after HELLO and after a failure', async () => {
  const { session, target } = await openInProcessSession(16384, 16, 4);
  const slotHost = (session as unknown as { slotHost: object }).slotHost;
  try {
    assert.ok(hasFastProperties(slotHost), 'slot host after HELLO');
    const into = new Uint8Array(16384);
    await session.allocStore(1n, new Uint8Array(16384).fill(7), { seal: true });
    const loaded = await session.load(1n, { into });
    assert.is(loaded.dataLength, 16384);
    assert.is(into[100], 7);
    assert.ok(hasFastProperties(slotHost), 'slot host after requests');
  } finally {
    await session.close(500);
    await target.stop();
  }
  assert.ok(hasFastProperties(slotHost), 'slot host after the session ended');
  // The session's failure reaches the calls through it.
  assert.ok((slotHost as { failure: unknown }).failure instanceof Error);
});

test.run();
