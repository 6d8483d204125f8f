// A target's address as people write it: "host:port", "[v6]:port", "kbtp://host:port", or for
// a client just "host" (the default port). One parser for the CLI, the client library and the
// target's configuration, so they all accept the same spellings.

/** The port a KBTP target listens on unless told otherwise. */
export const DEFAULT_PORT = 7117;

export interface HostPort {
  host: string;
  port: number;
}

export interface HostPortRules {
  /** The port when the text names none; without it a port is required. */
  defaultPort?: number;
  /** Port 0 (pick a free port) makes sense for listening only. */
  allowPortZero?: boolean;
}

/** Parses `text`; undefined when it is not an address (the caller says what to fix, and where). */
export function parseHostPort(text: string, rules: HostPortRules = {}): HostPort | undefined {
  const bare = text.replace(/^kbtp:\/\//, '');
  const match = /^(\[[^\]]+\]|[^:]+)(?::([0-9]+))?$/.exec(bare);
  if (match === null) return undefined;
  const port = match[2] === undefined ? rules.defaultPort : Number(match[2]);
  const lowest = rules.allowPortZero === true ? 0 : 1;
  if (port === undefined || !Number.isInteger(port) || port < lowest || port > 65535) return undefined;
  const host = (match[1] ?? '').replace(/^\[(.*)\]$/, '$1');
  if (host === '') return undefined;
  return { host, port };
}
