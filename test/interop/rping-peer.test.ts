// The kbtp rping peer against itself on loopback: proves the peer program speaks rping's protocol
// consistently before it meets siw (test/interop/siw-rping.interop.ts), in both MPA CRC modes.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createRnic } from '../../host/rnic/verbs.ts';
import { readRpingInfo, rpingPattern, runRpingClient, runRpingServer, writeRpingInfo, type RpingServerReport } from './rping-peer.ts';

test('rpingPattern matches rping.c for ping 0 and wraps the alphabet', () => {
  const ping0 = new TextDecoder().decode(rpingPattern(0, 64));
  assert.is(ping0, 'rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr\0');
  const ping57 = rpingPattern(57, 64);
  assert.is(ping57[14], 122, 'ping 57 starts at z');
  assert.is(ping57[15], 65, 'then wraps to A');
});

test('the buffer advertisement is {addr u64, rkey u32, len u32} big-endian', () => {
  const bytes = new Uint8Array(16);
  writeRpingInfo(bytes, { address: 0x0102030405060708n, rkey: 0x0a0b0c0d, size: 64 });
  assert.is(Buffer.from(bytes).toString('hex'), '01020304050607080a0b0c0d00000040');
  assert.equal(readRpingInfo(bytes), { address: 0x0102030405060708n, rkey: 0x0a0b0c0d, size: 64 });
});

for (const crc of [false, true]) {
  test(`kbtp rping client and server complete 5 validated iterations (CRC ${crc ? 'on' : 'off'})`, async () => {
    const rnic = createRnic({ name: 'listener' });
    const listener = await rnic.listen({ host: '127.0.0.1', port: 0 });
    const serverLog: string[] = [];
    const served: Promise<RpingServerReport> = listener.next().then((request) => runRpingServer(request, { mpa: { crc }, log: (l) => serverLog.push(l) }));
    try {
      const client = await runRpingClient({ host: '127.0.0.1', port: listener.port, count: 5, mpa: { crc } });
      const server = await served;
      assert.is(client.iterations, 5);
      assert.is(server.iterations, 5);
      assert.is(client.connection.crc, crc);
      assert.is(server.connection.crc, crc);
      assert.is(serverLog[4], `server ping data: ${new TextDecoder().decode(rpingPattern(4, 64).subarray(0, 63))}`);
    } finally {
      await rnic.close();
    }
  });
}

test('a server buffer smaller than the advertisement is reported, not silently truncated', async () => {
  const rnic = createRnic({ name: 'listener' });
  const listener = await rnic.listen({ host: '127.0.0.1', port: 0 });
  const served = listener.next().then((request) => runRpingServer(request, { size: 32 }));
  const client = runRpingClient({ host: '127.0.0.1', port: listener.port, size: 64, stepTimeoutMs: 5000 });
  try {
    assert.match(await rejection(served), /advertises 64 octets, the server buffer holds 32/);
    assert.ok(await rejection(client), 'the client fails too');
  } finally {
    await rnic.close();
  }
});

async function rejection(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
  throw new Error('expected a rejection');
}

test.run();
