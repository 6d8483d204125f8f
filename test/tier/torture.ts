// Crash torture of a real target process with a data directory: several sessions store, seal,
// free and load random blocks at once; the process is killed with SIGKILL at a random moment and
// started again on the same directory, round after round. After every restart: each acknowledged
// sealed block loads byte-exact with its Generation, each acknowledged FREE stays freed, no
// Generation went backwards, and the pool audit (SIGUSR2) is clean; after the last, a clean shutdown
// with a clean pool audit.
// Used by crash.test.ts (a bounded number of rounds) and as a soak: `make soak-tier`
// (node --import tsx test/tier/torture.ts --rounds N).
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect, type KbtpSession } from '../../host/kbtp/initiator.ts';
import { KbtpStatusError } from '../../host/kbtp/errors.ts';
import { generationDistance } from '../../host/tier/generations.ts';
import { Random } from '../../host/util/random.ts';

const root = fileURLToPath(new URL('../../', import.meta.url));
const SESSIONS = 4;
const HANDLES_PER_SESSION = 24;
const BLOCK = 4096;

interface Known {
  /** What the last acknowledged request left. */
  sealed: boolean;
  generation: number;
  version: number;
  /** A request in flight when the process died: it may or may not have happened. */
  pending?: { sealed: boolean; generation: number | undefined; version: number };
}

function content(handle: number, version: number): Uint8Array {
  const length = 100 + ((handle * 37 + version * 11) % (BLOCK - 100));
  const data = new Uint8Array(length);
  for (let i = 0; i < length; i++) data[i] = (handle * 13 + version * 101 + i * 3) & 0xff;
  return data;
}

function startTarget(dir: string, log: string[]): Promise<{ child: ChildProcess; address: string; output: () => string }> {
  const cli = path.join(root, 'dist/host/cli.js');
  if (!fs.existsSync(cli)) throw new Error('dist/host/cli.js is missing: run make build');
  const child = spawn(
    process.execPath,
    [
      cli,
      'target',
      '--listen',
      '127.0.0.1:0',
      '--data-dir',
      dir,
      '--blocks',
      '48',
      '--block-size',
      String(BLOCK),
      '--workers',
      '2',
      '--durable-capacity',
      '8MiB',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let text = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    text += chunk.toString();
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    text += chunk.toString();
  });
  return new Promise((resolve, reject) => {
    const timer = setInterval(() => {
      const match = /listening on (127\.0\.0\.1:\d+)/.exec(text);
      // The durable tier's line follows "listening" (a read may end between the two): wait for it too.
      const recovered = /durable tier: .*\n/.exec(text)?.[0];
      if (match?.[1] !== undefined && recovered !== undefined) {
        clearInterval(timer);
        log.push(recovered.trimEnd());
        resolve({ child, address: match[1], output: () => text });
      }
    }, 20);
    child.once('exit', (code) => {
      clearInterval(timer);
      reject(new Error(`target exited with ${code} before listening:\n${text}`));
    });
  });
}

async function expectState(session: KbtpSession, handle: number, known: Known, round: number): Promise<void> {
  let loaded: { generation: number; data: Uint8Array } | undefined;
  let notValidGeneration = 0;
  try {
    const result = await session.load(BigInt(handle));
    loaded = { generation: result.generation, data: result.data };
  } catch (error) {
    if (!(error instanceof KbtpStatusError) || error.statusName !== 'NOT_VALID') throw error;
    notValidGeneration = error.completion?.generation ?? 0;
  }
  const matches = (state: { sealed: boolean; generation: number | undefined; version: number }): boolean => {
    if (!state.sealed) return loaded === undefined;
    return (
      loaded !== undefined &&
      (state.generation === undefined || loaded.generation === state.generation) &&
      Buffer.from(loaded.data).equals(Buffer.from(content(handle, state.version)))
    );
  };
  if (known.pending !== undefined && matches(known.pending)) {
    known.sealed = known.pending.sealed;
    known.version = known.pending.version;
    if (loaded !== undefined) known.generation = loaded.generation;
  } else if (!matches(known)) {
    throw new Error(
      `round ${round}: handle ${handle}: expected ${known.sealed ? `sealed generation ${known.generation} version ${known.version}` : 'not VALID'}` +
        `${known.pending !== undefined ? ` (or the request in flight: ${JSON.stringify(known.pending)})` : ''}, found ${loaded === undefined ? 'not VALID' : `generation ${loaded.generation}`}`,
    );
  }
  delete known.pending;
  if (loaded === undefined) {
    // Not recovered: its Generation restarted above everything shown before.
    const ahead = generationDistance(known.generation, notValidGeneration);
    if (!(ahead >= 1 && ahead < 0x8000)) throw new Error(`round ${round}: handle ${handle}: Generation ${notValidGeneration} is not above ${known.generation}`);
    known.generation = notValidGeneration;
  }
}

