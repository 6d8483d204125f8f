// bench/profile/callgrind-file.ts: JIT code named from the perf map (the newest code at an
// address), callgrind's own and call costs told apart, and code that is not JavaScript shared
// out among the sides whose JavaScript called it, in proportion to what those calls cost.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { attribute, named, NO_JS_CALLER, parseCallgrind, PerfMap, perOperation } from '../../bench/profile/callgrind-file.ts';

// Two JavaScript functions (one per side) at 0x1000 and 0x2000; 0x1000 held older code first.
const MAP = [
  '1000 100 JS:*old file:///x/dist/host/a.js:1:1',
  '2000 100 JS:*consume file:///x/initiator/host/rnic/receive.js:1:1',
  '1000 80 JS:*consume file:///x/dist/host/rnic/receive.js:1:1',
].join('\n');

// The target's consume (0x1000) costs 300 itself and calls memcpy for 100; the initiator's (0x2000,
// also seen as a second recursion level '2) costs 200 and calls memcpy for 300; memcpy calls
// nothing, costs 400 itself; main costs 50 and calls the target's consume (inclusive 400).
const CALLGRIND = `# callgrind format
version: 1
positions: line
events: Ir
summary: 1150

ob=???
fn=0x0000000000001000
0 300
cfn=memcpy
calls=1 0
0 100

fn=0x0000000000002000
0 150
cfn=memcpy
calls=3 0
0 300

fn=0x0000000000002000'2
0 50

fn=memcpy
0 400

fn=main
0 50
cfn=0x0000000000001000
calls=1 0
0 400
`;

const sideOf = (name: string): string | undefined => (name.startsWith('JS:') ? (name.includes('/initiator/') ? 'initiator' : 'target') : undefined);

test('perf map: the newest code at an address names it', () => {
  const map = new PerfMap(MAP);
  assert.is(map.size, 3);
  assert.is(map.lookup(0x1010), 'JS:*consume file:///x/dist/host/rnic/receive.js:1:1');
  assert.is(map.lookup(0x1090), 'JS:*old file:///x/dist/host/a.js:1:1', 'past the newer entry, the older one still covers it');
  assert.is(map.lookup(0x3000), undefined);
});

test('own costs, call costs and recursion levels', () => {
  const profile = parseCallgrind(CALLGRIND);
  assert.is(profile.total, 1150);
  assert.is(profile.self.get('0x0000000000001000'), 300);
  assert.is(profile.self.get('0x0000000000002000'), 200, "the '2 level is the same function");
  assert.is(profile.self.get('memcpy'), 400);
  assert.is(profile.self.get('main'), 50, 'a call cost is not its caller own');
  assert.equal(
    [...profile.callers.get('memcpy')!.entries()],
    [
      ['0x0000000000001000', 100],
      ['0x0000000000002000', 300],
    ],
  );
});

test('what is not JavaScript goes to the sides in proportion to their calls', () => {
  const at = attribute(named(parseCallgrind(CALLGRIND), new PerfMap(MAP)), { sideOf });
  assert.is(at.jsBySide.get('target'), 300);
  assert.is(at.jsBySide.get('initiator'), 200);
  // memcpy's 400: a quarter called by the target, three quarters by the initiator.
  assert.is(at.bySide.get('target'), 300 + 100);
  assert.is(at.bySide.get('initiator'), 200 + 300);
  assert.is(at.bySide.get(NO_JS_CALLER), 50, 'main has no JavaScript caller');
  assert.is(at.byFunction.get('shared  memcpy'), 400);
  assert.is(at.byFunction.get('target  JS:*consume file:///x/dist/host/rnic/receive.js:1:1'), 300);
});

test('two runs compare by name: JIT addresses differ between runs, the functions do not', () => {
  const a = named(parseCallgrind(CALLGRIND), new PerfMap(MAP));
  // The second run: the same code at other addresses, and memcpy called twice as much by the initiator.
  const moved = CALLGRIND.replaceAll('0x0000000000001000', '0x0000000000005000')
    .replaceAll('0x0000000000002000', '0x0000000000006000')
    .replace('calls=3 0\n0 300', 'calls=6 0\n0 600')
    .replace('fn=memcpy\n0 400', 'fn=memcpy\n0 700')
    .replace('summary: 1150', 'summary: 1450');
  const b = named(parseCallgrind(moved), new PerfMap(MAP.replaceAll('1000 ', '5000 ').replaceAll('2000 ', '6000 ')));
  const per = perOperation(a, b, 10);
  assert.is(per.total, 30);
  assert.is(per.self.get('memcpy'), 30);
  assert.is(per.self.get('JS:*consume file:///x/dist/host/rnic/receive.js:1:1'), 0);
  // Only the initiator's calls grew: all of the difference in memcpy is its.
  const at = attribute(per, { sideOf });
  assert.is(at.bySide.get('initiator'), 30);
  assert.is(at.bySide.get('target') ?? 0, 0);
});

test.run();
