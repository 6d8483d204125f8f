// Work requests and work completions: the verbs vocabulary of the RNIC. Opcodes and statuses
// mirror libibverbs (IBV_WR_*, IBV_WC_*); status values are the ibv_wc_status numbers so logs
// read the same as on a hardware RNIC.

/** A local scatter/gather element: `length` octets at byte `offset` of the region `lkey` names. */
export interface Sge {
  readonly lkey: number;
  readonly offset: number;
  readonly length: number;
}

export type SendOpcode =
  | 'SEND'
  | 'SEND_WITH_INV'
  | 'SEND_WITH_SE'
  | 'SEND_WITH_SE_INV'
  | 'RDMA_WRITE'
  | 'RDMA_WRITE_WITH_IMM'
  | 'RDMA_READ'
  | 'ATOMIC_FETCH_ADD'
  | 'ATOMIC_CMP_SWAP'
  | 'LOCAL_INV';

export interface AtomicOperands {
  /** FetchAdd: the value to add. */
  readonly add?: bigint;
  /** FetchAdd: field boundary mask (RFC 7306); 0 or absent = plain 64-bit add. */
  readonly addMask?: bigint;
  /** CmpSwap: the value to compare with. */
  readonly compare?: bigint;
  /** CmpSwap: bits taking part in the comparison; absent = all. */
  readonly compareMask?: bigint;
  /** CmpSwap: the value to swap in. */
  readonly swap?: bigint;
  /** CmpSwap: bits replaced on a match; absent = all. */
  readonly swapMask?: bigint;
}

export interface SendWorkRequest {
  /** Returned in the completion; any value. */
  readonly wrId: bigint | number;
  readonly opcode: SendOpcode;
  /**
   * Local buffers. SEND*, RDMA_WRITE*: the data (gathered in order). RDMA_READ: the single sink.
   * Atomics: optional single 8-octet element receiving the original remote value (host order).
   */
  readonly sgList?: readonly Sge[];
  /** Produce a completion on success (default: the QP's `signalAll`, itself default true). */
  readonly signaled?: boolean;
  /** Ask for a solicited event at the receiver (SEND -> SEND_WITH_SE, immediate data with SE). */
  readonly solicited?: boolean;
  /** Wait until every earlier RDMA Read and atomic has completed before starting. */
  readonly fence?: boolean;
  /** SEND_WITH_INV / SEND_WITH_SE_INV: the peer's STag to invalidate. LOCAL_INV: our STag. */
  readonly invalidateStag?: number;
  /** RDMA and atomic operations: the peer's STag and tagged offset. */
  readonly remote?: { readonly stag: number; readonly taggedOffset: bigint | number };
  /** RDMA_WRITE_WITH_IMM: the 64-bit Immediate Data (RFC 7306). */
  readonly immediate?: bigint;
  readonly atomic?: AtomicOperands;
}

export interface ReceiveWorkRequest {
  readonly wrId: bigint | number;
  readonly sgList: readonly Sge[];
  /**
   * Called once for a Send that fills this receive in more than one segment, when its first
   * `received` octets are placed and their FPDU checked and before the next segment is placed: the
   * receiver may then point the scatter list past `received` elsewhere (a KBTP target sends an
   * inline STORE's data straight to its block once the header has said which; issue 16). The
   * octets before `received` must stay where they are; the new elements are checked like posted
   * ones and bound the message's length; the receiver may fill the last of them ahead of the
   * segments (several in one read), so a Send shorter than the steered list leaves the rest of
   * that element undefined, as the message itself is then. A software-RNIC extension: the iWARP path calls it, the
   * RoCE path does not (the receiver then gets the message where it was posted, as without it).
   */
  readonly steer?: (received: number) => void;
  /**
   * With MPA CRC off, steer() is called as soon as this many octets of the message are placed
   * (inside its first segment) rather than after the whole first segment: the rest of that
   * segment then goes where steer() points too (a KBTP target reads an inline STORE's header,
   * 40 octets, into the context and all of its data into the block; issue 16). With CRC on the
   * segment's octets are not known good before its end, so steer() waits for it as without this.
   * Only for a Send of more than one segment whose first segment is longer than this.
   */
  readonly steerAt?: number;
}

/** ibv_wc_status values. */
export const WcStatus = {
  Success: 0,
  LocalLengthError: 1,
  LocalQpOperationError: 2,
  LocalProtectionError: 4,
  WrFlushError: 5,
  BadResponseError: 7,
  LocalAccessError: 8,
  RemoteInvalidRequestError: 9,
  RemoteAccessError: 10,
  RemoteOperationError: 11,
  /** RC: the peer did not acknowledge within the retry count (ibv IBV_WC_RETRY_EXC_ERR). */
  RetryExceededError: 12,
  /** RC: the peer kept answering RNR NAK beyond the RNR retry count. */
  RnrRetryExceededError: 13,
  RemoteAbortError: 16,
  FatalError: 19,
  GeneralError: 21,
} as const;
export type WcStatus = (typeof WcStatus)[keyof typeof WcStatus];

const STATUS_NAMES: Record<number, string> = {
  0: 'success',
  1: 'local length error',
  2: 'local QP operation error',
  4: 'local protection error',
  5: 'work request flushed',
  7: 'bad response',
  8: 'local access error',
  9: 'remote invalid request',
  10: 'remote access error',
  11: 'remote operation error',
  12: 'transport retry counter exceeded',
  13: 'RNR retry counter exceeded',
  16: 'remote abort',
  19: 'fatal error',
  21: 'general error',
};

export function wcStatusName(status: number): string {
  return STATUS_NAMES[status] ?? `status ${status}`;
}

export type WcOpcode = 'SEND' | 'RDMA_WRITE' | 'RDMA_READ' | 'COMP_SWAP' | 'FETCH_ADD' | 'LOCAL_INV' | 'RECV' | 'RECV_RDMA_WITH_IMM';

export interface WorkCompletion {
  readonly wrId: bigint | number;
  readonly status: WcStatus;
  readonly opcode: WcOpcode;
  readonly qpNumber: number;
  /** Octets received (RECV) or transferred (RDMA_READ and sends). */
  readonly byteLength: number;
  /** RECV_RDMA_WITH_IMM: the Immediate Data. */
  readonly immediate?: bigint;
  /** RECV of a Send with Invalidate: the STag that was invalidated. */
  readonly invalidatedStag?: number;
  /** RECV: the message asked for a solicited event. */
  readonly solicited?: boolean;
  /** Atomics: the remote value before the operation. */
  readonly atomicResult?: bigint;
  /** Why a completion is not a success. */
  readonly error?: string;
}

export function wcOpcodeFor(opcode: SendOpcode): WcOpcode {
  switch (opcode) {
    case 'RDMA_WRITE':
    case 'RDMA_WRITE_WITH_IMM':
      return 'RDMA_WRITE';
    case 'RDMA_READ':
      return 'RDMA_READ';
    case 'ATOMIC_FETCH_ADD':
      return 'FETCH_ADD';
    case 'ATOMIC_CMP_SWAP':
      return 'COMP_SWAP';
    case 'LOCAL_INV':
      return 'LOCAL_INV';
    default:
      return 'SEND';
  }
}
