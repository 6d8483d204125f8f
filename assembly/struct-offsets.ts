// Byte offsets of the engine's control structures in shared memory. This file is valid both
// as AssemblyScript and as TypeScript, so the engine and the host read one definition.
// Fields are little-endian (wasm memory order) unless they are wire-visible: table entries,
// ring slots and KBTP messages are big-endian, as the draft requires.

// Engine descriptor: written once by the host, read-only afterwards.
export const ENGINE_POOL_BASE = 0; // u32 address of block 0
export const ENGINE_BLOCK_SIZE = 4; // u32
export const ENGINE_BLOCK_COUNT = 8; // u32 F
export const ENGINE_TABLE_BASE = 12; // u32 address of the entry of the first handle
export const ENGINE_HANDLE_COUNT = 16; // u32 handles served
export const ENGINE_HANDLE_LOCKS = 20; // u32 address of one u32 lock word per handle
export const ENGINE_BASE_HANDLE = 24; // u64 Table Base Handle
export const ENGINE_BLOCK_RINGS = 32; // u32 address of one u32 ring address per block (its home ring)
export const ENGINE_MAX_INLINE = 36; // u32
export const ENGINE_SHARED_RING = 40; // u32 address of the shared ring's descriptor
export const ENGINE_DURABLE = 44; // u32 1 when a durable tier keeps sealed blocks (kbtp-v1 section 12)
export const ENGINE_GENERATION_MARKS = 48; // u32 address of one u32 per handle: highest Generation that may be shown
export const ENGINE_TENANTS = 52; // u32 address of the first tenant
export const ENGINE_TENANT_COUNT = 56; // u32
// Staging blocks (durable tier only): a sealing STORE or ALLOC_STORE lands its data in one and
// the tier writes it from there, so a request the tier fails leaves the pool block and the ring
// as they were (kbtp-v1 sections 6 and 12). The data enters the pool only once it is durable.
export const ENGINE_STAGING = 60; // u32 address of staging block 0 (right after the pool)
export const ENGINE_STAGING_COUNT = 64; // u32
export const ENGINE_STAGING_FLAGS = 68; // u32 address of one u32 per staging block (1: in use)
export const ENGINE_STAGING_HINT = 72; // u32 where the next search starts (atomic)
export const ENGINE_DRAINING = 76; // u32 1 once the node drains: every session's new requests get SHUTTING_DOWN (atomic)
export const ENGINE_SIZE = 128;

// Ring descriptor, three cache lines: fields written once (read by every operation), then Tail
// alone, then the parked-free bookkeeping, so that frees moving Tail do not evict what every
// allocation reads. Head sits alone just before the slots, so that one STag can cover Head and
// slots (the Ring STag of DIRECT_ALLOC) without covering Tail or this descriptor.
export const RING_MODE = 0; // u32 RING_MODE_*
export const RING_ORDER = 4; // u32 n, N = 2^n slots
export const RING_SLOTS = 8; // u32 address of slot 0
export const RING_HEAD = 12; // u32 address of the Head counter
export const RING_BLOCK_COUNT = 16; // u32 blocks that live on this ring
export const RING_FIRST_BLOCK = 20; // u32 index of its first block (a partition is contiguous)
export const RING_DEFERRED_LIST = 24; // u32 address of N parked frees of DEFERRED_ENTRY_SIZE
export const RING_ABANDONED = 28; // u32 address of N u64 records (1 << 32 | ticket) of reclaimed tickets
export const RING_CLEAR_ON_FREE = 32; // u32 1 when blocks cross trust domains on this ring
export const RING_TAIL = 64; // u64 counter, memory byte order
export const RING_DEFERRED_COUNT = 128; // u32 frees parked or being parked
export const RING_DEFERRED_LOCK = 132; // u32 spin lock over the parked list (never held while waiting)
export const RING_DEFERRED_USED = 136; // u32 entries in the parked list (under the lock)
export const RING_DESCRIPTOR_SIZE = 192;
export const RING_MODE_MASKED = 0; // RFC 7306 masked FetchAdd: Ticket | Slot Offset
export const RING_MODE_UNMASKED = 1; // IB FetchAdd: Ticket in the high 32 bits, slot = ticket mod N
export const DEFERRED_ENTRY_SIZE = 16; // u32 ticket, u32 pad, u64 block offset
export const SLOT_SIZE = 16;
export const SLOT_SEQUENCE = 0; // u32 big-endian: the ticket whose turn the slot holds
export const SLOT_BLOCK_OFFSET = 8; // u64 big-endian: the block it carries (all ones: none)
export const ENTRY_SIZE = 16;
// Block table entry fields (draft 3.2), big-endian; Flags and Generation form one u32 at 0.
export const ENTRY_FLAGS = 0; // u16
export const ENTRY_GENERATION = 2; // u16
export const ENTRY_DATA_LENGTH = 4; // u32
export const ENTRY_BLOCK_OFFSET = 8; // u64

