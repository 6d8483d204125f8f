// A worker's side of the durable tier (host/kbtp/server/tier-client.ts): the asks of one turn of
// the worker's event loop reach the main thread as one message (one wake-up of the main thread,
// and one burst for the group commit), each answer settles its own ask, and asks of later turns go
// in later messages.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { TierClient } from '../../host/kbtp/server/tier-client.ts';
import type { TierToMain, TierAnswer } from '../../host/kbtp/server/tier-messages.ts';
import type { Engine } from '../../host/engine/engine.ts';

/** Seals need the engine's memory for their checksum; these tests ask only what does not. */
const noEngine = {} as Engine;

test('the asks of one turn go out as one message, after the turn, in order', async () => {
  const posted: TierToMain[] = [];
  const client = new TierClient((message) => posted.push(message), noEngine);
  const answers: Array<Promise<TierAnswer>> = [
    client.ask({ op: 'reserve', index: 3, generation: 7 }),
    client.ask({ op: 'unbind', index: 4, generation: 2, why: 'free' }),
    client.ask({ op: 'fetch', index: 5, blockOffset: 65536n }),
  ];
  // Nothing is posted within the turn: more asks may come from the turn's other sockets.
  await Promise.resolve();
  assert.is(posted.length, 0);
  await nextTurn();
  assert.is(posted.length, 1);
  const [message] = posted;
  assert.equal(
    message?.asks.map((ask) => [ask.op, ask.index]),
    [
      ['reserve', 3],
      ['unbind', 4],
      ['fetch', 5],
    ],
  );
  assert.is(message?.ids.length, 3);
  assert.is(new Set(message?.ids).size, 3);

  // The main thread answers out of order, in one message of triples (id, ok, outcome).
  const [a, b, c] = message?.ids ?? [];
  client.answeredAll([c ?? 0, 1, 9, a ?? 0, 0, 4]);
  client.answered(b ?? 0, { ok: true, outcome: 0 });
  assert.equal(await Promise.all(answers), [
    { ok: false, outcome: 4 },
    { ok: true, outcome: 0 },
    { ok: true, outcome: 9 },
  ]);
});

test('asks of later turns go in later messages, and an answer settles its ask only once', async () => {
  const posted: TierToMain[] = [];
  const client = new TierClient((message) => posted.push(message), noEngine);
  const first = client.ask({ op: 'reserve', index: 1, generation: 1 });
  await nextTurn();
  const second = client.ask({ op: 'reserve', index: 2, generation: 1 });
  const third = client.ask({ op: 'reserve', index: 3, generation: 1 });
  await nextTurn();
  assert.equal(
    posted.map((message) => message.asks.map((ask) => ask.index)),
    [[1], [2, 3]],
  );
  const ids = posted.flatMap((message) => message.ids);
  client.answeredAll([ids[0] ?? 0, 1, 0, ids[0] ?? 0, 0, 5]);
  assert.equal(await first, { ok: true, outcome: 0 });
  client.answeredAll([ids[1] ?? 0, 1, 1, ids[2] ?? 0, 1, 2]);
  assert.equal(await Promise.all([second, third]), [
    { ok: true, outcome: 1 },
    { ok: true, outcome: 2 },
  ]);
  await nextTurn();
  assert.is(posted.length, 2);
});

test.run();
