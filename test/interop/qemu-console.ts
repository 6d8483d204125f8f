// A QEMU process whose serial console (stdio) is kept in a log file and in memory, line by line,
// so tests can wait for console lines. Shared by the siw peer guest (guest.ts) and the appliance
// boots (test/image/). Every QEMU started here is SIGKILLed if the test process exits first.
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';

const running = new Set<ChildProcess>();
const killAll = (): void => {
  for (const child of running) child.kill('SIGKILL');
};
process.once('exit', killAll);
// A test run stopped by a signal would otherwise leave its guests running ('exit' does not fire).
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    killAll();
    process.kill(process.pid, signal);
  });
}

export interface ConsoleExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

export class QemuConsole {
  readonly exited: Promise<ConsoleExit>;
  private readonly child: ChildProcess;
  private readonly logFile: WriteStream;
  private text = '';
  private pendingLine = '';
  private readonly lineWaiters: { pattern: RegExp; since: number; resolve: (m: RegExpMatchArray | null) => void }[] = [];
  private finished = false;

  constructor(
    binary: string,
    args: readonly string[],
    readonly logPath: string,
    appendLog = false,
  ) {
    this.logFile = createWriteStream(logPath, { flags: appendLog ? 'a' : 'w' });
    this.logFile.write(`# ${binary} ${args.join(' ')}\n`);
    this.child = spawn(binary, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    running.add(this.child);
    this.child.stdout?.on('data', (chunk: Buffer) => this.consume(chunk.toString('latin1')));
    this.child.stderr?.on('data', (chunk: Buffer) => this.consume(`[qemu] ${chunk.toString('latin1')}`));
    this.child.stdin?.on('error', () => {}); // the guest may power off while we still write to it
    this.exited = new Promise((resolveExit) => {
      const finish = (exit: ConsoleExit, spawnError?: Error): void => {
        if (this.finished) return;
        this.finished = true;
        running.delete(this.child);
        if (spawnError) this.consume(`[harness] cannot start ${binary}: ${spawnError.message}\n`);
        if (this.pendingLine) this.consume('\n');
        for (const waiter of this.lineWaiters.splice(0)) waiter.resolve(null);
        this.logFile.end(() => resolveExit(exit));
      };
      this.child.once('error', (error) => finish({ code: null, signal: null }, error));
      this.child.once('close', (code, signal) => finish({ code, signal }));
    });
  }

  /** Everything the console printed so far (carriage returns removed). */
  get log(): string {
    return this.text;
  }

  get running(): boolean {
    return !this.finished;
  }

  /** QEMU's process id (undefined if it could not start). */
  get pid(): number | undefined {
    return this.child.pid;
  }

  /** Notes a line in the log file (not part of the console text). */
  note(line: string): void {
    if (!this.finished) this.logFile.write(`[harness] ${line}\n`);
  }

  /**
   * Resolves with the first console line matching `pattern` that starts at or after log offset
   * `since` (default 0: past lines count too). Rejects if QEMU exits first or after `timeoutMs`.
   */
  waitForLine(pattern: RegExp, timeoutMs: number, since = 0): Promise<RegExpMatchArray> {
    const seen = this.pastMatch(pattern, since);
    if (seen) return Promise.resolve(seen);
    if (this.finished) return Promise.reject(new Error(`QEMU exited before printing ${pattern}; log: ${this.logPath}`));
    return new Promise((resolveLine, reject) => {
      const timer = setTimeout(() => {
        remove();
        reject(new Error(`no console line matching ${pattern} within ${timeoutMs} ms; log: ${this.logPath}`));
      }, timeoutMs);
      const waiter = {
        pattern,
        since,
        resolve: (m: RegExpMatchArray | null) => {
          clearTimeout(timer);
          remove();
          if (m === null) reject(new Error(`QEMU exited before printing ${pattern}; log: ${this.logPath}`));
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

  /** Types a line on the guest's serial console. */
  send(line: string): void {
    if (!this.finished) this.child.stdin?.write(`${line}\n`);
  }

  kill(signal: NodeJS.Signals = 'SIGKILL'): void {
    if (!this.finished) this.child.kill(signal);
  }

  private pastMatch(pattern: RegExp, since: number): RegExpMatchArray | null {
    let offset = 0;
    for (const line of this.text.split('\n')) {
      if (offset >= since) {
        const m = pattern.exec(line);
        if (m) return m;
      }
      offset += line.length + 1;
    }
    return null;
  }

  private consume(text: string): void {
    const clean = text.replace(/\r/g, '');
    const lineStart = this.text.length - this.pendingLine.length;
    this.text += clean;
    this.logFile.write(clean);
    const lines = (this.pendingLine + clean).split('\n');
    this.pendingLine = lines.pop() ?? '';
    let offset = lineStart;
    for (const line of lines) {
      for (const waiter of [...this.lineWaiters]) {
        if (offset < waiter.since) continue;
        const m = waiter.pattern.exec(line);
        if (m) waiter.resolve(m);
      }
      offset += line.length + 1;
    }
  }
}
