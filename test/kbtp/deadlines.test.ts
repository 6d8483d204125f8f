// Call deadlines swept by one timer per session (host/kbtp/deadlines.ts): a call past its deadline
// fails with KBTP_TIMEOUT as it did with a timer of its own, a caller's abort still ends it, and
// closing a session leaves no timer behind. The target is made silent by dropping everything the
// initiator sends once the session is open, so requests are never answered (no timing assertion:
// only that the calls end, and how).
import { createHook } from 'node:async_hooks';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Deadlines, type DeadlineEntry } from '../../host/kbtp/deadlines.ts';
import type { LinkedChannel } from '../../host/rnic/linked-channel.ts';
import type { ChannelEvents, StreamChannel, StreamConsumer } from '../../host/rnic/channel.ts';
import type { WriteDone } from '../../host/rnic/transmit.ts';
import { openInProcessSession } from './in-process-session.ts';
import { failure } from '../support/failure.ts';
import { KbtpError } from '../../host/kbtp/errors.ts';

/** The initiator's end of the stream, with a switch that drops every write (completing it) from then on. */
class Muted implements StreamChannel {
  muted = false;
  constructor(private readonly inner: LinkedChannel) {}
  write(chunks: readonly Uint8Array[], count: number, done: WriteDone | undefined): void {
    if (!this.muted) this.inner.write(chunks, count, done);
    else if (done !== undefined) queueMicrotask(() => done());
  }
  get pendingBytes(): number {
    return this.inner.pendingBytes;
  }
  setConsumer(consumer: StreamConsumer): void {
    this.inner.setConsumer(consumer);
  }
  setEvents(events: ChannelEvents): void {
    this.inner.setEvents(events);
  }
  end(): void {
    this.inner.end();
  }
  destroy(): void {
    this.inner.destroy();
  }
  get closed(): boolean {
    return this.inner.closed;
  }
  get remoteAddress(): string | undefined {
    return this.inner.remoteAddress;
  }
  get remotePort(): number | undefined {
    return this.inner.remotePort;
  }
  get localAddress(): string | undefined {
    return this.inner.localAddress;
  }
  get localPort(): number | undefined {
    return this.inner.localPort;
  }
}

async function silentTarget(credits: number) {
  let muted: Muted | undefined;
  const opened = await openInProcessSession(512, 16, credits, (channel) => {
    muted = new Muted(channel);
    return muted;
  });
  // Something to load and store, then silence.
  await opened.session.allocStore(1n, new Uint8Array(512).fill(1));
  muted!.muted = true;
  return opened;
}

/**
 * The timers created from now on that are still alive. Only these: make test runs every test file
 * in one process, so a count of all the process's timers also sees other files' timers come and go.
 */
function trackTimers(): { alive(): number; stop(): void } {
  const alive = new Set<number>();
  const hook = createHook({
    init(asyncId, type) {
      if (type === 'Timeout') alive.add(asyncId);
    },
    destroy(asyncId) {
      alive.delete(asyncId);
    },
  }).enable();
  return { alive: () => alive.size, stop: () => hook.disable() };
}

