// The recent warnings and errors of the daemon, kept for the status page (the log has them all).
import type { LogLevel } from './appliance-config.ts';

export interface WarningEntry {
  time: string;
  level: LogLevel;
  message: string;
}

export class WarningLog {
  private readonly entries: WarningEntry[] = [];

  constructor(private readonly capacity = 50) {}

  add(level: LogLevel, message: string): void {
    this.entries.push({ time: new Date().toISOString(), level, message });
    if (this.entries.length > this.capacity) this.entries.shift();
  }

  /** Newest first. */
  recent(): WarningEntry[] {
    return [...this.entries].reverse();
  }
}
