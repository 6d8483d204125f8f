// Boots the soft-iWARP peer guest (images/guest/) under QEMU TCG and runs one peer script in it.
// The guest's TCP is reachable from the host only through QEMU user networking: each forwarded
// guest port gets a free host port on 127.0.0.1, and the guest reaches host listeners on
// 127.0.0.1:PORT as 10.0.2.2:PORT. Every run keeps its console log and a pcap of the guest's
// link (QEMU filter-dump) under the artefact folder, also when the guest had to be killed.
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { createSocket } from 'node:dgram';
import { createServer } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { QemuConsole } from './qemu-console.ts';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** The guest's address on QEMU user networking, and the host as the guest sees it. */
export const GUEST_ADDRESS = '10.0.2.15';
export const HOST_ADDRESS_FROM_GUEST = '10.0.2.2';
/** The guest's eth1 (rxe0) on the layer-2 tunnel, and the address a host program takes there. */
export const GUEST_TUNNEL_ADDRESS = '10.0.4.15';
export const HOST_TUNNEL_ADDRESS = '10.0.4.2';

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

/** A UDP port on 127.0.0.1 that nothing is bound to right now (for QEMU's end of a tunnel). */
export function freeLoopbackUdpPort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const socket = createSocket('udp4');
    socket.once('error', reject);
    socket.bind(0, '127.0.0.1', () => {
      const { port } = socket.address();
      socket.close(() => resolvePort(port));
    });
  });
}

/**
 * The guest's second NIC (eth1, with rxe0 on it): each Ethernet frame is one UDP datagram between
 * QEMU's end (127.0.0.1:qemuPort) and a host program's end (127.0.0.1:hostPort), so the host
 * program is the guest's layer-2 neighbour (qemu-peers.md).
 */
export interface FrameTunnelPorts {
  readonly hostPort: number;
  readonly qemuPort: number;
}

export interface GuestOptions {
  /** Artefact base name: <artefacts>/<name>.log and <name>.pcap. */
  readonly name: string;
  /** busybox sh script run in the guest after siw0 is up; its exit status is the guest's. */
  readonly peerScript: string;
  /** Guest TCP ports to reach from the host (each gets a free 127.0.0.1 port). */
  readonly forwardGuestPorts?: readonly number[];
  /** Gives the guest eth1 on this tunnel; its frames are also dumped to <name>-tunnel.pcap. */
  readonly frameTunnel?: FrameTunnelPorts;
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
  /** The tunnel NIC's capture, when the guest had one. */
  readonly tunnelPcapPath: string | undefined;
  readonly durationMs: number;
}

// The kernel command line holds the script; x86 allows 2048 bytes in all.
const MAX_PEER_SCRIPT_BASE64 = 1700;

export class Guest {
  readonly logPath: string;
  readonly pcapPath: string;
  readonly tunnelPcapPath: string | undefined;
  readonly exited: Promise<GuestResult>;
  private readonly console: QemuConsole;
  private readonly hostPorts: ReadonlyMap<number, number>;

  private constructor(options: GuestOptions, image: GuestImage, hostPorts: Map<number, number>) {
    const artefacts = artefactDir();
    this.logPath = join(artefacts, `${options.name}.log`);
    this.pcapPath = join(artefacts, `${options.name}.pcap`);
    const tunnel = options.frameTunnel;
    this.tunnelPcapPath = tunnel ? join(artefacts, `${options.name}-tunnel.pcap`) : undefined;
    this.hostPorts = hostPorts;
    const script = Buffer.from(options.peerScript).toString('base64');
    if (script.length > MAX_PEER_SCRIPT_BASE64) {
      throw new Error(`peer script is ${script.length} base64 bytes; the kernel command line allows ${MAX_PEER_SCRIPT_BASE64}`);
    }
    const forwards = [...hostPorts].map(([guest, host]) => `,hostfwd=tcp:127.0.0.1:${host}-:${guest}`).join('');
    const args = [
      '-accel',
      'tcg',
      '-cpu',
      'max',
      '-smp',
      '1',
      '-m',
      String(options.memoryMiB ?? 1024),
      '-nodefaults',
      '-no-user-config',
      '-display',
      'none',
      '-monitor',
      'none',
      '-serial',
      'stdio',
      '-no-reboot',
      '-kernel',
      image.vmlinux,
      '-initrd',
      image.initramfs,
      // mitigations=off: speculative-execution workarounds cost a lot under TCG and guard nothing here.
      '-append',
      `console=ttyS0 loglevel=4 mitigations=off panic=-1 kbtp.peer=${script}`,
      '-netdev',
      `user,id=n0${forwards}`,
      '-device',
      'virtio-net-pci,netdev=n0',
      '-object',
      `filter-dump,id=f0,netdev=n0,file=${this.pcapPath}`,
      ...(tunnel
        ? [
            '-netdev',
            `socket,id=n1,udp=127.0.0.1:${tunnel.hostPort},localaddr=127.0.0.1:${tunnel.qemuPort}`,
            '-device',
            'virtio-net-pci,netdev=n1,mac=52:54:00:4b:42:0f',
            '-object',
            `filter-dump,id=f1,netdev=n1,file=${this.tunnelPcapPath}`,
          ]
        : []),
    ];
    const started = Date.now();
    this.console = new QemuConsole('qemu-system-x86_64', args, this.logPath);
    const timeoutMs = options.timeoutMs ?? 180_000;
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      this.console.note(`guest still running after ${timeoutMs} ms: killed`);
      this.console.kill();
    }, timeoutMs);
    this.exited = this.console.exited.then((exit) => {
      clearTimeout(timer);
      const log = this.console.log;
      const exitMatch = /KBTP-PEER-EXIT=(\d+)/.exec(log);
      const failure = /KBTP-GUEST-FAILED: (.*)/.exec(log);
      return {
        exitStatus: exitMatch ? Number(exitMatch[1]) : null,
        guestFailure: failure ? (failure[1] ?? '').trim() : null,
        timedOut,
        qemuExitCode: exit.code,
        log,
        logPath: this.logPath,
        pcapPath: this.pcapPath,
        tunnelPcapPath: this.tunnelPcapPath,
        durationMs: Date.now() - started,
      };
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
    return this.console.waitForLine(pattern, timeoutMs);
  }

  /** Types a line on the guest console; the peer script reads it with `read -r`. */
  send(line: string): void {
    this.console.send(line);
  }

  kill(): void {
    this.console.kill();
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
