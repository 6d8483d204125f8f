// kbtp bench's warm-up per phase: the long one for every phase that runs an operation the target
// has not served yet in this run (its code is compiled then), the short one for the rest.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { parseMix } from '../../host/bench/mix.ts';
import { phaseWarmups } from '../../host/bench/run.ts';

test('each operation first run gets the long warm-up, a repeated one the short', () => {
  assert.equal(phaseWarmups(parseMix('load,store'), 500, 2000), [2000, 2000]);
  const phases = [...parseMix('load,store'), ...parseMix('load,free')];
  assert.equal(phaseWarmups(phases, 500, 2000), [2000, 2000, 500, 2000]);
});

test('a weighted phase is new if any of its operations is; later phases of those are not', () => {
  assert.equal(phaseWarmups(parseMix('load:3,store:1'), 500, 2000), [2000]);
  const phases = [...parseMix('load'), ...parseMix('load:1,store:1'), ...parseMix('store')];
  assert.equal(phaseWarmups(phases, 500, 2000), [2000, 2000, 500]);
});

test('without a long warm-up, or a shorter one, every phase gets the given warm-up', () => {
  assert.equal(phaseWarmups(parseMix('load,store'), 500), [500, 500]);
  assert.equal(phaseWarmups(parseMix('load,store'), 3000, 2000), [3000, 3000]);
  assert.equal(phaseWarmups([], 500, 2000), []);
});

test.run();
