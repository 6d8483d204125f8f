// bench/compare/node-floor.ts: the Node.js floor of a kbtp request in each of make compare's
// shapes (LOAD and STORE, several connections, several requests in flight) answers every request
// and accounts for every octet; a short timed run reports CPU per request for both threads.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { floorWire, nodeFloor, type FloorShape } from '../../bench/compare/node-floor.ts';

test('the wire shapes: a LOAD brings the block back, a STORE carries it out', () => {
  assert.equal(floorWire({ op: 'load', size: 4096 }), { request: 64, answer: 4096 + 84 });
  assert.equal(floorWire({ op: 'store', size: 4096 }), { request: 4096 + 84, answer: 64 });
});

// Counts that no whole number of batches fills: the last batch of a session is short.
for (const shape of [
  { op: 'load', size: 4096, sessions: 1, inFlight: 1 },
  { op: 'store', size: 4096, sessions: 1, inFlight: 1 },
  { op: 'load', size: 16 * 1024, sessions: 3, inFlight: 8 },
  { op: 'store', size: 16 * 1024, sessions: 3, inFlight: 8 },
  // Larger than a read buffer and than a socket's first window: answers and requests split across reads and writes.
  { op: 'store', size: 1024 * 1024 + 3, sessions: 2, inFlight: 8 },
  { op: 'load', size: 1024 * 1024 + 3, sessions: 2, inFlight: 8 },
] satisfies FloorShape[]) {
  const requests = shape.size > 65536 ? 61 : 1003;
  test(`${shape.op}, ${shape.size} octets, ${shape.sessions} x ${shape.inFlight}: exactly ${requests} requests, every octet accounted for`, async () => {
    const figures = await nodeFloor(shape, { requests });
    const wire = floorWire(shape);
    assert.equal(figures.accounting, {
      issued: requests,
      answered: requests,
      served: requests,
      clientOctets: requests * wire.answer,
      serverOctets: requests * wire.request,
    });
    assert.is(figures.requests, requests);
    assert.ok(figures.p50Us > 0 && figures.p99Us >= figures.p50Us, JSON.stringify(figures));
  });
}

test('a short timed run answers requests and gives each thread a CPU time per request', async () => {
  const figures = await nodeFloor({ op: 'load', size: 4096, sessions: 1, inFlight: 1 }, { seconds: 1, warmupMs: 100 });
  assert.ok(figures.requests > 100, `${figures.requests} requests`);
  assert.ok(figures.requestsPerSecond > 100);
  assert.ok(figures.gbps > 0);
  // Each side reads and writes a socket per request: that takes CPU time, and less than the wall time per request.
  const wallUs = 1e6 / figures.requestsPerSecond;
  for (const [side, us] of [
    ['client', figures.clientUsPerOp],
    ['server', figures.serverUsPerOp],
  ] as const) {
    assert.ok(us > 0 && us <= wallUs * 1.05, `${side} ${us} us per request against ${wallUs} us of wall time`);
  }
  // Requests still in flight when the window closed were answered too.
  assert.ok(figures.accounting.issued >= figures.requests && figures.accounting.served === figures.accounting.issued);
});

test('shapes it cannot run are refused', async () => {
  for (const [shape, requests, message] of [
    [{ op: 'load', size: 0, sessions: 1, inFlight: 1 }, 10, /block size/],
    [{ op: 'load', size: 16, sessions: 0, inFlight: 1 }, 10, /session/],
    [{ op: 'store', size: 16, sessions: 1, inFlight: 0 }, 10, /in flight/],
    [{ op: 'store', size: 16, sessions: 1, inFlight: 1 }, 0, /at least 1 request/],
  ] satisfies Array<[FloorShape, number, RegExp]>) {
    const outcome = await nodeFloor(shape, { requests }).then(
      () => 'ran',
      (error: unknown) => (error instanceof Error ? error.message : String(error)),
    );
    assert.match(outcome, message);
  }
});

test.run();
