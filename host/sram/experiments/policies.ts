// The three policies under mixes of QP-heavy and MR-heavy load. Sizes scale with the cache's
// line count L, so the mixes mean the same thing for any configured SRAM:
//   qp-heavy       one tenant, 0.85 L QPs, 16 pages
//   mr-heavy       one tenant, 8 QPs, 0.85 L pages over 8 regions
//   noisy-qps      tenant A (8 QPs, 0.3 L pages) beside tenant B cycling through 2 L QPs
//   dereg-churn    tenant A (8 QPs, 0.3 L pages) beside a neighbour registering and
//                  deregistering a region every 50 operations
import { withOverrides, createSramCache, type SramModelConfig } from '../config.ts';
import { DEFAULT_LINK_GBPS } from '../costs.ts';
import { Random } from '../../util/random.ts';
import { barChart } from '../../report/svg.ts';
import { percent, type TextTable } from '../../report/table.ts';
import { ThroughputMeter, modelMessage } from '../workload.ts';
import { integerOption, numberOption, type Experiment, type ExperimentContext, type OptionValues } from './experiment.ts';

export const POLICIES = ['shared-lru', 'partitioned', 'hw-assisted'] as const;
const PAGE_BYTES = 4096;
/** The churning neighbour's regions: 64 KiB each. */
const CHURN_REGION_PAGES = 16;

export interface TenantLoad {
  readonly name: string;
  readonly qps: number;
  readonly pages: number;
  readonly regions: number;
  /** Fraction of operations. */
  readonly share: number;
}

export interface Mix {
  readonly name: string;
  readonly tenants: readonly TenantLoad[];
  /** A neighbour registers and deregisters a region every this many operations (0: never). */
  readonly churnEvery: number;
}

export function mixesFor(lines: number): Mix[] {
  const scaled = (factor: number) => Math.max(1, Math.round(lines * factor));
  return [
    { name: 'qp-heavy', tenants: [{ name: 'A', qps: scaled(0.85), pages: 16, regions: 1, share: 1 }], churnEvery: 0 },
    { name: 'mr-heavy', tenants: [{ name: 'A', qps: 8, pages: scaled(0.85), regions: 8, share: 1 }], churnEvery: 0 },
    {
      name: 'noisy-qps',
      tenants: [
        { name: 'A', qps: 8, pages: scaled(0.3), regions: 4, share: 0.5 },
        { name: 'B', qps: scaled(2), pages: 8, regions: 1, share: 0.5 },
      ],
      churnEvery: 0,
    },
    { name: 'dereg-churn', tenants: [{ name: 'A', qps: 8, pages: scaled(0.3), regions: 4, share: 1 }], churnEvery: 50 },
  ];
}

export interface PolicyCell {
  mix: string;
  policy: string;
  hitRate: number;
  /** Tenant A: the first tenant of the mix, the one whose service the comparison is about. */
  tenantATranslationMissRate: number;
  tenantANicNsPerOperation: number;
  nicNsPerOperation: number;
  operationsPerSecond: number;
}

export interface PoliciesParams {
  readonly operations: number;
  readonly warmup: number;
  readonly messageBytes: number;
  readonly linkGbps: number;
}

export function runPolicyCell(config: SramModelConfig, mix: Mix, params: PoliciesParams, seed: number): PolicyCell {
  const cache = createSramCache(config);
  const random = new Random(seed);
  const meter = new ThroughputMeter(params.linkGbps);
  const tenantA = new ThroughputMeter(params.linkGbps);
  const churnOwner = mix.tenants.length;
  // Each tenant's QPs, regions and CQ get their own number ranges.
  const qpBase = mix.tenants.map((_, index) => index << 20);
  const stagBase = mix.tenants.map((_, index) => (index + 1) << 16);
  const pagesPerRegion = mix.tenants.map((tenant) => Math.max(1, Math.ceil(tenant.pages / tenant.regions)));
  const cumulative: number[] = [];
  let sum = 0;
  // biome-ignore lint/suspicious/noAssignInExpressions: a running sum, pushed as it grows
  for (const tenant of mix.tenants) cumulative.push((sum += tenant.share));
  mix.tenants.forEach((tenant, index) => {
    for (let region = 0; region < tenant.regions; region++) cache.registerRegion(stagBase[index]! + region, index, pagesPerRegion[index]);
  });
  let churnStag = 0x7000_0000;
  const total = params.warmup + params.operations;
  for (let op = 0; op < total; op++) {
    if (op === params.warmup) cache.resetCounters();
    const roll = random.float() * sum;
    let index = 0;
    while (index < cumulative.length - 1 && roll >= cumulative[index]!) index++;
    const tenant = mix.tenants[index]!;
    const qp = qpBase[index]! + random.below(tenant.qps);
    const region = random.below(tenant.regions);
    const page = random.below(pagesPerRegion[index]!);
    const nicNs = modelMessage(cache, index, qp, stagBase[index]! + region, page * PAGE_BYTES, params.messageBytes, PAGE_BYTES, index);
    if (op >= params.warmup) {
      meter.add(nicNs, params.messageBytes);
      if (index === 0) tenantA.add(nicNs, params.messageBytes);
    }
    if (mix.churnEvery > 0 && op % mix.churnEvery === mix.churnEvery - 1) {
      cache.registerRegion(churnStag, churnOwner, CHURN_REGION_PAGES);
      cache.deregisterRegion(churnStag++);
    }
  }
  const a = cache.ownerStats(0);
  return {
    mix: mix.name,
    policy: config.policy,
    hitRate: cache.stats().hitRate,
    tenantATranslationMissRate: a.translationLookups === 0 ? 0 : a.translationMisses / a.translationLookups,
    tenantANicNsPerOperation: tenantA.nicNsPerOperation(),
    nicNsPerOperation: meter.nicNsPerOperation(),
    operationsPerSecond: meter.rate(),
  };
}

