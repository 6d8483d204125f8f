// A victim tenant with a steady DMA working set shares the SRAM with a neighbour that either
// does nothing, only registers new regions, or registers and deregisters in a loop (Kong et
// al., NSDI 2023, section on control verbs). Reports the victim's MPT/MTT miss rate and its
// modelled throughput in each case.
import { createSramCache, type SramModelConfig } from '../config.ts';
import { DEFAULT_LINK_GBPS } from '../costs.ts';
import { Random } from '../../util/random.ts';
import { barChart, lineChart } from '../../report/svg.ts';
import { percent, type TextTable } from '../../report/table.ts';
import { ThroughputMeter, modelMessage } from '../workload.ts';
import { integerOption, numberOption, type Experiment, type ExperimentContext, type OptionValues } from './experiment.ts';

export const MODES = ['alone', 'register', 'dereg'] as const;
export type Mode = (typeof MODES)[number];

const VICTIM = 0;
const NEIGHBOUR = 1;
const VICTIM_QP = 1;
const VICTIM_CQ = 1;
const VICTIM_STAG = 0x100;
const NEIGHBOUR_QP = 2;
const FIRST_NEIGHBOUR_STAG = 0x10000;
const PAGE_BYTES = 4096;
/** The neighbour's regions: 64 KiB each. */
const NEIGHBOUR_REGION_PAGES = 16;

export interface DeregParams {
  readonly victimPages: number;
  /** Victim operations between two of the neighbour's control operations. */
  readonly interval: number;
  readonly operations: number;
  readonly warmup: number;
  readonly messageBytes: number;
  readonly linkGbps: number;
}

export interface DeregCase {
  mode: Mode;
  translationLookups: number;
  translationMisses: number;
  translationMissRate: number;
  throughputGbps: number;
  nicNsPerOperation: number;
  pcieReadsPerOperation: number;
  pcieWritesPerOperation: number;
  linesLost: number;
  linesDropped: number;
}

export function runDeregCase(config: SramModelConfig, mode: Mode, params: DeregParams, seed: number): DeregCase {
  const cache = createSramCache(config);
  const random = new Random(seed);
  const meter = new ThroughputMeter(params.linkGbps);
  cache.registerRegion(VICTIM_STAG, VICTIM, params.victimPages);
  cache.createQueuePair(VICTIM_QP, VICTIM);
  cache.createQueuePair(NEIGHBOUR_QP, NEIGHBOUR);
  const pagesPerMessage = Math.max(1, Math.ceil(params.messageBytes / PAGE_BYTES));
  const startPages = Math.max(1, params.victimPages - pagesPerMessage + 1);
  let nextStag = FIRST_NEIGHBOUR_STAG;
  const total = params.warmup + params.operations;
  for (let op = 0; op < total; op++) {
    if (op === params.warmup) cache.resetCounters();
    const offset = random.below(startPages) * PAGE_BYTES;
    const nicNs = modelMessage(cache, VICTIM, VICTIM_QP, VICTIM_STAG, offset, params.messageBytes, PAGE_BYTES, VICTIM_CQ);
    if (op >= params.warmup) meter.add(nicNs, params.messageBytes);
    if (mode !== 'alone' && op % params.interval === params.interval - 1) {
      const stag = nextStag++;
      cache.registerRegion(stag, NEIGHBOUR, NEIGHBOUR_REGION_PAGES);
      if (mode === 'dereg') cache.deregisterRegion(stag);
    }
  }
  const victim = cache.ownerStats(VICTIM);
  return {
    mode,
    translationLookups: victim.translationLookups,
    translationMisses: victim.translationMisses,
    translationMissRate: victim.translationLookups === 0 ? 0 : victim.translationMisses / victim.translationLookups,
    throughputGbps: meter.gbps(),
    nicNsPerOperation: meter.nicNsPerOperation(),
    pcieReadsPerOperation: victim.pcieReads / params.operations,
    pcieWritesPerOperation: victim.pcieWrites / params.operations,
    linesLost: victim.linesLost,
    linesDropped: victim.linesDropped,
  };
}

export interface DeregResult {
  cases: Record<Mode, DeregCase>;
  sweep?: Array<{ victimPages: number; cases: Record<Mode, DeregCase> }>;
}

