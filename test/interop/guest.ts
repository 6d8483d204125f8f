// Boots the soft-iWARP peer guest (images/guest/) under QEMU TCG and runs one peer script in it.
// The guest's TCP is reachable from the host only through QEMU user networking: each forwarded
// guest port gets a free host port on 127.0.0.1, and the guest reaches host listeners on
// 127.0.0.1:PORT as 10.0.2.2:PORT. Every run keeps its console log and a pcap of the guest's
// link (QEMU filter-dump) under the artefact folder, also when the guest had to be killed.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { createWriteStream, mkdirSync, readFileSync, type WriteStream } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** The guest's address on QEMU user networking, and the host as the guest sees it. */
export const GUEST_ADDRESS = '10.0.2.15';
export const HOST_ADDRESS_FROM_GUEST = '10.0.2.2';

export interface GuestImage {
  readonly dir: string;
  readonly vmlinux: string;
  readonly initramfs: string;
  readonly manifest: { key: string; kernel: string; kernelVersion: string; packages: Record<string, string> };
}

let cachedImage: GuestImage | undefined;

/**
 * The built guest image: $KBTP_GUEST_IMAGE when `make interop` already built it, otherwise
 * images/guest/build.sh is run (it reuses its cache, so this is cheap after the first time).
 */
export function guestImage(): GuestImage {
  if (cachedImage) return cachedImage;
  let dir = process.env.KBTP_GUEST_IMAGE;
  if (!dir) {
    const output = execFileSync(join(repoRoot, 'images/guest/build.sh'), { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
    dir = output.trim().split('\n').pop() ?? '';
  }
  const manifest = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')) as GuestImage['manifest'];
  cachedImage = { dir, vmlinux: join(dir, 'vmlinux'), initramfs: join(dir, 'initramfs.cpio'), manifest };
  return cachedImage;
}

export function artefactDir(): string {
  const dir = process.env.KBTP_INTEROP_ARTEFACTS ?? join(repoRoot, '.cache/interop');
  mkdirSync(dir, { recursive: true });
  return dir;
}

/** A TCP port on 127.0.0.1 that nothing listens on right now. */
export function freeLoopbackPort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolvePort(address.port) : reject(new Error('no port'))));
    });
  });
}

export interface GuestOptions {
  /** Artefact base name: <artefacts>/<name>.log and <name>.pcap. */
  readonly name: string;
  /** busybox sh script run in the guest after siw0 is up; its exit status is the guest's. */
  readonly peerScript: string;
  /** Guest TCP ports to reach from the host (each gets a free 127.0.0.1 port). */
  readonly forwardGuestPorts?: readonly number[];
  /** The guest is killed after this long (its log is kept). Default 180 s: TCG is slow. */
  readonly timeoutMs?: number;
  readonly memoryMiB?: number;
}

export interface GuestResult {
  /** The peer script's exit status, from the guest's "KBTP-PEER-EXIT=" line; null if it never got there. */
  readonly exitStatus: number | null;
  /** Set when the guest could not bring up siw or the peer ("KBTP-GUEST-FAILED: ..."). */
  readonly guestFailure: string | null;
  readonly timedOut: boolean;
  readonly qemuExitCode: number | null;
  readonly log: string;
  readonly logPath: string;
  readonly pcapPath: string;
  readonly durationMs: number;
}

// The kernel command line holds the script; x86 allows 2048 bytes in all.
const MAX_PEER_SCRIPT_BASE64 = 1700;
const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

export class Guest {
  readonly logPath: string;
  readonly pcapPath: string;
  readonly exited: Promise<GuestResult>;
  private readonly child: ChildProcess;
  private readonly logFile: WriteStream;
  private log = '';
  private pendingLine = '';
  private readonly lineWaiters: { pattern: RegExp; resolve: (m: RegExpMatchArray) => void }[] = [];
  private readonly hostPorts: ReadonlyMap<number, number>;
  private finished = false;

