// Boots the appliance disk image (images/appliance/, `make image`) under QEMU TCG from the disk
// alone (UEFI: OVMF from Debian, no -kernel), with user networking that forwards the KBTP and
// management ports to 127.0.0.1 only. A node is a raw disk file (a sparse copy of the built image,
// provisioned with images/appliance/provision.sh) plus its own UEFI variable store; it can be
// booted, powered down by its ACPI button, or killed (power loss), and booted again. Every boot
// appends to the node's console log and writes its own pcap under .cache/image-test/.
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { QemuConsole } from '../interop/qemu-console.ts';
import { freeLoopbackPort } from '../interop/guest.ts';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

export const KBTP_GUEST_PORT = 7117;
export const MANAGEMENT_GUEST_PORT = 7118;

export interface ApplianceBuild {
  readonly img: string;
  readonly version: string;
  /** What the image's supervisor runs: `kbtp appliance`, or `kbtp target` in builds before it. */
  readonly service: 'appliance' | 'target';
}

/** The architecture under test: ARCH=arm64 (make image-test ARCH=arm64) or x86_64. */
export const ARCH = process.env.ARCH === 'arm64' || process.env.ARCH === 'aarch64' ? 'arm64' : 'x86_64';

/** How each architecture's node is powered on: the machine, and its UEFI firmware from Debian. */
const MACHINES = {
  // pauth-impdef=on: the architected pointer-authentication algorithm is very slow under TCG.
  arm64: {
    qemu: 'qemu-system-aarch64',
    machine: ['-machine', 'virt', '-cpu', 'max,pauth-impdef=on'],
    code: '/usr/share/AAVMF/AAVMF_CODE.fd',
    vars: '/usr/share/AAVMF/AAVMF_VARS.fd',
  },
  x86_64: {
    qemu: 'qemu-system-x86_64',
    machine: ['-machine', 'q35', '-cpu', 'max'],
    code: '/usr/share/OVMF/OVMF_CODE_4M.fd',
    vars: '/usr/share/OVMF/OVMF_VARS_4M.fd',
  },
} as const;

/** The built image (`make image` made it; $KBTP_APPLIANCE_IMAGE names another raw image). */
export function applianceBuild(): ApplianceBuild {
  const img = process.env.KBTP_APPLIANCE_IMAGE ?? join(repoRoot, `images/out/kbtp-appliance-${ARCH}.img`);
  if (!existsSync(img)) throw new Error(`${img} does not exist: run 'make image' first`);
  const manifest = JSON.parse(readFileSync(img.replace(/\.img$/, '.json'), 'utf8')) as { version: string; service: 'appliance' | 'target' };
  return { img, version: manifest.version, service: manifest.service };
}

/** How many runs' artefacts .cache/image-test/ keeps; the disks only of the newest two. */
const RUNS_KEPT = 6;
const DISKS_KEPT = 2;
let runDir: string | undefined;

/**
 * This run's folder for logs, pcaps and disks: .cache/image-test/<UTC time>/ (or
 * $KBTP_IMAGE_TEST_ARTEFACTS), so a run never overwrites the evidence of the one before it. Older
 * runs are pruned; their 2 GiB sparse disks go first.
 */
