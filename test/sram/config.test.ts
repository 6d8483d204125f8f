import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { DEFAULT_SRAM_CONFIG, SramConfigError, createSramCache, loadSramConfig, parseSramConfig } from '../../host/sram/config.ts';
import { openSramModel } from '../../host/sram/index.ts';

const dir = mkdtempSync(join(tmpdir(), 'kbtp-sram-config-'));

function file(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

test('an empty object is the documented default', () => {
  assert.equal(parseSramConfig({}, 'x'), DEFAULT_SRAM_CONFIG);
});

test('a full config is read and builds the model it describes', () => {
  const path = file(
    'full.json',
    JSON.stringify({
      lines: 256,
      associativity: 8,
      policy: 'partitioned',
      partition: { QPC: 128, MPT: 16, MTT: 96, CQC: 8, EQC: 8 },
      costs: { sramHitNs: 15, pcieReadNs: 800 },
      controlInsertsLines: false,
    }),
  );
  const config = loadSramConfig(path);
  assert.is(config.lines, 256);
  assert.is(config.associativity, 8);
  assert.equal(config.costs, { sramHitNs: 15, pcieReadNs: 800, pcieWriteNs: 500 });
  const cache = createSramCache(config);
  assert.is(cache.policy.name, 'partitioned');
  assert.is(cache.costs.pcieReadNs, 800);
  assert.is(cache.controlInsertsLines, false);
  assert.is(loadSramConfig(file('full-assoc.json', '{"associativity": "full"}')).associativity, 0);
});

const refusals: Array<[string, unknown, RegExp]> = [
  ['not an object', [1], /must be a JSON object/],
  ['unknown field', { line: 5 }, /unknown field "line"; the fields are lines, associativity/],
  ['lines', { lines: -3 }, /"lines" must be a whole number of SRAM lines between 1 and \d+ \(got -3\); e\.g\. "lines": 2048/],
  ['lines as text', { lines: '2048' }, /"lines" must be a whole number .*got "2048"/],
  ['associativity', { associativity: 2.5 }, /"associativity" must be "full" \(or 0\) or a positive number of ways per set \(got 2\.5\)/],
  ['associativity divides lines', { lines: 100, associativity: 8 }, /not a multiple of associativity 8/],
  ['policy', { policy: 'lru' }, /"policy" must be one of "shared-lru", "partitioned", "hw-assisted"(, "[^"]+")* \(got "lru"\)/],
  ['partition without the policy', { partition: { QPC: 1 } }, /"partition" only applies to "policy": "partitioned"/],
  ['partition kind', { lines: 4, policy: 'partitioned', partition: { QP: 4 } }, /"partition\.QP" names no kind; use QPC, MPT, MTT, CQC, EQC, BLOCK/],
  [
    'partition sum',
    { lines: 4, policy: 'partitioned', partition: { QPC: 3 } },
    /"partition" gives 3 lines in all but "lines" is 4; make the per-kind counts add up/,
  ],
  ['costs field', { costs: { hitNs: 5 } }, /unknown field "costs\.hitNs"; the cost fields are sramHitNs, pcieReadNs, pcieWriteNs/],
  ['costs value', { costs: { pcieReadNs: -1 } }, /"costs\.pcieReadNs" must be a non-negative number of nanoseconds \(got -1\)/],
  ['controlInsertsLines', { controlInsertsLines: 'yes' }, /"controlInsertsLines" must be true or false/],
];

for (const [name, value, message] of refusals) {
  test(`refuses a bad ${name} with a message naming the field and the fix`, () => {
    try {
      parseSramConfig(value, 'model.json');
      assert.unreachable('accepted a bad config');
    } catch (error) {
      assert.instance(error, SramConfigError);
      assert.match((error as Error).message, /^model\.json: /);
      assert.match((error as Error).message, message);
    }
  });
}

test('file problems name the file', () => {
  assert.throws(() => loadSramConfig(join(dir, 'missing.json')), /missing\.json: cannot read the SRAM model config \(no such file\)/);
  assert.throws(() => loadSramConfig(file('bad.json', '{"lines": ')), /bad\.json: not valid JSON/);
});

test('openSramModel gives an observer over the configured cache', () => {
  const observer = openSramModel(file('small.json', '{"lines": 64, "policy": "hw-assisted"}'));
  assert.is(observer.cache.lineCount, 64);
  assert.is(observer.cache.policy.name, 'hw-assisted');
});

test.after(() => rmSync(dir, { recursive: true, force: true }));

test.run();
