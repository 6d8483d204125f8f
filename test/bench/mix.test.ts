// The --mix syntax: a phase per operation, one weighted phase, and clear errors.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { parseMix, OpPicker, MixError } from '../../host/bench/mix.ts';

test('a plain list is a phase per operation; weights make one mixed phase', () => {
  assert.equal(
    parseMix('load,store').map((phase) => phase.map((item) => item.op)),
    [['load'], ['store']],
  );
  const [mixed, ...rest] = parseMix('load:3,store:1');
  assert.is(rest.length, 0);
  assert.equal(mixed, [
    { op: 'load', weight: 3 },
    { op: 'store', weight: 1 },
  ]);
  assert.equal(
    parseMix('ALLOC_STORE, free').map((phase) => phase[0]?.op),
    ['alloc-store', 'free'],
  );
});

test('weighted draws follow the weights', () => {
  const [phase] = parseMix('load:3,store:1');
  const picker = new OpPicker(phase ?? [], 5);
  let loads = 0;
  for (let i = 0; i < 40_000; i++) if (picker.next() === 'load') loads++;
  assert.ok(Math.abs(loads / 40_000 - 0.75) < 0.01, `${loads}`);
});

test('bad mixes say what to write', () => {
  assert.throws(
    () => parseMix('lod'),
    (error: Error) => error instanceof MixError && /not an operation/.test(error.message),
  );
  assert.throws(() => parseMix('load:0'), /positive number/);
  assert.throws(() => parseMix('load,load'), /twice/);
  assert.throws(() => parseMix(''), /empty/);
  assert.throws(() => parseMix('store:1,direct-load:1'), /separate phases/);
});

test.run();
