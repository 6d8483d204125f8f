// The same KV-block traffic (the Mooncake conversation trace: a request loads the blocks of its
// prefix that the pool holds and stores the rest) carried two ways at the target's NIC:
//   KBTP: one Pool STag registered once over the whole pool; a block is an offset into it.
//   per-block MR (the draft's patterns 2 and 3): each stored block gets its own registered
//   region, deregistered when the pool evicts the block.
// Every block operation is three messages at the target NIC: the request's receive (QPC, the
// session's receive ring translation, CQC), the block's data movement (QPC, the block's MPT and
// MTT entries) and the COMPLETION send (QPC, send buffer translation, CQC).
import { EVICTED, HIT, SramCache } from '../cache.ts';
import { withOverrides, createSramCache, type SramModelConfig } from '../config.ts';
import { DEFAULT_LINK_GBPS } from '../costs.ts';
import { EntryKind } from '../kinds.ts';
import { barChart } from '../../report/svg.ts';
import { defaultTracePath, loadBlockTrace, REPOSITORY_TRACE, type BlockTrace } from '../trace.ts';
import { percent, type TextTable } from '../../report/table.ts';
import { ThroughputMeter, modelMessage } from '../workload.ts';
import { UsageError, integerOption, numberOption, type Experiment, type ExperimentContext, type OptionValues } from './experiment.ts';

const POOL_STAG = 0x100;
const RECEIVE_STAG_BASE = 0x1000;
const SEND_STAG_BASE = 0x2000;
const FIRST_BLOCK_STAG = 0x10_0000;
const BUFFER_PAGE_BYTES = 4096;
const RING_SLOTS = 64;
const RECEIVE_SLOT_BYTES = 256;
const COMPLETION_BYTES = 40;

export interface BlockTrafficParams {
  readonly blockBytes: number;
  readonly poolBlocks: number;
  readonly sessions: number;
  readonly requestBytes: number;
  readonly linkGbps: number;
}

export interface Scheme {
  readonly name: string;
  readonly perBlockRegions: boolean;
  /** Page size of the block memory's registration. */
  readonly pageBytes: number;
  readonly config: SramModelConfig;
}

export interface SchemeResult {
  scheme: string;
  policy: string;
  pageBytes: number;
  loads: number;
  stores: number;
  registrations: number;
  deregistrations: number;
  translationLookups: number;
  translationMisses: number;
  translationMissRate: number;
  linesInvalidated: number;
  pcieReads: number;
  pcieWrites: number;
  nicNsPerBlockOperation: number;
  /** Block payload rate with each block operation taking max(wire time, NIC time). */
  gbps: number;
}

export function runScheme(trace: BlockTrace, scheme: Scheme, params: BlockTrafficParams): SchemeResult {
  const cache = createSramCache(scheme.config);
  const meter = new ThroughputMeter(params.linkGbps);
  // The pool's block table: an LRU of poolBlocks blocks. The model's own LRU serves, with its
  // line index as the block's slot in the pool.
  const pool = new SramCache({ lines: params.poolBlocks });
  const stagOfSlot = new Uint32Array(params.poolBlocks);
  let nextBlockStag = FIRST_BLOCK_STAG;
  let loads = 0;
  let stores = 0;
  const blockPages = Math.ceil(params.blockBytes / scheme.pageBytes);
  if (!scheme.perBlockRegions) cache.registerRegion(POOL_STAG, 0, Math.ceil((params.poolBlocks * params.blockBytes) / scheme.pageBytes));
  for (let session = 0; session < params.sessions; session++) {
    cache.registerRegion(RECEIVE_STAG_BASE + session, session, (RING_SLOTS * RECEIVE_SLOT_BYTES) / BUFFER_PAGE_BYTES);
    cache.registerRegion(SEND_STAG_BASE + session, session, 1);
    cache.createQueuePair(session, session);
  }
  const sequence = new Uint32Array(params.sessions);
  for (let request = 0; request < trace.requests; request++) {
    const session = request % params.sessions;
    for (let at = trace.starts[request]!; at < trace.starts[request + 1]!; at++) {
      const found = pool.access(EntryKind.BLOCK, trace.blockIds[at]!, 0, 0, false);
      const slot = pool.lastLine;
      if ((found & HIT) !== 0) {
        loads++;
      } else {
        stores++;
        // The pool evicted the slot's previous block to make room: its region goes too.
        if ((found & EVICTED) !== 0 && scheme.perBlockRegions) cache.deregisterRegion(stagOfSlot[slot]!);
        if (scheme.perBlockRegions) {
          stagOfSlot[slot] = nextBlockStag;
          cache.registerRegion(nextBlockStag++, session, blockPages);
        }
      }
      const ring = sequence[session]!++ % RING_SLOTS;
      let nicNs = modelMessage(
        cache,
        session,
        session,
        RECEIVE_STAG_BASE + session,
        ring * RECEIVE_SLOT_BYTES,
        params.requestBytes,
        BUFFER_PAGE_BYTES,
        session,
      );
      nicNs += scheme.perBlockRegions
        ? modelMessage(cache, session, session, stagOfSlot[slot]!, 0, params.blockBytes, scheme.pageBytes, -1)
        : modelMessage(cache, session, session, POOL_STAG, slot * params.blockBytes, params.blockBytes, scheme.pageBytes, -1);
      nicNs += modelMessage(cache, session, session, SEND_STAG_BASE + session, ring * COMPLETION_BYTES, COMPLETION_BYTES, BUFFER_PAGE_BYTES, session);
      meter.add(nicNs, params.blockBytes);
    }
  }
  const stats = cache.stats();
  const mpt = stats.perKind.MPT!;
  const mtt = stats.perKind.MTT!;
  const lookups = mpt.hits + mpt.misses + mtt.hits + mtt.misses;
  return {
    scheme: scheme.name,
    policy: scheme.config.policy,
    pageBytes: scheme.pageBytes,
    loads,
    stores,
    registrations: stats.registrations,
    deregistrations: stats.deregistrations,
    translationLookups: lookups,
    translationMisses: mpt.misses + mtt.misses,
    translationMissRate: lookups === 0 ? 0 : (mpt.misses + mtt.misses) / lookups,
    linesInvalidated: mpt.invalidations + mtt.invalidations,
    pcieReads: stats.pcieReads,
    pcieWrites: stats.pcieWrites,
    nicNsPerBlockOperation: meter.nicNsPerOperation(),
    gbps: meter.gbps(),
  };
}