export function runDereg(config: SramModelConfig, params: DeregParams, seed: number, sweep: readonly number[], context?: ExperimentContext): DeregResult {
  const steps = MODES.length * (1 + sweep.length);
  let done = 0;
  const runAll = (victimPages: number): Record<Mode, DeregCase> => {
    const cases = {} as Record<Mode, DeregCase>;
    for (const mode of MODES) {
      cases[mode] = runDeregCase(config, mode, { ...params, victimPages }, seed);
      context?.progress.step(++done, steps, `${mode}, victim working set ${victimPages} pages`);
    }
    return cases;
  };
  const result: DeregResult = { cases: runAll(params.victimPages) };
  if (sweep.length > 0) result.sweep = sweep.map((victimPages) => ({ victimPages, cases: runAll(victimPages) }));
  return result;
}

const SWEEP_FACTORS = [0.25, 0.5, 0.75, 1, 1.25, 1.5, 2, 3];

export const dereg: Experiment = {
  name: 'dereg',
  summary: "a neighbour's registrations vs its deregistrations, seen by a victim's translations",
  description: [
    'A victim RDMA-writes messages to random pages of its region (QPC, MPT, one MTT per page, CQC per',
    'message). The neighbour does nothing (alone), registers a new region every --interval victim',
    'operations (register), or registers and deregisters one (dereg). Reported for the victim:',
    'MPT+MTT miss rate and modelled throughput in Gbit/s (each message takes the larger of its wire',
    'time and its NIC time). With --json: {"victim_translation_miss_rate": {alone, register, dereg},',
    '"victim_throughput": {alone, register, dereg}} (throughput in Gbit/s).',
  ].join('\n'),
  options: {
    'victim-pages': { type: 'string', value: '<n>', help: "victim's working set in 4 KiB pages (default 1.5 x the cache's lines)" },
    interval: { type: 'string', value: '<n>', help: 'victim operations per neighbour (de)registration (default 100)' },
    operations: { type: 'string', value: '<n>', help: 'victim operations measured per case (default 400000)' },
    warmup: { type: 'string', value: '<n>', help: 'victim operations before measuring (default 100000)' },
    'message-bytes': { type: 'string', value: '<n>', help: 'bytes per victim RDMA Write (default 4096)' },
    'link-gbps': { type: 'string', value: '<n>', help: `link rate for throughput (default ${DEFAULT_LINK_GBPS})` },
    sweep: { type: 'boolean', help: "also sweep the victim's working set from 0.25x to 3x the lines" },
  },
  run(values: OptionValues, context: ExperimentContext) {
    const { config } = context;
    const params: DeregParams = {
      victimPages: integerOption(values, 'victim-pages', Math.round(config.lines * 1.5), 1, 1 << 30),
      interval: integerOption(values, 'interval', 100, 1),
      operations: integerOption(values, 'operations', 400_000, 1),
      warmup: integerOption(values, 'warmup', 100_000, 0),
      messageBytes: integerOption(values, 'message-bytes', 4096, 1, 1 << 30),
      linkGbps: numberOption(values, 'link-gbps', DEFAULT_LINK_GBPS, 0.001),
    };
    const sweepPages = values.sweep === true ? SWEEP_FACTORS.map((factor) => Math.max(1, Math.round(config.lines * factor))) : [];
    const result = runDereg(config, params, context.seed, sweepPages, context);
    const { alone, register, dereg: deregCase } = result.cases;
    const ratio = (value: number, base: number) => (base === 0 ? Number.POSITIVE_INFINITY : value / base);
    const times = (value: number, base: number) => {
      const r = ratio(value, base);
      return Number.isFinite(r) ? r.toFixed(2) : 'inf';
    };
    const main: TextTable = {
      title:
        `victim: ${params.victimPages} pages (${(params.victimPages / config.lines).toFixed(2)} x ${config.lines} lines, ${config.policy}), ` +
        `${params.messageBytes}-byte writes, neighbour acts every ${params.interval} victim ops`,
      columns: [
        'neighbour',
        'translation miss rate',
        'x alone',
        'throughput Gbit/s',
        'x alone',
        'NIC ns/op',
        'PCIe reads/op',
        'lines evicted by neighbour',
        'lines invalidated',
      ],
      rows: MODES.map((mode) => {
        const c = result.cases[mode];
        return [
          mode,
          percent(c.translationMissRate, 2),
          times(c.translationMissRate, alone.translationMissRate),
          c.throughputGbps,
          times(c.throughputGbps, alone.throughputGbps),
          c.nicNsPerOperation,
          c.pcieReadsPerOperation,
          c.linesLost,
          c.linesDropped,
        ];
      }),
    };
    const tables: TextTable[] = [main];
    const notes = [
      `dereg neighbour: victim translation miss rate x${times(deregCase.translationMissRate, alone.translationMissRate)} (Kong et al., ConnectX-5: roughly x3), ` +
        `throughput x${times(deregCase.throughputGbps, alone.throughputGbps)} of alone.`,
      `register-only neighbour: miss rate x${times(register.translationMissRate, alone.translationMissRate)}, ` +
        `throughput x${times(register.throughputGbps, alone.throughputGbps)} (Kong et al.: barely moves).`,
      'Right after each deregistration the victim misses on every page it touches, so its miss rate approaches the ceiling ' +
        `(every MTT lookup missing: about half of its MPT+MTT lookups); the ratio is that ceiling over the alone rate ` +
        `(${percent(alone.translationMissRate, 2)} here), so it depends on how often the victim missed anyway (see --sweep).`,
    ];
    const charts = [
      {
        file: 'dereg.svg',
        svg: barChart({
          title: `Victim beside a neighbour (${config.lines} lines, ${config.policy}), relative to alone`,
          yLabel: 'relative to the victim alone',
          groups: ['translation miss rate', 'throughput'],
          series: MODES.map((mode) => ({
            name: mode,
            values: [ratio(result.cases[mode].translationMissRate, alone.translationMissRate), ratio(result.cases[mode].throughputGbps, alone.throughputGbps)],
          })),
          formatY: (value) => `${value.toFixed(2)}x`,
        }),
      },
    ];
    const json: Record<string, unknown> = {
      victim_translation_miss_rate: { alone: alone.translationMissRate, register: register.translationMissRate, dereg: deregCase.translationMissRate },
      victim_throughput: { alone: alone.throughputGbps, register: register.throughputGbps, dereg: deregCase.throughputGbps },
    };
    if (result.sweep !== undefined) {
      tables.push({
        title: "victim's working set swept (translation miss rate; throughput in Gbit/s)",
        columns: ['victim pages', 'x lines', 'alone', 'register', 'dereg', 'dereg / alone', 'Gbit/s alone', 'Gbit/s dereg'],
        rows: result.sweep.map(({ victimPages, cases }) => [
          victimPages,
          (victimPages / config.lines).toFixed(2),
          percent(cases.alone.translationMissRate, 2),
          percent(cases.register.translationMissRate, 2),
          percent(cases.dereg.translationMissRate, 2),
          times(cases.dereg.translationMissRate, cases.alone.translationMissRate),
          cases.alone.throughputGbps,
          cases.dereg.throughputGbps,
        ]),
      });
      charts.push({
        file: 'dereg-sweep.svg',
        svg: lineChart({
          title: `Victim translation miss rate vs its working set (${config.lines} lines)`,
          xLabel: "victim's working set (pages)",
          yLabel: 'victim MPT+MTT miss rate',
          logX: true,
          yMin: 0,
          yMax: 1,
          formatY: (value) => percent(value, 0),
          marker: { x: config.lines, label: `${config.lines} lines` },
          series: MODES.map((mode) => ({
            name: mode,
            points: result.sweep!.map(({ victimPages, cases }) => [victimPages, cases[mode].translationMissRate] as const),
          })),
        }),
      });
      json.sweep = result.sweep.map(({ victimPages, cases }) => ({
        victim_pages: victimPages,
        victim_translation_miss_rate: {
          alone: cases.alone.translationMissRate,
          register: cases.register.translationMissRate,
          dereg: cases.dereg.translationMissRate,
        },
        victim_throughput: { alone: cases.alone.throughputGbps, register: cases.register.throughputGbps, dereg: cases.dereg.throughputGbps },
      }));
    }
    return { tables, notes, json, charts };
  },
};
