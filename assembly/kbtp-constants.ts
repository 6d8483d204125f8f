// KBTP version 1 numbers (draft sections 3 and 5, kbtp-v1.md sections 1, 4 and 6).
// Valid as AssemblyScript and as TypeScript, so the engine and the host share one definition.

export const KBTP_VERSION = 1;
export const HEADER_SIZE = 24;
export const DESCRIPTOR_SIZE = 16;
export const COMPLETION_SIZE = 40;
export const BIND_SIZE = 40;

// Field offsets of the common header that starts every message (kbtp-v1 section 1).
export const HEADER_VERSION = 0;
export const HEADER_OPCODE = 1;
export const HEADER_FLAGS = 2;
export const HEADER_REQUEST_ID = 4;
export const HEADER_HANDLE = 12;
export const HEADER_GENERATION = 20;
/** Status in a COMPLETION or HELLO_ACK; reserved (zero) in a request. */
export const HEADER_STATUS = 22;

// Field offsets inside a Data Descriptor or Completion Descriptor (draft 5.2).
export const DESCRIPTOR_STAG = 0;
export const DESCRIPTOR_TAGGED_OFFSET = 4;
export const DESCRIPTOR_LENGTH = 12;

// Field offsets of the COMPLETION body (kbtp-v1 section 2) and the BIND body (section 1).
export const COMPLETION_DATA_LENGTH = 24;
export const COMPLETION_RESERVED = 28;
export const COMPLETION_BLOCK_OFFSET = 32;
export const BIND_TICKET = 24;
export const BIND_DATA_LENGTH = 28;
export const BIND_BLOCK_OFFSET = 32;

export const OPCODE_HELLO = 0x01;
export const OPCODE_HELLO_ACK = 0x02;
export const OPCODE_GOODBYE = 0x03;
export const OPCODE_LOAD = 0x10;
export const OPCODE_STORE = 0x11;
export const OPCODE_ALLOC_STORE = 0x12;
export const OPCODE_FREE = 0x13;
export const OPCODE_BIND = 0x14;
export const OPCODE_COMPLETION = 0x20;

export const FLAG_INLINE = 0x0001;
export const FLAG_SEAL = 0x0002;
export const FLAG_RECORD = 0x0004;
export const FLAG_INVALIDATE = 0x0008;
export const FLAG_ALLOW_UNSEALED = 0x0010;

export const ENTRY_VALID = 0x0001;
export const ENTRY_SEALED = 0x0002;
/** Flags bits 15..8: the Placement Epoch, +1 (mod 256) on every demotion and promotion (kbtp-v1 section 12). */
export const ENTRY_EPOCH_SHIFT = 8;
export const ENTRY_EPOCH_MASK = 0xff00;

export const CAP_DIRECT_LOAD = 0x1;
export const CAP_DIRECT_ALLOC = 0x2;
export const CAP_RECORD_COMPLETION = 0x4;
export const CAP_PERSISTENT = 0x8;

export const STATUS_SUCCESS = 0x0000;
export const STATUS_INVALID_REQUEST = 0x0001;
export const STATUS_VERSION_MISMATCH = 0x0002;
export const STATUS_AUTH_FAILED = 0x0003;
export const STATUS_NOT_SUPPORTED = 0x0004;
export const STATUS_OUT_OF_RANGE = 0x0005;
export const STATUS_ACCESS_DENIED = 0x0006;
export const STATUS_NOT_VALID = 0x0007;
export const STATUS_NOT_SEALED = 0x0008;
export const STATUS_SEALED = 0x0009;
export const STATUS_ALREADY_VALID = 0x000a;
export const STATUS_GENERATION_MISMATCH = 0x000b;
export const STATUS_LENGTH_ERROR = 0x000c;
export const STATUS_NO_SPACE = 0x000d;
export const STATUS_TICKET_ABANDONED = 0x000e;
export const STATUS_BAD_TICKET = 0x000f;
export const STATUS_REMOTE_ACCESS = 0x0010;
export const STATUS_TOO_MANY_REQUESTS = 0x0011;
export const STATUS_TIER_ERROR = 0x0012;
export const STATUS_SHUTTING_DOWN = 0x0013;

/** Counter increments of draft 3.3 (masked) and 9.2 (unmasked). */
export const RING_ADD_DATA_MASKED = 0x0000000100000010;
export const RING_ADD_DATA_UNMASKED = 0x0000000100000000;
