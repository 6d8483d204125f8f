// The request hot path keeps nothing per request (issue 16). A million requests through a target
// served in this process leave the heap, after a full collection, less than one octet per request
// larger than before them: once driven by a bare initiator QP (the target's connection, RNIC
// transmit and receive and engine calls, and the RNIC's on the initiator side), once through the
// initiator library's batched loadMany/storeMany with caller buffers. Both run without sockets
// (LinkedChannel), so they measure kbtp's code, not the kernel's or libuv's. What is still
// allocated (and collected) per request is measured as well, from the used heap over runs of
// 16,000 requests in which no collection ran (a count of octets, independent of the machine's
// load), and held under a budget: under one octet per request for the target and for the
// initiator's callback API (loadInto/storeFrom), i.e. nothing per request; the promise APIs pay
// their promises. A change that brings back an allocation per message, completion or call fails
// here. docs/BENCH.md keeps the profile by allocating site (bench/alloc-profile.ts).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { HotPathDriver } from '../../bench/hot-path-driver.ts';
import { busyPoll } from '../../host/rnic/busy-poll.ts';
import type { KbtpSession } from '../../host/kbtp/initiator.ts';
import { heapAfterFullCollection, sampleRuns } from '../support/heap.ts';
import { openInProcessSession } from './in-process-session.ts';

const REQUESTS = 1_000_000;
/**
 * Requests per sampled run: long enough that what a run costs once (the drive's own promises,
 * about 1.2 KB) stays under 0.1 octets per request; halved down to 1,000 should every run see a
 * collection (each a multiple of 8, the initiator drives' handles).
 */
const SAMPLE_REQUESTS = 16_000;
/**
 * Octets allocated per request, at most: every side in one thread (the target, both RNICs, and
 * for the initiator tests the initiator library). Measured 2026-12-01 (session 3, after calls got
 * one deadline sweep per session and reused call records): target about 510-550, loadMany/storeMany
 * about 670-720, load()/store() 8 in flight about 1,030-1,180, loadInto/storeFrom (callbacks) about
 * 570, i.e. the target's share alone (3,700, 3,950 and 9,500+ at the start of that day;
 * see docs/BENCH.md). Then the send and receive queues stopped shrinking and regrowing their
 * arrays: target about 395, loadMany/storeMany about 560, load()/store() about 890. Session 4
 * (06:44 and 07:05, loads landing in registered buffers, storeMany inline): target 386-398,
 * loadMany/storeMany 550-602, loadInto/storeFrom 454-466, load()/store() 874-900; the batch and
 * call budgets came down to what those leave room for. Session 5 (h16c, 11:58, load 5: view
 * caches with several lengths per offset and for staged payloads, no closure context per channel
 * write or callback call, no clock read per request for the connection's timeouts): target 46-58,
 * loadMany/storeMany 272-288, loadInto/storeFrom 54-95, load()/store() 578-620 (two runs), then 853 in the lead's clean-clone
 * make test (13:17, load 1.9: over the 850 first set here, so 1,000). Session 6 (h16c, 14:25,
 * load 10: a clock read that does not box, STags and slot request ids below 2^31, batch records
 * reused, runs of 16,000 requests and collections no longer missed at a run's end): target 0.08,
 * loadInto/storeFrom 0.30, loadMany/storeMany 64, load()/store() 506 (three runs alike). The
 * target and the callback API are held to the goal itself, under one octet per request: a heap
 * number in one request of eight already goes over it. The promise APIs keep a promise (and for
 * load()/store() a result) per call by design, and inside a whole make test (one process after
 * every other file, 14:57) they measured 85 and 641: their budgets are coarse guards against an
 * object per request or a per-call timer (about 4 KB), not against a closure per call.
 */
const TARGET_BUDGET = 1;
/**
 * The same drive over TCP on 127.0.0.1 (SocketChannel at both ends; bench/alloc-profile.js
 * socket): Node allocates from C++ for each read and write callback, 17.6 octets per request
 * alone and 30.1 after the other kbtp files (more, smaller reads on a loaded machine); kbtp's
 * JavaScript under one (session 6; the done queue's push and splice had cost about 110, 129.93
 * in all). Fewer requests: each crosses the kernel twice (about 45 us at load 12).
 */
const SOCKET_BUDGET = 60;
const SOCKET_REQUESTS = 100_000;
const BATCH_BUDGET = 130;
const CALL_BUDGET = 800;
const CALLBACK_BUDGET = 1;