export const policies: Experiment = {
  name: 'policies',
  summary: 'shared-lru vs partitioned vs hw-assisted under QP-heavy and MR-heavy mixes',
  description: [
    "Four mixes sized against the cache's line count L: qp-heavy (0.85 L QPs), mr-heavy (0.85 L pages),",
    'noisy-qps (tenant A with 0.3 L pages beside tenant B cycling 2 L QPs) and dereg-churn (tenant A',
    'beside a neighbour registering and deregistering every 50 operations). Each operation is one',
    "message: QPC (dirty), MPT, one MTT per page, CQC. The partitioned policy uses the config's",
    '"partition" or its default split (QPC 1/2, MTT 3/8, MPT 1/16, CQC 1/32, EQC 1/32). The winner of a',
    'mix is the policy giving tenant A the least NIC time per operation.',
  ].join('\n'),
  options: {
    operations: { type: 'string', value: '<n>', help: 'operations measured per mix and policy (default 200000)' },
    warmup: { type: 'string', value: '<n>', help: 'operations before measuring (default 100000)' },
    'message-bytes': { type: 'string', value: '<n>', help: 'payload bytes per message (default 1024)' },
    'link-gbps': { type: 'string', value: '<n>', help: `link rate (default ${DEFAULT_LINK_GBPS})` },
  },
  run(values: OptionValues, context: ExperimentContext) {
    const params: PoliciesParams = {
      operations: integerOption(values, 'operations', 200_000, 1),
      warmup: integerOption(values, 'warmup', 100_000, 0),
      messageBytes: integerOption(values, 'message-bytes', 1024, 1, 1 << 30),
      linkGbps: numberOption(values, 'link-gbps', DEFAULT_LINK_GBPS, 0.001),
    };
    const { config } = context;
    const mixes = mixesFor(config.lines);
    const configs = POLICIES.map((policy) => withOverrides(config, { policy }, `policy ${policy}`));
    const cells: PolicyCell[] = [];
    let done = 0;
    for (const mix of mixes) {
      for (const policyConfig of configs) {
        cells.push(runPolicyCell(policyConfig, mix, params, context.seed));
        context.progress.step(++done, mixes.length * configs.length, `${mix.name} on ${policyConfig.policy}`);
      }
    }
    const winners = mixes.map((mix) => {
      const ofMix = cells.filter((cell) => cell.mix === mix.name);
      const best = Math.min(...ofMix.map((cell) => cell.tenantANicNsPerOperation));
      // Policies within 1% of the best tie for the win.
      const tied = ofMix.filter((cell) => cell.tenantANicNsPerOperation <= best * 1.01);
      const rest = ofMix.filter((cell) => !tied.includes(cell));
      const runnerUp = rest.length === 0 ? undefined : rest.reduce((a, b) => (b.tenantANicNsPerOperation < a.tenantANicNsPerOperation ? b : a));
      return {
        mix: mix.name,
        winners: tied.map((cell) => cell.policy),
        runnerUp: runnerUp?.policy ?? null,
        margin: runnerUp === undefined ? 1 : runnerUp.tenantANicNsPerOperation / best,
      };
    });
    const table: TextTable = {
      title: `policies: ${config.lines} lines, ${params.messageBytes}-byte messages (tenant A = the first tenant of the mix)`,
      columns: ['mix', 'policy', 'hit rate', 'A translation miss', 'A NIC ns/op', 'all NIC ns/op', 'M ops/s'],
      rows: cells.map((cell) => [
        cell.mix,
        cell.policy,
        percent(cell.hitRate),
        percent(cell.tenantATranslationMissRate, 2),
        cell.tenantANicNsPerOperation,
        cell.nicNsPerOperation,
        cell.operationsPerSecond / 1e6,
      ]),
    };
    const notes = winners.map((w) =>
      w.runnerUp === null
        ? `${w.mix}: all policies tie.`
        : `${w.mix}: ${w.winners.join(' and ')} ${w.winners.length > 1 ? 'tie for the win' : 'wins'} ` +
          `(tenant A's NIC time ${w.margin.toFixed(2)}x lower than ${w.runnerUp}).`,
    );
    const chart = barChart({
      title: `Tenant A's NIC time per operation (${config.lines} lines; lower is better)`,
      yLabel: 'modelled NIC ns per operation',
      groups: mixes.map((mix) => mix.name),
      series: POLICIES.map((policy) => ({
        name: policy,
        values: mixes.map((mix) => cells.find((cell) => cell.mix === mix.name && cell.policy === policy)!.tenantANicNsPerOperation),
      })),
      formatY: (value) => value.toFixed(0),
    });
    return {
      tables: [table],
      notes,
      json: { lines: config.lines, params, mixes, cells, winners },
      charts: [{ file: 'policies.svg', svg: chart }],
    };
  },
};
