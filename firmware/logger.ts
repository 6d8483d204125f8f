// The daemon's log: one line per event on stderr (journald and container runtimes take it from
// there), human-readable by default or JSON lines, filtered by a level that SIGHUP may change.
// Callers pass facts as fields; nothing secret is ever handed to the logger.
import type { LogFormat, LogLevel } from './appliance-config.ts';

const RANK: Record<LogLevel, number> = { error: 0, warn: 1, info: 2, debug: 3 };

export type LogFields = Record<string, string | number | boolean | null | undefined>;

export interface Logger {
  error(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  debug(message: string, fields?: LogFields): void;
  setLevel(level: LogLevel): void;
  readonly level: LogLevel;
}

/** key=value, quoted when the value has spaces or quotes, so a line stays one grep-able line. */
function textField(key: string, value: string | number | boolean | null): string {
  const text = String(value);
  return /^[^\s"=]+$/.test(text) ? `${key}=${text}` : `${key}=${JSON.stringify(text)}`;
}

export function createLogger(options: {
  level: LogLevel;
  format: LogFormat;
  write?: (line: string) => void;
  onWarning?: (level: LogLevel, message: string) => void;
}): Logger {
  let level = options.level;
  const write = options.write ?? ((line: string) => process.stderr.write(`${line}\n`));
  const emit = (at: LogLevel, message: string, fields: LogFields = {}): void => {
    if (RANK[at] <= RANK.warn) options.onWarning?.(at, message);
    if (RANK[at] > RANK[level]) return;
    const time = new Date().toISOString();
    // A message that spans lines (a stack) stays one event: newlines are escaped.
    const oneLine = message.replace(/\r?\n/g, '\\n');
    if (options.format === 'json') {
      const record: Record<string, string | number | boolean | null> = { time, level: at, msg: message };
      for (const [key, value] of Object.entries(fields)) if (value !== undefined) record[key] = value;
      write(JSON.stringify(record));
      return;
    }
    const extra = Object.entries(fields)
      .filter((entry): entry is [string, string | number | boolean | null] => entry[1] !== undefined)
      .map(([key, value]) => textField(key, value));
    write(`${time} ${at.padEnd(5)} ${oneLine}${extra.length > 0 ? ` ${extra.join(' ')}` : ''}`);
  };
  return {
    error: (message, fields) => emit('error', message, fields),
    warn: (message, fields) => emit('warn', message, fields),
    info: (message, fields) => emit('info', message, fields),
    debug: (message, fields) => emit('debug', message, fields),
    setLevel: (next) => {
      level = next;
    },
    get level() {
      return level;
    },
  };
}
