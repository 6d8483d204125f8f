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
  /** A bad configuration value; `field` names it. */
  | 'KBTP_CONFIG';

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
