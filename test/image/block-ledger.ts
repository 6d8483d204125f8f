// What a host knows about the blocks it stored on a node with a durable tier, and the check that
// a node lost none of them: after a clean reboot or a power loss, every acknowledged sealed block
// loads byte-exact with its Generation and every acknowledged FREE stays freed (kbtp-v1 section 12).
// A request that was in flight when the power went may have happened or not: either outcome passes,
// nothing else does.
import { KbtpStatusError } from '../../host/kbtp/errors.ts';
import type { KbtpSession } from '../../host/kbtp/initiator.ts';

interface BlockState {
  readonly sealed: boolean;
  readonly data?: Buffer;
  /** undefined while a request is in flight: its Generation was never shown. */
  readonly generation?: number;
}

interface Entry {
  acknowledged: BlockState;
  inFlight?: BlockState;
}

export interface LedgerCheck {
  /** Handles found sealed (byte-exact) and freed or never stored, as acknowledged. */
  sealed: number;
  notValid: number;
  /** Requests in flight at the loss that turned out to have happened. */
  inFlightApplied: number;
}

export class BlockLedger {
  private readonly entries = new Map<bigint, Entry>();

  /** Handles whose last acknowledged request left them sealed. */
  get sealedHandles(): bigint[] {
    return [...this.entries].filter(([, entry]) => entry.acknowledged.sealed).map(([handle]) => handle);
  }

  /** Stores `data` sealed at a handle that is not VALID; the ledger follows the request. */
  async store(session: KbtpSession, handle: bigint, data: Buffer): Promise<void> {
    const entry = this.entry(handle);
    entry.inFlight = { sealed: true, data };
    const info = await session.allocStore(handle, data, { seal: true });
    entry.acknowledged = { sealed: true, data, generation: info.generation };
    delete entry.inFlight;
  }

  async free(session: KbtpSession, handle: bigint): Promise<void> {
    const entry = this.entry(handle);
    entry.inFlight = { sealed: false };
    const info = await session.free(handle);
    entry.acknowledged = { sealed: false, generation: info.generation };
    delete entry.inFlight;
  }

  isSealed(handle: bigint): boolean {
    return this.entry(handle).acknowledged.sealed;
  }

  /** Loads every handle the ledger knows and compares; throws naming the first handle that differs. */
  async check(session: KbtpSession): Promise<LedgerCheck> {
    const result: LedgerCheck = { sealed: 0, notValid: 0, inFlightApplied: 0 };
    for (const [handle, entry] of this.entries) {
      const found = await loadState(session, handle);
      if (entry.inFlight !== undefined && matches(entry.inFlight, found)) {
        entry.acknowledged = found.sealed ? { ...entry.inFlight, generation: found.generation } : { sealed: false, generation: found.generation };
        result.inFlightApplied += 1;
      } else if (matches(entry.acknowledged, found)) {
        if (!found.sealed) entry.acknowledged = { sealed: false, generation: found.generation };
      } else {
        throw new Error(
          `handle ${handle}: expected ${describe(entry.acknowledged)}${entry.inFlight === undefined ? '' : ` (or, from the request in flight, ${describe(entry.inFlight)})`}, found ${describe(found)}`,
        );
      }
      delete entry.inFlight;
      if (found.sealed) result.sealed += 1;
      else result.notValid += 1;
    }
    return result;
  }

  private entry(handle: bigint): Entry {
    let entry = this.entries.get(handle);
    if (entry === undefined) {
      entry = { acknowledged: { sealed: false } };
      this.entries.set(handle, entry);
    }
    return entry;
  }
}

async function loadState(session: KbtpSession, handle: bigint): Promise<BlockState> {
  try {
    const loaded = await session.load(handle);
    return { sealed: true, data: Buffer.from(loaded.data), generation: loaded.generation };
  } catch (error) {
    if (error instanceof KbtpStatusError && error.statusName === 'NOT_VALID') return { sealed: false, generation: error.completion?.generation };
    throw error;
  }
}

function matches(expected: BlockState, found: BlockState): boolean {
  if (!expected.sealed) return !found.sealed;
  return (
    found.sealed &&
    (expected.generation === undefined || expected.generation === found.generation) &&
    expected.data !== undefined &&
    found.data !== undefined &&
    expected.data.equals(found.data)
  );
}

function describe(state: BlockState): string {
  if (!state.sealed) return 'not VALID';
  return `sealed, ${state.data?.length ?? 0} octets${state.generation === undefined ? '' : `, Generation ${state.generation}`}`;
}
