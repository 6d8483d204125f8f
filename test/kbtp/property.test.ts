// Random operations from several sessions against a simple model of the block table: every
// completion must be the model's answer, and the pool audit must find nothing lost or doubled.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { startRig, type Rig } from '../support/rig.ts';
import type { KbtpSession, BlockInfo } from '../../host/kbtp/initiator.ts';
import { KbtpStatusError } from '../../host/kbtp/errors.ts';
import { Random } from '../../host/util/random.ts';

interface ModelEntry {
  valid: boolean;
  sealed: boolean;
  generation: number;
  data: Uint8Array;
  blockOffset: bigint;
}
interface Tenant {
  name: 'alpha' | 'beta';
  store: [bigint, bigint];
  load: [bigint, bigint];
  quota: number;
  usage: number;
}

const HANDLES = 256n;
const BLOCK = 4096;

let rig: Rig;
test.before(async () => {
  rig = await startRig();
});
test.after(async () => {
  await rig.stop();
});

function randomSource(seed: number): (n: number) => number {
  const generator = new Random(seed);
  return (n) => generator.below(n);
}

test('1,200 random requests from three sessions agree with the model', async () => {
  const random = randomSource(20261129);
  const alpha: Tenant = { name: 'alpha', store: [0n, 64n], load: [0n, 256n], quota: 24, usage: 0 };
  const beta: Tenant = { name: 'beta', store: [64n, 128n], load: [64n, 128n], quota: 8, usage: 0 };
  const sessions: Array<{ session: KbtpSession; tenant: Tenant }> = [
    { session: await rig.session('alpha'), tenant: alpha },
    { session: await rig.session('alpha'), tenant: alpha },
    { session: await rig.session('beta'), tenant: beta },
  ];
  const model = new Map<bigint, ModelEntry>();
  const entry = (handle: bigint): ModelEntry => {
    let found = model.get(handle);
    if (found === undefined) {
      found = { valid: false, sealed: false, generation: 1, data: new Uint8Array(0), blockOffset: 0n };
      model.set(handle, found);
    }
    return found;
  };
  const next = (generation: number): number => (generation === 0xffff ? 1 : generation + 1);
  const counts: Record<string, number> = {};

  for (let step = 0; step < 1200; step++) {
    const { session, tenant } = sessions[random(sessions.length)] ?? sessions[0]!;
    const handle = random(20) === 0 ? 300n + BigInt(random(10)) : BigInt(random(140));
    const op = (['allocStore', 'store', 'load', 'free'] as const)[random(4)] ?? 'load';
    const served = handle < HANDLES;
    const e = served ? entry(handle) : undefined;
    const genChoice = random(10);
    const expectedGeneration = genChoice === 0 ? ((e?.generation ?? 1) + 7) & 0xffff || 1 : genChoice === 1 ? (e?.generation ?? 0) : 0;
    const seal = random(2) === 0;
    const allowUnsealed = random(2) === 0;
    const length = random(4) === 0 ? 1025 + random(BLOCK - 1025) : random(300);
    const data = new Uint8Array(length).map(() => random(256));

    // The model's answer, in kbtp-v1 section 11's order of checks.
    let status = 'SUCCESS';
    const [first, end] = op === 'load' ? tenant.load : tenant.store;
    if (!served || e === undefined) status = 'OUT_OF_RANGE';
    else if (handle < first || handle >= end) status = 'ACCESS_DENIED';
    else if (expectedGeneration !== 0 && expectedGeneration !== e.generation) status = 'GENERATION_MISMATCH';
    else if (op !== 'allocStore' && !e.valid) status = 'NOT_VALID';
    else if (op === 'allocStore' && e.valid) status = 'ALREADY_VALID';
    else if (op === 'store' && e.sealed) status = 'SEALED';
    else if (op === 'load' && !e.sealed && !allowUnsealed) status = 'NOT_SEALED';
    else if (op === 'allocStore' && tenant.usage + 1 > tenant.quota) status = 'NO_SPACE';

    let info: BlockInfo | undefined;
    let loaded: Uint8Array | undefined;
    let actual = 'SUCCESS';
    try {
      if (op === 'allocStore') info = await session.allocStore(handle, data, { seal, generation: expectedGeneration });
      else if (op === 'store') info = await session.store(handle, data, { seal, generation: expectedGeneration });
      else if (op === 'free') info = await session.free(handle, { generation: expectedGeneration });
      else {
        const result = await session.load(handle, { generation: expectedGeneration, allowUnsealed });
        info = result;
        loaded = result.data;
      }
    } catch (error) {
      if (!(error instanceof KbtpStatusError)) throw error;
      actual = error.statusName;
      info = error.completion;
    }
    const where = `step ${step}: ${tenant.name} ${op} ${handle} (gen ${expectedGeneration})`;
    assert.is(actual, status, where);
    counts[status] = (counts[status] ?? 0) + 1;

    if (status === 'SUCCESS' && e !== undefined) {
      if (op === 'allocStore') {
        Object.assign(e, { valid: true, sealed: seal, generation: next(e.generation), data, blockOffset: info?.blockOffset ?? -1n });
        tenant.usage += 1;
      } else if (op === 'store') {
        e.data = data;
        e.sealed = seal;
      } else if (op === 'free') {
        Object.assign(e, { valid: false, sealed: false, generation: next(e.generation), data: new Uint8Array(0) });
        tenant.usage -= 1;
      } else {
        assert.equal(Array.from(loaded ?? []), Array.from(e.data), `${where}: data`);
      }
    }
    // Completion fields: the entry as it is after the request; 0 for handles not served.
    if (info !== undefined) {
      assert.is(info.generation, e?.generation ?? 0, `${where}: generation`);
      assert.is(info.dataLength, e?.data.length ?? 0, `${where}: data length`);
      if (e !== undefined && (e.valid || e.generation > 1)) assert.is(info.blockOffset, e.blockOffset, `${where}: block offset`);
    }
  }
  for (const status of ['SUCCESS', 'ACCESS_DENIED', 'NOT_VALID', 'ALREADY_VALID', 'GENERATION_MISMATCH', 'NOT_SEALED', 'SEALED', 'OUT_OF_RANGE']) {
    assert.ok((counts[status] ?? 0) > 0, `the random walk reached ${status}: ${JSON.stringify(counts)}`);
  }
  const engine = rig.target.engine;
  assert.is(engine.tenantUsage(0), alpha.usage);
  assert.is(engine.tenantUsage(1), beta.usage);
  const audit = rig.target.audit();
  assert.ok(audit.ok, JSON.stringify(audit));
  assert.is(audit.bound, alpha.usage + beta.usage);
});

test.run();