// Tenant: what a tenant may do, and its usage, shared by all of its sessions.
export const TENANT_STORE_FIRST = 0; // u64
export const TENANT_STORE_COUNT = 8; // u64
export const TENANT_LOAD_FIRST = 16; // u64
export const TENANT_LOAD_COUNT = 24; // u64
export const TENANT_QUOTA = 32; // u32
export const TENANT_USAGE = 36; // u32 bound handles + tickets taken and not bound (atomic)
export const TENANT_RING = 40; // u32 ring descriptor its allocations use
export const TENANT_POLICY = 44; // u32 EVICTION_*: what the quota counts and what happens at it
export const TENANT_SIZE = 64;
export const EVICTION_NONE = 0; // the quota counts bound handles; at it, NO_SPACE
export const EVICTION_DEMOTE = 1; // the quota counts bound handles resident in the pool; at it, demote (kbtp-v1 section 12)

// Session: one per connection.
export const SESSION_TENANT = 0; // u32 tenant address
export const SESSION_CAPABILITIES = 4; // u32 granted capability bits
export const SESSION_CREDITS = 8; // u32 Target Receive Credits
export const SESSION_OUTSTANDING = 12; // u32 requests between arrival and COMPLETION (atomic)
export const SESSION_DRAINING = 16; // u32 1 while the target drains
export const SESSION_SIZE = 64;

// Request context: one per posted receive. The RNIC places the request's bytes at
// REQUEST_MESSAGE; the engine leaves the data operation and the COMPLETION beside it.
export const REQUEST_SESSION = 0; // u32 session address (host sets it when posting)
export const REQUEST_LENGTH = 4; // u32 message length (host sets it on arrival)
export const REQUEST_STATE = 8; // u32 REQUEST_STATE_* of the running program
export const REQUEST_LOCK = 12; // u32 LOCK_* held on the handle
export const REQUEST_TICKET = 16; // u32 ticket taken by ALLOC_STORE
export const REQUEST_SLOT = 20; // u32 slot offset of that ticket
export const REQUEST_RING = 24; // u32 ring the ticket came from
export const REQUEST_ENTRY = 28; // u32 address of the handle's table entry (0: not served)
export const REQUEST_BLOCK_OFFSET = 32; // u64 block chosen for the request
export const REQUEST_DATA_LENGTH = 40; // u32 data length the request will leave in the entry
export const REQUEST_TIER = 44; // u32 TIER_* the host carries out for ACTION_PERSIST / ACTION_RESERVE / ACTION_FETCH / ACTION_EVICT
// (TIER_SEAL's data: the staging block at REQUEST_STAGING when it is not 0, else the pool block at REQUEST_BLOCK_OFFSET)
export const REQUEST_OP_KIND = 48; // u32 OP_* the host carries out for ACTION_DATA
export const REQUEST_OP_LENGTH = 52; // u32 octets to move
export const REQUEST_OP_LOCAL = 56; // u32 address in this memory (inside the pool)
export const REQUEST_OP_STAG = 60; // u32 initiator STag
export const REQUEST_OP_REMOTE_OFFSET = 64; // u64 initiator tagged offset
export const REQUEST_INVALIDATE_STAG = 72; // u32 STag for Send with Invalidate (0: plain Send)
// u32 octets of an inline STORE's message in the context when placeInline() sent the rest to the block (0: none)
export const REQUEST_PLACED = 76;
export const REQUEST_COMPLETION = 80; // 40-octet COMPLETION message, big-endian
export const REQUEST_TIER_GENERATION = 128; // u32 Generation the tier record carries (the entry's current one for TIER_RESERVE)
export const REQUEST_NO_EVICT = 132; // u32 1: the host found nothing to demote, answer NO_SPACE
export const REQUEST_EVICT_TENANT = 136; // u32 tenant address whose quota is full (ACTION_EVICT)
export const REQUEST_OWNER = 140; // u32 tenant address that owns the handle (promotion)
export const REQUEST_STAGING = 144; // u32 staging block the request holds (0: none)
export const REQUEST_UNDO_STATUS = 148; // u32 status a BIND answers once its durable seal is undone (TIER_UNBIND_UNDO)
// u32 1 when run() returned ACTION_RETRY because every staging block is in use: one frees only
// when a seal in flight is answered (a group commit ends), so the host need not retry at once.
export const REQUEST_STAGING_WAIT = 152;
export const REQUEST_MESSAGE = 192; // the request as received
export const REQUEST_HEADER_SIZE = 192;

