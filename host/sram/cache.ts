// The on-NIC SRAM cache model. Lines hold entries of any kind (kinds.ts) keyed by two 32-bit
// parts (a QP number, an STag and a page index, a block id). Pools of lines come from the
// policy; each pool is divided into sets, and each set keeps an intrusive doubly linked LRU
// list over line indices. A key finds its line through an open-addressing hash table with
// linear probing and backward-shift deletion. Everything lives in typed arrays allocated up
// front, so access() allocates nothing. A line's fields sit together in one 64-byte record of
// an Int32Array (array of structs): a hit or a miss touches a few CPU cache lines rather than
// one per field, which is most of the model's speed.
import { DEFAULT_COSTS, type SramCosts } from './costs.ts';
import {
  KIND_FIELDS,
  K_EVICTIONS,
  K_HITS,
  K_INSERTS,
  K_INVALIDATIONS,
  K_MISSES,
  K_WRITEBACKS_PAID,
  K_WRITEBACKS,
  OWNER_FIELDS,
  O_HITS,
  O_LINES_DROPPED,
  O_LINES_LOST,
  O_MISSES,
  O_WRITEBACKS,
  kindStatsFrom,
  ownerStatsFrom,
  type OwnerStats,
  type SramStats,
} from './counters.ts';
import { EntryKind, KIND_COUNT, KIND_NAMES, WRITABLE_KINDS, kindName } from './kinds.ts';
import { createPolicy, type InvalidationTarget, type SramPolicy } from './policy.ts';
import { InternalError, UsageError } from '../errors.ts';

export interface SramCacheOptions {
  /** Number of lines (entries) the SRAM holds. */
  readonly lines: number;
  /** Ways per set; 0 or absent means fully associative. */
  readonly associativity?: number;
  /** Defaults to shared-lru. */
  readonly policy?: SramPolicy;
  readonly costs?: Partial<SramCosts>;
  /**
   * Whether a registration puts the new region's MPT entry into the cache and a QP creation
   * its context (the firmware command writes them through the cache). Default true.
   */
  readonly controlInsertsLines?: boolean;
}

/** Bits of access()'s result. */
export const HIT = 1;
/** A valid line was given up for the new entry. */
export const EVICTED = 2;
/** ... and it was dirty, so it was written back first (one PCIe write). */
export const WROTE_BACK = 4;
/** The kind has no lines under this policy: the entry was fetched and not kept. */
export const BYPASSED = 8;

export interface LineView {
  readonly line: number;
  readonly kind: string;
  readonly a: number;
  readonly b: number;
  readonly dirty: boolean;
  readonly owner: number;
}

/** 2^24 lines: 1 GiB of line records, far beyond any NIC or device SRAM. */
export const MAX_LINES = 1 << 24;

const EMPTY_SLOT = -1;
const NONE = -1;
/** Kind field of an empty line. */
const EMPTY = -1;

// Fields of a line's record in `rec` (line << SHIFT is its first field).
const SHIFT = 4;
const F_A = 0;
const F_B = 1;
const F_KIND = 2;
const F_DIRTY = 3;
const F_OWNER = 4;
/** Toward the most recently used end of the set's list. */
const F_PREV = 5;
/** Toward the least recently used end. */
const F_NEXT = 6;
const F_HASH = 7;
/** Where the line's key sits in the hash table. */
const F_SLOT = 8;
const F_SET = 9;
/** Neighbours on the list of valid lines of the same kind (invalidations walk it, not the cache). */
const F_KIND_PREV = 10;
const F_KIND_NEXT = 11;

function hashKey(kind: number, a: number, b: number): number {
  let h = (a ^ Math.imul(kind + 1, 0x9e3779b9)) | 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h ^= Math.imul(b ^ (b >>> 15), 0xc2b2ae35);
  h = Math.imul(h ^ (h >>> 13), 0x27d4eb2f);
  return h ^ (h >>> 16);
}

function nextPowerOfTwo(n: number): number {
  let p = 16;
  while (p < n) p *= 2;
  return p;
}

