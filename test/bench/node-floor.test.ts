// bench/compare/node-floor.ts: the Node.js floor of a 1-in-flight request runs, answers whole
// blocks and reports CPU per request for both of its threads.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { nodeFloor } from '../../bench/compare/node-floor.ts';

test('a short run answers requests and gives each thread a CPU time per request', async () => {
  const figures = await nodeFloor(4096, 1, 100);
  assert.ok(figures.requests > 100, `${figures.requests} requests`);
  assert.ok(figures.requestsPerSecond > 100);
  // Each side reads and writes a socket per request: that takes CPU time, and less than the wall time per request.
  const wallUs = 1e6 / figures.requestsPerSecond;
  for (const [side, us] of [
    ['client', figures.clientUsPerOp],
    ['server', figures.serverUsPerOp],
  ] as const) {
    assert.ok(us > 0 && us <= wallUs * 1.05, `${side} ${us} us per request against ${wallUs} us of wall time`);
  }
  assert.ok(figures.p50Us > 0 && figures.p99Us >= figures.p50Us);
});

test('several connections, one request in flight each, all answered', async () => {
  const figures = await nodeFloor(4096, 1, 100, 4);
  assert.ok(figures.requests > 100, `${figures.requests} requests`);
  assert.ok(figures.p50Us > 0 && figures.p99Us >= figures.p50Us);
  assert.ok(figures.clientUsPerOp > 0 && figures.serverUsPerOp > 0);
});

test.run();
