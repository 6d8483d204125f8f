// The client library's errors: a KBTP status, a failed or lost connection, a malformed answer,
// a timeout, an abort, a closed session. All are KbtpErrors (../errors.ts); the client library
// throws nothing else for anything that goes wrong talking to a target.
import { EXIT_FAILURE, EXIT_STATUS, KbtpError } from '../errors.ts';
import { statusName, type Completion } from './wire/messages.ts';

export { ConfigError, EXIT_FAILURE, EXIT_OK, EXIT_STATUS, EXIT_USAGE, KbtpError, ProtocolError, UsageError, type KbtpErrorCode } from '../errors.ts';

/** The target answered a request with a status other than SUCCESS. */
export class KbtpStatusError extends KbtpError {
  readonly statusName: string;
  constructor(
    readonly status: number,
    message: string,
    readonly completion?: Completion,
  ) {
    super('KBTP_STATUS', `${statusName(status)}: ${message}`, EXIT_STATUS);
    this.statusName = statusName(status);
  }
}

/** One failed request of a batch: its place in the batch, its handle and the status it got. */
export interface BatchFailure {
  readonly index: number;
  readonly handle: bigint;
  readonly status: number;
}

/**
 * Some requests of a loadMany/storeMany were answered with a status other than SUCCESS (the
 * others completed). A KbtpStatusError whose `status` is the first failure's, so a caller that
 * handles statuses handles batches too; `failures` names every failed request.
 */
export class BatchError extends KbtpStatusError {
  constructor(
    readonly failures: readonly BatchFailure[],
    first: string,
  ) {
    super(failures[0]?.status ?? 0, `${failures.length} request(s) of the batch failed; the first: ${first}`);
  }
}

/** The connection could not be made, failed, or was lost. */
export class TransportError extends KbtpError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('KBTP_TRANSPORT', message, EXIT_FAILURE, options);
  }
}

/** The target refused the connection before any session (MPA Reject), with the reason it gave. */
export class TargetRefusedError extends TransportError {}

export class TimeoutError extends KbtpError {
  constructor(message: string) {
    super('KBTP_TIMEOUT', message, EXIT_FAILURE);
  }
}

export class AbortedError extends KbtpError {
  constructor(message: string, reason: unknown) {
    super('KBTP_ABORTED', message, EXIT_FAILURE, { cause: reason });
  }
}

export class SessionClosedError extends KbtpError {
  constructor(message = 'the session is closed') {
    super('KBTP_CLOSED', message, EXIT_FAILURE);
  }
}
