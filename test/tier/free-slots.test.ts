// The data file's free slots (host/tier/free-slots.ts): always the lowest free slot first, against
// a sorted list under random pushes, takes and cuts.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { FreeSlots } from '../../host/tier/free-slots.ts';
import { Random } from '../../host/util/random.ts';

test('take() gives the lowest free slot, through growth, random order and keepBelow()', () => {
  const random = new Random(12);
  const slots = new FreeSlots(2);
  const model: number[] = [];
  let next = 0;
  for (let step = 0; step < 20_000; step++) {
    const choice = random.below(10);
    if (choice < 5) {
      // A fresh slot, or one given back.
      const slot = random.below(3) === 0 || model.length === 0 ? next++ : next + random.below(50);
      if (model.includes(slot)) continue;
      if (slot >= next) next = slot + 1;
      slots.push(slot);
      model.push(slot);
    } else if (choice < 9) {
      model.sort((a, b) => a - b);
      assert.is(slots.take(), model.shift());
    } else if (random.below(20) === 0) {
      const limit = random.below(next + 1);
      slots.keepBelow(limit);
      model.splice(0, model.length, ...model.filter((slot) => slot < limit));
    }
    assert.is(slots.size, model.length);
  }
  model.sort((a, b) => a - b);
  for (const slot of model) assert.is(slots.take(), slot);
  assert.is(slots.take(), undefined);
});

test.run();