export class SramCache implements InvalidationTarget {
  readonly lineCount: number;
  readonly associativity: number;
  readonly policy: SramPolicy;
  readonly costs: SramCosts;
  readonly controlInsertsLines: boolean;

  /** Every line's record, 1 << SHIFT int32 fields each. Keys are stored as int32 (a | 0). */
  private readonly rec: Int32Array;
  private readonly kindHead = new Int32Array(KIND_COUNT).fill(NONE);
  /** Lines collected for an invalidation. */
  private readonly scratch: Int32Array;
  private readonly regionPages = new Map<number, number>();

  // Per set.
  private readonly head: Int32Array;
  private readonly tail: Int32Array;

  // Per kind: which pool, and that pool's sets.
  private readonly setBaseOfKind: Int32Array;
  private readonly setCountOfKind: Int32Array;
  private readonly writable: Uint8Array;

  // key -> line.
  private readonly slots: Int32Array;
  private readonly slotMask: number;

  private readonly kindCounters = new Float64Array(KIND_COUNT * KIND_FIELDS);
  private ownerCounters: Float64Array;
  private ownerCapacity: number;

  /** Running totals. */
  hits = 0;
  misses = 0;
  writeBacks = 0;
  registrations = 0;
  deregistrations = 0;

  /** The costs as the counters use them: a hit, a miss (lookup + PCIe read), a write-back. */
  readonly hitNs: number;
  readonly missNs: number;
  readonly writeBackNs: number;

  /** Line touched by the last access or insert (for walkthroughs and tests). */
  lastLine = NONE;

  constructor(options: SramCacheOptions) {
    const { lines } = options;
    if (!Number.isInteger(lines) || lines < 1 || lines > MAX_LINES) {
      throw new UsageError(`lines must be a whole number from 1 to ${MAX_LINES} (got ${lines})`);
    }
    const associativity = options.associativity ?? 0;
    if (!Number.isInteger(associativity) || associativity < 0) {
      throw new UsageError(`associativity must be 0 (fully associative) or a positive integer (got ${associativity})`);
    }
    this.lineCount = lines;
    this.associativity = associativity;
    this.policy = options.policy ?? createPolicy('shared-lru');
    this.costs = { ...DEFAULT_COSTS, ...options.costs };
    for (const [name, value] of Object.entries(this.costs)) {
      if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
        throw new UsageError(`costs.${name} must be a non-negative number of nanoseconds (got ${String(value)})`);
      }
    }
    this.controlInsertsLines = options.controlInsertsLines ?? true;
    this.hitNs = this.costs.sramHitNs;
    this.missNs = this.costs.sramHitNs + this.costs.pcieReadNs;
    this.writeBackNs = this.costs.pcieWriteNs;

    this.rec = new Int32Array(lines << SHIFT);
    for (let line = 0; line < lines; line++) {
      this.rec[(line << SHIFT) + F_KIND] = EMPTY;
      this.rec[(line << SHIFT) + F_OWNER] = NONE;
    }
    this.scratch = new Int32Array(lines);
    this.writable = new Uint8Array(KIND_COUNT);
    for (const kind of WRITABLE_KINDS) this.writable[kind] = 1;

