// The appliance's self-test: one block stored over KBTP on loopback, loaded back byte-exact and
// freed, as the node's own first tenant (or the tenant named on the command line). The appliance
// image marks an updated root slot good only after this passes (images/appliance/.../bless).
//
//   node dist/firmware/self-test.js CONFIG [TENANT]     exit 0 and one line on success, 1 otherwise
import { readFileSync, realpathSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { connect } from '../host/kbtp/initiator.ts';
import { KbtpStatusError } from '../host/kbtp/errors.ts';
import { DEFAULT_PORT, parseHostPort } from '../host/kbtp/address.ts';
import { CheckFailedError, UsageError } from '../host/errors.ts';
import { jsonSyntaxProblem } from '../host/util/json-syntax.ts';

export interface SelfTestTarget {
  port: number;
  tenant: string;
  secret: string;
  /** Handles the tenant may store at, highest first: the self-test uses the first one free. */
  handles: bigint[];
}

const HANDLES_TRIED = 8;

type JsonRecord = Record<string, unknown>;
const isRecord = (value: unknown): value is JsonRecord => typeof value === 'object' && value !== null && !Array.isArray(value);
const asHandle = (value: unknown, fallback: bigint): bigint =>
  typeof value === 'number' || (typeof value === 'string' && /^[0-9]+$/.test(value)) ? BigInt(value) : fallback;

/** Reads what the self-test needs from a node's configuration file (the target's keys only). */
export function selfTestTarget(configText: string, tenantName?: string): SelfTestTarget {
  let config: unknown;
  try {
    config = JSON.parse(configText);
  } catch (error) {
    throw new UsageError(`the configuration is not valid JSON (${jsonSyntaxProblem(error, configText)})`);
  }
  if (!isRecord(config)) throw new UsageError('the configuration is not a JSON object');
  const listen = typeof config.listen === 'string' ? parseHostPort(config.listen, { allowPortZero: false }) : undefined;
  const tenants = Array.isArray(config.tenants) ? config.tenants.filter(isRecord) : [];
  const tenant = tenantName === undefined ? tenants[0] : tenants.find((t) => t.name === tenantName);
  if (tenant === undefined || typeof tenant.name !== 'string') {
    throw new UsageError(tenantName === undefined ? 'the configuration has no tenant' : `the configuration has no tenant named ${tenantName}`);
  }
  const pool = isRecord(config.pool) ? config.pool : {};
  const blockCount = typeof pool.blockCount === 'number' ? pool.blockCount : 4096;
  const handleBase = asHandle(pool.handleBase, 0n);
  const handleCount = asHandle(pool.handleCount, BigInt(blockCount * 4));
  const range = isRecord(tenant.storeRange) ? tenant.storeRange : {};
  const first = asHandle(range.first, handleBase);
  const count = asHandle(range.count, handleCount);
  if (count === 0n) throw new UsageError(`tenant ${tenant.name} may not store anywhere`);
  const handles: bigint[] = [];
  for (let i = 1n; i <= BigInt(HANDLES_TRIED) && i <= count; i++) handles.push(first + count - i);
  return { port: listen?.port ?? DEFAULT_PORT, tenant: tenant.name, secret: typeof tenant.secret === 'string' ? tenant.secret : '', handles };
}

/** Stores, loads and frees one random block; resolves with a one-line report, throws on any failure. */
export async function selfTest(target: SelfTestTarget, blockBytes = 4096): Promise<string> {
  const session = await connect(`127.0.0.1:${target.port}`, { tenant: target.tenant, secret: target.secret, timeoutMs: 30_000 });
  try {
    const data = randomBytes(Math.min(blockBytes, session.hello.blockSize));
    for (const handle of target.handles) {
      try {
        await session.allocStore(handle, data, { seal: true });
      } catch (error) {
        // A handle the node's users already hold is skipped, never touched.
        if (error instanceof KbtpStatusError && target.handles.indexOf(handle) < target.handles.length - 1) continue;
        throw error;
      }
      const loaded = await session.load(handle);
      await session.free(handle);
      if (!Buffer.from(loaded.data).equals(data)) throw new CheckFailedError(`handle ${handle}: the block loaded back differs from the one stored`);
      return `self-test passed: ${data.length} octets stored, loaded back byte-exact and freed at handle ${handle} as tenant ${target.tenant}`;
    }
    throw new CheckFailedError('no handle to test with');
  } finally {
    await session.close().catch(() => undefined);
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href) {
  const [configPath, tenant] = process.argv.slice(2);
  if (configPath === undefined) {
    console.error('usage: self-test CONFIG [TENANT]');
    process.exitCode = 2;
  } else {
    selfTest(selfTestTarget(readFileSync(configPath, 'utf8'), tenant)).then(
      (line) => console.log(line),
      (error: unknown) => {
        console.error(`self-test failed: ${error instanceof Error ? error.message : String(error)}`);
        process.exitCode = 1;
      },
    );
  }
}
