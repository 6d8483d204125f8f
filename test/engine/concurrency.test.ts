// Two worker threads hammer one pool; afterwards every block must be bound exactly once or sit
// in a ring exactly once. A build of the engine whose FetchAdd is a plain load and store (made
// here, never shipped) must be caught by the same check.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, cpSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { compileRelease } from '../../bench/asc-compile.ts';
import { Engine } from '../../host/engine/engine.ts';
import { auditPool, type AuditReport } from '../../host/engine/audit.ts';
import { engineModule } from '../../host/engine/wasm.ts';
import { spawnWorker } from '../../host/util/spawn-worker.ts';
import type { EngineConfig } from '../../host/engine/config.ts';
import type { StressJob, StressReport } from '../support/engine-stress-worker.ts';
import { ENTRY_VALID } from '../../assembly/kbtp-constants.ts';

const SHARED = { first: 0n, count: 96 };
const DIRECT = { first: 96n, count: 32, quota: 16 };

function config(ringMode: 'masked' | 'unmasked'): EngineConfig {
  return {
    blockSize: 64,
    blockCount: 64,
    handleCount: 128,
    ringMode,
    threads: 3,
    maxInline: 64,
    partitions: [{ blocks: DIRECT.quota }],
    tenants: [
      { name: 'shared', storeRange: { first: SHARED.first, count: BigInt(SHARED.count) }, loadScope: { first: 0n, count: 128n }, quota: 48 },
      {
        name: 'direct',
        storeRange: { first: DIRECT.first, count: BigInt(DIRECT.count) },
        loadScope: { first: 0n, count: 128n },
        quota: DIRECT.quota,
        partition: 0,
      },
    ],
  };
}

async function stress(
  engine: Engine,
  operationsPerWorker: number,
  maxRetries: number,
  minStuckMs: number,
): Promise<{ reports: StressReport[]; audit: AuditReport }> {
  const initiatorUsage = new SharedArrayBuffer(4);
  const reports = await Promise.all(
    [1, 2].map(
      (thread) =>
        new Promise<StressReport>((resolve, reject) => {
          const job: StressJob = {
            handoff: engine.handoff(),
            thread,
            operations: operationsPerWorker,
            seed: 0x1234 * thread + 7,
            maxRetries,
            minStuckMs,
            initiatorUsage,
            shared: SHARED,
            direct: DIRECT,
          };
          const worker = spawnWorker(new URL('../support/engine-stress-worker.ts', import.meta.url), { workerData: job });
          worker.once('message', (report: StressReport) => {
            resolve(report);
            void worker.terminate();
          });
          worker.once('error', reject);
        }),
    ),
  );
  return { reports, audit: auditPool(engine) };
}

function boundBy(engine: Engine, first: bigint, count: number): number {
  let bound = 0;
  for (let i = 0n; i < BigInt(count); i++) if (((engine.readEntry(first + i)?.flags ?? 0) & ENTRY_VALID) !== 0) bound += 1;
  return bound;
}

for (const mode of ['masked', 'unmasked'] as const) {
  test(`${mode} counters: 2 workers x 250,000 random operations leave every block exactly once`, async () => {
    const engine = Engine.create(config(mode));
    const { reports, audit } = await stress(engine, 250_000, 5_000_000, 30_000);
    for (const report of reports) {
      assert.is(report.stuck, undefined, `thread ${report.thread} stuck`);
      assert.equal(report.unexpected, [], `thread ${report.thread}: unexpected answers`);
      assert.is(report.wrongData, 0, `thread ${report.thread}: loads returned another handle's data`);
      assert.is(report.operations, 250_000);
      assert.ok((report.statuses.SUCCESS ?? 0) > 100_000, 'most operations succeed');
      assert.ok(report.directBinds > 1000, 'direct allocations happen');
    }
    assert.equal({ lost: audit.lost, doubled: audit.doubled, problems: audit.problems }, { lost: [], doubled: [], problems: [] });
    assert.is(audit.bound + audit.inRings, 64);
    // Usage of each tenant equals its bound handles once everything is quiet.
    assert.is(engine.tenantUsage(0), boundBy(engine, SHARED.first, SHARED.count));
    assert.is(engine.tenantUsage(1), boundBy(engine, DIRECT.first, DIRECT.count));
  });
}

test('the same stress catches an engine whose FetchAdd is not atomic', async () => {
  const work = mkdtempSync(join(tmpdir(), 'kbtp-broken-'));
  try {
    cpSync(new URL('../../assembly', import.meta.url), join(work, 'assembly'), { recursive: true });
    const source = join(work, 'assembly', 'masked-fetch-add.ts');
    const original = readFileSync(source, 'utf8');
    const atomicLoop = /export function maskedFetchAdd\([^)]*\): u64 \{[\s\S]*?\n\}\n/;
    assert.match(original, atomicLoop);
    writeFileSync(
      source,
      original.replace(
        atomicLoop,
        'export function maskedFetchAdd(address: usize, addend: u64, mask: u64): u64 {\n' +
          '  const observed = load<u64>(address);\n  store<u64>(address, maskedSum(observed, addend, mask));\n  return observed;\n}\n',
      ),
    );
    const outFile = join(work, 'broken.wasm');
    await compileRelease(join(work, 'assembly', 'index.ts'), outFile);
    const broken = Engine.create(config('masked'), new WebAssembly.Module(readFileSync(outFile)));
    assert.is.not(broken.module, engineModule());
    const { reports, audit } = await stress(broken, 250_000, 200_000, 0);
    const caught = !audit.ok || reports.some((r) => r.stuck !== undefined || r.wrongData > 0 || r.unexpected.length > 0);
    assert.ok(caught, 'a non-atomic FetchAdd went unnoticed');
    console.log(
      `    non-atomic FetchAdd caught: audit lost ${audit.lost.length}, doubled ${audit.doubled.length}, ` +
        `problems ${audit.problems.length}; wrong loads ${reports.map((r) => r.wrongData).join('/')}; ` +
        `stuck ${reports.filter((r) => r.stuck !== undefined).length} of 2 threads`,
    );
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

test.run();
