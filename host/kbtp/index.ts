// The kbtp package: the client library a serving engine imports to park and fetch KV-cache
// blocks in a kbtp cache node (docs/CLIENT.md). `import { connect } from 'kbtp'`.
export {
  connect,
  parseTarget,
  directLoadConsistent,
  TargetAddressError,
  type KbtpSession,
  type ConnectOptions,
  type CallOptions,
  type LoadOptions,
  type StoreOptions,
  type BlockInfo,
  type LoadResult,
  type CallDone,
  type TableEntry,
} from './initiator.ts';
export type { HelloAck } from './wire/hello.ts';
export { statusName } from './wire/messages.ts';
export { DEFAULT_PORT } from './address.ts';
export {
  KbtpError,
  KbtpStatusError,
  BatchError,
  type BatchFailure,
  TransportError,
  ProtocolError,
  TimeoutError,
  AbortedError,
  SessionClosedError,
  UsageError,
  ConfigError,
  EXIT_OK,
  EXIT_FAILURE,
  EXIT_USAGE,
  EXIT_STATUS,
  type KbtpErrorCode,
} from './errors.ts';
/** Capabilities to ask for in connect() (granted ones are in `session.hello.capabilities`). */
export { CAP_DIRECT_LOAD, CAP_DIRECT_ALLOC, CAP_RECORD_COMPLETION, CAP_PERSISTENT } from '../../assembly/kbtp-constants.ts';
