// RDMA Writes into a region that knows a Write's extent (MemoryRegion.remoteWriteExtent, issue
// 16): a kbtp client's LOAD into a registered buffer (landing.ts) is a 256 KiB RDMA Write and a
// COMPLETION Send, and its receive path read the Write one segment at a time (a prefix read, four
// direct reads, the last segment with the Send: 6 reads), since a Write carries no length. With
// the extent known, the segments after the first come in one readv (3 reads). Over a loopback
// TCP pair, the client's channel counting its reads.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { SocketChannel } from '../../host/rnic/channel.ts';
import { Access, type MemoryRegion } from '../../host/rnic/verbs.ts';
import { completions, connectedPair, type Pair, pattern } from '../support/rnic.ts';

const BLOCK = 256 * 1024;
const COMPLETION = 64;
const LOADS = 6;
/** LOADs before the receiver reads in bulk (its first large message goes through staging). */
const WARM = 2;

/** The client QP's socket channel (the QP keeps it to itself). */
const channelOf = (qp: unknown): SocketChannel => (qp as { channel: SocketChannel }).channel;

interface Counted {
  reads: number;
  vectorReads: number;
  placed: boolean[];
}

/**
 * One LOAD's answer: the server writes `block` to the start of `region` (an RDMA Write) and then
 * sends a COMPLETION-sized Send (`seed`'s pattern); resolves once the client received the Send,
 * so the Write before it is placed (RFC 5040 §5.5).
 */
async function answer(pair: Pair, region: MemoryRegion, block: Uint8Array, seed: number): Promise<void> {
  const { client, server } = pair;
  server.memory.set(block, 0);
  server.memory.set(pattern(COMPLETION, seed), block.length);
  server.qp.postSend({
    wrId: 1,
    opcode: 'RDMA_WRITE',
    sgList: [{ lkey: server.mr.lkey, offset: 0, length: block.length }],
    remote: { stag: region.rkey, taggedOffset: 0 },
  });
  server.qp.postSend({ wrId: 2, opcode: 'SEND', sgList: [{ lkey: server.mr.lkey, offset: block.length, length: COMPLETION }] });
  const [received] = await completions(client.cq, 1);
  assert.equal([received!.opcode, received!.status, received!.byteLength], ['RECV', 0, COMPLETION]);
  await completions(server.cq, 2);
}

/** A landing buffer of `length` octets of the client's, its own region, as landing.ts registers one. */
function landingRegion(pair: Pair, length: number, extent: number): { landing: Uint8Array; region: MemoryRegion } {
  const landing = new Uint8Array(length);
  const region = pair.client.rnic.registerMemory(pair.client.pd, landing, { access: Access.LocalWrite | Access.RemoteWrite });
  region.remoteWriteExtent = extent;
  return { landing, region };
}

/** LOADS blocks written into a landing buffer of the client's, each followed by a COMPLETION Send; reads counted after WARM. */
async function loads(extent: number): Promise<Counted> {
  const pair = await connectedPair({ size: 2 * BLOCK, preposted: LOADS });
  try {
    const { landing, region } = landingRegion(pair, BLOCK, extent);
    const channel = channelOf(pair.client.qp);
    const counted: Counted = { reads: 0, vectorReads: 0, placed: [] };
    for (let i = 0; i < LOADS; i++) {
      const block = pattern(BLOCK, i + 1);
      const reads = channel.reads;
      const vectorReads = channel.vectorReads;
      await answer(pair, region, block, 100 + i);
      counted.placed.push(Buffer.from(landing).equals(Buffer.from(block)));
      if (i < WARM) continue;
      counted.reads += channel.reads - reads;
      counted.vectorReads += channel.vectorReads - vectorReads;
    }
    return counted;
  } finally {
    await pair.close();
  }
}

test('a 256 KiB RDMA Write into a region that knows its extent: its segments after the first in one readv', async () => {
  const known = await loads(BLOCK);
  const unknown = await loads(0);
  const all = Array.from({ length: LOADS }, () => true);
  assert.equal(known.placed, all, 'every block placed as sent, extent known');
  assert.equal(unknown.placed, all, 'every block placed as sent, extent unknown');
  const measured = LOADS - WARM;
  assert.is(unknown.vectorReads, 0);
  assert.ok(known.vectorReads >= measured, `${known.vectorReads} vectored reads for ${measured} LOADs`);
  // All waiting (one thread sends and receives): the prefix, one readv, the COMPLETION's rest,
  // against a read per segment.
  assert.ok(
    known.reads + known.vectorReads < unknown.reads,
    `${known.reads} + ${known.vectorReads} reads with the extent known, ${unknown.reads} without, for ${measured} LOADs`,
  );
});

test("a Write shorter than its region's extent: placed as sent, and the Send after it too", async () => {
  const pair = await connectedPair({ size: 2 * BLOCK, preposted: 4 });
  try {
    const { landing, region } = landingRegion(pair, 2 * BLOCK, 2 * BLOCK);
    for (let i = 0; i < 3; i++) {
      const block = pattern(BLOCK, 7 + i);
      await answer(pair, region, block, 200 + i);
      assert.ok(Buffer.from(landing.subarray(0, BLOCK)).equals(Buffer.from(block)), `Write ${i} placed as sent`);
      // The COMPLETION landed in its receive buffer, whatever the guess put past the Write.
      const at = (pair.client.memory.length >> 1) + 4096 * i;
      assert.ok(Buffer.from(pair.client.memory.subarray(at, at + COMPLETION)).equals(Buffer.from(pattern(COMPLETION, 200 + i))), `COMPLETION ${i}`);
    }
  } finally {
    await pair.close();
  }
});

test.run();