/**
 * Octets allocated per request: heap growth over runs in which no collection ran (a run with one
 * is discarded); the smallest of several samples. Should every run of `requests` see a collection
 * (load()/store() allocate about 8 MB in 16,000 requests, and after other test files V8 may have
 * shrunk its young generation below that), shorter runs are tried, down to 1,000 requests.
 */
async function allocatedPerRequest(requests: number, run: (requests: number) => Promise<void>): Promise<number> {
  let count = requests;
  for (; count >= 1000; count /= 2) {
    const best = await sampleRuns(count, () => run(count));
    if (!Number.isNaN(best)) return best;
  }
  throw new Error(`every run of ${count * 2} to ${requests} requests saw a garbage collection: cannot measure allocation`);
}

/**
 * Drives the target from a bare initiator QP (bench/hot-path-driver.ts): a warm-up, the octets
 * allocated per request (under `budget`), then `requests` requests after which the heap, after a
 * full collection, must not have grown by an octet per request.
 */
async function targetKeepsNothing(what: string, driver: HotPathDriver, requests: number, budget: number): Promise<void> {
  try {
    await driver.run(100_000, 4); // warm-up: compile, grow the queues to their working size
    const sampled = await allocatedPerRequest(SAMPLE_REQUESTS, (count) => driver.run(count, 4));
    const before = heapAfterFullCollection();
    const started = performance.now();
    const cpu = process.cpuUsage();
    await driver.run(requests, 4);
    const used = process.cpuUsage(cpu);
    const cpuUs = (used.user + used.system) / requests;
    const seconds = (performance.now() - started) / 1000;
    const after = heapAfterFullCollection();
    assert.is(driver.failures, 0, driver.firstFailure);
    assert.ok(driver.counts.stores > requests / 5, 'STOREs ran (RDMA Reads by the target)');
    assert.ok(driver.counts.loads > requests / 2, 'LOADs ran (RDMA Writes by the target)');
    const growth = (after - before) / requests;
    console.log(
      `  target ${what}: ${requests} requests in ${seconds.toFixed(1)} s (${cpuUs.toFixed(1)} us CPU each); heap growth ${growth.toFixed(3)} octets/request; ` +
        `${sampled.toFixed(2)} octets allocated and collected per request (both RNICs and the target)`,
    );
    assert.ok(growth < 1, `heap grew ${growth.toFixed(2)} octets per request`);
    assert.ok(sampled < budget, `${sampled.toFixed(2)} octets allocated per request, not under the budget of ${budget}`);
  } finally {
    await driver.close();
  }
}

test('target: a million LOADs and STOREs from a bare QP keep nothing', async () => {
  await targetKeepsNothing('(in-memory channel)', await HotPathDriver.open(1024, 8), REQUESTS, TARGET_BUDGET);
});

/**
 * The TCP drive with this thread's busy poll set to `budgetUs` (host/rnic/busy-poll.ts; unset it
 * follows the machine's cpuidle driver, so both settings are given here), restored after.
 */
async function overTcpWithBusyPoll(budgetUs: number): Promise<void> {
  const before = busyPoll.budgetUs;
  busyPoll.configure(budgetUs);
  const counts = busyPoll.counts;
  try {
    await targetKeepsNothing(`(TCP, 127.0.0.1, busy poll ${budgetUs} us)`, await HotPathDriver.openOverTcp(1024, 8), SOCKET_REQUESTS, SOCKET_BUDGET);
  } finally {
    busyPoll.configure(before);
  }
  const after = busyPoll.counts;
  const turns = after.spins + after.skipped - counts.spins - counts.skipped;
  if (budgetUs === 0) assert.is(turns, 0, 'no spin with the poll off');
  // Both ends in this thread: after a write the other end has bytes at once, so the spins look once and skip.
  else assert.ok(turns > SOCKET_REQUESTS, `the poll ran at the end of the turns that wrote (${turns} spins and skips)`);
}

test('target over a loopback TCP connection: the socket channel adds only what Node allocates itself', async () => {
  await overTcpWithBusyPoll(0);
});

// Session 16's busy poll spun by setImmediate, an Immediate per round: 110 octets per request here.
test('target over a loopback TCP connection with the busy poll on: its spins allocate nothing', async () => {
  await overTcpWithBusyPoll(200);
});

/**
 * Drives `run(requests)` through the initiator library against an in-process target: a warm-up,
 * the octets allocated per request (under `budget`), then a million requests after which the
 * heap, after a full collection, must not have grown by an octet per request.
 */