    const pools = this.policy.layout({ lines, associativity });
    this.setBaseOfKind = new Int32Array(KIND_COUNT);
    this.setCountOfKind = new Int32Array(KIND_COUNT).fill(-1);
    let setTotal = 0;
    const poolSets: Array<{ firstLine: number; sets: number; ways: number }> = [];
    let firstLine = 0;
    for (const pool of pools) {
      if (!Number.isInteger(pool.lines) || pool.lines < 0) {
        throw new InternalError(`policy ${this.policy.name} gave a pool of ${pool.lines} lines; pools need a whole, non-negative number`);
      }
      const ways = associativity === 0 ? pool.lines : associativity;
      if (pool.lines > 0 && pool.lines % ways !== 0) {
        const names = pool.kinds.map(kindName).join('+');
        throw new UsageError(
          `the ${names} pool has ${pool.lines} lines, not a multiple of associativity ${associativity}; ` +
            'choose line counts that are multiples of the associativity',
        );
      }
      const sets = pool.lines === 0 ? 0 : pool.lines / ways;
      for (const kind of pool.kinds) {
        if (this.setCountOfKind[kind] !== -1) {
          throw new InternalError(`policy ${this.policy.name} put ${kindName(kind)} in two pools`);
        }
        this.setBaseOfKind[kind] = setTotal;
        this.setCountOfKind[kind] = sets;
      }
      poolSets.push({ firstLine, sets, ways });
      setTotal += sets;
      firstLine += pool.lines;
    }
    if (firstLine !== lines) {
      throw new InternalError(`policy ${this.policy.name} laid out ${firstLine} lines for a cache of ${lines}`);
    }
    for (let kind = 0; kind < KIND_COUNT; kind++) {
      if (this.setCountOfKind[kind] === -1) throw new InternalError(`policy ${this.policy.name} left ${kindName(kind)} out of every pool`);
    }

    this.head = new Int32Array(setTotal).fill(NONE);
    this.tail = new Int32Array(setTotal).fill(NONE);
    let set = 0;
    for (const pool of poolSets) {
      for (let s = 0; s < pool.sets; s++, set++) {
        // Pushing ascending lines at the head leaves the lowest at the tail: empty lines are
        // filled in index order, which keeps walkthroughs readable.
        for (let way = 0; way < pool.ways; way++) {
          const line = pool.firstLine + s * pool.ways + way;
          this.rec[(line << SHIFT) + F_SET] = set;
          this.pushHead(line, set);
        }
      }
    }

    const slotCount = nextPowerOfTwo(lines * 4);
    this.slots = new Int32Array(slotCount).fill(EMPTY_SLOT);
    this.slotMask = slotCount - 1;