function bytesLabel(bytes: number): string {
  if (bytes % (1 << 20) === 0) return `${bytes >> 20} MiB`;
  if (bytes % 1024 === 0) return `${bytes >> 10} KiB`;
  return `${bytes} B`;
}

export function schemesFor(config: SramModelConfig, pageBytes: number, hugePageBytes: number, blockBytes: number): Scheme[] {
  const hw = withOverrides(config, { policy: 'hw-assisted' }, 'hw-assisted');
  return [
    { name: `kbtp, ${bytesLabel(pageBytes)} pages`, perBlockRegions: false, pageBytes, config },
    { name: `kbtp, ${bytesLabel(hugePageBytes)} pages`, perBlockRegions: false, pageBytes: hugePageBytes, config },
    { name: `per-block MR, ${bytesLabel(pageBytes)} pages`, perBlockRegions: true, pageBytes, config },
    // The best a region per block can do: the whole block is one page, one MTT entry.
    { name: `per-block MR, ${bytesLabel(blockBytes)} pages`, perBlockRegions: true, pageBytes: blockBytes, config },
    { name: `per-block MR, ${bytesLabel(blockBytes)} pages, hw-assisted`, perBlockRegions: true, pageBytes: blockBytes, config: hw },
  ];
}

export const kbtpVsPerBlockMr: Experiment = {
  name: 'kbtp-vs-per-block-mr',
  summary: 'KV-block traffic through one pool STag (KBTP) vs a registered region per block',
  description: [
    'Replays the Mooncake conversation trace against a pool of --pool-blocks blocks (LRU): a block',
    'the pool holds is a LOAD, any other a STORE that may evict the oldest block. KBTP resolves every',
    "block through the one Pool STag; the per-block scheme (the draft's patterns 2 and 3) registers a",
    'region per stored block and deregisters it on eviction. Rows: KBTP on small and on huge pages;',
    'per-block MRs on small pages and on one page per block; the latter again on a hw-assisted NIC.',
  ].join('\n'),
  options: {
    trace: { type: 'string', value: '<file>', help: "Mooncake-format trace (default: the repository's test/fixtures/traces/mooncake-conversation.jsonl)" },
    requests: { type: 'string', value: '<n>', help: 'replay only the first n requests (default all)' },
    'block-bytes': { type: 'string', value: '<n>', help: 'bytes per KV block (default 65536)' },
    'pool-blocks': { type: 'string', value: '<n>', help: 'blocks the pool holds (default 20000)' },
    sessions: { type: 'string', value: '<n>', help: 'initiator sessions (QPs) the requests are spread over (default 32)' },
    'page-bytes': { type: 'string', value: '<n>', help: 'small page size of the block memory (default 4096)' },
    'huge-page-bytes': { type: 'string', value: '<n>', help: 'huge page size for the second KBTP row (default 2097152)' },
    'link-gbps': { type: 'string', value: '<n>', help: `link rate (default ${DEFAULT_LINK_GBPS})` },
  },
  run(values: OptionValues, context: ExperimentContext) {
    const tracePath = typeof values.trace === 'string' ? values.trace : defaultTracePath();
    if (tracePath === undefined) throw new UsageError(`cannot find the repository's trace (${REPOSITORY_TRACE}); pass --trace <file.jsonl>`);
    const maxRequests = integerOption(values, 'requests', Number.MAX_SAFE_INTEGER, 1);
    const params: BlockTrafficParams = {
      blockBytes: integerOption(values, 'block-bytes', 65_536, 1, 1 << 30),
      poolBlocks: integerOption(values, 'pool-blocks', 20_000, 1, 1 << 24),
      sessions: integerOption(values, 'sessions', 32, 1, 4096),
      requestBytes: 64,
      linkGbps: numberOption(values, 'link-gbps', DEFAULT_LINK_GBPS, 0.001),
    };
    const pageBytes = integerOption(values, 'page-bytes', 4096, 1, 1 << 30);
    const hugePageBytes = integerOption(values, 'huge-page-bytes', 2 << 20, 1, 1 << 30);
    let trace: BlockTrace;
    try {
      trace = loadBlockTrace(tracePath, maxRequests);
    } catch (error) {
      throw new UsageError((error as Error).message);
    }
    const schemes = schemesFor(context.config, pageBytes, hugePageBytes, params.blockBytes);
    const results = schemes.map((scheme, index) => {
      const result = runScheme(trace, scheme, params);
      context.progress.step(index + 1, schemes.length, scheme.name);
      return result;
    });
    const operations = results[0]!.loads + results[0]!.stores;
    const table: TextTable = {
      title:
        `${trace.requests} requests, ${operations} block operations (${results[0]!.loads} loads, ${results[0]!.stores} stores), ` +
        `${bytesLabel(params.blockBytes)} blocks, pool of ${params.poolBlocks} blocks, ${params.sessions} sessions, ${context.config.lines} lines`,
      columns: [
        'scheme',
        'policy',
        'regs',
        'deregs',
        'translation lookups',
        'misses',
        'miss rate',
        'lines invalidated',
        'PCIe reads',
        'PCIe writes',
        'NIC ns/block op',
        'Gbit/s',
      ],
      rows: results.map((r) => [
        r.scheme,
        r.policy,
        r.registrations,
        r.deregistrations,
        r.translationLookups,
        r.translationMisses,
        percent(r.translationMissRate, 2),
        r.linesInvalidated,
        r.pcieReads,
        r.pcieWrites,
        r.nicNsPerBlockOperation,
        r.gbps,
      ]),
    };
    const [kbtp, kbtpHuge, perBlock, perBlockOnePage, perBlockHw] = results as [SchemeResult, SchemeResult, SchemeResult, SchemeResult, SchemeResult];
    const times = (a: number, b: number) => (b === 0 ? 'inf' : (a / b).toFixed(2));
    const notes = [
      `same ${bytesLabel(pageBytes)} pages: per-block MRs miss ${times(perBlock.translationMisses, kbtp.translationMisses)}x as many translations as KBTP ` +
        `and take ${times(perBlock.nicNsPerBlockOperation, kbtp.nicNsPerBlockOperation)}x its NIC time per block operation; ` +
        `their ${perBlock.deregistrations} deregistrations invalidated ${perBlock.linesInvalidated} translation lines.`,
      `each at its best page size: per-block MRs (one ${bytesLabel(params.blockBytes)} page per block) miss ${perBlockOnePage.translationMisses} translations ` +
        `(${percent(perBlockOnePage.translationMissRate, 1)}), KBTP's pool on ${bytesLabel(hugePageBytes)} pages ${kbtpHuge.translationMisses} ` +
        `(${percent(kbtpHuge.translationMissRate, 2)}): ${times(perBlockOnePage.nicNsPerBlockOperation, kbtpHuge.nicNsPerBlockOperation)}x the NIC time per block operation.`,
      `a hw-assisted NIC (deregistration drops only the departing region) leaves per-block MRs at ${times(perBlockHw.nicNsPerBlockOperation, kbtpHuge.nicNsPerBlockOperation)}x ` +
        `KBTP's NIC time: every stored block still brings its own MPT and MTT lines, which the pool's ${params.poolBlocks} blocks cannot all keep in ${context.config.lines} lines ` +
        '(and a registration per stored block costs target-CPU or firmware time the model does not count).',
    ];
    // Short names fit under the bars: "kbtp 4K", "per-block 64K hw".
    const short = (scheme: Scheme) =>
      `${scheme.perBlockRegions ? 'per-block' : 'kbtp'} ${bytesLabel(scheme.pageBytes).replace(' KiB', 'K').replace(' MiB', 'M')}` +
      (scheme.perBlockRegions && scheme.config.policy === 'hw-assisted' ? ' hw' : '');
    const groups = schemes.map(short);
    const charts = [
      {
        file: 'kbtp-vs-per-block-mr.svg',
        svg: barChart({
          title: `NIC time per block operation (${context.config.lines} lines)`,
          yLabel: 'modelled NIC ns per block operation',
          groups,
          series: [{ name: 'NIC ns per block op', values: results.map((r) => r.nicNsPerBlockOperation) }],
          formatY: (value) => value.toFixed(0),
        }),
      },
      {
        file: 'kbtp-vs-per-block-mr-misses.svg',
        svg: barChart({
          title: `Translation misses per block operation (${context.config.lines} lines)`,
          yLabel: 'MPT+MTT misses per block operation',
          groups,
          series: [{ name: 'translation misses per block op', values: results.map((r) => r.translationMisses / operations) }],
          formatY: (value) => value.toFixed(2),
        }),
      },
    ];
    return { tables: [table], notes, json: { trace: tracePath, requests: trace.requests, params, lines: context.config.lines, results }, charts };
  },
};
