// A BLOCK-kind SRAM tier of an in-network cache device in front of its DRAM pool, replaying the
// Mooncake conversation trace (one block per hash id). Counting rule, as in the trace's README:
// a request's blocks count as hits only up to its first miss (a prefix must be contiguous to be
// reused); every block is still accessed, so the tier ends up holding the whole request.
import { HIT, SramCache } from '../cache.ts';
import { EntryKind } from '../kinds.ts';
import { lineChart } from '../../report/svg.ts';
import { defaultTracePath, loadBlockTrace, REPOSITORY_TRACE, type BlockTrace } from '../trace.ts';
import { percent, type TextTable } from '../../report/table.ts';
import { UsageError, integerListOption, integerOption, type Experiment, type ExperimentContext, type OptionValues } from './experiment.ts';

/** Stands for "as many lines as the trace has distinct blocks". */
export const UNLIMITED = 0;

/** LRU prefix-hit rates the trace's README gives (test/fixtures/README.md). */
export const REFERENCE_HIT_RATES: ReadonlyMap<number, number> = new Map([
  [1000, 0.044],
  [5000, 0.11],
  [20000, 0.287],
  [50000, 0.355],
  [UNLIMITED, 0.366],
]);

export interface BlockTierReplay {
  references: number;
  /** Hits before the first miss of their request. */
  prefixHits: number;
  /** Every hit, prefix or not. */
  hits: number;
}

export function replayBlockTier(trace: BlockTrace, lines: number, associativity = 0): BlockTierReplay {
  const tier = new SramCache({ lines, associativity });
  let prefixHits = 0;
  let hits = 0;
  for (let request = 0; request < trace.requests; request++) {
    let inPrefix = true;
    for (let at = trace.starts[request]!; at < trace.starts[request + 1]!; at++) {
      if ((tier.access(EntryKind.BLOCK, trace.blockIds[at]!, 0, 0, false) & HIT) !== 0) {
        hits++;
        if (inPrefix) prefixHits++;
      } else {
        inPrefix = false;
      }
    }
  }
  return { references: trace.blockIds.length, prefixHits, hits };
}

export interface BlockTierPoint {
  capacity: number | 'unlimited';
  lines: number;
  prefixHitRate: number;
  hitRate: number;
  reference: number | null;
  setAssociativePrefixHitRate: number | null;
}

const DEFAULT_CAPACITIES = [1000, 2000, 5000, 10000, 20000, 50000, 100000, UNLIMITED];

