// The appliance's boot self-test against a real target on loopback: it passes on a healthy node,
// skips handles the node's users hold, and fails (never passes) with a wrong secret.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { selfTest, selfTestTarget } from '../../firmware/self-test.ts';
import { startRig, SECRETS } from '../support/rig.ts';

const config = (port: number, secret: string) =>
  JSON.stringify({
    listen: `0.0.0.0:${port}`,
    pool: { blockSize: 4096, blockCount: 64, handleCount: 256 },
    tenants: [{ name: 'alpha', secret, quota: 24, storeRange: { first: 0, count: 64 } }],
  });

test('selfTestTarget reads the port, the first tenant and the top of its store range', () => {
  const target = selfTestTarget(config(7200, 's3cret'));
  assert.is(target.port, 7200);
  assert.is(target.tenant, 'alpha');
  assert.is(target.secret, 's3cret');
  assert.equal(target.handles.slice(0, 2), [63n, 62n]);
  assert.throws(() => selfTestTarget(config(7200, 'x'), 'nobody'), /no tenant named nobody/);
  assert.throws(() => selfTestTarget('[]'), /not a JSON object/);
});

test('the self-test stores, loads back and frees a block; a held handle is skipped; a wrong secret fails', async () => {
  const rig = await startRig();
  try {
    const holder = await rig.session('alpha');
    await holder.allocStore(63n, new Uint8Array([1, 2, 3]), { seal: true });
    const line = await selfTest(selfTestTarget(config(rig.target.port, SECRETS.alpha)), 4096);
    assert.match(line, /self-test passed: 4096 octets .* at handle 62 as tenant alpha/);
    // The user's block is untouched and the tested handle is free again.
    assert.equal([...(await holder.load(63n)).data], [1, 2, 3]);
    await holder.allocStore(62n, new Uint8Array([9]), { seal: true });
    let failed = '';
    await selfTest(selfTestTarget(config(rig.target.port, 'wrong-secret'))).catch((error: Error) => {
      failed = error.message;
    });
    assert.ok(failed !== '', 'a wrong secret must fail the self-test');
  } finally {
    await rig.stop();
  }
});

test.run();
