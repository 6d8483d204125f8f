// Feeds well over 100,000 random and mutated FPDUs and MPA frames to the receive path (through
// in-memory channels, not sockets): no exception may escape, every call must return, every MPA
// exchange must settle, and memory and queues must stay bounded.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { MemoryChannel } from '../../host/rnic/channel.ts';
import { Access, createRnic, type MemoryRegion, type QueuePair } from '../../host/rnic/verbs.ts';
import { encodeFpdu, encodeMpaFrame, type MpaFrame } from '../../host/rnic/wire/mpa.ts';
import { encodeFpduWithMarkers } from '../../host/rnic/wire/markers.ts';
import { encodeTaggedHeader, encodeUntaggedHeader } from '../../host/rnic/wire/ddp.ts';
import { encodeReadRequest, encodeTerminate, rdmapControl, RdmapOpcode } from '../../host/rnic/wire/rdmap.ts';
import { encodeAtomicRequest, encodeAtomicResponse, encodeImmediateData } from '../../host/rnic/wire/atomics.ts';
import v8 from 'node:v8';
import vm from 'node:vm';

/** A full collection, available without --expose-gc on the command line. */
function collectGarbage(): void {
  v8.setFlagsFromString('--expose-gc');
  (vm.runInNewContext('gc') as () => void)();
}

/** Deterministic xorshift so a failure reproduces. */
class Random {
  constructor(private state: number) {}
  next(): number {
    let x = this.state;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.state = x >>> 0;
    return this.state;
  }
  below(limit: number): number {
    return this.next() % limit;
  }
  chance(probability: number): boolean {
    return this.next() / 0x1_0000_0000 < probability;
  }
  bytes(length: number): Uint8Array {
    const out = new Uint8Array(length);
    for (let i = 0; i < length; i++) out[i] = this.next() & 0xff;
    return out;
  }
  pick<T>(items: readonly T[]): T {
    return items[this.below(items.length)]!;
  }
  u64(): bigint {
    return (BigInt(this.next()) << 32n) | BigInt(this.next());
  }
}

const random = new Random(0x5eed1234);
const rnic = createRnic({ name: 'fuzz' });
const pd = rnic.allocPd();
const memory = new SharedArrayBuffer(1 << 16);
const regions: MemoryRegion[] = [
  rnic.registerMemory(pd, memory, { access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead | Access.RemoteAtomic, length: 32768 }),
  rnic.registerMemory(pd, memory, { access: Access.RemoteRead, offset: 32768, length: 8192, taggedOffsetBase: 0xffff_ffff_ffff_0000n }),
  rnic.registerMemory(pd, memory, { access: Access.LocalWrite | Access.RemoteWrite, offset: 40960, length: 24576, taggedOffsetBase: 1n << 40n }),
];
const otherPd = rnic.allocPd();
const foreign = rnic.registerMemory(otherPd, new SharedArrayBuffer(4096), { access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead });

interface Session {
  qp: QueuePair;
  channel: MemoryChannel;
  crc: boolean;
  markers: boolean;
  streamOffset: number;
  msn: [number, number, number, number];
  readSink: { stag: number; to: bigint; length: number } | undefined;
  atomicIds: number[];
}

const stats = { fpdus: 0, sessions: 0, terminatesSent: 0, mpaFrames: 0, settled: 0, thrown: 0, delivered: 0, established: 0 };

function newSession(): Session {
  const cq = rnic.createCq({ depth: 256 });
  const qp = rnic.createQp({ pd, sendCq: cq, recvCq: cq, ird: 1 + random.below(8), ord: 1 + random.below(8), maxRecvWr: 64, maxSendWr: 64 });
  // Keep only the last few kilobytes of what the QP sends: the fuzzer never reads it back.
  const channel = new MemoryChannel(4096);
  const crc = random.chance(0.5);
  const markers = random.chance(0.2);
  const responder = random.chance(0.5);
  const session: Session = { qp, channel, crc, markers, streamOffset: 0, msn: [1, 1, 1, 1], readSink: undefined, atomicIds: [] };
  for (let i = 0; i < 1 + random.below(6); i++) {
    const region = random.pick([regions[0]!, regions[2]!]);
    const offset = random.below(region.length);
    qp.postRecv({
      wrId: i,
      sgList: [
        { lkey: region.lkey, offset, length: random.below(region.length - offset + 1) },
        { lkey: regions[0]!.lkey, offset: 0, length: random.below(64) },
      ],
    });
  }
  qp.beginConnecting();
  qp.enterRdmaMode(channel, {
    role: responder ? 'responder' : 'initiator',
    crc,
    markersIn: markers,
    markersOut: random.chance(0.2),
    mulpdu: random.pick([128, 1454, 64768]),
    ird: 1 + random.below(4),
    ord: 1 + random.below(4),
    ...(responder && random.chance(0.5) ? { acceptRtr: new Set(random.chance(0.5) ? (['write'] as const) : (['read', 'send'] as const)) } : {}),
  });
  if (!responder) {
    // Outstanding requests give Read Responses and Atomic Responses something to match.
    const sink = regions[0]!;
    const length = 1 + random.below(4096);
    qp.postSend({ wrId: 1, opcode: 'RDMA_READ', sgList: [{ lkey: sink.lkey, offset: 0, length }], remote: { stag: 0x100, taggedOffset: 0 } });
    session.readSink = { stag: sink.stag, to: sink.taggedOffsetBase, length };
    qp.postSend({
      wrId: 2,
      opcode: 'ATOMIC_FETCH_ADD',
      sgList: [{ lkey: sink.lkey, offset: 8, length: 8 }],
      remote: { stag: 0x200, taggedOffset: 8 },
      atomic: { add: 1n },
    });
    session.atomicIds.push(1);
  }
  stats.sessions++;
  return session;
}

