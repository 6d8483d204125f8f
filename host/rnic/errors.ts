// Error values the RNIC surfaces to its users. API misuse throws RnicError synchronously (like a
// verbs call returning an errno); failures on the wire end a connection with a TerminateInfo.
// RnicError is a KbtpError (code KBTP_TRANSPORT); `errno` says what exactly, as verbs would.
import { EXIT_FAILURE, KbtpError } from '../errors.ts';

export type RnicErrorCode =
  | 'EINVAL' // bad argument
  | 'ENOMEM' // a queue or table is full
  | 'ENOTCONN' // the QP is not connected (or already closed)
  | 'EISCONN' // the QP is already connected or connecting
  | 'ETIMEDOUT' // connection setup timed out
  | 'ECONNREFUSED' // the peer rejected the connection (MPA Reply with R=1) or refused TCP
  | 'ECONNRESET' // the connection ended (Terminate, close or reset)
  | 'EPROTO'; // the peer broke the protocol during setup

export class RnicError extends KbtpError {
  constructor(
    /** What went wrong, as the errno a verbs call would return. */
    readonly errno: RnicErrorCode,
    message: string,
    /** The Terminate that ended the connection, sent or received, when there was one. */
    readonly terminate?: TerminateInfo,
  ) {
    super('KBTP_TRANSPORT', message, EXIT_FAILURE);
  }
}

/** A decoded Terminate, as sent or received. */
export interface TerminateInfo {
  readonly layer: number;
  readonly errorType: number;
  readonly errorCode: number;
  /** "layer / type / code (meaning)". */
  readonly description: string;
  /** Local diagnostic: what exactly was wrong (only for Terminates this side sent). */
  readonly reason?: string;
  /** DDP header of the failed segment, when the Terminate carried it. */
  readonly ddpHeader?: Uint8Array;
  readonly ddpSegmentLength?: number;
  /** Read Request header of the failed message, when the Terminate carried it. */
  readonly rdmaHeader?: Uint8Array;
}
