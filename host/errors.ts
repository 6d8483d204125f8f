// The errors kbtp throws: one base class, KbtpError, with a stable `code` a program can branch
// on and the exit code the `kbtp` command uses for it. Usage and configuration errors live here,
// at the bottom, so every layer can throw them; the client library's own (status, transport,
// timeout, abort) are in ./kbtp/errors.ts.

export const EXIT_OK = 0;
/** The target could not be reached, the connection failed, or a call timed out. */
export const EXIT_FAILURE = 1;
/** Bad arguments or configuration: nothing was tried. */
export const EXIT_USAGE = 2;
/** The target answered with a KBTP status other than SUCCESS. */
export const EXIT_STATUS = 3;

export type KbtpErrorCode =
  /** The target answered with a KBTP status other than SUCCESS (`status`, `statusName`). */
  | 'KBTP_STATUS'
  /** The connection could not be made, failed or was lost; `cause` has the RNIC's error. */
  | 'KBTP_TRANSPORT'
  /** The target sent something KBTP does not allow. */
  | 'KBTP_PROTOCOL'
  /** The call did not finish within its `timeoutMs`. */
  | 'KBTP_TIMEOUT'
  /** The call's AbortSignal fired; `cause` is the signal's reason. */
  | 'KBTP_ABORTED'
  /** The session was closed before or while the call ran. */
  | 'KBTP_CLOSED'
  /** Bad arguments. */
  | 'KBTP_USAGE'
  /** A bad configuration value; `field` names it, when there is one field to blame. */
  | 'KBTP_CONFIG'
  /** Input data (a trace, a packet capture) is not in its format; the message says where. */
  | 'KBTP_FORMAT'
  /** An address to listen on is in use, not an address of this host, or not permitted. */
  | 'KBTP_LISTEN'
  /** A local file could not be read or written; the message names it and says why. */
  | 'KBTP_IO'
  /** The durable tier could not make a block durable or serve it; `reason` says why (ENOSPC, EIO, CHECKSUM, ...). */
  | 'KBTP_TIER'
  /** An appliance update could not be fetched or written. */
  | 'KBTP_UPDATE'
  /** A check kbtp runs on itself failed: the pool audit, the self-test's read-back. */
  | 'KBTP_CHECK'
  /** kbtp itself went wrong: a broken invariant, a worker thread that failed, an injected test fault. */
  | 'KBTP_INTERNAL';

export class KbtpError extends Error {
  constructor(
    readonly code: KbtpErrorCode,
    message: string,
    /** What the `kbtp` command exits with for this error. */
    readonly exitCode: number,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** Bad arguments: the message says what to write instead. */
export class UsageError extends KbtpError {
  constructor(message: string) {
    super('KBTP_USAGE', message, EXIT_USAGE);
  }
}

/** A bad configuration value: which field, what is wrong with it, and how to fix it. */
export class ConfigError extends KbtpError {
  constructor(
    readonly field: string,
    problem: string,
    fix: string,
  ) {
    super('KBTP_CONFIG', `${field}: ${problem}; ${fix}`, EXIT_USAGE);
  }
}

/** The peer broke the protocol: a malformed or unexpected message (KBTP, MPA, DDP/RDMAP, IB). */
export class ProtocolError extends KbtpError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('KBTP_PROTOCOL', message, EXIT_FAILURE, options);
  }
}

/** Input data (a trace, a packet capture) that is not in its format: the message says where and what. */
export class FormatError extends KbtpError {
  constructor(message: string) {
    super('KBTP_FORMAT', message, EXIT_USAGE);
  }
}

/** An address kbtp was told to listen on cannot be used: the message says which and what to change. */
export class ListenError extends KbtpError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('KBTP_LISTEN', message, EXIT_USAGE, options);
  }
}

/** A local file that cannot be read or written. */
export class FileError extends KbtpError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('KBTP_IO', message, EXIT_FAILURE, options);
  }
}

const ERRNO_WORDS: Readonly<Record<string, string>> = {
  ENOENT: 'no such file or directory',
  EACCES: 'permission denied',
  EISDIR: 'it is a directory',
  ENOTDIR: 'a part of the path is not a directory',
  ENOSPC: 'no space left on the device',
  EROFS: 'read-only file system',
};

/** A file operation that failed, said in words: which file, what was tried, why (with the errno). */
export class LocalFileError extends FileError {
  constructor(action: 'read' | 'write', file: string, error: unknown) {
    const code = (error as NodeJS.ErrnoException).code;
    const why = (code !== undefined ? ERRNO_WORDS[code] : undefined) ?? (error as Error).message;
    super(`cannot ${action} ${file}: ${why}${code !== undefined ? ` (${code})` : ''}`, { cause: error });
  }
}

/** A check kbtp runs on itself found a fault (the pool audit, the self-test's read-back). */
export class CheckFailedError extends KbtpError {
  constructor(message: string) {
    super('KBTP_CHECK', message, EXIT_FAILURE);
  }
}

/**
 * kbtp itself went wrong: an invariant broke, a worker thread failed, a test injected a fault.
 * Nothing the caller did; the message is for the log and a bug report.
 */
export class InternalError extends KbtpError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('KBTP_INTERNAL', message, EXIT_FAILURE, options);
  }
}

/**
 * `error` with what was being done in front of its message: a KbtpError keeps its code and exit
 * code (a status stays a status); anything else becomes an InternalError. The original is the cause.
 */
export function withContext(context: string, error: unknown): KbtpError {
  const message = `${context}: ${error instanceof Error ? error.message : String(error)}`;
  if (error instanceof KbtpError) return new KbtpError(error.code, message, error.exitCode, { cause: error });
  return new InternalError(message, { cause: error });
}

/** The exit code the `kbtp` command uses for `error`: its own for a KbtpError, 1 for anything else. */
export function exitCodeOf(error: unknown): number {
  return error instanceof KbtpError ? error.exitCode : EXIT_FAILURE;
}