export const REQUEST_STATE_NEW = 0;
export const REQUEST_STATE_CREDITED = 1; // passed format and credit checks, waiting for the handle
export const REQUEST_STATE_WAIT_SLOT = 2; // ALLOC_STORE holds a ticket whose slot is not yet filled
export const REQUEST_STATE_DATA = 3; // the data operation is out with the host
export const REQUEST_STATE_DONE = 4;
export const REQUEST_STATE_DATA_SENT = 5; // LOAD: Write and COMPLETION are out, the handle is held until the Write is done
export const REQUEST_STATE_PERSIST = 6; // the tier is making the request's change durable
export const REQUEST_STATE_FETCH_SLOT = 7; // LOAD of a tier-only block holds a ticket of the owner's ring whose slot is not filled yet
export const REQUEST_STATE_FETCH = 8; // the host is reading the block from the tier into the pool
export const REQUEST_STATE_PLACE_SLOT = 9; // a durable ALLOC_STORE holds a ticket whose slot is not filled yet; its data is staged
// An inline STORE passed its checks on its first segment and holds credit and handle while the
// transport places the rest of its data straight into the block (placeInline()); run() finishes it
// once all of it arrived, complete(request, false) gives back what it holds if it never does.
export const REQUEST_STATE_PLACING = 10;

export const LOCK_NONE = 0;
export const LOCK_SHARED = 1;
export const LOCK_EXCLUSIVE = 2;
export const LOCK_WRITER_BIT = 0x80000000;

// What the host does next with a request (return value of submit/resume/complete).
export const ACTION_SEND = 1; // send the COMPLETION at REQUEST_COMPLETION (Send with Invalidate if REQUEST_INVALIDATE_STAG)
export const ACTION_DATA = 2; // carry out the data operation, then call complete(request, ok)
export const ACTION_RETRY = 3; // the handle is busy or the ring slot not filled yet: call resume later
export const ACTION_GOODBYE = 4; // the initiator said GOODBYE: finish outstanding requests and close
export const ACTION_NONE = 5; // nothing to send (the transport failed; the session ends)
// LOAD: carry out the RDMA Write and post the COMPLETION right behind it (RDMAP places the Write's
// data before it delivers a later Send); call complete(request, ok) once the Write is done locally.
export const ACTION_DATA_AND_SEND = 6;
// Durable tier (kbtp-v1 section 12). PERSIST: make REQUEST_TIER durable, then persisted(request, ok).
// RESERVE: durably raise the handle's Generation mark, store it in the mark array, then run() again.
// FETCH: read the block from the tier into the pool block at REQUEST_BLOCK_OFFSET, then fetched(request, outcome).
// EVICT: demote one least recently used sealed resident block of REQUEST_EVICT_TENANT (demote()), then
// run() again; with nothing to demote set REQUEST_NO_EVICT first.
export const ACTION_PERSIST = 7;
export const ACTION_RESERVE = 8;
export const ACTION_FETCH = 9;
export const ACTION_EVICT = 10;
// Internal to the engine: a STORE run by placeInline() passed every check (never returned to the host).
export const ACTION_PLACE = 11;

export const TIER_SEAL = 1; // data (REQUEST_BLOCK_OFFSET, REQUEST_DATA_LENGTH) and entry, Generation REQUEST_TIER_GENERATION
export const TIER_UNBIND = 2; // the handle is not VALID with Generation REQUEST_TIER_GENERATION (FREE)
export const TIER_UNBIND_LOST = 3; // the same, for a block whose data failed its checksum
export const TIER_RESERVE = 4; // raise the Generation mark above REQUEST_TIER_GENERATION
export const TIER_FETCH = 5;
// A sealing BIND lost its ticket to a reclaim or another BIND while its seal was made durable:
// the seal is undone durably (not VALID with REQUEST_TIER_GENERATION), then REQUEST_UNDO_STATUS.
export const TIER_UNBIND_UNDO = 6;

export const FETCH_OK = 0;
export const FETCH_FAILED = 1; // I/O error: nothing changed, TIER_ERROR
export const FETCH_LOST = 2; // the data failed its checksum: the block is lost (persist TIER_UNBIND_LOST next)

export const DEMOTED = 0;
export const DEMOTE_BUSY = 1; // a request holds the handle
export const DEMOTE_NOT_ELIGIBLE = 2; // not VALID, not SEALED, or not resident

export const OP_WRITE_TO_INITIATOR = 1; // RDMA Write: pool -> initiator buffer (LOAD)
export const OP_READ_FROM_INITIATOR = 2; // RDMA Read Request: initiator buffer -> pool (STORE, ALLOC_STORE)
