// A receive's `steer`: after a multi-segment Send's first segment the receiver may point the
// rest elsewhere (a KBTP target sends an inline STORE's data straight to its block; issue 16).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { connectedPair, completions, pattern, type Pair } from '../support/rnic.ts';
import { WcStatus, type Sge } from '../../host/rnic/verbs.ts';

async function withPair(body: (pair: Pair) => Promise<void>): Promise<void> {
  const pair = await connectedPair({ size: 1 << 20 });
  try {
    await body(pair);
  } finally {
    await pair.close();
  }
}

const SINK = 600_000;

test('a steered receive: the first segment stays where it was posted, the rest goes where steer() said', async () => {
  await withPair(async ({ client, server }) => {
    const calls: number[] = [];
    const length = 150_000;
    const receive: { wrId: number; sgList: readonly Sge[]; steer: (received: number) => void } = {
      wrId: 7,
      sgList: [{ lkey: server.mr.lkey, offset: 0, length: 200_000 }],
      steer: (received) => {
        calls.push(received);
        receive.sgList = [
          { lkey: server.mr.lkey, offset: 0, length: received },
          { lkey: server.mr.lkey, offset: SINK, length: length - received },
        ];
      },
    };
    server.qp.postRecv(receive);
    // A single-segment Send does not ask.
    server.qp.postRecv({ ...receive, wrId: 8, sgList: [{ lkey: server.mr.lkey, offset: 400_000, length: 100 }] });
    const message = pattern(length, 3);
    client.memory.set(message, 0);
    client.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [{ lkey: client.mr.lkey, offset: 0, length }] });
    client.memory.set(pattern(60, 4), 300_000);
    client.qp.postSend({ wrId: 2, opcode: 'SEND', sgList: [{ lkey: client.mr.lkey, offset: 300_000, length: 60 }] });
    await completions(client.cq, 2);
    const received = await completions(server.cq, 2);
    assert.equal(
      received.map((c) => [c.wrId, c.status, c.byteLength]),
      [
        [7, WcStatus.Success, length],
        [8, WcStatus.Success, 60],
      ],
    );
    assert.is(calls.length, 1, 'steer() is called once, for the multi-segment Send only');
    const first = calls[0]!;
    assert.ok(first > 0 && first < 65_536, `the first segment's length (${first})`);
    assert.equal(server.memory.subarray(0, first), message.subarray(0, first));
    assert.ok(
      server.memory.subarray(first, length).every((b) => b === 0),
      'nothing after the first segment lands in the posted buffer',
    );
    assert.equal(server.memory.subarray(SINK, SINK + length - first), message.subarray(first));
  });
});

for (const crc of [false, true]) {
  test(`steerAt with MPA CRC ${crc ? 'on: steer() still waits for the first segment' : 'off: steer() comes right after the first steerAt octets'}`, async () => {
    const pair = await connectedPair({ size: 1 << 20, accept: { crc }, connect: { crc } });
    try {
      const { client, server } = pair;
      const calls: number[] = [];
      const length = 150_000;
      const steerAt = 56;
      const receive: { wrId: number; sgList: readonly Sge[]; steer: (received: number) => void; steerAt: number } = {
        wrId: 7,
        sgList: [{ lkey: server.mr.lkey, offset: 0, length: 200_000 }],
        steerAt,
        steer: (received) => {
          calls.push(received);
          receive.sgList = [
            { lkey: server.mr.lkey, offset: 0, length: received },
            { lkey: server.mr.lkey, offset: SINK, length: length - received },
          ];
        },
      };
      server.qp.postRecv(receive);
      // A single-segment Send longer than steerAt does not ask.
      server.qp.postRecv({ ...receive, wrId: 8, sgList: [{ lkey: server.mr.lkey, offset: 400_000, length: 100 }] });
      const message = pattern(length, 5);
      client.memory.set(message, 0);
      client.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [{ lkey: client.mr.lkey, offset: 0, length }] });
      client.memory.set(pattern(80, 6), 300_000);
      client.qp.postSend({ wrId: 2, opcode: 'SEND', sgList: [{ lkey: client.mr.lkey, offset: 300_000, length: 80 }] });
      await completions(client.cq, 2);
      const received = await completions(server.cq, 2);
      assert.equal(
        received.map((c) => [c.wrId, c.status, c.byteLength]),
        [
          [7, WcStatus.Success, length],
          [8, WcStatus.Success, 80],
        ],
      );
      assert.is(calls.length, 1, 'steer() is called once, for the multi-segment Send only');
      const at = calls[0]!;
      if (crc) assert.ok(at > 60_000 && at < 65_536, `called after the first segment (${at})`);
      else assert.is(at, steerAt, 'called after the first steerAt octets');
      assert.equal(server.memory.subarray(0, at), message.subarray(0, at));
      assert.ok(
        server.memory.subarray(at, length).every((b) => b === 0),
        'nothing after the steer point lands in the posted buffer',
      );
      assert.equal(server.memory.subarray(SINK, SINK + length - at), message.subarray(at));
    } finally {
      await pair.close();
    }
  });
}

test('a Send longer than the steered receive fails that receive with a length error', async () => {
  await withPair(async ({ client, server }) => {
    const receive: { wrId: number; sgList: readonly Sge[]; steer: (received: number) => void } = {
      wrId: 9,
      sgList: [{ lkey: server.mr.lkey, offset: 0, length: 200_000 }],
      steer: (received) => {
        receive.sgList = [
          { lkey: server.mr.lkey, offset: 0, length: received },
          { lkey: server.mr.lkey, offset: SINK, length: 1000 },
        ];
      },
    };
    server.qp.postRecv(receive);
    client.memory.set(pattern(150_000, 5), 0);
    client.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [{ lkey: client.mr.lkey, offset: 0, length: 150_000 }] });
    const [failed] = await completions(server.cq, 1);
    assert.is(failed!.wrId, 9);
    assert.is(failed!.status, WcStatus.LocalLengthError);
  });
});

test.run();
