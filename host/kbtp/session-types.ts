// What a session is opened with and what its calls take and give back (the public types of the
// client library; the calls themselves are in session.ts).
import type { CallOptions } from './call.ts';

export interface ConnectOptions {
  tenant?: string;
  secret?: string;
  /** Capabilities to ask for (CAP_DIRECT_LOAD, CAP_DIRECT_ALLOC); granted ones are in `hello`. */
  capabilities?: number;
  /** Most requests in flight, further capped by the target's credits (default 32). */
  pipeline?: number;
  /** Ask for MPA CRC (default false: like siw, loopback does not need it). */
  crc?: boolean;
  /**
   * The RDMA binding the target serves: 'iwarp' (RDMAP over TCP, default) or 'roce' (IB RC over
   * RoCEv2, draft 9.2: unmasked ring counters). Must match the target's --transport.
   */
  transport?: 'iwarp' | 'roce';
  /** Time limit for connecting and the HELLO exchange (default 10 s). */
  timeoutMs?: number;
  /** Aborts connecting. */
  signal?: AbortSignal;
  /** Default time limit of each call on the session (default 30 s). */
  callTimeoutMs?: number;
  /**
   * iWARP to a target on this machine's loopback: the connection's TCP congestion control
   * (default null: the host's). BBR, many hosts' default, paces a loopback connection from a
   * timer whose segments the two CPUs then deliver out of order, and the sender retransmits what
   * was never lost: 'reno' doubled the 256 KiB and 1 MiB STORE rows with 8 in flight, and halved
   * the 256 KiB STORE row of 16 sessions x 1 (docs/BENCH.md, session 13).
   * `session.congestionControl` says what the connection got.
   */
  loopbackCongestionControl?: string | null;
}

export interface BlockInfo {
  generation: number;
  dataLength: number;
  blockOffset: bigint;
}

export interface LoadResult extends BlockInfo {
  data: Uint8Array;
}

export interface LoadOptions extends CallOptions {
  /** Expected generation; 0 (default) means any. */
  generation?: number;
  /** Load a bound block that is not sealed yet. */
  allowUnsealed?: boolean;
  /** Copy the block into this buffer instead of a fresh one. */
  into?: Uint8Array;
}

export interface StoreOptions extends CallOptions {
  /** Seal the block: from then on it can be loaded, not stored to. */
  seal?: boolean;
  /** Expected generation; 0 (default) means any. */
  generation?: number;
}
