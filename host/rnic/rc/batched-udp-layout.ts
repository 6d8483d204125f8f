// The batched UDP socket's memory layout, shared by the RC thread (batched-udp-socket.ts) and the
// send worker whose source is in batched-udp-workers.ts: Linux's struct offsets and constants,
// and the send blocks' control words.

// Linux constants (x86_64 and arm64 agree on all of these).
export const AF_INET = 2;
export const SOCK_DGRAM = 2;
export const SOCK_CLOEXEC = 0o2000000;
export const SOL_SOCKET = 1;
export const SO_SNDBUF = 7;
export const SO_RCVBUF = 8;
export const MSG_DONTWAIT = 0x40;
export const MSG_TRUNC = 0x20;
export const EINTR = 4;
export const EIO = 5;
export const EMSGSIZE = 90;
export const ENOPROTOOPT = 92;
export const EAGAIN = 11;
export const EINVAL = 22;
export const ENOBUFS = 105;

// struct mmsghdr on LP64: msghdr (56 octets) + msg_len, padded to 64.
export const MMSGHDR = 64;
export const MSG_NAME = 0;
export const MSG_NAMELEN = 8;
export const MSG_IOV = 16;
export const MSG_IOVLEN = 24;
export const MSG_CONTROL = 32;
export const MSG_CONTROLLEN = 40;
export const MSG_FLAGS = 48;
export const MSG_LEN = 56;
export const IOVEC = 16;
export const SOCKADDR_IN = 16;
/** Parts of one outbound packet (header, payload, trailer): every packet has three iovecs, empty ones of length 0. */
export const MAX_PARTS = 3;
/** Control message room: CMSG_SPACE(sizeof(int)) on LP64. */
export const CMSG_ROOM = 24;
export const SOL_UDP = 17;
export const UDP_SEGMENT = 103;
export const UDP_GRO = 104;
/** GSO limits: segments per message (UDP_MAX_SEGMENTS on older kernels) and octets (a UDP datagram's). */
export const MAX_SEGMENTS = 64;
export const MAX_GSO_BYTES = 65507;

/** Send blocks: one fills while the send worker writes the others. */
export const SEND_BLOCKS = 4;
// The send control words (Int32 indices): blocks submitted and written (counters), closing, the
// errno that turned GSO off, the test hook's remaining simulated EAGAINs, statistics; then per
// block its message count, then per block and message its packet count.
export const SUBMITTED = 0;
export const WRITTEN = 1;
export const SEND_CLOSING = 2;
export const GSO_OFF_ERRNO = 3;
export const SIMULATED_FULL = 4;
export const SEND_CALLS = 5;
export const MESSAGES_SENT = 6;
export const DATAGRAMS_SENT = 7;
export const SEND_BLOCKED = 8;
export const SEND_ERRORS = 9;
/** 1 while the send worker sleeps: only then does a submission wake it (a wake costs a system call and often a context switch). */
export const SENDER_SLEEPING = 10;
export const BLOCK_MESSAGES = 16;
/** Per block, the first message the worker writes (the main thread may have written some). */
export const BLOCK_START = BLOCK_MESSAGES + SEND_BLOCKS;
export const MESSAGE_PACKETS = BLOCK_START + SEND_BLOCKS;