async function initiatorKeepsNothing(
  what: string,
  budget: number,
  drive: (session: KbtpSession, handles: bigint[], into: Uint8Array[], blocks: Uint8Array[]) => (requests: number) => Promise<void>,
): Promise<void> {
  const { session, target } = await openInProcessSession(1024, 16, 8);
  try {
    const handles = Array.from({ length: 8 }, (_, i) => BigInt(i));
    for (const handle of handles) await session.allocStore(handle, new Uint8Array(1024));
    const into = handles.map(() => new Uint8Array(1024));
    const blocks = handles.map((_, i) => new Uint8Array(1024).fill(i + 1));
    const run = drive(session, handles, into, blocks);
    await run(80_000);
    const sampled = await allocatedPerRequest(SAMPLE_REQUESTS, run);
    const before = heapAfterFullCollection();
    const started = performance.now();
    const cpu = process.cpuUsage();
    await run(REQUESTS);
    const used = process.cpuUsage(cpu);
    const cpuUs = (used.user + used.system) / REQUESTS;
    const seconds = (performance.now() - started) / 1000;
    const after = heapAfterFullCollection();
    for (let i = 0; i < handles.length; i++)
      assert.ok(
        into[i]!.every((octet) => octet === i + 1),
        `block ${i} holds what was stored`,
      );
    const growth = (after - before) / REQUESTS;
    console.log(
      `  initiator ${what}: ${REQUESTS} requests in ${seconds.toFixed(1)} s (${cpuUs.toFixed(1)} us CPU each); heap growth ${growth.toFixed(3)} octets/request; ` +
        `${sampled.toFixed(2)} octets allocated and collected per request (initiator, target and both RNICs)`,
    );
    assert.ok(growth < 1, `heap grew ${growth.toFixed(2)} octets per request`);
    assert.ok(sampled < budget, `${sampled.toFixed(2)} octets allocated per request, not under the budget of ${budget}`);
  } finally {
    await session.close(500);
    await target.stop();
  }
}

test('initiator: a million loadMany/storeMany requests with caller buffers keep nothing', async () => {
  await initiatorKeepsNothing('loadMany/storeMany', BATCH_BUDGET, (session, handles, into, blocks) => {
    const loadOptions = { allowUnsealed: true };
    return async (requests) => {
      for (let i = 0; i < requests / handles.length; i++) {
        if (i % 4 === 0) await session.storeMany(handles, blocks);
        else await session.loadMany(handles, into, loadOptions);
      }
    };
  });
});

test('initiator: a million loadInto/storeFrom calls (callbacks, no promise), 8 in flight, keep nothing', async () => {
  await initiatorKeepsNothing('loadInto/storeFrom', CALLBACK_BUDGET, (session, handles, into, blocks) => {
    const loadOptions = { allowUnsealed: true };
    // The STORE sources registered, as kbtp bench registers its own: each STORE then goes out as
    // one Send of its request and the caller's block (two SGEs, framed at once); storeMany above
    // covers the unregistered path (the block copied into the slot).
    for (const block of blocks) session.registerLoadBuffer(block);
    return (requests) =>
      new Promise<void>((resolve, reject) => {
        // One chain per handle: each completion issues that handle's next call from inside the completion.
        const perHandle = requests / handles.length;
        let running = handles.length;
        handles.forEach((handle, i) => {
          let calls = 0;
          const next = (error: Error | undefined): void => {
            if (error !== undefined) return reject(error);
            if (calls === perHandle) {
              running -= 1;
              if (running === 0) resolve();
              return;
            }
            calls += 1;
            if (calls % 4 === 1) session.storeFrom(handle, blocks[i]!, next);
            else session.loadInto(handle, into[i]!, next, loadOptions);
          };
          next(undefined);
        });
      });
  });
});

test('initiator: a million load()/store() calls with caller buffers, 8 in flight, keep nothing', async () => {
  await initiatorKeepsNothing('load()/store()', CALL_BUDGET, (session, handles, into, blocks) => {
    // One loop per handle, each with its own buffer and options: 8 calls in flight, as kbtp bench runs them.
    const loops = handles.map((handle, i) => {
      const loadOptions = { allowUnsealed: true, into: into[i]! };
      const block = blocks[i]!;
      return async (calls: number): Promise<void> => {
        for (let n = 0; n < calls; n++) {
          if (n % 4 === 0) await session.store(handle, block);
          else await session.load(handle, loadOptions);
        }
      };
    });
    return async (requests) => {
      await Promise.all(loops.map((loop) => loop(requests / handles.length)));
    };
  });
});

test.run();
