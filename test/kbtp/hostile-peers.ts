// Tools for the hostile-peer battery: a real target process (spawned from host/cli.ts, with its
// file-descriptor limit raised where the machine allows), its status line (SIGUSR2), a legitimate
// client that keeps storing and loading while the peers misbehave, and raw peers that stop or
// talk garbage at any stage of connection setup.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect, type KbtpSession } from '../../host/kbtp/initiator.ts';
import { encodeHello } from '../../host/kbtp/wire/hello.ts';
import { RdmapOpcode } from '../../host/rnic/wire/rdmap.ts';
import { RawPeer, untagged } from '../support/raw-peer.ts';

const cli = fileURLToPath(new URL('../../host/cli.ts', import.meta.url));

export interface TargetStatus {
  sessionsOpen: number;
  sessionsRefused: number;
  refusals: Record<string, number>;
  timeouts: Record<string, number>;
  setupFailures: Record<string, number>;
  internalErrors: number;
  slotsInUse: number;
  rssBytes: number;
  audit: { ok: boolean; bound: number; inRings: number; lost: number; doubled: number; problems: number };
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** A `kbtp target` process on a free loopback port. */
export class TargetProcess {
  private stdout = '';
  /** Standard output lines other than status lines. */
  output = '';
  stderr = '';
  readonly exited: Promise<number>;
  private readonly statusWaiters: Array<(status: TargetStatus) => void> = [];
  port = 0;

  private constructor(
    readonly child: ChildProcessWithoutNullStreams,
    private readonly dir: string,
  ) {
    child.stdout.on('data', (chunk: Buffer) => {
      this.stdout += chunk.toString();
      let newline: number;
      // biome-ignore lint/suspicious/noAssignInExpressions: the usual read-lines loop
      while ((newline = this.stdout.indexOf('\n')) >= 0) {
        const line = this.stdout.slice(0, newline);
        this.stdout = this.stdout.slice(newline + 1);
        if (line.startsWith('{"status"')) this.statusWaiters.shift()?.((JSON.parse(line) as { status: TargetStatus }).status);
        else this.output += `${line}\n`;
        const listening = /listening on 127\.0\.0\.1:([0-9]+)/.exec(line);
        if (listening !== null) this.port = Number(listening[1]);
      }
    });
    child.stderr.on('data', (chunk: Buffer) => {
      this.stderr += chunk.toString();
    });
    this.exited = new Promise((resolve) => child.on('close', (code) => resolve(code ?? -1)));
  }

  /** Starts a target with `config`; `env` adds variables (KBTP_TEST_FAULT). */
  static async start(config: unknown, env: Record<string, string> = {}, args: string[] = []): Promise<TargetProcess> {
    const dir = mkdtempSync(join(tmpdir(), 'kbtp-hostile-'));
    const file = join(dir, 'target.json');
    writeFileSync(file, JSON.stringify(config));
    // Thousands of connections need more descriptors than some machines give by default.
    const command = `ulimit -n $(ulimit -Hn) 2>/dev/null; ulimit -n 16384 2>/dev/null; exec "$0" "$@"`;
    const child = spawn('sh', ['-c', command, process.execPath, '--import', 'tsx', cli, 'target', '--config', file, ...args], {
      env: { ...process.env, ...env },
    });
    const target = new TargetProcess(child, dir);
    const deadline = Date.now() + 60_000;
    while (target.port === 0) {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error(`target did not start: ${target.stderr}`);
      await sleep(50);
    }
    return target;
  }

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** The statistics, slots in use, memory and a pool audit (SIGUSR2). */
  status(): Promise<TargetStatus> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no status from the target; stderr: ${this.stderr.slice(-2000)}`)), 20_000);
      this.statusWaiters.push((status) => {
        clearTimeout(timer);
        resolve(status);
      });
      this.child.kill('SIGUSR2');
    });
  }

  /** Polls the status until `ready` holds (the target's timeouts and cleanups run on their own clock). */
  async until(ready: (status: TargetStatus) => boolean, what: string, timeoutMs = 30_000): Promise<TargetStatus> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const status = await this.status();
      if (ready(status)) return status;
      if (Date.now() > deadline) throw new Error(`waited ${timeoutMs} ms for ${what}; last status ${JSON.stringify(status)}`);
      await sleep(100);
    }
  }

  async stop(): Promise<number> {
    if (this.child.exitCode === null) this.child.kill('SIGINT');
    const code = await this.exited;
    rmSync(this.dir, { recursive: true, force: true });
    return code;
  }
}

/** Connects, retrying a few times: a loaded machine may be slower than the target's short test timeouts. */
export async function connectPatiently(address: string, tenant: string, secret: string): Promise<KbtpSession> {
  let last: unknown;
  for (let attempt = 0; attempt < 5; attempt++) {
    try {
      return await connect(address, { tenant, secret, pipeline: 2 });
    } catch (error) {
      last = error;
      await sleep(200);
    }
  }
  throw last;
}

/**
 * A legitimate client: allocates, stores, loads back (checking every byte) and frees, over and
 * over, on its own handles. Any failure is recorded; the battery requires none.
 */
export class LegitimateClient {
  readonly failures: string[] = [];
  rounds = 0;
  private running = true;
  private paused = false;
  private idle: (() => void) | undefined;
  private readonly loop: Promise<void>;

  constructor(
    private readonly session: KbtpSession,
    private readonly handles: bigint[],
    private readonly size: number,
  ) {
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    let round = 0;
    while (this.running) {
      if (this.paused) {
        this.idle?.();
        await sleep(10);
        continue;
      }
      const handle = this.handles[round % this.handles.length] ?? 0n;
      const data = new Uint8Array(this.size).map((_, i) => (i * 7 + round) & 0xff);
      try {
        await this.session.allocStore(handle, data, { seal: true });
        const loaded = await this.session.load(handle);
        if (loaded.data.length !== data.length || loaded.data.some((byte, i) => byte !== data[i])) this.failures.push(`round ${round}: wrong data`);
        await this.session.free(handle);
      } catch (error) {
        this.failures.push(`round ${round}: ${error instanceof Error ? error.message : String(error)}`);
        if (this.failures.length > 5) return;
      }
      round += 1;
      this.rounds = round;
    }
  }

  /** Waits until the client has no request outstanding and holds no block. */
  pause(): Promise<void> {
    this.paused = true;
    return new Promise((resolve) => {
      this.idle = () => {
        this.idle = undefined;
        resolve();
      };
    });
  }

  resume(): void {
    this.paused = false;
  }

  async stop(): Promise<void> {
    this.running = false;
    this.paused = false;
    await this.loop;
    await this.session.close(1000).catch(() => undefined);
  }
}

/** A HELLO as a Send FPDU from a raw peer (MSN 1). */
export function rawHello(peer: RawPeer, tenant: string, secret: string, msn = 1): void {
  const hello = encodeHello({ version: 1, requestId: 1n, capabilities: 0, initiatorCredits: 8, tenant, credential: new TextEncoder().encode(secret) });
  peer.sendUlpdu(untagged(RdmapOpcode.Send, 0, msn, hello));
}

/** Sends a KBTP message as a Send FPDU. */
export function rawSend(peer: RawPeer, message: Uint8Array, msn: number): void {
  peer.sendUlpdu(untagged(RdmapOpcode.Send, 0, msn, message));
}

export { RawPeer };