export function artefactDir(): string {
  if (runDir !== undefined) return runDir;
  const fixed = process.env.KBTP_IMAGE_TEST_ARTEFACTS;
  if (fixed !== undefined && fixed !== '') {
    mkdirSync(fixed, { recursive: true });
    runDir = fixed;
    return runDir;
  }
  const base = join(repoRoot, '.cache/image-test');
  mkdirSync(base, { recursive: true });
  const runs = readdirSync(base, { withFileTypes: true })
    .filter((entry) => entry.isDirectory() && /^run-/.test(entry.name))
    .map((entry) => entry.name)
    .sort()
    .reverse();
  for (const name of runs.slice(RUNS_KEPT - 1)) rmSync(join(base, name), { recursive: true, force: true });
  for (const name of runs.slice(DISKS_KEPT - 1, RUNS_KEPT - 1)) {
    for (const file of readdirSync(join(base, name))) if (file.endsWith('.img')) rmSync(join(base, name, file), { force: true });
  }
  runDir = join(base, `run-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  mkdirSync(runDir, { recursive: true });
  const latest = join(base, 'latest');
  rmSync(latest, { force: true });
  symlinkSync(runDir, latest);
  return runDir;
}

export interface NodeOptions {
  /** Artefact base name: <artefacts>/<name>.img, .log, -<boot>.pcap. */
  readonly name: string;
  /** The node's kbtp.json. */
  readonly config: object;
  readonly diskGiB?: number;
  readonly testHooks?: boolean;
}

/** A provisioned appliance disk with its UEFI variables and fixed host ports across boots. */
export class ApplianceNode {
  readonly disk: string;
  readonly vars: string;
  readonly logPath: string;
  private boots = 0;
  private current: QemuConsole | undefined;

  private constructor(
    readonly name: string,
    readonly kbtpPort: number,
    readonly managementPort: number,
  ) {
    const dir = artefactDir();
    this.disk = join(dir, `${name}.img`);
    this.vars = join(dir, `${name}.vars.fd`);
    this.logPath = join(dir, `${name}.log`);
  }

  static async create(options: NodeOptions): Promise<ApplianceNode> {
    const node = new ApplianceNode(options.name, await freeLoopbackPort(), await freeLoopbackPort());
    const build = applianceBuild();
    rmSync(node.logPath, { force: true });
    execFileSync('cp', ['--sparse=always', build.img, node.disk]);
    execFileSync('truncate', ['-s', `${options.diskGiB ?? 2}G`, node.disk]);
    copyFileSync(MACHINES[ARCH].vars, node.vars);
    const configPath = join(artefactDir(), `${options.name}.kbtp.json`);
    writeFileSync(configPath, JSON.stringify(options.config, null, 2));
    execFileSync(
      join(repoRoot, 'images/appliance/provision.sh'),
      [node.disk, '--config', configPath, ...(options.testHooks === true ? ['--test-hooks'] : [])],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    return node;
  }

  get console(): QemuConsole {
    if (this.current === undefined) throw new Error(`${this.name} was never booted`);
    return this.current;
  }

  /** Powers the node on; resolves once QEMU runs. The console log is appended to. */
  boot(): QemuConsole {
    if (this.current?.running === true) throw new Error(`${this.name} is already running`);
    this.boots += 1;
    const pcap = join(artefactDir(), `${this.name}-boot${this.boots}.pcap`);
    // A unix socket path is limited to 107 octets: the monitor lives in the temporary folder.
    const monitor = join(tmpdir(), `kbtp-image-${process.pid}-${this.name}.monitor`);
    rmSync(monitor, { force: true });
    const machine = MACHINES[ARCH];
    const args = [
      '-accel',
      'tcg',
      ...machine.machine,
      '-smp',
      '2',
      '-m',
      '1024',
      '-nodefaults',
      '-no-user-config',
      '-display',
      'none',
      '-serial',
      'stdio',
      '-monitor',
      `unix:${monitor},server=on,wait=off`,
      '-drive',
      `if=pflash,format=raw,readonly=on,file=${machine.code}`,
      '-drive',
      `if=pflash,format=raw,file=${this.vars}`,
      // writethrough: every write the guest completes has reached the host file, so killing QEMU
      // loses exactly what a power cut loses (nothing the guest flushed).
      '-drive',
      `file=${this.disk},format=raw,if=virtio,cache=writethrough`,
      '-netdev',
      `user,id=n0,hostfwd=tcp:127.0.0.1:${this.kbtpPort}-:${KBTP_GUEST_PORT},hostfwd=tcp:127.0.0.1:${this.managementPort}-:${MANAGEMENT_GUEST_PORT}`,
      // No option ROM: the NIC's iPXE firmware is for network boot, which the appliance never
      // does, and loading it costs the firmware a second or more under TCG.
      '-device',
      'virtio-net-pci,netdev=n0,romfile=',
      '-object',
      `filter-dump,id=f0,netdev=n0,file=${pcap}`,
      '-device',
      'i6300esb',
    ];
    this.current = new QemuConsole(machine.qemu, args, this.logPath, this.boots > 1);
    this.current.note(`boot ${this.boots}`);
    this.monitorPath = monitor;
    return this.current;
  }

  private monitorPath = '';

  /**
   * CPU seconds the running QEMU has used (all its threads): what a boot costs, a figure that
   * depends much less on the machine's load than wall-clock time does.
   */
  cpuSeconds(): number | undefined {
    const pid = this.current?.pid;
    if (pid === undefined) return undefined;
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8')
        .replace(/^.*\) /, '')
        .split(' ');
      return (Number(fields[11]) + Number(fields[12])) / 100; // utime + stime in USER_HZ (100 on Linux)
    } catch {
      return undefined;
    }
  }

  /** Presses the ACPI power button (QEMU system_powerdown): a clean shutdown. */
  pressPowerButton(): Promise<void> {
    return this.monitor('system_powerdown');
  }

  /** The reset line: the machine restarts at once, nothing of the guest's is flushed or unmounted. */
  pressReset(): Promise<void> {
    this.current?.note('reset (system_reset, no shutdown)');
    return this.monitor('system_reset');
  }

  /** Runs one HMP command: waits for the monitor's prompt, types it, waits for the next prompt. */
  private monitor(command: string): Promise<void> {
    return new Promise<void>((resolveDone, reject) => {
      let seen = '';
      let sent = false;
      const socket = netConnect(this.monitorPath);
      const timer = setTimeout(() => socket.destroy(new Error(`the QEMU monitor did not take '${command}' within 60 s`)), 60_000);
      socket.on('data', (chunk: Buffer) => {
        seen += chunk.toString('latin1');
        const prompts = seen.split('(qemu)').length - 1;
        if (!sent && prompts >= 1) {
          sent = true;
          socket.write(`${command}\n`);
        } else if (sent && prompts >= 2) {
          clearTimeout(timer);
          socket.end();
          resolveDone();
        }
      });
      socket.once('error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
      // system_powerdown / system_reset may end QEMU before it prompts again: what was sent is done.
      socket.once('close', () => {
        clearTimeout(timer);
        if (sent) resolveDone();
        else reject(new Error(`the QEMU monitor closed before '${command}' was sent`));
      });
    });
  }

  /** A line in the node's log, from the harness. */
  note(line: string): void {
    this.current?.note(line);
  }

  /** Power loss: QEMU is SIGKILLed. */
  async pullThePlug(): Promise<void> {
    this.current?.note('power loss (SIGKILL)');
    this.current?.kill('SIGKILL');
    await this.current?.exited;
  }

  /** Kills QEMU if it still runs and keeps the disk for inspection. */
  async stop(): Promise<void> {
    if (this.current?.running === true) await this.pullThePlug();
  }
}
