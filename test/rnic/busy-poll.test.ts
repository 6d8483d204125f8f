// The bounded busy poll (host/rnic/busy-poll.ts, issue 16): unset, off where the kernel has a
// cpuidle driver and NO_IDLE_DRIVER_BUDGET_US where it has none. With a budget, a turn that wrote
// to a channel ends with a synchronous spin on this thread's channel descriptors that returns
// when one has bytes or when the budget is spent, allocating nothing; the bytes then arrive whole.
// Its latency and CPU figures live in docs/BENCH.md, not here.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawn, type ChildProcess } from 'node:child_process';
import { SocketChannel } from '../../host/rnic/channel.ts';
import {
  busyPoll,
  defaultBusyPollUs,
  FIRST_BACK_OFF_MS,
  parseBusyPollUs,
  MAX_BUSY_POLL_US,
  NO_IDLE_DRIVER_BUDGET_US,
  DIRECT_READS_IN_ROW,
} from '../../host/rnic/busy-poll.ts';
import { cpuIdleDriver } from '../../host/util/cpu-latency.ts';
import type { StreamConsumer } from '../../host/rnic/channel.ts';
import { sampleRuns } from '../support/heap.ts';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A peer in a process of its own (a peer in this thread could not answer while the thread spins):
 * every octet it receives, of value N from 1 to 125, comes back N milliseconds after it was read;
 * one of 128 or more comes back at once; a 0 gets no answer; 126 ends the connection (FIN) and
 * 127 resets it (RST).
 */
const ECHO = `
const net = require('node:net');
const server = net.createServer((socket) => {
  socket.setNoDelay(true);
  socket.on('data', (data) => {
    for (const octet of data) {
      if (octet === 0) continue;
      if (octet === 126) return void socket.end();
      if (octet === 127) return void socket.resetAndDestroy();
      if (octet >= 128) {
        socket.write(Uint8Array.of(octet));
        continue;
      }
      // A wait by the clock: a timer of Node's came back early at times (its loop clock lags).
      const until = process.hrtime.bigint() + BigInt(octet) * 1000000n;
      while (process.hrtime.bigint() < until);
      socket.write(Uint8Array.of(octet));
    }
  });
});
server.listen(0, '127.0.0.1', () => process.stdout.write(server.address().port + '\\n'));
`;

interface Peer {
  channel: SocketChannel;
  collector: Collector;
  child: ChildProcess;
}