test('a call past its deadline fails with KBTP_TIMEOUT naming the call: on the wire, waiting for a slot, and a batch', async () => {
  const { session, target } = await silentTarget(2);
  try {
    assert.is(session.depth, 2);
    const onWire = failure(session.load(1n, { timeoutMs: 40, allowUnsealed: true }));
    const alsoOnWire = failure(session.store(1n, new Uint8Array(8), { timeoutMs: 60_000 }));
    // Both slots are taken by requests nobody answers: these wait for a slot until their deadline.
    const waiting = failure(session.free(1n, { timeoutMs: 30 }));
    const batch = failure(session.loadMany([1n], [new Uint8Array(512)], { allowUnsealed: true, timeoutMs: 50 }));
    const callback = new Promise<Error | undefined>((resolve) => session.loadInto(1n, new Uint8Array(512), resolve, { allowUnsealed: true, timeoutMs: 35 }));
    const wire = await onWire;
    assert.is(wire.code, 'KBTP_TIMEOUT');
    assert.is(wire.message, 'LOAD of handle 1: no answer within 40 ms');
    const slot = await waiting;
    assert.is(slot.code, 'KBTP_TIMEOUT');
    assert.is(slot.message, 'FREE of handle 1: no answer within 30 ms');
    const batched = await batch;
    assert.is(batched.code, 'KBTP_TIMEOUT');
    assert.is(batched.message, 'LOAD of a batch of 1: no answer within 50 ms');
    const viaCallback = await callback;
    assert.instance(viaCallback, KbtpError);
    assert.is((viaCallback as KbtpError).code, 'KBTP_TIMEOUT');
    assert.is(viaCallback?.message, 'LOAD of handle 1: no answer within 35 ms');
    // The 60-second call still waits; closing ends it.
    await session.close(50);
    assert.is((await alsoOnWire).code, 'KBTP_CLOSED');
  } finally {
    await session.close(50);
    await target.stop();
  }
});

test("a caller's abort ends a call on the wire or waiting for a slot with KBTP_ABORTED and the caller's reason", async () => {
  const { session, target } = await silentTarget(1);
  try {
    const first = new AbortController();
    const second = new AbortController();
    const onWire = failure(session.load(1n, { signal: first.signal, allowUnsealed: true }));
    const waiting = failure(session.store(1n, new Uint8Array(8), { signal: second.signal }));
    const reason = new Error('the user moved on');
    second.abort(reason);
    first.abort(reason);
    const a = await onWire;
    const b = await waiting;
    assert.is(a.code, 'KBTP_ABORTED');
    assert.is(a.message, 'LOAD of handle 1: aborted');
    assert.is(a.cause, reason);
    assert.is(b.code, 'KBTP_ABORTED');
    assert.is(b.message, 'STORE of handle 1: aborted');
  } finally {
    await session.close(50);
    await target.stop();
  }
});

test('a pending call holds a timer; after close none is left behind', async () => {
  const timers = trackTimers();
  try {
    const { session, target } = await silentTarget(2);
    const pending = failure(session.load(1n, { timeoutMs: 60_000, allowUnsealed: true }));
    assert.ok(timers.alive() > 0, 'a call waiting for its answer keeps a timer (and the process) alive');
    await session.close(50);
    assert.is((await pending).code, 'KBTP_CLOSED');
    await target.stop();
    // Destroy hooks of cleared timers run after the call that cleared them.
    await new Promise((resolve) => setImmediate(resolve));
    assert.is(timers.alive(), 0, 'no timer left after close');
  } finally {
    timers.stop();
  }
});

test('Deadlines: expires what passed its deadline, not what left, and disarms on close', async () => {
  const deadlines = new Deadlines();
  const expired: string[] = [];
  const entry = (name: string, inMs: number): DeadlineEntry => ({
    deadline: performance.now() + inMs,
    expired: () => expired.push(name),
    previousDeadline: undefined,
    nextDeadline: undefined,
    inDeadlines: false,
  });
  const late = entry('late', 60);
  const early = entry('early', 10);
  const gone = entry('gone', 5);
  deadlines.add(late);
  deadlines.add(early);
  deadlines.add(gone);
  deadlines.remove(gone);
  assert.is(deadlines.size, 2);
  while (expired.length < 2) await new Promise((resolve) => setTimeout(resolve, 5));
  assert.equal(expired, ['early', 'late']);
  assert.is(deadlines.size, 0);
  const never = entry('never', 60_000);
  deadlines.add(never);
  assert.ok(deadlines.armed);
  deadlines.close();
  assert.not.ok(deadlines.armed);
  assert.not.ok(never.inDeadlines);
  deadlines.add(entry('after close', 1));
  assert.is(deadlines.size, 0, 'a closed session registers nothing');
});

test.run();
