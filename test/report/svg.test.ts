import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { barChart, escapeXml, lineChart, niceTicks } from '../../host/report/svg.ts';
import { formatTable } from '../../host/report/table.ts';

test('ticks cover the whole range, ending at or above the maximum', () => {
  assert.equal(niceTicks(0, 2.98), [0, 1, 2, 3]);
  assert.equal(niceTicks(0, 0.366), [0, 0.1, 0.2, 0.3, 0.4]);
  assert.equal(niceTicks(0, 1), [0, 0.2, 0.4, 0.6, 0.8, 1]);
  assert.equal(niceTicks(5, 5), [5]);
});

test('text is escaped and every series is drawn with its legend', () => {
  assert.is(escapeXml('a<b & "c">'), 'a&lt;b &amp; &quot;c&quot;&gt;');
  const svg = lineChart({
    title: 'T <1>',
    xLabel: 'x',
    yLabel: 'y',
    logX: true,
    series: [
      {
        name: 'one',
        points: [
          [1, 1],
          [10, 2],
        ],
      },
      {
        name: 'two',
        points: [
          [1, 3],
          [100, 4],
        ],
        dashed: true,
      },
    ],
  });
  assert.match(svg, /T &lt;1&gt;/);
  assert.is(svg.match(/<path /g)?.length, 2);
  assert.match(svg, /stroke-dasharray="7,5"/);
  assert.match(svg, />one</);
  assert.match(svg, />two</);
  assert.not.match(svg, /NaN/);
  assert.throws(() => lineChart({ title: '', xLabel: '', yLabel: '', logX: true, series: [{ name: 'z', points: [[0, 1]] }] }), /positive x values/);
});

test('bar charts draw an unbounded ratio to the top, labelled inf', () => {
  const svg = barChart({
    title: 't',
    yLabel: 'y',
    groups: ['g'],
    series: [
      { name: 'a', values: [1] },
      { name: 'b', values: [Number.POSITIVE_INFINITY] },
    ],
  });
  assert.match(svg, />inf</);
  assert.not.match(svg, /NaN|Infinity/);
});

test('tables align columns and right-align numbers', () => {
  const text = formatTable({
    title: 'T',
    columns: ['name', 'n'],
    rows: [
      ['a', 1],
      ['bbb', 22.5],
    ],
  });
  assert.is(text, 'T\nname      n\n----  -----\na         1\nbbb   22.50');
});

test.run();