async function openPeer(): Promise<Peer> {
  const child = spawn(process.execPath, ['-e', ECHO], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<number>((resolve, reject) => {
    child.once('error', reject);
    child.stdout!.once('data', (data: Buffer) => resolve(Number(data.toString().trim())));
  });
  let channel: SocketChannel;
  try {
    channel = await SocketChannel.connect('127.0.0.1', port, 10_000);
  } catch (error) {
    child.kill();
    throw error;
  }
  const collector = new Collector();
  channel.setConsumer(collector);
  return { channel, collector, child };
}

function closePeer(peer: Peer): void {
  peer.channel.destroy();
  peer.child.kill();
}

/** Runs `body` with a peer and this thread's budget set to `budgetUs`; the budget is restored after. */
async function withPeer(budgetUs: number, body: (peer: Peer) => Promise<void>): Promise<void> {
  const budget = busyPoll.budgetUs;
  const peer = await openPeer();
  busyPoll.configure(budgetUs);
  try {
    await body(peer);
  } finally {
    busyPoll.configure(budget);
    closePeer(peer);
  }
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

/** Writes one octet; the turn that writes it ends (in a microtask) with the spin, if any. */
async function send(peer: Peer, octet: number): Promise<void> {
  peer.channel.write([Uint8Array.of(octet)], 1, undefined);
  await Promise.resolve();
  await Promise.resolve();
}

async function received(peer: Peer, length: number): Promise<void> {
  const start = performance.now();
  while (peer.collector.length < length) {
    if (performance.now() - start > 5000) throw new Error(`${peer.collector.length} of ${length} octets after 5 s`);
    await sleep(1);
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

test('unset, the budget follows the kernel: a poll only where it has no cpuidle driver', () => {
  assert.is(defaultBusyPollUs('none'), NO_IDLE_DRIVER_BUDGET_US);
  assert.ok(NO_IDLE_DRIVER_BUDGET_US > 0);
  for (const driver of ['haltpoll', 'intel_idle', 'acpi_idle', undefined]) assert.is(defaultBusyPollUs(driver), 0, String(driver));
  // This thread's budget, the environment variable being unset in the tests, is the machine's default.
  assert.is(process.env.KBTP_BUSY_POLL_US, undefined, 'KBTP_BUSY_POLL_US is not set in the tests');
  assert.is(busyPoll.budgetUs, defaultBusyPollUs(cpuIdleDriver()));
});

test('off: a write and a read leave the loop free to sleep (no spin)', () =>
  withPeer(0, async (peer) => {
    const before = busyPoll.counts.spins;
    await send(peer, 2);
    await received(peer, 1);
    assert.is(busyPoll.counts.spins, before);
    assert.is(peer.collector.buffer[0], 2);
  }));

test('a spin returns when a descriptor becomes readable, then the bytes arrive as usual', () =>
  withPeer(MAX_BUSY_POLL_US, async (peer) => {
    let found = 0;
    for (let round = 1; round <= 5; round++) {
      busyPoll.configure(MAX_BUSY_POLL_US); // forgets any skipping (a spin after the last answer's read may have looked ready)
      const before = busyPoll.counts;
      const start = performance.now();
      await send(peer, 2); // answered after 2 ms, within the 10 ms budget
      const spun = performance.now() - start;
      const spin = busyPoll.lastSpin;
      assert.is(busyPoll.counts.spins, before.spins + 1, 'the turn that wrote spun');
      assert.ok(spun >= spin.ms, 'the spin held the thread');
      // The peer, a process of its own, may not get a CPU in time on a loaded machine: then the spin gives up.
      // (An answer has also been seen ready at the first look, or found sooner than the peer's 2 ms
      // wait, now and then on the loaded test machine of session 17: not understood, so not asserted.)
      if (spin.outcome === 'found') {
        found++;
        assert.ok(spin.ms > 0 && spin.ms < MAX_BUSY_POLL_US / 1000, `found after ${spin.ms.toFixed(2)} ms`);
      } else if (spin.outcome === 'gave-up') {
        assert.ok(spin.ms >= MAX_BUSY_POLL_US / 1000, `gave up after ${spin.ms.toFixed(2)} ms`);
      } else {
        assert.is(spin.outcome, 'ready', `round ${round}`);
      }
      // Not read by the spin (this turn is not the channel's read callback): libuv's loop reads it, into the consumer.
      assert.is(peer.collector.length, round - 1);
      await received(peer, round);
      assert.is(peer.collector.buffer[round - 1], 2);
    }
    assert.ok(found >= 2, `${found} of 5 spins found the answer`);
  }));

test('a spin gives up once the budget is spent', () =>
  withPeer(3000, async (peer) => {
    for (let round = 0; round < 3; round++) {
      await send(peer, 0); // never answered
      const spin = busyPoll.lastSpin;
      assert.is(spin.outcome, 'gave-up');
      assert.ok(spin.ms >= 3 && spin.ms < 50, `gave up after ${spin.ms.toFixed(2)} ms with a 3 ms budget`);
    }
    // A read that raised no completion (the rest of a message to come) spins; one that did, does not:
    // its completion's handler may be a promise reaction that writes the next request after this turn.
    let spins = busyPoll.counts.spins;
    busyPoll.received(false);
    busyPoll.turnEnded(true);
    assert.is(busyPoll.counts.spins, spins, 'no spin after a turn that raised completions and wrote nothing');
    busyPoll.received(false);
    busyPoll.turnEnded(false);
    assert.is(busyPoll.counts.spins, spins + 1, 'a spin after a read that raised nothing');
    spins = busyPoll.counts.spins;
    // Nor while libuv holds a write the socket has not taken.
    busyPoll.writeQueued();
    busyPoll.activity();
    busyPoll.turnEnded(false);
    assert.is(busyPoll.counts.spins, spins, 'no spin while a write waits');
    busyPoll.writeSettled();
    busyPoll.activity();
    busyPoll.turnEnded(false);
    assert.is(busyPoll.counts.spins, spins + 1);
  }));

// A budget of 20 us: a few rounds of one epoll_wait each, on a descriptor with nothing to read.
test('a spin allocates nothing, however many rounds it looks', () =>
  withPeer(20, async () => {
    const spins = (count: number): void => {
      for (let i = 0; i < count; i++) {
        busyPoll.activity();
        busyPoll.turnEnded(false);
      }
    };
    spins(20_000); // compiled
    const before = busyPoll.counts;
    const perSpin = await sampleRuns(4000, () => spins(4000));
    const after = busyPoll.counts;
    assert.ok(after.gaveUp - before.gaveUp >= 4000, 'the spins waited, and gave up');
    assert.ok(perSpin < 1, `${perSpin.toFixed(2)} octets allocated per spin`);
  }));

test('after a write, a look that finds bytes waiting skips the next spins (1, 3, 7, ...); a spin that waits ends that', () =>
  withPeer(MAX_BUSY_POLL_US, async (peer) => {
    // An answer found by the spin stays unread until the loop runs: not before the end of this test's turn.
    // (The peer may not get a CPU within the budget on a loaded machine: then it is read, and asked again.)
    for (let tries = 1; ; tries++) {
      await send(peer, 1);
      if (busyPoll.lastSpin.outcome === 'found') break;
      assert.ok(tries < 10, 'no answer found by 10 spins');
      await received(peer, tries);
    }
    const turn = (): void => {
      busyPoll.activity();
      busyPoll.turnEnded(false);
    };
    const before = busyPoll.counts;
    turn(); // looks: ready at once
    assert.is(busyPoll.lastSpin.outcome, 'ready');
    turn(); // skipped (1)
    turn(); // looks again: ready
    turn();
    turn();
    turn(); // skipped (3)
    turn(); // looks
    const after = busyPoll.counts;
    assert.is(after.spins - before.spins, 3);
    assert.is(after.skipped - before.skipped, 4);
    // configure() forgets the skipping.
    busyPoll.configure(MAX_BUSY_POLL_US);
    turn();
    assert.is(busyPoll.counts.spins, after.spins + 1);
  }));

test('reads that keep arriving just after the poll gives up make it back off; reads a spin found do not', () =>
  withPeer(MAX_BUSY_POLL_US, async (peer) => {
    // The answers land while the spin waits (the channel's read judges each): the poll is where it should be.
    let found = 0;
    for (let i = 1; i <= 40; i++) {
      await send(peer, 1);
      if (busyPoll.lastSpin.outcome === 'found') found++;
      await received(peer, i);
    }
    // Most, on a quiet machine; on a loaded one the peer's process may miss the budget now and then.
    assert.ok(found >= 8, `${found} of 40 spins found the answer`);
    assert.is(busyPoll.suspended, false);
    // Every read lands right after the budget ran out, as when the peer waits for this thread's CPU.
    busyPoll.configure(300);
    for (let i = 0; i < 40; i++) {
      await send(peer, 0);
      busyPoll.received(false);
    }
    assert.is(busyPoll.suspended, true);
    const spins = busyPoll.counts.spins;
    await send(peer, 0);
    assert.is(busyPoll.counts.spins, spins, 'backed off: no spin');
    const first = busyPoll.suspendedForMs;
    assert.ok(first > 0 && first <= FIRST_BACK_OFF_MS, `first back-off ${first} ms`);
    // Lost again right after: the back-off doubles.
    while (busyPoll.suspended) await sleep(20);
    for (let i = 0; i < 40; i++) {
      await send(peer, 0);
      busyPoll.received(false);
    }
    // More than the first could be (a few milliseconds pass before the look): doubled.
    const second = busyPoll.suspendedForMs;
    assert.ok(second > FIRST_BACK_OFF_MS && second <= 2 * FIRST_BACK_OFF_MS, `second back-off ${second} ms`);
    // configure() forgets the back-off (and its doubling).
    busyPoll.configure(300);
    assert.is(busyPoll.suspended, false);
  }));

/**
 * Answers each octet read with the next of a cycle of 128..255 until `exchanges` have been sent:
 * its writes are made inside the channel's read callback, so their turns end with spins there.
 */
class PingPong implements StreamConsumer {
  readonly buffer = new Uint8Array(4096);
  private readonly octets = Array.from({ length: 128 }, (_, i) => [Uint8Array.of(128 + i)]);
  sent = 0;
  received = 0;
  outOfOrder = 0;
  private exchanges = 0;
  private done: (() => void) | undefined;
  constructor(private readonly channel: SocketChannel) {}
  readBuffer(): Uint8Array {
    return this.buffer;
  }
  commit(length: number): void {
    for (let i = 0; i < length; i++) {
      if (this.buffer[i] !== 128 + (this.received % 128)) this.outOfOrder++;
      this.received++;
    }
    if (this.sent < this.exchanges) this.next();
    else if (this.received === this.sent) this.done?.();
  }
  private next(): void {
    this.channel.write(this.octets[this.sent % 128]!, 1, undefined);
    this.sent++;
  }
  run(exchanges: number): Promise<void> {
    this.exchanges += exchanges;
    return new Promise((resolve) => {
      this.done = resolve;
      this.next();
    });
  }
}

test("what a spin finds inside the channel's own read callback is read there, in order, allocating nothing", () =>
  withPeer(MAX_BUSY_POLL_US, async (peer) => {
    const pingPong = new PingPong(peer.channel);
    peer.channel.setConsumer(pingPong);
    await pingPong.run(2000); // compiled
    // Where the peer's process has to wait for this thread's CPU (a loaded machine), the poll finds
    // itself in its way and backs off, and libuv reads instead: such an attempt measures Node's read
    // callback, not the poll's reads. Up to 3 attempts; one where the poll read most answers counts.
    const attempts: string[] = [];
    for (let attempt = 0; attempt < 3; attempt++) {
      busyPoll.configure(MAX_BUSY_POLL_US); // forgets a back-off
      const before = busyPoll.counts;
      const sent = pingPong.sent;
      // sampleRuns discards a run that saw a collection (NaN if all did): shorter runs then.
      let perExchange = Number.NaN;
      for (let count = 2000; Number.isNaN(perExchange) && count >= 250; count /= 2) perExchange = await sampleRuns(count, () => pingPong.run(count));
      const direct = busyPoll.counts.directReads - before.directReads;
      const exchanges = pingPong.sent - sent;
      assert.is(pingPong.outOfOrder, 0, 'every answer in order');
      assert.is(pingPong.received, pingPong.sent);
      attempts.push(`${direct} of ${exchanges} answers read by the poll, ${perExchange.toFixed(2)} octets allocated per exchange`);
      // All but one read in DIRECT_READS_IN_ROW + 1 at most, when the peer answers within the budget.
      if (direct < exchanges / 2) continue;
      // libuv's reads in between allocate what Node's read callback does, measured here with the
      // poll off (about 56 octets per read); the poll's own reads, nothing. A fixed bound (4 octets)
      // failed when libuv read one answer in eleven rather than one in twelve (4.00).
      busyPoll.configure(0);
      let perLibuvRead = Number.NaN;
      for (let count = 2000; Number.isNaN(perLibuvRead) && count >= 250; count /= 2) perLibuvRead = await sampleRuns(count, () => pingPong.run(count));
      busyPoll.configure(MAX_BUSY_POLL_US);
      const libuvShare = 1 - direct / exchanges;
      console.log(`  ${attempts.at(-1)}; ${perLibuvRead.toFixed(2)} per exchange with the poll off, libuv read ${(libuvShare * 100).toFixed(1)} %`);
      assert.ok(perLibuvRead > 20, `Node's read callback allocates (${perLibuvRead.toFixed(2)} octets per read): the measure works`);
      assert.ok(perExchange <= libuvShare * perLibuvRead + 1, `the poll's reads allocated: ${attempts.join('; ')}, ${perLibuvRead.toFixed(2)} per libuv read`);
      return;
    }
    assert.unreachable(`the poll read too few answers to measure its reads: ${attempts.join('; ')}`);
  }));

test('the poll reads at most DIRECT_READS_IN_ROW in a row: then libuv reads, and the rest of the loop runs', () =>
  withPeer(MAX_BUSY_POLL_US, async (peer) => {
    const pingPong = new PingPong(peer.channel);
    peer.channel.setConsumer(pingPong);
    const channel = peer.channel;
    const reads = channel.reads;
    const polled = channel.polledReads;
    await pingPong.run(20 * (DIRECT_READS_IN_ROW + 1));
    const byPoll = channel.polledReads - polled;
    const byLibuv = channel.reads - reads - byPoll;
    assert.ok(byPoll > 0, 'the poll read');
    // Without the bound, one read of libuv's could start a chain of them all (the peer answers at once, well within the budget).
    assert.ok(byLibuv >= 2 && byPoll <= byLibuv * DIRECT_READS_IN_ROW, `${byPoll} reads by the poll, ${byLibuv} by libuv`);
    assert.is(pingPong.outOfOrder, 0);
  }));

/**
 * Answers the peer's first octet with `last` from inside the read callback, so that the spin after
 * that write finds what the peer does next (an end or a reset) and reads it there; reports how
 * the channel ended.
 */
async function endedBy(last: number): Promise<{ ended: boolean; error: Error | undefined }> {
  const peer = await openPeer();
  busyPoll.configure(MAX_BUSY_POLL_US);
  const { channel } = peer;
  try {
    let ended = false;
    const closed = new Promise<Error | undefined>((resolve) => channel.setEvents({ onEnd: () => (ended = true), onClose: resolve }));
    let answered = false;
    channel.setConsumer({
      readBuffer: () => peer.collector.buffer,
      commit: () => {
        if (answered) return;
        answered = true;
        channel.write([Uint8Array.of(last)], 1, undefined);
      },
    });
    channel.write([Uint8Array.of(200)], 1, undefined);
    const error = await closed;
    return { ended, error };
  } finally {
    peer.child.kill();
  }
}

test('an end or a reset the poll finds in the read callback ends the channel as libuv would', async () => {
  const budget = busyPoll.budgetUs;
  try {
    // FIN: the poll's read sees the end and leaves it to libuv, which reports it once.
    const fin = await endedBy(126);
    assert.ok(fin.ended, 'the end of the stream was reported');
    assert.is(fin.error, undefined, 'an end is not an error');
    // RST: whoever reads first takes the error from the socket; the channel closes with it.
    // The poll reads first when the peer's process resets within the 10 ms budget.
    let byPoll = 0;
    for (let attempt = 0; attempt < 3; attempt++) {
      const { error } = await endedBy(127);
      assert.ok(error !== undefined && /ECONNRESET/.test(`${(error as NodeJS.ErrnoException).code ?? ''} ${error.message}`), String(error));
      if (/read from the connection failed: ECONNRESET/.test(error!.message)) byPoll++;
    }
    console.log(`  ${byPoll} of 3 resets read by the poll`);
    assert.ok(byPoll >= 1, 'the poll read the reset at least once in 3 tries');
  } finally {
    busyPoll.configure(budget);
  }
});

test.run();
