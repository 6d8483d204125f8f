// The KBTP initiator library: a session with a target over kbtp's software RNIC.
//
//   const session = await connect('127.0.0.1:7117', { tenant: 'default' });
//   await session.allocStore(42n, bytes, { seal: true });
//   const { data } = await session.load(42n);
//   await session.free(42n);
//   await session.close();
//
// Requests are pipelined up to the credits the target grants; buffers are registered once per
// session and reused. Every failure is a KbtpError (./errors.ts): KbtpStatusError carries the
// KBTP status the target answered, TransportError a lost connection; every call takes
// { signal, timeoutMs } and none waits longer than its timeout.
//
// This file is the door: connect() and connectChannel() open a KbtpSession (session.ts); the
// calls' time limits are in call.ts, the one-sided paths in direct.ts, batches in batch.ts.
import { createRnic, RnicError, RcQueuePair, type AnyQueuePair, type ConnectionSummary, type StreamChannel } from '../rnic/verbs.ts';
import { DEFAULT_PORT, parseHostPort } from './address.ts';
import { UsageError } from './errors.ts';
import { bounded, checkTimeout, DEFAULT_CALL_TIMEOUT_MS, DEFAULT_CONNECT_TIMEOUT_MS } from './call.ts';
import { KbtpSession } from './session.ts';
import type { ConnectOptions } from './session-types.ts';

export { KbtpSession } from './session.ts';
export type { CallOptions } from './call.ts';
export type { CallDone } from './slot-call.ts';
export type { ConnectOptions, BlockInfo, LoadResult, LoadOptions, StoreOptions } from './session-types.ts';
export type { TableEntry } from '../engine/table-entry.ts';
export { directLoadConsistent } from './direct.ts';
export { TargetRefusedError } from './errors.ts';

/** A target address that cannot be parsed: the caller's mistake, not the network's. */
export class TargetAddressError extends UsageError {}

/** "host:port", "kbtp://host:port" or "host" (default port 7117). */
export function parseTarget(target: string): { host: string; port: number } {
  const address = parseHostPort(target, { defaultPort: DEFAULT_PORT });
  if (address === undefined) throw new TargetAddressError(`"${target}" is not a target address; use host:port, e.g. 127.0.0.1:${DEFAULT_PORT}`);
  return address;
}

export async function connect(target: string, options: ConnectOptions = {}): Promise<KbtpSession> {
  const { host, port } = parseTarget(target);
  const timeoutMs = checkTimeout(options.timeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS, 'timeoutMs');
  checkTimeout(options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS, 'callTimeoutMs');
  const rnic = createRnic({ name: 'initiator' });
  const session = new KbtpSession(rnic, options);
  try {
    // The caller's deadline (bounded) ends first; the RNIC's own setup timer is a backstop.
    const setupMs = timeoutMs + 1000;
    await bounded(`connecting to ${host}:${port}`, { timeoutMs, ...(options.signal !== undefined ? { signal: options.signal } : {}) }, () =>
      session.open(
        (qp) =>
          qp instanceof RcQueuePair
            ? rnic.connectRc(qp, { host, port, timeoutMs: setupMs })
            : rnic.connect(qp, {
                host,
                port,
                crc: options.crc ?? false,
                timeoutMs: setupMs,
                ...(options.loopbackCongestionControl !== undefined ? { loopbackCongestionControl: options.loopbackCongestionControl } : {}),
              }),
        `${host}:${port}`,
        options,
      ),
    );
  } catch (error) {
    await session.abandon();
    throw error;
  }
  return session;
}

/** A session over a stream that is already connected (an in-process LinkedChannel, a test's socket). */
export async function connectChannel(channel: StreamChannel, options: ConnectOptions = {}): Promise<KbtpSession> {
  const timeoutMs = checkTimeout(options.timeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS, 'timeoutMs');
  checkTimeout(options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS, 'callTimeoutMs');
  const rnic = createRnic({ name: 'initiator' });
  const session = new KbtpSession(rnic, options);
  try {
    const establish = (qp: AnyQueuePair): Promise<ConnectionSummary> =>
      qp instanceof RcQueuePair
        ? Promise.reject(new RnicError('EINVAL', 'a stream channel carries the iWARP binding only'))
        : rnic.connectChannel(qp, channel, { crc: options.crc ?? false, timeoutMs: timeoutMs + 1000 });
    await bounded('connecting over the given channel', { timeoutMs, ...(options.signal !== undefined ? { signal: options.signal } : {}) }, () =>
      session.open(establish, 'the target', options),
    );
  } catch (error) {
    await session.abandon();
    throw error;
  }
  return session;
}
