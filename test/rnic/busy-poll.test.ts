// The bounded busy poll (host/rnic/busy-poll.ts, issue 16): off by default; when a budget is set, a
// socket write or read keeps the event loop polling for that long and no longer, and the bytes
// still arrive whole. Its latency and CPU figures live in docs/BENCH.md, not here.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import net from 'node:net';
import { SocketChannel } from '../../host/rnic/channel.ts';
import { busyPoll, parseBusyPollUs, MAX_BUSY_POLL_US } from '../../host/rnic/busy-poll.ts';
import type { StreamConsumer } from '../../host/rnic/channel.ts';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function connectPair(): Promise<{ channel: SocketChannel; server: net.Server; remote: net.Socket }> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const accepted = new Promise<net.Socket>((resolve) => server.once('connection', resolve));
  const channel = await SocketChannel.connect('127.0.0.1', (server.address() as net.AddressInfo).port, 10_000);
  return { channel, server, remote: await accepted };
}

/** Collects what the channel reads. */
class Collector implements StreamConsumer {
  readonly buffer = new Uint8Array(1 << 16);
  length = 0;
  readBuffer(): Uint8Array {
    return this.buffer.subarray(this.length);
  }
  commit(length: number): void {
    this.length += length;
  }
}

test('the budget is read as whole microseconds from 0 to the maximum', () => {
  assert.is(parseBusyPollUs(undefined), 0);
  assert.is(parseBusyPollUs(''), 0);
  assert.is(parseBusyPollUs('0'), 0);
  assert.is(parseBusyPollUs(' 50 '), 50);
  assert.is(parseBusyPollUs(String(MAX_BUSY_POLL_US)), MAX_BUSY_POLL_US);
  for (const bad of ['-1', '1.5', '50us', 'abc', String(MAX_BUSY_POLL_US + 1)]) assert.is(parseBusyPollUs(bad), undefined, bad);
  assert.throws(() => busyPoll.configure(-1), /from 0 to/);
  assert.throws(() => busyPoll.configure(MAX_BUSY_POLL_US + 1), /from 0 to/);
});

test('off by default: a write and a read leave the loop free to sleep', async () => {
  assert.is(busyPoll.budgetUs, 0, 'KBTP_BUSY_POLL_US is not set in the tests');
  const { channel, server, remote } = await connectPair();
  try {
    const collector = new Collector();
    channel.setConsumer(collector);
    channel.write([new Uint8Array(100)], 1, undefined);
    await sleep(1);
    assert.is(busyPoll.polling, false);
    remote.write(new Uint8Array(10));
    while (collector.length < 10) await sleep(1);
    assert.is(busyPoll.polling, false);
  } finally {
    channel.destroy();
    remote.destroy();
    server.close();
  }
});

test('with a budget: a write and a read keep the loop polling, for the budget and no longer', async () => {
  const { channel, server, remote } = await connectPair();
  busyPoll.configure(10_000);
  try {
    const collector = new Collector();
    channel.setConsumer(collector);
    const received: Buffer[] = [];
    remote.on('data', (chunk: Buffer) => received.push(chunk));
    const sent = Uint8Array.from({ length: 3000 }, (_, i) => i & 0xff);
    channel.write([sent], 1, undefined);
    await new Promise((resolve) => setImmediate(resolve));
    assert.ok(busyPoll.polling, 'polling after the write');
    // The loop stops polling once the budget has passed without a read or write.
    const start = performance.now();
    while (busyPoll.polling && performance.now() - start < 2000) await sleep(5);
    const polledMs = performance.now() - start;
    assert.is(busyPoll.polling, false);
    assert.ok(polledMs >= 5 && polledMs < 1000, `polled for ${polledMs.toFixed(1)} ms with a 10 ms budget`);
    assert.equal(new Uint8Array(Buffer.concat(received)), sent);
    // A read starts it again, and the bytes reach the consumer as without polling.
    remote.write(Uint8Array.from({ length: 5000 }, (_, i) => (i * 7) & 0xff));
    while (collector.length < 5000) await sleep(1);
    assert.ok(busyPoll.polling, 'polling after the read');
    assert.equal(
      collector.buffer.subarray(0, 5000),
      Uint8Array.from({ length: 5000 }, (_, i) => (i * 7) & 0xff),
    );
  } finally {
    busyPoll.configure(0);
    channel.destroy();
    remote.destroy();
    server.close();
  }
  await sleep(60);
  assert.is(busyPoll.polling, false);
});

test('reads that keep arriving just after the poll gives up make it back off; reads caught while polling do not', async () => {
  busyPoll.configure(300);
  try {
    const waitIdle = async (): Promise<void> => {
      while (busyPoll.polling) await new Promise((resolve) => setImmediate(resolve));
    };
    // Every read lands while the loop still polls: the poll is where it should be.
    for (let i = 0; i < 40; i++) {
      busyPoll.activity();
      busyPoll.received();
    }
    await waitIdle();
    assert.is(busyPoll.suspended, false);
    // Every read lands right after the budget ran out, as when the peer waits for this thread's CPU.
    for (let i = 0; i < 40; i++) {
      await waitIdle();
      busyPoll.received();
    }
    assert.is(busyPoll.suspended, true);
    await waitIdle();
    busyPoll.activity();
    assert.is(busyPoll.polling, false, 'backed off: no polling');
    assert.ok(busyPoll.suspendedForMs > 500 && busyPoll.suspendedForMs <= 1000, `first back-off ${busyPoll.suspendedForMs} ms`);
    // Lost again right after: the back-off doubles.
    while (busyPoll.suspended) await sleep(20);
    for (let i = 0; i < 40; i++) {
      await waitIdle();
      busyPoll.received();
    }
    assert.ok(busyPoll.suspendedForMs > 1500 && busyPoll.suspendedForMs <= 2000, `second back-off ${busyPoll.suspendedForMs} ms`);
    // configure() forgets the back-off (and its doubling).
    busyPoll.configure(300);
    assert.is(busyPoll.suspended, false);
  } finally {
    busyPoll.configure(0);
  }
  assert.is(busyPoll.suspended, false);
});

test.run();