/** One session's random work on its own handles until `stop` says so. */
async function work(session: KbtpSession, first: number, known: Map<number, Known>, random: Random, stop: { now: boolean }): Promise<number> {
  let acknowledged = 0;
  while (!stop.now) {
    const handle = first + random.below(HANDLES_PER_SESSION);
    const state = known.get(handle);
    if (state === undefined) throw new Error(`no state for ${handle}`);
    const version = state.version + 1;
    try {
      if (state.sealed) {
        if (random.below(3) === 0) {
          const loaded = await session.load(BigInt(handle));
          if (!Buffer.from(loaded.data).equals(Buffer.from(content(handle, state.version)))) throw new Error(`handle ${handle} loaded wrong bytes`);
          continue;
        }
        state.pending = { sealed: false, generation: undefined, version: state.version };
        const freed = await session.free(BigInt(handle));
        if (stop.now) return acknowledged;
        Object.assign(state, { sealed: false, generation: freed.generation });
      } else {
        state.pending = { sealed: true, generation: undefined, version };
        const stored = await session.allocStore(BigInt(handle), content(handle, version), { seal: true });
        if (stop.now) return acknowledged;
        Object.assign(state, { sealed: true, generation: stored.generation, version });
      }
      delete state.pending;
      acknowledged += 1;
    } catch (error) {
      if (stop.now) return acknowledged; // the connection died with the process
      throw error;
    }
  }
  return acknowledged;
}

export interface TortureReport {
  rounds: number;
  acknowledged: number;
  recoveries: string[];
}

/** Asks the running target for its status line (SIGUSR2) and checks its pool audit. */
async function expectCleanAudit(target: { child: ChildProcess; output: () => string }, round: number): Promise<void> {
  const from = target.output().length;
  target.child.kill('SIGUSR2');
  for (let waited = 0; waited < 20000; waited += 20) {
    const line = /^\{"status".*$/m.exec(target.output().slice(from))?.[0];
    if (line !== undefined) {
      const audit = (JSON.parse(line) as { status: { audit: { ok: boolean } } }).status.audit;
      if (!audit.ok) throw new Error(`round ${round}: pool audit after recovery: ${JSON.stringify(audit)}`);
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`round ${round}: no status line within 20 s of SIGUSR2:\n${target.output().slice(from)}`);
}

export async function runTorture(options: { rounds: number; seed: number; log?: (line: string) => void }): Promise<TortureReport> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kbtp-torture-'));
  const random = new Random(options.seed);
  const known = new Map<number, Known>();
  for (let h = 0; h < SESSIONS * HANDLES_PER_SESSION; h++) known.set(h, { sealed: false, generation: 1, version: 0 });
  const recoveries: string[] = [];
  let acknowledged = 0;
  try {
    for (let round = 0; round <= options.rounds; round++) {
      const target = await startTarget(dir, recoveries);
      try {
        const sessions = await Promise.all(Array.from({ length: SESSIONS }, () => connect(target.address, { tenant: 'default' })));
        // Everything acknowledged before the last kill, checked through the first session.
        if (round > 0) for (const [handle, state] of known) await expectState(sessions[0] as KbtpSession, handle, state, round);
        // The recovered pool is consistent every round, not only at the final clean shutdown.
        if (round > 0) await expectCleanAudit(target, round);
        if (round === options.rounds) {
          await Promise.all(sessions.map((session) => session.close(1000).catch(() => undefined)));
          target.child.kill('SIGTERM');
          const code = await new Promise<number | null>((resolve) => target.child.once('exit', resolve));
          const audit = /pool audit: .*$/m.exec(target.output())?.[0] ?? '(no audit line)';
          if (code !== 0 || !/lost 0, doubled 0/.test(audit)) throw new Error(`clean shutdown failed (exit ${code}): ${audit}\n${target.output()}`);
          options.log?.(audit);
          break;
        }
        const stop = { now: false };
        const workers = sessions.map((session, i) => work(session, i * HANDLES_PER_SESSION, known, new Random(random.next()), stop));
        await new Promise((resolve) => setTimeout(resolve, 150 + random.below(500)));
        stop.now = true;
        target.child.kill('SIGKILL');
        const counts = await Promise.all(workers);
        acknowledged += counts.reduce((a, b) => a + b, 0);
        await new Promise<void>((resolve) => {
          if (target.child.exitCode !== null || target.child.signalCode !== null) resolve();
          else target.child.once('exit', () => resolve());
        });
        for (const session of sessions) void session.close(10).catch(() => undefined);
        options.log?.(`round ${round}: killed; ${counts.join('+')} acknowledged`);
      } catch (error) {
        target.child.kill('SIGKILL');
        throw error;
      }
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  return { rounds: options.rounds, acknowledged, recoveries };
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const index = process.argv.indexOf('--rounds');
  const rounds = index > 0 ? Number(process.argv[index + 1]) : 100;
  const seed = Number(process.env.SEED ?? Date.now() % 100000);
  console.log(`crash torture: ${rounds} rounds, seed ${seed}`);
  runTorture({ rounds, seed, log: (line) => console.log(line) }).then(
    (report) => {
      console.log(`ok: ${report.rounds} SIGKILLs survived, ${report.acknowledged} acknowledged requests checked`);
    },
    (error: unknown) => {
      console.error(error instanceof Error ? error.message : String(error));
      process.exitCode = 1;
    },
  );
}