export const blockTier: Experiment = {
  name: 'block-tier',
  summary: 'hit rate of a BLOCK SRAM tier against its capacity, replaying the Mooncake trace',
  description: [
    'Replays the Mooncake conversation trace (one block per hash id) through an LRU BLOCK tier of each',
    "capacity. The prefix-hit rate counts a request's blocks as hits only up to its first miss, the rule",
    "of the trace README's reference figures (4.4% / 11.0% / 28.7% / 35.5% / 36.6% at 1k / 5k / 20k /",
    '50k / unlimited), shown beside them; the all-hit rate counts every hit. With --ways the tier is',
    'also replayed set-associative (capacity rounded up to a multiple of the ways).',
  ].join('\n'),
  options: {
    trace: { type: 'string', value: '<file>', help: "Mooncake-format trace (default: the repository's test/fixtures/traces/mooncake-conversation.jsonl)" },
    capacities: {
      type: 'string',
      value: '<list>',
      help: 'tier capacities in blocks, comma-separated; "unlimited" allowed (default 1000,2000,5000,10000,20000,50000,100000,unlimited)',
    },
    ways: { type: 'string', value: '<n>', help: 'also replay an n-way set-associative tier' },
    requests: { type: 'string', value: '<n>', help: 'replay only the first n requests (default all)' },
  },
  run(values: OptionValues, context: ExperimentContext) {
    const tracePath = typeof values.trace === 'string' ? values.trace : defaultTracePath();
    if (tracePath === undefined) throw new UsageError(`cannot find the repository's trace (${REPOSITORY_TRACE}); pass --trace <file.jsonl>`);
    const capacities = integerListOption(values, 'capacities', DEFAULT_CAPACITIES, 1, { unlimited: UNLIMITED });
    const ways = values.ways === undefined ? 0 : integerOption(values, 'ways', 0, 1, 1 << 20);
    const maxRequests = integerOption(values, 'requests', Number.MAX_SAFE_INTEGER, 1);
    let trace: BlockTrace;
    try {
      trace = loadBlockTrace(tracePath, maxRequests);
    } catch (error) {
      throw new UsageError((error as Error).message);
    }
    const fullTrace = maxRequests === Number.MAX_SAFE_INTEGER;
    const points: BlockTierPoint[] = capacities.map((capacity, index) => {
      const lines = capacity === UNLIMITED ? Math.max(1, trace.distinctBlocks) : capacity;
      const replay = replayBlockTier(trace, lines);
      let setAssociative: number | null = null;
      // An unlimited tier is fully associative by definition: a set could overflow while others sit empty.
      if (ways > 0 && capacity !== UNLIMITED) {
        const setLines = Math.ceil(lines / ways) * ways;
        setAssociative = replayBlockTier(trace, setLines, ways).prefixHits / replay.references;
      }
      context.progress.step(index + 1, capacities.length, capacity === UNLIMITED ? 'unlimited' : `${capacity} blocks`);
      return {
        capacity: capacity === UNLIMITED ? 'unlimited' : capacity,
        lines,
        prefixHitRate: replay.prefixHits / replay.references,
        hitRate: replay.hits / replay.references,
        reference: fullTrace ? (REFERENCE_HIT_RATES.get(capacity) ?? null) : null,
        setAssociativePrefixHitRate: setAssociative,
      };
    });
    const columns = ['capacity (blocks)', 'LRU prefix-hit rate', 'README reference', 'difference', 'all-hit rate'];
    if (ways > 0) columns.push(`${ways}-way prefix-hit rate`);
    const table: TextTable = {
      title: `BLOCK tier replay: ${trace.requests} requests, ${trace.blockIds.length} block references, ${trace.distinctBlocks} distinct blocks`,
      columns,
      rows: points.map((p) => {
        const row: Array<string | number> = [
          String(p.capacity),
          percent(p.prefixHitRate, 2),
          p.reference === null ? '-' : percent(p.reference, 1),
          p.reference === null ? '-' : `${((p.prefixHitRate - p.reference) * 100).toFixed(2)} pp`,
          percent(p.hitRate, 2),
        ];
        if (ways > 0) row.push(p.setAssociativePrefixHitRate === null ? '-' : percent(p.setAssociativePrefixHitRate, 2));
        return row;
      }),
    };
    const compared = points.filter((p) => p.reference !== null);
    const worst = compared.reduce((max, p) => Math.max(max, Math.abs(p.prefixHitRate - p.reference!)), 0);
    const notes = [
      compared.length === 0
        ? 'no capacity matches a README reference (1000, 5000, 20000, 50000, unlimited on the full trace).'
        : `agrees with the README's reference LRU figures within ${(worst * 100).toFixed(2)} percentage points at ${compared.map((p) => p.capacity).join(', ')}.`,
      'Prefix reuse caps the tier: even unlimited SRAM serves only the blocks of prefixes seen before, ' +
        'so capacity beyond the reuse working set buys little.',
    ];
    const withSets = points.filter((p) => p.setAssociativePrefixHitRate !== null);
    if (withSets.length > 0) {
      const loss = withSets.reduce((max, p) =>
        p.prefixHitRate - p.setAssociativePrefixHitRate! > max.prefixHitRate - max.setAssociativePrefixHitRate! ? p : max,
      );
      notes.push(
        `${ways}-way sets cost up to ${((loss.prefixHitRate - loss.setAssociativePrefixHitRate!) * 100).toFixed(2)} points (at ${loss.capacity} blocks): ` +
          'one conflict eviction anywhere in a prefix ends the prefix, so set conflicts hurt prefix hits far more than plain hits.',
      );
    }
    const xOf = (p: BlockTierPoint) => p.lines;
    const unlimitedLines = points.find((p) => p.capacity === 'unlimited')?.lines;
    const series = [
      { name: 'LRU, prefix hits', points: points.map((p) => [xOf(p), p.prefixHitRate] as const) },
      { name: 'LRU, all hits', points: points.map((p) => [xOf(p), p.hitRate] as const) },
      { name: 'README reference', points: compared.map((p) => [xOf(p), p.reference!] as const), dashed: true },
    ];
    if (ways > 0) {
      series.push({
        name: `${ways}-way, prefix hits`,
        points: points.filter((p) => p.setAssociativePrefixHitRate !== null).map((p) => [xOf(p), p.setAssociativePrefixHitRate!] as const),
      });
    }
    const chart = lineChart({
      title: 'BLOCK SRAM tier: hit rate vs capacity (Mooncake conversation trace)',
      xLabel: 'tier capacity (blocks)',
      yLabel: 'hit rate',
      logX: true,
      yMin: 0,
      formatY: (value) => percent(value, 0),
      formatX: (value) => (value === unlimitedLines ? 'unlimited' : value >= 1000 ? `${value / 1000}k` : String(value)),
      series: series.filter((s) => s.points.length > 0),
    });
    return {
      tables: [table],
      notes,
      json: { trace: tracePath, requests: trace.requests, references: trace.blockIds.length, distinctBlocks: trace.distinctBlocks, points },
      charts: [{ file: 'block-tier.svg', svg: chart }],
    };
  },
};
