// Sweeps the number of active QPs past what the SRAM can hold. Every message picks a QP at
// random, so once the QP contexts (plus the CQ contexts and translations that share the
// lines) outgrow the cache, most messages miss on their QP context - and a QP context is
// dirty, so its eviction also costs a write-back.
import { createSramCache, type SramModelConfig } from '../config.ts';
import { DEFAULT_LINK_GBPS } from '../costs.ts';
import { Random } from '../../util/random.ts';
import { lineChart } from '../../report/svg.ts';
import { percent, type TextTable } from '../../report/table.ts';
import { ThroughputMeter, modelMessage } from '../workload.ts';
import { integerListOption, integerOption, numberOption, type Experiment, type ExperimentContext, type OptionValues } from './experiment.ts';

const POOL_STAG = 0x100;
const PAGE_BYTES = 4096;

export interface QpSweepParams {
  readonly qpCounts: readonly number[];
  readonly messages: number;
  readonly messageBytes: number;
  /** Distinct pages of the one registered region the messages land in. */
  readonly pages: number;
  readonly qpsPerCq: number;
  readonly linkGbps: number;
}

export interface QpSweepPoint {
  qps: number;
  /** Lines the active set needs: QP contexts, CQ contexts, the MPT entry and the MTT pages. */
  workingSetLines: number;
  hitRate: number;
  qpcHitRate: number;
  translationHitRate: number;
  nicNsPerMessage: number;
  messagesPerSecond: number;
  gbps: number;
  pcieReadsPerMessage: number;
  pcieWritesPerMessage: number;
}

function rate(hits: number, misses: number): number {
  return hits + misses === 0 ? 0 : hits / (hits + misses);
}

export function runQpSweepPoint(config: SramModelConfig, qps: number, params: QpSweepParams, seed: number): QpSweepPoint {
  const cache = createSramCache(config);
  const random = new Random(seed);
  const meter = new ThroughputMeter(params.linkGbps);
  cache.registerRegion(POOL_STAG, 0);
  for (let qp = 0; qp < qps; qp++) cache.createQueuePair(qp, 0);
  const warmup = Math.max(50_000, 5 * qps);
  const pageSpan = Math.max(1, params.pages - Math.ceil(params.messageBytes / PAGE_BYTES) + 1);
  for (let message = 0; message < warmup + params.messages; message++) {
    if (message === warmup) cache.resetCounters();
    const qp = random.below(qps);
    const offset = random.below(pageSpan) * PAGE_BYTES;
    const nicNs = modelMessage(cache, 0, qp, POOL_STAG, offset, params.messageBytes, PAGE_BYTES, Math.floor(qp / params.qpsPerCq));
    if (message >= warmup) meter.add(nicNs, params.messageBytes);
  }
  const stats = cache.stats();
  const kind = stats.perKind;
  return {
    qps,
    workingSetLines: qps + Math.ceil(qps / params.qpsPerCq) + 1 + params.pages,
    hitRate: stats.hitRate,
    qpcHitRate: rate(kind.QPC!.hits, kind.QPC!.misses),
    translationHitRate: rate(kind.MPT!.hits + kind.MTT!.hits, kind.MPT!.misses + kind.MTT!.misses),
    nicNsPerMessage: meter.nicNsPerOperation(),
    messagesPerSecond: meter.rate(),
    gbps: meter.gbps(),
    pcieReadsPerMessage: stats.pcieReads / params.messages,
    pcieWritesPerMessage: stats.pcieWrites / params.messages,
  };
}

const DEFAULT_QPS = [64, 128, 256, 512, 1024, 1536, 1792, 2048, 2560, 3072, 4096, 8192, 16384];