function someStag(): number {
  switch (random.below(6)) {
    case 0:
      return random.next();
    case 1:
      return foreign.stag;
    case 2:
      return (random.pick(regions).stag ^ 1) >>> 0;
    default:
      return random.pick(regions).stag;
  }
}

function someOffset(stag: number): bigint {
  const region = regions.find((r) => r.stag === stag);
  if (region === undefined || random.chance(0.1)) return random.u64();
  return region.taggedOffsetBase + BigInt(random.below(region.length + 64)) - (random.chance(0.05) ? 8n : 0n);
}

/** A plausible ULPDU of a random kind, mostly in sequence for the session. */
function makeUlpdu(session: Session): Uint8Array {
  const kind = random.below(11);
  const untagged = (opcode: number, queue: number, body: Uint8Array, reserved = 0, last = true, offset = 0): Uint8Array => {
    const ulpdu = new Uint8Array(18 + body.length);
    const msn = random.chance(0.9) ? session.msn[queue as 0 | 1 | 2 | 3] : random.next();
    if (last && msn === session.msn[queue as 0 | 1 | 2 | 3]) session.msn[queue as 0 | 1 | 2 | 3] = (msn + 1) >>> 0;
    encodeUntaggedHeader(ulpdu, 0, {
      last,
      ddpVersion: 1,
      rdmapControl: rdmapControl(opcode),
      reserved,
      queueNumber: random.chance(0.95) ? queue : random.below(6),
      messageSequenceNumber: msn,
      messageOffset: offset,
    });
    ulpdu.set(body, 18);
    return ulpdu;
  };
  const tagged = (opcode: number, stag: number, to: bigint, payload: Uint8Array, last = true): Uint8Array => {
    const ulpdu = new Uint8Array(14 + payload.length);
    encodeTaggedHeader(ulpdu, 0, { last, ddpVersion: 1, rdmapControl: rdmapControl(opcode), stag, taggedOffset: to });
    ulpdu.set(payload, 14);
    return ulpdu;
  };
  switch (kind) {
    case 0:
    case 1: {
      const stag = someStag();
      return tagged(
        RdmapOpcode.RdmaWrite,
        stag,
        someOffset(stag),
        random.bytes(random.chance(0.2) ? 8192 + random.below(9000) : random.below(300)),
        random.chance(0.9),
      );
    }
    case 2: {
      const sink = session.readSink;
      if (sink !== undefined && random.chance(0.7)) return tagged(RdmapOpcode.RdmaReadResponse, sink.stag, sink.to, random.bytes(sink.length));
      return tagged(RdmapOpcode.RdmaReadResponse, someStag(), random.u64(), random.bytes(random.below(200)));
    }
    case 3:
    case 4:
      return untagged(
        random.pick([3, 4, 5, 6]),
        0,
        random.bytes(random.below(random.chance(0.1) ? 20000 : 200)),
        someStag(),
        random.chance(0.9),
        random.chance(0.9) ? 0 : random.below(100),
      );
    case 5: {
      const body = new Uint8Array(28);
      const stag = someStag();
      encodeReadRequest(body, 0, {
        sinkStag: random.next(),
        sinkTaggedOffset: random.u64(),
        readSize: random.chance(0.1) ? 0 : random.below(20000),
        sourceStag: stag,
        sourceTaggedOffset: someOffset(stag),
      });
      return untagged(RdmapOpcode.RdmaReadRequest, 1, body);
    }
    case 6: {
      const body = new Uint8Array(52);
      const stag = someStag();
      encodeAtomicRequest(body, 0, {
        atomicOpcode: random.pick([0, 2, 2, 0, 1, 15]),
        requestId: random.next(),
        remoteStag: stag,
        remoteTaggedOffset: someOffset(stag) & (random.chance(0.8) ? ~7n : ~0n),
        addOrSwapData: random.u64(),
        addOrSwapMask: random.chance(0.5) ? 0n : random.u64(),
        compareData: random.u64(),
        compareMask: random.u64(),
      });
      return untagged(RdmapOpcode.AtomicRequest, 1, body);
    }
    case 7: {
      const body = new Uint8Array(12);
      encodeAtomicResponse(body, 0, { requestId: session.atomicIds[0] ?? random.next(), originalValue: random.u64() });
      return untagged(RdmapOpcode.AtomicResponse, 3, body);
    }
    case 8: {
      const body = new Uint8Array(8);
      encodeImmediateData(body, 0, random.u64());
      return untagged(random.pick([8, 9]), 0, body);
    }
    case 9: {
      const body = new Uint8Array(4 + (random.chance(0.5) ? 2 + 18 : 0) + (random.chance(0.3) ? 28 : 0));
      try {
        encodeTerminate(body, 0, { layer: random.below(3), errorType: random.below(3), errorCode: random.below(256), segmentLengthValid: random.chance(0.5) });
      } catch {
        // Sizes that do not match are left as random bytes.
      }
      body.set(random.bytes(body.length - 4), 4);
      return untagged(RdmapOpcode.Terminate, 2, body);
    }
    default:
      return random.bytes(random.below(80));
  }
}