    this.ownerCapacity = 16;
    this.ownerCounters = new Float64Array(this.ownerCapacity * OWNER_FIELDS);
  }

  /**
   * Looks `kind`/`a`/`b` up for `owner` (a small non-negative index: QP, tenant). A hit moves
   * the line to the most recently used end; a miss takes the set's least recently used line,
   * writing it back first if dirty, and fetches the entry over PCIe. `write` marks the line
   * dirty (only kinds the NIC modifies on-chip). Returns HIT/EVICTED/WROTE_BACK/BYPASSED bits.
   */
  access(kind: EntryKind, a: number, b: number, owner: number, write: boolean): number {
    a |= 0;
    b |= 0;
    if (write && this.writable[kind] === 0) {
      throw new UsageError(`${kindName(kind)} entries are never modified on-chip; access them with write = false`);
    }
    if (owner >>> 0 >= this.ownerCapacity) this.growOwners(owner);
    const h = hashKey(kind, a, b);
    // The probe is written out here rather than calling find(): this is the hottest loop.
    const slots = this.slots;
    const rec = this.rec;
    const mask = this.slotMask;
    let slot = h & mask;
    let line = slots[slot]!;
    while (line !== EMPTY_SLOT) {
      const at = line << SHIFT;
      if (rec[at + F_A] === a && rec[at + F_B] === b && rec[at + F_KIND] === kind) break;
      slot = (slot + 1) & mask;
      line = slots[slot]!;
    }
    if (line !== EMPTY_SLOT) {
      this.touch(line);
      if (write) rec[(line << SHIFT) + F_DIRTY] = 1;
      this.lastLine = line;
      this.hits++;
      this.kindCounters[kind * KIND_FIELDS + K_HITS]! += 1;
      this.ownerCounters[owner * OWNER_FIELDS + O_HITS + kind]! += 1;
      return HIT;
    }
    this.misses++;
    this.kindCounters[kind * KIND_FIELDS + K_MISSES]! += 1;
    this.ownerCounters[owner * OWNER_FIELDS + O_MISSES + kind]! += 1;
    return this.fill(kind, a, b, h, owner, write);
  }

  /**
   * Modelled NIC time of every access and write-back so far (experiments read it before and
   * after an operation to time it). Derived from the counts, so exact and free to keep.
   */
  get timeNs(): number {
    return this.hits * this.hitNs + this.misses * this.missNs + this.writeBacks * this.writeBackNs;
  }

  /**
   * Puts an entry in the cache without fetching it (a control command supplied its content).
   * Present already: it becomes most recently used. Returns the same bits as access().
   */
  insert(kind: EntryKind, a: number, b: number, owner: number, dirty: boolean): number {
    a |= 0;
    b |= 0;
    if (owner >>> 0 >= this.ownerCapacity) this.growOwners(owner);
    const h = hashKey(kind, a, b);
    const line = this.find(h, kind, a, b);
    if (line !== NONE) {
      this.touch(line);
      if (dirty) this.rec[(line << SHIFT) + F_DIRTY] = 1;
      this.lastLine = line;
      return HIT;
    }
    this.kindCounters[kind * KIND_FIELDS + K_INSERTS]! += 1;
    return this.fill(kind, a, b, h, owner, dirty);
  }

  /** Whether the entry is cached; does not change recency. */
  contains(kind: EntryKind, a: number, b: number): boolean {
    a |= 0;
    b |= 0;
    return this.find(hashKey(kind, a, b), kind, a, b) !== NONE;
  }

  /**
   * The line a miss on this key would take now (the LRU line of its set), or -1 when the key is
   * cached or its kind has no lines. Changes nothing.
   */
  peekVictim(kind: EntryKind, a: number, b: number): number {
    a |= 0;
    b |= 0;
    const h = hashKey(kind, a, b);
    const setCount = this.setCountOfKind[kind]!;
    if (setCount === 0 || this.find(h, kind, a, b) !== NONE) return NONE;
    return this.tail[this.setFor(kind, h, setCount)]!;
  }

  /** The set (global index) a key maps to, or -1 when its kind has no lines. */
  setOfKey(kind: EntryKind, a: number, b: number): number {
    const setCount = this.setCountOfKind[kind]!;
    return setCount === 0 ? NONE : this.setFor(kind, hashKey(kind, a | 0, b | 0), setCount);
  }

  /** Drops one entry without writing it back (its owner is gone). Returns whether it was cached. */
  invalidate(kind: EntryKind, a: number, b: number): boolean {
    a |= 0;
    b |= 0;
    const line = this.find(hashKey(kind, a, b), kind, a, b);
    if (line === NONE) return false;
    this.drop(line);
    return true;
  }

  invalidateKinds(kindMask: number): number {
    let count = 0;
    for (let kind = 0; kind < KIND_COUNT; kind++) {
      if (((1 << kind) & kindMask) === 0) continue;
      for (let line = this.kindHead[kind]!; line !== NONE; line = this.rec[(line << SHIFT) + F_KIND_NEXT]!) this.scratch[count++] = line;
    }
    return this.dropCollected(count);
  }

  invalidateRegion(stag: number): number {
    stag |= 0;
    let count = 0;
    const pages = this.regionPages.get(stag);
    if (pages !== undefined && pages <= 4 * this.lineCount) {
      // A region of known size: look each of its keys up rather than walking every translation line.
      const mpt = this.find(hashKey(EntryKind.MPT, stag, 0), EntryKind.MPT, stag, 0);
      if (mpt !== NONE) this.scratch[count++] = mpt;
      for (let page = 0; page < pages; page++) {
        const line = this.find(hashKey(EntryKind.MTT, stag, page), EntryKind.MTT, stag, page);
        if (line !== NONE) this.scratch[count++] = line;
      }
    } else {
      for (const kind of [EntryKind.MPT, EntryKind.MTT]) {
        for (let line = this.kindHead[kind]!; line !== NONE; line = this.rec[(line << SHIFT) + F_KIND_NEXT]!) {
          if (this.rec[(line << SHIFT) + F_A] === stag) this.scratch[count++] = line;
        }
      }
    }
    return this.dropCollected(count);
  }

  /**
   * A region was registered: its MPT entry is written through the cache. `pages` (its MTT entry
   * count), when known, lets a region-only invalidation find its lines without a scan.
   */
  registerRegion(stag: number, owner: number, pages?: number): void {
    this.registrations++;
    if (pages !== undefined) this.regionPages.set(stag | 0, pages);
    if (this.controlInsertsLines) this.insert(EntryKind.MPT, stag, 0, owner, false);
  }

  /** A region was deregistered: the policy decides which translation lines go. */
  deregisterRegion(stag: number): void {
    this.deregistrations++;
    this.policy.deregister(this, stag >>> 0);
    this.regionPages.delete(stag | 0);
  }

  createQueuePair(qpNumber: number, owner: number): void {
    if (this.controlInsertsLines) this.insert(EntryKind.QPC, qpNumber, 0, owner, false);
  }

  destroyQueuePair(qpNumber: number): void {
    this.invalidate(EntryKind.QPC, qpNumber, 0);
  }

  // ---- reports (these allocate; never on the access path) ----

  lineView(line: number): LineView | null {
    if (!Number.isInteger(line) || line < 0 || line >= this.lineCount) return null;
    const at = line << SHIFT;
    const kind = this.rec[at + F_KIND]!;
    if (kind === EMPTY) return null;
    return {
      line,
      kind: kindName(kind),
      a: this.rec[at + F_A]! >>> 0,
      b: this.rec[at + F_B]! >>> 0,
      dirty: this.rec[at + F_DIRTY] === 1,
      owner: this.rec[at + F_OWNER]!,
    };
  }

  snapshot(): Array<LineView | null> {
    return Array.from({ length: this.lineCount }, (_, line) => this.lineView(line));
  }

  /** Lines of the set holding `line`, most recently used first. */
  recencyOrder(line = 0): number[] {
    const order: number[] = [];
    for (let at = this.head[this.rec[(line << SHIFT) + F_SET]!]!; at !== NONE; at = this.rec[(at << SHIFT) + F_NEXT]!) order.push(at);
    return order;
  }

  occupancy(): Record<string, number> {
    const counts: Record<string, number> = {};
    for (const name of KIND_NAMES) counts[name] = 0;
    for (let line = 0; line < this.lineCount; line++) {
      const kind = this.rec[(line << SHIFT) + F_KIND]!;
      if (kind !== EMPTY) counts[kindName(kind)]! += 1;
    }
    return counts;
  }

  stats(): SramStats {
    const perKind: SramStats['perKind'] = {};
    for (let kind = 0; kind < KIND_COUNT; kind++) perKind[KIND_NAMES[kind]!] = kindStatsFrom(this.kindCounters, kind, this);
    const accesses = this.hits + this.misses;
    return {
      accesses,
      hits: this.hits,
      misses: this.misses,
      hitRate: accesses === 0 ? 0 : this.hits / accesses,
      pcieReads: this.misses,
      pcieWrites: this.writeBacks,
      pcieCrossings: this.misses + this.writeBacks,
      timeNs: this.timeNs,
      registrations: this.registrations,
      deregistrations: this.deregistrations,
      perKind,
    };
  }

  ownerStats(owner: number): OwnerStats {
    if (owner >= this.ownerCapacity) return ownerStatsFrom(new Float64Array(OWNER_FIELDS), 0, owner, this);
    return ownerStatsFrom(this.ownerCounters, owner, owner, this);
  }

  /** Owners that have touched the cache, in index order. */
  owners(): number[] {
    const seen: number[] = [];
    for (let owner = 0; owner < this.ownerCapacity; owner++) {
      const base = owner * OWNER_FIELDS;
      for (let field = 0; field < OWNER_FIELDS; field++) {
        if (this.ownerCounters[base + field] !== 0) {
          seen.push(owner);
          break;
        }
      }
    }
    return seen;
  }

  /** Zeroes every counter; the cached lines stay (to measure after a warm-up). */
  resetCounters(): void {
    this.kindCounters.fill(0);
    this.ownerCounters.fill(0);
    this.hits = 0;
    this.misses = 0;
    this.writeBacks = 0;
    this.registrations = 0;
    this.deregistrations = 0;
  }

  // ---- internals ----

  /** The line holding the key (a and b as int32), or NONE. */
  private find(h: number, kind: number, a: number, b: number): number {
    const slots = this.slots;
    const rec = this.rec;
    const mask = this.slotMask;
    for (let slot = h & mask; ; slot = (slot + 1) & mask) {
      const line = slots[slot]!;
      if (line === EMPTY_SLOT) return NONE;
      const at = line << SHIFT;
      if (rec[at + F_A] === a && rec[at + F_B] === b && rec[at + F_KIND] === kind) return line;
    }
  }

  /** Takes the LRU line of the key's set for a new entry; the caller counts the miss or insert. */
  private fill(kind: number, a: number, b: number, h: number, owner: number, dirty: boolean): number {
    const setCount = this.setCountOfKind[kind]!;
    if (setCount === 0) {
      this.lastLine = NONE;
      return BYPASSED;
    }
    const rec = this.rec;
    const line = this.tail[this.setFor(kind, h, setCount)]!;
    const at = line << SHIFT;
    let result = 0;
    const victimKind = rec[at + F_KIND]!;
    if (victimKind !== EMPTY) {
      result = EVICTED;
      this.kindCounters[victimKind * KIND_FIELDS + K_EVICTIONS]! += 1;
      const victimOwner = rec[at + F_OWNER]!;
      if (victimOwner !== owner && victimOwner >= 0) this.ownerCounters[victimOwner * OWNER_FIELDS + O_LINES_LOST]! += 1;
      if (rec[at + F_DIRTY] === 1) {
        result |= WROTE_BACK;
        this.writeBacks++;
        this.kindCounters[victimKind * KIND_FIELDS + K_WRITEBACKS]! += 1;
        this.kindCounters[kind * KIND_FIELDS + K_WRITEBACKS_PAID]! += 1;
        this.ownerCounters[owner * OWNER_FIELDS + O_WRITEBACKS]! += 1;
      }
      this.unhash(line);
      this.unlinkKind(line, victimKind);
    }
    this.linkKind(line, kind);
    rec[at + F_KIND] = kind;
    rec[at + F_A] = a;
    rec[at + F_B] = b;
    rec[at + F_HASH] = h;
    rec[at + F_DIRTY] = dirty ? 1 : 0;
    rec[at + F_OWNER] = owner;
    const slots = this.slots;
    const mask = this.slotMask;
    let slot = h & mask;
    while (slots[slot] !== EMPTY_SLOT) slot = (slot + 1) & mask;
    slots[slot] = line;
    rec[at + F_SLOT] = slot;
    this.touch(line);
    this.lastLine = line;
    return result;
  }

  private drop(line: number): void {
    const rec = this.rec;
    const at = line << SHIFT;
    const kind = rec[at + F_KIND]!;
    this.kindCounters[kind * KIND_FIELDS + K_INVALIDATIONS]! += 1;
    const owner = rec[at + F_OWNER]!;
    if (owner >= 0) this.ownerCounters[owner * OWNER_FIELDS + O_LINES_DROPPED]! += 1;
    this.unhash(line);
    this.unlinkKind(line, kind);
    rec[at + F_KIND] = EMPTY;
    rec[at + F_DIRTY] = 0;
    rec[at + F_OWNER] = NONE;
    const set = rec[at + F_SET]!;
    this.unlink(line, set);
    this.pushTail(line, set);
  }

  /**
   * Drops the first `count` lines of scratch in descending line order, so the lowest freed line
   * ends at the LRU end and is refilled first (the order a scan of the lines would give).
   */
  private dropCollected(count: number): number {
    const collected = this.scratch.subarray(0, count).sort();
    for (let index = count - 1; index >= 0; index--) this.drop(collected[index]!);
    return count;
  }

  private linkKind(line: number, kind: number): void {
    const rec = this.rec;
    const first = this.kindHead[kind]!;
    rec[(line << SHIFT) + F_KIND_PREV] = NONE;
    rec[(line << SHIFT) + F_KIND_NEXT] = first;
    if (first !== NONE) rec[(first << SHIFT) + F_KIND_PREV] = line;
    this.kindHead[kind] = line;
  }

  private unlinkKind(line: number, kind: number): void {
    const rec = this.rec;
    const before = rec[(line << SHIFT) + F_KIND_PREV]!;
    const after = rec[(line << SHIFT) + F_KIND_NEXT]!;
    if (before !== NONE) rec[(before << SHIFT) + F_KIND_NEXT] = after;
    else this.kindHead[kind] = after;
    if (after !== NONE) rec[(after << SHIFT) + F_KIND_PREV] = before;
  }

  private setFor(kind: number, h: number, setCount: number): number {
    const base = this.setBaseOfKind[kind]!;
    // Rotated so the set index does not reuse the low bits that pick the hash slot; masked to 31
    // bits so the modulo stays an integer operation.
    return setCount === 1 ? base : base + ((((h >>> 11) | (h << 21)) & 0x7fffffff) % setCount);
  }

  /** Removes the line's key from the table, shifting later probes back so no tombstone is needed. */
  private unhash(line: number): void {
    const slots = this.slots;
    const rec = this.rec;
    const mask = this.slotMask;
    let hole = rec[(line << SHIFT) + F_SLOT]!;
    for (let probe = (hole + 1) & mask; ; probe = (probe + 1) & mask) {
      const moving = slots[probe]!;
      if (moving === EMPTY_SLOT) break;
      const home = rec[(moving << SHIFT) + F_HASH]! & mask;
      // The entry may fill the hole unless its home lies cyclically in (hole, probe].
      const stays = hole <= probe ? home > hole && home <= probe : home > hole || home <= probe;
      if (!stays) {
        slots[hole] = moving;
        rec[(moving << SHIFT) + F_SLOT] = hole;
        hole = probe;
      }
    }
    slots[hole] = EMPTY_SLOT;
  }

  private touch(line: number): void {
    const set = this.rec[(line << SHIFT) + F_SET]!;
    if (this.head[set] === line) return;
    this.unlink(line, set);
    this.pushHead(line, set);
  }

  private unlink(line: number, set: number): void {
    const rec = this.rec;
    const before = rec[(line << SHIFT) + F_PREV]!;
    const after = rec[(line << SHIFT) + F_NEXT]!;
    if (before !== NONE) rec[(before << SHIFT) + F_NEXT] = after;
    else this.head[set] = after;
    if (after !== NONE) rec[(after << SHIFT) + F_PREV] = before;
    else this.tail[set] = before;
  }

  private pushHead(line: number, set: number): void {
    const rec = this.rec;
    const first = this.head[set]!;
    rec[(line << SHIFT) + F_PREV] = NONE;
    rec[(line << SHIFT) + F_NEXT] = first;
    if (first !== NONE) rec[(first << SHIFT) + F_PREV] = line;
    else this.tail[set] = line;
    this.head[set] = line;
  }

  private pushTail(line: number, set: number): void {
    const rec = this.rec;
    const last = this.tail[set]!;
    rec[(line << SHIFT) + F_NEXT] = NONE;
    rec[(line << SHIFT) + F_PREV] = last;
    if (last !== NONE) rec[(last << SHIFT) + F_NEXT] = line;
    else this.head[set] = line;
    this.tail[set] = line;
  }

  private growOwners(owner: number): void {
    if (!Number.isInteger(owner) || owner < 0) throw new UsageError(`owner must be a non-negative integer index (got ${owner})`);
    let capacity = this.ownerCapacity;
    while (capacity <= owner) capacity *= 2;
    const grown = new Float64Array(capacity * OWNER_FIELDS);
    grown.set(this.ownerCounters);
    this.ownerCounters = grown;
    this.ownerCapacity = capacity;
  }
}