export const qpSweep: Experiment = {
  name: 'qp-sweep',
  summary: "active QPs swept past the cache's capacity: the cliff in hit rate and throughput",
  description: [
    'Each message goes to a QP chosen at random: its QP context (dirty), the MPT entry and one MTT',
    "entry of a shared region (--pages pages), and its CQ's context (one CQ per --qps-per-cq QPs).",
    'For each QP count: hit rates (all, QPC, translations), modelled NIC time per message and the',
    'message rate when each message takes the larger of its wire time and its NIC time.',
  ].join('\n'),
  options: {
    qps: { type: 'string', value: '<list>', help: `QP counts, comma-separated (default ${DEFAULT_QPS.join(',')})` },
    messages: { type: 'string', value: '<n>', help: 'messages measured per QP count (default 200000)' },
    'message-bytes': { type: 'string', value: '<n>', help: 'payload bytes per message (default 256)' },
    pages: { type: 'string', value: '<n>', help: 'distinct 4 KiB pages the messages touch (default 64)' },
    'qps-per-cq': { type: 'string', value: '<n>', help: 'QPs sharing one completion queue (default 16)' },
    'link-gbps': { type: 'string', value: '<n>', help: `link rate (default ${DEFAULT_LINK_GBPS})` },
  },
  run(values: OptionValues, context: ExperimentContext) {
    const { config } = context;
    const params: QpSweepParams = {
      qpCounts: integerListOption(values, 'qps', DEFAULT_QPS, 1),
      messages: integerOption(values, 'messages', 200_000, 1),
      messageBytes: integerOption(values, 'message-bytes', 256, 1, 1 << 30),
      pages: integerOption(values, 'pages', 64, 1, 1 << 30),
      qpsPerCq: integerOption(values, 'qps-per-cq', 16, 1),
      linkGbps: numberOption(values, 'link-gbps', DEFAULT_LINK_GBPS, 0.001),
    };
    const points = params.qpCounts.map((qps, index) => {
      const point = runQpSweepPoint(config, qps, params, context.seed);
      context.progress.step(index + 1, params.qpCounts.length, `${qps} QPs`);
      return point;
    });
    const table: TextTable = {
      title: `QP sweep: ${config.lines} lines (${config.policy}), ${params.messageBytes}-byte messages over ${params.pages} pages, ${params.qpsPerCq} QPs per CQ`,
      columns: ['QPs', 'working set lines', 'hit rate', 'QPC hit', 'translation hit', 'NIC ns/msg', 'M msgs/s', 'PCIe reads/msg', 'PCIe writes/msg'],
      rows: points.map((p) => [
        p.qps,
        p.workingSetLines,
        percent(p.hitRate),
        percent(p.qpcHitRate),
        percent(p.translationHitRate),
        p.nicNsPerMessage,
        p.messagesPerSecond / 1e6,
        p.pcieReadsPerMessage,
        p.pcieWritesPerMessage,
      ]),
    };
    const first = points[0]!;
    const best = Math.max(...points.map((p) => p.messagesPerSecond));
    const cliff = points.find((p) => p.messagesPerSecond < 0.9 * best);
    const last = points.at(-1)!;
    const notes = [
      cliff === undefined
        ? `no cliff within the swept range: the largest working set (${last.workingSetLines} lines) ${last.workingSetLines > config.lines ? 'exceeds' : 'fits'} ${config.lines} lines.`
        : `cliff: throughput first falls below 90% of its best at ${cliff.qps} QPs (working set ${cliff.workingSetLines} lines vs ${config.lines} lines); ` +
          `from ${(first.messagesPerSecond / 1e6).toFixed(2)} M msgs/s at ${first.qps} QPs to ${(last.messagesPerSecond / 1e6).toFixed(2)} M msgs/s at ${last.qps} QPs ` +
          `(hit rate ${percent(first.hitRate)} -> ${percent(last.hitRate)}).`,
      'Past the cliff each message misses its QP context with probability about 1 - lines/QPs, and each such miss ' +
        'evicts another dirty context: a PCIe read plus a write-back.',
    ];
    const charts = [
      {
        file: 'qp-sweep.svg',
        svg: lineChart({
          title: `Message rate vs active QPs (${config.lines} lines, ${config.policy})`,
          xLabel: 'active QPs',
          yLabel: 'million messages per second (modelled)',
          logX: true,
          yMin: 0,
          marker: { x: config.lines, label: `${config.lines} lines` },
          series: [{ name: 'M msgs/s', points: points.map((p) => [p.qps, p.messagesPerSecond / 1e6] as const) }],
        }),
      },
      {
        file: 'qp-sweep-hit-rate.svg',
        svg: lineChart({
          title: `Hit rate vs active QPs (${config.lines} lines, ${config.policy})`,
          xLabel: 'active QPs',
          yLabel: 'hit rate',
          logX: true,
          yMin: 0,
          yMax: 1,
          formatY: (value) => percent(value, 0),
          marker: { x: config.lines, label: `${config.lines} lines` },
          series: [
            { name: 'all accesses', points: points.map((p) => [p.qps, p.hitRate] as const) },
            { name: 'QP contexts', points: points.map((p) => [p.qps, p.qpcHitRate] as const) },
            { name: 'translations', points: points.map((p) => [p.qps, p.translationHitRate] as const) },
          ],
        }),
      },
    ];
    return { tables: [table], notes, json: { lines: config.lines, policy: config.policy, params, points }, charts };
  },
};
