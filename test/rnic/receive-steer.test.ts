// A receive's `steer`: after a multi-segment Send's first segment (with MPA CRC off and steerAt:
// after its first steerAt octets) the receiver may point the rest elsewhere (a KBTP target sends
// an inline STORE's data straight to its block; issue 16).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { connectedPair, completions, pattern, type Pair } from '../support/rnic.ts';
import { WcStatus, type Sge } from '../../host/rnic/verbs.ts';

/** How a receive is steered: with MPA CRC on or off, and a steerAt or none (work.ts). */
interface SteerCase {
  crc: boolean;
  steerAt: number | undefined;
}

const CASES: SteerCase[] = [
  { crc: true, steerAt: undefined },
  { crc: false, steerAt: 56 },
  { crc: true, steerAt: 56 },
];

const early = (c: SteerCase): boolean => !c.crc && c.steerAt !== undefined;
const named = (c: SteerCase): string => `CRC ${c.crc ? 'on' : 'off'}${c.steerAt === undefined ? '' : `, steerAt ${c.steerAt}`}`;

async function withPair(c: SteerCase, body: (pair: Pair) => Promise<void>): Promise<void> {
  const pair = await connectedPair({ size: 1 << 20, accept: { crc: c.crc }, connect: { crc: c.crc } });
  try {
    await body(pair);
  } finally {
    await pair.close();
  }
}

/** A receive of 200,000 octets at 0 whose steer() keeps the octets received and sends the rest to `sink` (`room` octets there, default the rest of `length`). */
function steeredReceive(
  c: SteerCase,
  pair: Pair,
  wrId: number,
  length: number,
  calls: number[],
  room?: number,
): { wrId: number; sgList: readonly Sge[]; steer: (received: number) => void; steerAt?: number } {
  const { lkey } = pair.server.mr;
  const receive: { wrId: number; sgList: readonly Sge[]; steer: (received: number) => void; steerAt?: number } = {
    wrId,
    sgList: [{ lkey, offset: 0, length: 200_000 }],
    steer: (received) => {
      calls.push(received);
      receive.sgList = [
        { lkey, offset: 0, length: received },
        { lkey, offset: SINK, length: room ?? length - received },
      ];
    },
  };
  if (c.steerAt !== undefined) receive.steerAt = c.steerAt;
  return receive;
}

const SINK = 600_000;

for (const c of CASES) {
  test(`a steered receive (${named(c)}): the octets before the steer point stay where posted, the rest goes where steer() said`, async () => {
    await withPair(c, async (pair) => {
      const { client, server } = pair;
      const calls: number[] = [];
      const length = 150_000;
      const receive = steeredReceive(c, pair, 7, length, calls);
      server.qp.postRecv(receive);
      // A single-segment Send does not ask.
      server.qp.postRecv({ ...receive, wrId: 8, sgList: [{ lkey: server.mr.lkey, offset: 400_000, length: 100 }] });
      const message = pattern(length, 3);
      client.memory.set(message, 0);
      client.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [{ lkey: client.mr.lkey, offset: 0, length }] });
      client.memory.set(pattern(80, 4), 300_000);
      client.qp.postSend({ wrId: 2, opcode: 'SEND', sgList: [{ lkey: client.mr.lkey, offset: 300_000, length: 80 }] });
      await completions(client.cq, 2);
      const received = await completions(server.cq, 2);
      assert.equal(
        received.map((completion) => [completion.wrId, completion.status, completion.byteLength]),
        [
          [7, WcStatus.Success, length],
          [8, WcStatus.Success, 80],
        ],
      );
      assert.is(calls.length, 1, 'steer() is called once, for the multi-segment Send only');
      const at = calls[0]!;
      // Without CRC and with steerAt, right after those octets; else after the whole first segment.
      if (early(c)) assert.is(at, c.steerAt, 'called after the first steerAt octets');
      else assert.ok(at > 60_000 && at < 65_536, `called after the first segment (${at})`);
      assert.equal(server.memory.subarray(0, at), message.subarray(0, at));
      assert.ok(
        server.memory.subarray(at, length).every((b) => b === 0),
        'nothing after the steer point lands in the posted buffer',
      );
      assert.equal(server.memory.subarray(SINK, SINK + length - at), message.subarray(at));
    });
  });

  test(`a Send longer than the steered receive (${named(c)}) fails that receive with a length error`, async () => {
    await withPair(c, async (pair) => {
      // 1,000 octets after the steer point: less than the rest of the first segment when steered early.
      pair.server.qp.postRecv(steeredReceive(c, pair, 9, 150_000, [], 1000));
      pair.client.memory.set(pattern(150_000, 5), 0);
      pair.client.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [{ lkey: pair.client.mr.lkey, offset: 0, length: 150_000 }] });
      const [failed] = await completions(pair.server.cq, 1);
      assert.is(failed!.wrId, 9);
      assert.is(failed!.status, WcStatus.LocalLengthError);
    });
  });
}

test.run();
