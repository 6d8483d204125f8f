// A CPU wake-latency request to the kernel (PM QoS, Documentation/power/pm_qos_interface.rst).
// An idle CPU enters the deepest idle state its cpuidle governor allows; waking it from there
// costs that state's exit latency. In a virtual machine whose idle vCPU halts, the exit is a trip
// through the hypervisor: on the VM kbtp is measured in, a 16 KiB TCP ping-pong between two
// processes takes 58-78 us at the median with halting CPUs and 17-29 us while a request of 0 us
// is held, which makes idle CPUs poll in the kernel's idle loop instead (docs/BENCH.md, session
// 15). A request lives as long as the descriptor it was written to stays open; the kernel keeps
// the strictest of all open requests, so closing ours never undoes another program's. Only a
// cpuidle governor reads the requests: a kernel that idles its CPUs without a cpuidle driver
// (current_driver "none", as on the Firecracker VM of session 16) takes its default idle path
// whatever is asked, and there a request changes nothing (16 KiB ping-pong p50 24-29 us with and
// without one), so a holder must not claim it helps.

import { closeSync, openSync, readFileSync, readSync, writeSync } from 'node:fs';

/** The kernel's character device for CPU latency requests (root only: mode 0600). */
export const CPU_LATENCY_DEVICE = '/dev/cpu_dma_latency';
/** Which cpuidle driver idles this kernel's CPUs ("none" without one). */
export const CPU_IDLE_DRIVER_FILE = '/sys/devices/system/cpu/cpuidle/current_driver';
/** The largest request accepted from a configuration (larger ones allow every idle state anyway). */
export const MAX_CPU_LATENCY_US = 1_000_000;
/** What a command line's `--cpu-wake-latency-us` takes, for its error messages. */
export const CPU_WAKE_LATENCY_CHOICES = `0 to ${MAX_CPU_LATENCY_US} microseconds, or off`;

/**
 * A command line's `N|off` (kbtp target, kbtp bench --spawn, make compare): microseconds from 0
 * to MAX_CPU_LATENCY_US, null for off, undefined when the text is neither.
 */
export function parseCpuWakeLatencyUs(text: string): number | null | undefined {
  if (text === 'off') return null;
  const value = Number(text);
  return Number.isSafeInteger(value) && value >= 0 && value <= MAX_CPU_LATENCY_US ? value : undefined;
}

/** A request that could not be placed, with what the operator can do about it. */
export interface CpuLatencyProblem {
  device: string;
  code: string;
  message: string;
}

/** One request held on the device while `hold` has been called and `release` has not. */
export class CpuLatencyRequest {
  private fd: number | undefined;
  private readonly encoded = Buffer.alloc(4);

  constructor(
    readonly latencyUs: number,
    readonly device: string = CPU_LATENCY_DEVICE,
  ) {
    if (!Number.isInteger(latencyUs) || latencyUs < 0 || latencyUs > MAX_CPU_LATENCY_US)
      throw new RangeError(`CPU wake latency ${latencyUs} us: from 0 to ${MAX_CPU_LATENCY_US}`);
    // Four octets are taken as a binary s32; any other length would be parsed as hexadecimal text.
    this.encoded.writeInt32LE(latencyUs);
  }

  get held(): boolean {
    return this.fd !== undefined;
  }

  /** Places the request (nothing if held); a device that cannot be opened or written is returned, not thrown. */
  hold(): CpuLatencyProblem | undefined {
    if (this.fd !== undefined) return undefined;
    let fd: number | undefined;
    try {
      fd = openSync(this.device, 'w');
      writeSync(fd, this.encoded, 0, 4);
      this.fd = fd;
      return undefined;
    } catch (error) {
      if (fd !== undefined) closeSync(fd);
      return problemOf(this.device, error);
    }
  }

  /** Drops the request: the kernel forgets it when its descriptor closes. */
  release(): void {
    if (this.fd === undefined) return;
    const fd = this.fd;
    this.fd = undefined;
    closeSync(fd);
  }
}

/** The strictest request the kernel now honours, in microseconds (its default, 2,000,000,000, when none); undefined if unreadable. */
export function currentCpuLatencyUs(device: string = CPU_LATENCY_DEVICE): number | undefined {
  let fd: number | undefined;
  try {
    fd = openSync(device, 'r');
    const value = Buffer.alloc(4);
    return readSync(fd, value, 0, 4, null) === 4 ? value.readInt32LE() : undefined;
  } catch {
    return undefined;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/**
 * The cpuidle driver the kernel idles its CPUs with ("none": no governor, so no request has any
 * effect); undefined when the kernel does not say (no sysfs, or a kernel built without cpuidle).
 */
export function cpuIdleDriver(file: string = CPU_IDLE_DRIVER_FILE): string | undefined {
  try {
    const driver = readFileSync(file, 'latin1').trim();
    return driver === '' ? undefined : driver;
  } catch {
    return undefined;
  }
}

/** Why a request would change nothing on a kernel with this idle driver, or undefined if it may help. */
export function noEffectReason(driver: string | undefined, file: string = CPU_IDLE_DRIVER_FILE): string | undefined {
  return driver === 'none'
    ? `this kernel idles its CPUs without a cpuidle driver (${file}: none), so no CPU wake-latency request changes how fast they wake`
    : undefined;
}

function problemOf(device: string, error: unknown): CpuLatencyProblem {
  const code = error instanceof Error && 'code' in error && typeof error.code === 'string' ? error.code : 'EIO';
  const why =
    code === 'EACCES' || code === 'EPERM'
      ? 'only root may request a CPU wake latency'
      : code === 'ENOENT'
        ? 'this kernel offers no CPU latency requests'
        : error instanceof Error
          ? error.message
          : String(error);
  return { device, code, message: `cannot request a CPU wake latency on ${device} (${code}): ${why}` };
}