/** Frames a ULPDU for the session's stream (markers, CRC) and maybe damages it. */
function frame(session: Session, ulpdu: Uint8Array): Uint8Array {
  let bytes: Uint8Array;
  if (session.markers) {
    const framed = encodeFpduWithMarkers(ulpdu.subarray(0, Math.min(ulpdu.length, 0xffff)), session.streamOffset, session.crc);
    session.streamOffset = framed.nextStreamOffset;
    bytes = framed.bytes;
  } else {
    bytes = encodeFpdu(ulpdu.subarray(0, Math.min(ulpdu.length, 0xffff)), session.crc);
  }
  const mutation = random.below(10);
  if (mutation < 6) return bytes;
  const copy = bytes.slice();
  switch (mutation) {
    case 6:
      for (let i = 0; i < 1 + random.below(4); i++) copy[random.below(copy.length)]! ^= 1 << random.below(8);
      return copy;
    case 7:
      return copy.subarray(0, random.below(copy.length));
    case 8: {
      // Rewrite the length field, then repair the CRC so the damage reaches the DDP checks.
      const length = random.chance(0.5) ? random.below(0x10000) : Math.max(0, ((copy[0]! << 8) | copy[1]!) + random.below(9) - 4);
      copy[0] = length >> 8;
      copy[1] = length & 0xff;
      return copy;
    }
    default: {
      const extended = new Uint8Array(copy.length + random.below(64));
      extended.set(copy);
      extended.set(random.bytes(extended.length - copy.length), copy.length);
      return extended;
    }
  }
}

test('100,000+ random and mutated FPDUs into the receive path', async () => {
  const errors: unknown[] = [];
  const onUncaught = (error: unknown): void => {
    errors.push(error);
  };
  process.on('uncaughtException', onUncaught);
  process.on('unhandledRejection', onUncaught);
  collectGarbage();
  const heapBefore = process.memoryUsage().heapUsed;
  let session = newSession();
  const target = 100_000;
  try {
    while (stats.fpdus < target) {
      if (session.qp.state !== 'rts') {
        stats.terminatesSent += session.qp.disconnectInfo?.reason === 'terminate-sent' ? 1 : 0;
        stats.delivered += session.qp.statistics.messagesReceived;
        session.qp.destroy();
        session = newSession();
      }
      const bytes = frame(session, makeUlpdu(session));
      stats.fpdus++;
      // Deliver in random pieces, as TCP might.
      let offset = 0;
      while (offset < bytes.length) {
        const piece = random.chance(0.7) ? bytes.length - offset : 1 + random.below(bytes.length - offset);
        try {
          session.channel.receive(bytes.subarray(offset, offset + piece));
        } catch (error) {
          stats.thrown++;
          errors.push(error);
        }
        offset += piece;
      }
      if (random.chance(0.001)) session.channel.receiveEnd();
      if (stats.fpdus % 2000 === 0) await new Promise((resolve) => setImmediate(resolve));
    }
  } finally {
    session.qp.destroy();
    await new Promise((resolve) => setImmediate(resolve));
    process.off('uncaughtException', onUncaught);
    process.off('unhandledRejection', onUncaught);
  }
  assert.equal(errors, [], 'no exception escaped the receive path');
  assert.ok(stats.fpdus >= target);
  assert.ok(stats.sessions > 100, `errors ended many streams (${stats.sessions} sessions)`);
  assert.ok(stats.terminatesSent > 100);
  // The generator keeps streams in sequence often enough to reach placement and execution.
  assert.ok(stats.delivered > 5_000, `${stats.delivered} messages passed every check`);
  assert.is(rnic.queuePairCount, 0, 'every QP was released');
  // What the receive path retains, not the garbage other test files left for the collector.
  collectGarbage();
  const growth = process.memoryUsage().heapUsed - heapBefore;
  assert.ok(growth < 64 * 1024 * 1024, `heap retained ${(growth / 1048576).toFixed(1)} MiB`);
});

