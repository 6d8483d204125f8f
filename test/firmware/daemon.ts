// `kbtp appliance` as a real process for the firmware tests: the built CLI (make test builds it
// first), a configuration file in a temporary directory, ephemeral ports, the announced
// addresses parsed from stdout, and the log kept for assertions and for failure messages.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, mkdirSync, writeFileSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { encodeFrame, JOURNAL_MAGIC } from '../../host/tier/records.ts';

/**
 * Journals of many small records in DATADIR/tier, as a node that crashed after a long uptime
 * leaves them: their replay takes a while on any machine (20,000 records a file), and the
 * daemon's event loop turns between the files, so /readyz answers during the recovery.
 */
export function longJournals(dataDir: string, files: number): void {
  const tierDir = join(dataDir, 'tier');
  mkdirSync(tierDir, { recursive: true });
  const frames = Buffer.concat(Array.from({ length: 20_000 }, (_, i) => encodeFrame(JOURNAL_MAGIC, { k: 'r', h: i % 1024, m: 3 })));
  for (let file = 1; file <= files; file++) writeFileSync(join(tierDir, `journal-${String(file).padStart(8, '0')}`), frames);
}

export const CLI = fileURLToPath(new URL('../../dist/host/cli.js', import.meta.url));

/** A small pool so several daemons fit on a shared test machine. */
export const SMALL_POOL = { blockSize: 4096, blockCount: 256, handleCount: 1024, maxInline: 1024 };

export interface Daemon {
  child: ChildProcess;
  dir: string;
  configPath: string;
  /** http://127.0.0.1:PORT */
  management: string;
  /** 127.0.0.1:PORT of KBTP, once announced. */
  kbtp: Promise<string>;
  stdout(): string;
  stderr(): string;
  exited: Promise<number>;
  /** Resolves when a stderr line matches. */
  waitForLog(pattern: RegExp, timeoutMs?: number): Promise<string>;
  writeConfig(config: Record<string, unknown>): void;
  stop(): Promise<number>;
}

export function runCli(
  args: string[],
  options: { timeoutMs?: number; env?: Record<string, string> } = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...options.env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 60_000);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code: code ?? (signal === null ? -1 : 128), stdout, stderr });
    });
  });
}

export async function startDaemon(
  config: Record<string, unknown> = {},
  extraArgs: string[] = [],
  options: { waitForManagement?: boolean } = {},
): Promise<Daemon> {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run make build first`);
  const dir = mkdtempSync(join(tmpdir(), 'kbtp-appliance-'));
  const configPath = join(dir, 'kbtp.json');
  const writeConfig = (next: Record<string, unknown>): void => writeFileSync(configPath, JSON.stringify(next, null, 2));
  writeConfig({ listen: '127.0.0.1:0', workers: 1, pool: SMALL_POOL, management: { listen: '127.0.0.1:0' }, ...config });
  const child = spawn(process.execPath, [CLI, 'appliance', '--config', configPath, ...extraArgs], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  const logWaiters: Array<{ pattern: RegExp; resolve: (line: string) => void }> = [];
  const lineWaiters: Array<() => void> = [];
  child.stdout?.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
    for (const waiter of lineWaiters.splice(0)) waiter();
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
    if (process.env.KBTP_TEST_LOG === '1') process.stderr.write(chunk);
    for (const waiter of [...logWaiters]) {
      const line = stderr.split('\n').find((candidate) => waiter.pattern.test(candidate));
      if (line !== undefined) {
        logWaiters.splice(logWaiters.indexOf(waiter), 1);
        waiter.resolve(line);
      }
    }
  });
  const exited = new Promise<number>((resolve) =>
    child.on('close', (code, signal) => {
      for (const waiter of lineWaiters.splice(0)) waiter();
      resolve(code ?? (signal === 'SIGKILL' ? 137 : 128));
    }),
  );
  let closed = false;
  void exited.then(() => {
    closed = true;
  });
  const announced = (pattern: RegExp, what: string, timeoutMs = 60_000): Promise<string> =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ${what} within ${timeoutMs} ms; stdout:\n${stdout}\nstderr:\n${stderr}`)), timeoutMs);
      const check = (): void => {
        const match = pattern.exec(stdout);
        if (match?.[1] !== undefined) {
          clearTimeout(timer);
          resolve(match[1]);
        } else if (closed) {
          clearTimeout(timer);
          reject(new Error(`the appliance exited before announcing ${what}; stdout:\n${stdout}\nstderr:\n${stderr}`));
        } else {
          lineWaiters.push(check);
        }
      };
      check();
    });
  const kbtp = announced(/KBTP listening on (\S+)/, 'the KBTP address');
  kbtp.catch(() => undefined);
  const management = options.waitForManagement === false ? '' : `http://${await announced(/management on http:\/\/([^/\s]+)\//, 'the management address')}`;
  const daemon: Daemon = {
    child,
    dir,
    configPath,
    management,
    kbtp,
    exited,
    writeConfig,
    stdout: () => stdout,
    stderr: () => stderr,
    waitForLog: (pattern, timeoutMs = 30_000) =>
      new Promise((resolve, reject) => {
        const line = stderr.split('\n').find((candidate) => pattern.test(candidate));
        if (line !== undefined) {
          resolve(line);
          return;
        }
        const timer = setTimeout(() => reject(new Error(`no log line matching ${pattern} within ${timeoutMs} ms; stderr:\n${stderr}`)), timeoutMs);
        logWaiters.push({
          pattern,
          resolve: (found) => {
            clearTimeout(timer);
            resolve(found);
          },
        });
      }),
    async stop() {
      if (!closed) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      const code = await exited;
      clearTimeout(timer);
      rmSync(dir, { recursive: true, force: true });
      return code;
    },
  };
  return daemon;
}

export async function get(url: string, headers: Record<string, string> = {}): Promise<{ status: number; text: string; headers: Headers }> {
  const response = await fetch(url, { headers });
  return { status: response.status, text: await response.text(), headers: response.headers };
}

/** Polls until `check` holds (bounded); no timing is asserted, only the eventual state. */
export async function eventually<T>(what: string, probe: () => Promise<T>, check: (value: T) => boolean, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: T | undefined;
  while (Date.now() < deadline) {
    last = await probe();
    if (check(last)) return last;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`${what}: not reached within ${timeoutMs} ms (last: ${JSON.stringify(last)})`);
}