  private constructor(options: GuestOptions, image: GuestImage, hostPorts: Map<number, number>) {
    const artefacts = artefactDir();
    this.logPath = join(artefacts, `${options.name}.log`);
    this.pcapPath = join(artefacts, `${options.name}.pcap`);
    this.hostPorts = hostPorts;
    const script = Buffer.from(options.peerScript).toString('base64');
    if (script.length > MAX_PEER_SCRIPT_BASE64) {
      throw new Error(`peer script is ${script.length} base64 bytes; the kernel command line allows ${MAX_PEER_SCRIPT_BASE64}`);
    }
    const forwards = [...hostPorts].map(([guest, host]) => `,hostfwd=tcp:127.0.0.1:${host}-:${guest}`).join('');
    const args = [
      '-accel', 'tcg', '-cpu', 'max', '-smp', '1', '-m', String(options.memoryMiB ?? 1024),
      '-nodefaults', '-no-user-config', '-display', 'none', '-monitor', 'none', '-serial', 'stdio', '-no-reboot',
      '-kernel', image.vmlinux, '-initrd', image.initramfs,
      // mitigations=off: speculative-execution workarounds cost a lot under TCG and guard nothing here.
      '-append', `console=ttyS0 loglevel=4 mitigations=off panic=-1 kbtp.peer=${script}`,
      '-netdev', `user,id=n0${forwards}`,
      '-device', 'virtio-net-pci,netdev=n0',
      '-object', `filter-dump,id=f0,netdev=n0,file=${this.pcapPath}`,
    ];
    this.logFile = createWriteStream(this.logPath);
    this.logFile.write(`# qemu-system-x86_64 ${args.join(' ')}\n`);
    const started = Date.now();
    this.child = spawn('qemu-system-x86_64', args, { stdio: ['pipe', 'pipe', 'pipe'] });
    running.add(this.child);
    this.child.stdout?.on('data', (chunk: Buffer) => this.consume(chunk.toString('latin1')));
    this.child.stderr?.on('data', (chunk: Buffer) => this.consume(`[qemu] ${chunk.toString('latin1')}`));
    this.child.stdin?.on('error', () => {}); // the guest may power off while we still write to it

    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      this.consume(`\n[harness] guest still running after ${options.timeoutMs ?? 180_000} ms: killed\n`);
      this.child.kill('SIGKILL');
    }, options.timeoutMs ?? 180_000);

    this.exited = new Promise((resolveExit) => {
      const finish = (code: number | null, spawnError?: Error): void => {
        if (this.finished) return;
        this.finished = true;
        clearTimeout(timer);
        running.delete(this.child);
        if (spawnError) this.consume(`[harness] cannot start qemu-system-x86_64: ${spawnError.message}\n`);
        if (this.pendingLine) this.consume('\n');
        for (const waiter of this.lineWaiters.splice(0)) waiter.resolve([] as unknown as RegExpMatchArray);
        const exitMatch = /KBTP-PEER-EXIT=(\d+)/.exec(this.log);
        const failure = /KBTP-GUEST-FAILED: (.*)/.exec(this.log);
        this.logFile.end(() =>
          resolveExit({
            exitStatus: exitMatch ? Number(exitMatch[1]) : null,
            guestFailure: failure ? (failure[1] ?? '').trim() : null,
            timedOut,
            qemuExitCode: code,
            log: this.log,
            logPath: this.logPath,
            pcapPath: this.pcapPath,
            durationMs: Date.now() - started,
          }),
        );
      };
      this.child.once('error', (error) => finish(null, error));
      this.child.once('close', (code) => finish(code));
    });
  }

  /** Boots a guest; resolves once QEMU has started (not once the guest is ready: wait for a line). */
  static async start(options: GuestOptions): Promise<Guest> {
    const hostPorts = new Map<number, number>();
    for (const guestPort of options.forwardGuestPorts ?? []) hostPorts.set(guestPort, await freeLoopbackPort());
    return new Guest(options, guestImage(), hostPorts);
  }

  /** The 127.0.0.1 port that reaches `guestPort` in the guest. */
  hostPort(guestPort: number): number {
    const port = this.hostPorts.get(guestPort);
    if (port === undefined) throw new Error(`guest port ${guestPort} is not forwarded`);
    return port;
  }

  /**
   * Resolves with the first console line (past or future) matching `pattern`. Rejects if the guest
   * exits first or nothing matches within `timeoutMs`.
   */
  waitForLine(pattern: RegExp, timeoutMs = 120_000): Promise<RegExpMatchArray> {
    const seen = this.log.split('\n').map((line) => pattern.exec(line)).find((m) => m !== null);
    if (seen) return Promise.resolve(seen);
    if (this.finished) return Promise.reject(new Error(`guest exited before printing ${pattern}; log: ${this.logPath}`));
    return new Promise((resolveLine, reject) => {
      const timer = setTimeout(() => {
        remove();
        reject(new Error(`no console line matching ${pattern} within ${timeoutMs} ms; log: ${this.logPath}`));
      }, timeoutMs);
      const waiter = {
        pattern,
        resolve: (m: RegExpMatchArray) => {
          clearTimeout(timer);
          remove();
          if (m.length === 0) reject(new Error(`guest exited before printing ${pattern}; log: ${this.logPath}`));
          else resolveLine(m);
        },
      };
      const remove = (): void => {
        const index = this.lineWaiters.indexOf(waiter);
        if (index >= 0) this.lineWaiters.splice(index, 1);
      };
      this.lineWaiters.push(waiter);
    });
  }

  /** Types a line on the guest console; the peer script reads it with `read -r`. */
  send(line: string): void {
    if (!this.finished) this.child.stdin?.write(`${line}\n`);
  }

  kill(): void {
    if (!this.finished) this.child.kill('SIGKILL');
  }

  private consume(text: string): void {
    const clean = text.replace(/\r/g, '');
    this.log += clean;
    this.logFile.write(clean);
    const lines = (this.pendingLine + clean).split('\n');
    this.pendingLine = lines.pop() ?? '';
    for (const line of lines) {
      for (const waiter of [...this.lineWaiters]) {
        const m = waiter.pattern.exec(line);
        if (m) waiter.resolve(m);
      }
    }
  }
}

/**
 * Runs one guest to completion: `hostSide` runs once the guest is started (it should wait for the
 * guest's readiness line itself) and the guest is killed if `hostSide` throws.
 */
export async function runGuest(options: GuestOptions, hostSide?: (guest: Guest) => Promise<void>): Promise<GuestResult> {
  const guest = await Guest.start(options);
  if (hostSide) {
    try {
      await hostSide(guest);
    } catch (error) {
      guest.kill();
      const result = await guest.exited;
      throw Object.assign(error instanceof Error ? error : new Error(String(error)), { guest: result });
    }
  }
  return guest.exited;
}