function mpaFrame(kind: 'request' | 'reply'): Uint8Array {
  const frameData: MpaFrame = {
    kind,
    markers: random.chance(0.2),
    crc: random.chance(0.5),
    reject: kind === 'reply' && random.chance(0.2),
    enhanced: random.chance(0.8),
    revision: random.pick([1, 2, 2, 2, 0, 3]),
    ...(random.chance(0.8)
      ? {
          enhancedData: {
            peerToPeer: random.chance(0.5),
            sendRtr: random.chance(0.3),
            writeRtr: random.chance(0.5),
            readRtr: random.chance(0.5),
            ird: random.chance(0.1) ? 0x3fff : random.below(2000),
            ord: random.chance(0.1) ? 0x3fff : random.below(2000),
          },
        }
      : {}),
    privateData: random.bytes(random.below(40)),
  };
  const bytes = encodeMpaFrame(frameData);
  switch (random.below(8)) {
    case 0:
      bytes[random.below(bytes.length)]! ^= 1 << random.below(8);
      return bytes;
    case 1:
      return bytes.subarray(0, random.below(bytes.length));
    case 2: {
      bytes[18] = random.below(256);
      bytes[19] = random.below(256);
      return bytes;
    }
    case 3:
      return random.bytes(random.below(600));
    default:
      return bytes;
  }
}

test('20,000 random and mutated MPA Requests and Replies: every setup settles', async () => {
  const errors: unknown[] = [];
  const onUncaught = (error: unknown): void => {
    errors.push(error);
  };
  process.on('uncaughtException', onUncaught);
  process.on('unhandledRejection', onUncaught);
  try {
    for (let batch = 0; batch < 40; batch++) {
      const pending: Array<Promise<unknown>> = [];
      for (let i = 0; i < 500; i++) {
        stats.mpaFrames++;
        const channel = new MemoryChannel(4096);
        const cq = rnic.createCq({ depth: 16 });
        const qp = rnic.createQp({ pd, sendCq: cq, recvCq: cq, ird: random.below(20), ord: random.below(20) });
        let setup: Promise<unknown>;
        if (random.chance(0.5)) {
          setup = rnic
            .acceptChannel(channel, 5000)
            .then((request): unknown =>
              random.chance(0.3)
                ? request.reject(random.bytes(random.below(20)))
                : request.accept(qp, { acceptRtr: random.chance(0.5) ? ['write'] : ['read', 'send'], crc: random.chance(0.5) }),
            );
          channel.receive(mpaFrame('request'));
        } else {
          setup = rnic.connectChannel(qp, channel, { timeoutMs: 5000, rtr: random.chance(0.5) ? ['write'] : ['send', 'read'] });
          channel.receive(mpaFrame('reply'));
        }
        // Whatever happened, a peer that goes away must settle the setup.
        if (random.chance(0.5)) channel.receive(random.bytes(random.below(30)));
        channel.receiveEnd();
        channel.destroy();
        pending.push(
          setup
            .then(
              () => {
                stats.settled++;
                stats.established++;
              },
              () => stats.settled++,
            )
            .finally(() => qp.destroy()),
        );
      }
      await Promise.all(pending);
    }
  } finally {
    process.off('uncaughtException', onUncaught);
    process.off('unhandledRejection', onUncaught);
  }
  assert.equal(errors, []);
  assert.is(stats.settled, stats.mpaFrames);
  assert.ok(stats.mpaFrames + stats.fpdus >= 120_000);
  assert.is(rnic.queuePairCount, 0);
});

test.run();
