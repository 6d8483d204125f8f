// SocketChannel's writes: straight to the socket's handle (host/rnic/handle-writer.ts) where Node
// offers it. What matters: every octet arrives in order, the dones run once each and in write
// order, also when the kernel's buffer is full and libuv holds writes back (the receiver paused),
// pendingBytes counts what is held, and a write to a reset connection fails instead of hanging.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import net from 'node:net';
import { SocketChannel } from '../../host/rnic/channel.ts';
import { HandleWriter, WRITE_DONE, WRITE_QUEUED } from '../../host/rnic/handle-writer.ts';
import { readFileSync } from 'node:fs';
import { LOOPBACK_CONGESTION_CONTROL, congestionControlOf, receiveBufferOf } from '../../host/rnic/socket-window.ts';

interface Peer {
  channel: SocketChannel;
  server: net.Server;
  remote: net.Socket;
}

async function connectPair(loopbackCongestionControl: string | null = null): Promise<Peer> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const accepted = new Promise<net.Socket>((resolve) => server.once('connection', resolve));
  const port = (server.address() as net.AddressInfo).port;
  const channel = await SocketChannel.connect('127.0.0.1', port, 10_000, loopbackCongestionControl);
  const remote = await accepted;
  return { channel, server, remote };
}

function pattern(length: number, seed: number): Uint8Array {
  const bytes = new Uint8Array(length);
  for (let i = 0; i < length; i++) bytes[i] = (i * 31 + seed) & 0xff;
  return bytes;
}

test("a connected channel's socket can take two 1 MiB blocks before its first read, reads woken as before", async () => {
  const { channel, server, remote } = await connectPair();
  try {
    const options = receiveBufferOf((channel as unknown as { fd: number }).fd);
    if (options instanceof Error) throw options;
    assert.ok(options.buffer >= 2 * 2 ** 20, `receive buffer ${options.buffer}`);
    assert.is(options.lowWater, 1);
    // The host's congestion control unless asked (host/rnic/socket-window.ts).
    assert.is(congestionControlOf((channel as unknown as { fd: number }).fd), readFileSync('/proc/sys/net/ipv4/tcp_congestion_control', 'utf8').trim());
    assert.is(channel.congestionControl, undefined);
  } finally {
    channel.destroy();
    remote.destroy();
    server.close();
  }
});

test('a channel connected over loopback with a congestion control named gets it, read back from the kernel', async () => {
  const { channel, server, remote } = await connectPair(LOOPBACK_CONGESTION_CONTROL);
  try {
    assert.is(channel.congestionControl, LOOPBACK_CONGESTION_CONTROL);
    assert.is(congestionControlOf((channel as unknown as { fd: number }).fd), LOOPBACK_CONGESTION_CONTROL);
  } finally {
    channel.destroy();
    remote.destroy();
    server.close();
  }
});

test('writes arrive whole and in order, dones in order, while the receiver holds back', async () => {
  const { channel, server, remote } = await connectPair();
  try {
    remote.pause();
    const received: Buffer[] = [];
    let receivedBytes = 0;
    remote.on('data', (chunk: Buffer) => {
      received.push(chunk);
      receivedBytes += chunk.length;
    });
    // 64 messages of a header, a 256 KiB payload and a trailer: 16 MiB, more than loopback buffers hold.
    const messages = 64;
    const expected: Uint8Array[] = [];
    const dones: number[] = [];
    let failures = 0;
    let heldMost = 0;
    for (let m = 0; m < messages; m++) {
      const parts = [pattern(18, m), pattern(256 * 1024, m + 1), pattern(4, m + 2)];
      expected.push(...parts);
      channel.write(parts, parts.length, (error) => {
        if (error) failures++;
        dones.push(m);
      });
      // Every few messages end the turn, so several writes (and queued ones) are in flight at once.
      if (m % 4 === 3) {
        await new Promise((resolve) => setImmediate(resolve));
        heldMost = Math.max(heldMost, channel.pendingBytes);
      }
    }
    await new Promise((resolve) => setImmediate(resolve));
    heldMost = Math.max(heldMost, channel.pendingBytes);
    assert.ok(heldMost > 0, 'the paused receiver made the kernel hold writes back');
    assert.ok(dones.length < messages, 'not every write could have completed with the receiver paused');
    remote.resume();
    const total = expected.reduce((sum, part) => sum + part.length, 0);
    const deadline = Date.now() + 60_000;
    while ((receivedBytes < total || dones.length < messages) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.is(failures, 0);
    assert.equal(
      dones,
      Array.from({ length: messages }, (_, i) => i),
    );
    assert.is(channel.pendingBytes, 0);
    const all = Buffer.concat(received);
    assert.is(all.length, total);
    let offset = 0;
    for (const part of expected) {
      assert.ok(all.subarray(offset, offset + part.length).equals(part), `bytes at ${offset} match`);
      offset += part.length;
    }
  } finally {
    channel.destroy();
    remote.destroy();
    server.close();
  }
});

test('hundreds of writes held back at once complete in write order (the done queue compacts in place)', async () => {
  const { channel, server, remote } = await connectPair();
  try {
    remote.pause();
    const received: Buffer[] = [];
    remote.on('data', (chunk: Buffer) => received.push(chunk));
    const dones: number[] = [];
    let failures = 0;
    const record = (m: number) => (error?: Error | null) => {
      if (error) failures++;
      dones.push(m);
    };
    // 16 MiB first, more than the loopback buffers hold, so every later write is queued behind it.
    const big = pattern(16 * 1024 * 1024, 1);
    channel.write([big], 1, record(-1));
    await new Promise((resolve) => setImmediate(resolve));
    // Each small write in a turn of its own: a batch each, all waiting at once (past the 256 at which
    // the queue of dones compacts while later ones still wait).
    const messages = 700;
    const small: Uint8Array[] = [];
    for (let m = 0; m < messages; m++) {
      small.push(pattern(8, m));
      channel.write([small[m]!], 1, record(m));
      await new Promise((resolve) => setImmediate(resolve));
    }
    assert.ok(dones.length < 2, 'the writes were held back');
    remote.resume();
    const deadline = Date.now() + 60_000;
    while (dones.length < messages + 1 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.is(failures, 0);
    assert.equal(
      dones,
      Array.from({ length: messages + 1 }, (_, i) => i - 1),
    );
    while (received.reduce((sum, chunk) => sum + chunk.length, 0) < big.length + 8 * messages && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 10));
    const all = Buffer.concat(received);
    assert.ok(all.subarray(0, big.length).equals(big), 'the large write');
    assert.ok(all.subarray(big.length).equals(Buffer.concat(small)), 'the small writes, in order');
  } finally {
    channel.destroy();
    remote.destroy();
    server.close();
  }
});

test('a write to a reset connection completes with an error and the channel closes', async () => {
  const { channel, server, remote } = await connectPair();
  try {
    const closed = new Promise<Error | undefined>((resolve) => channel.setEvents({ onEnd: () => undefined, onClose: resolve }));
    remote.resetAndDestroy();
    // Writes until one fails: the first may still reach the kernel before the RST is seen.
    const outcome = await new Promise<Error | null | undefined>((resolve) => {
      let tries = 0;
      const attempt = (): void => {
        const payload = pattern(64 * 1024, tries);
        channel.write([payload], 1, (error) => {
          if (error) resolve(error);
          else if (++tries > 200) resolve(undefined);
          else setTimeout(attempt, 5);
        });
      };
      attempt();
    });
    assert.ok(outcome instanceof Error, 'a write after the reset failed');
    await closed;
    assert.ok(channel.closed);
  } finally {
    channel.destroy();
    server.close();
  }
});

test('a write done at once behind a held one is reported after it, failures too, in write order', () => {
  // A stand-in handle: the real binding's state array says how each write went, as Node's C++ sets it.
  const wrap = (process as unknown as { binding(name: string): { streamBaseState: Int32Array; kLastWriteWasAsync: number; kBytesWritten: number } }).binding(
    'stream_wrap',
  );
  const held: Array<{ oncomplete(status: number): void }> = [];
  let next: { async: boolean; status: number } = { async: false, status: 0 };
  const write = (request: { oncomplete(status: number): void }, bytes: number): number => {
    wrap.streamBaseState[wrap.kLastWriteWasAsync] = next.async ? 1 : 0;
    wrap.streamBaseState[wrap.kBytesWritten] = bytes;
    if (next.async) held.push(request);
    return next.status;
  };
  const handle = {
    writev: (request: { oncomplete(status: number): void }, chunks: Uint8Array[]) =>
      write(
        request,
        chunks.reduce((sum, chunk) => sum + chunk.length, 0),
      ),
    writeBuffer: (request: { oncomplete(status: number): void }, chunk: Uint8Array) => write(request, chunk.length),
  };
  const reports: Array<string> = [];
  const writer = HandleWriter.for({ _handle: handle } as unknown as net.Socket, (error) => reports.push(error === undefined ? 'ok' : 'error'));
  assert.ok(writer !== undefined);
  const two = [new Uint8Array(10), new Uint8Array(20)];
  assert.is(writer.write(two, 2), WRITE_DONE, 'nothing held: done at once');
  next = { async: true, status: 0 };
  assert.is(writer.write(two, 2), WRITE_QUEUED);
  assert.is(writer.queuedBytes, 30);
  next = { async: false, status: 0 };
  assert.is(writer.write([new Uint8Array(5)], 1), WRITE_QUEUED, 'done at once, but behind a held write');
  next = { async: false, status: -32 };
  assert.is(writer.write(two, 2), WRITE_QUEUED, 'failed at once, behind a held write');
  next = { async: true, status: 0 };
  assert.is(writer.write(two, 2), WRITE_QUEUED);
  next = { async: false, status: 0 };
  assert.is(writer.write(two, 2), WRITE_QUEUED);
  assert.equal(reports, []);
  held.shift()!.oncomplete(0);
  assert.equal(reports, ['ok', 'ok', 'error'], 'the held write, then the two behind it, not the next held one');
  assert.is(writer.queuedBytes, 30);
  held.shift()!.oncomplete(-104);
  assert.equal(reports, ['ok', 'ok', 'error', 'error', 'ok']);
  assert.is(writer.queuedBytes, 0);
  next = { async: false, status: 0 };
  assert.is(writer.write(two, 2), WRITE_DONE, 'nothing held any more');
  next = { async: false, status: -32 };
  assert.is(writer.write(two, 2), -32, 'a failure with nothing held is answered at once');
});

test('the chunk list a writev was given keeps none of its chunks once the write returned', () => {
  // HandleWriter reuses one exact-length list per chunk count; a chunk it kept would stay
  // reachable (a caller's buffer, a ring view) until the next write of that many chunks.
  const wrap = (process as unknown as { binding(name: string): { streamBaseState: Int32Array; kLastWriteWasAsync: number; kBytesWritten: number } }).binding(
    'stream_wrap',
  );
  const lists: Uint8Array[][] = [];
  let async = false;
  const handle = {
    writev: (_request: unknown, chunks: Uint8Array[]) => {
      lists.push(chunks);
      wrap.streamBaseState[wrap.kLastWriteWasAsync] = async ? 1 : 0;
      wrap.streamBaseState[wrap.kBytesWritten] = chunks.reduce((sum, chunk) => sum + chunk.length, 0);
      return 0;
    },
    writeBuffer: () => 0,
  };
  const writer = HandleWriter.for({ _handle: handle } as unknown as net.Socket, () => undefined);
  assert.ok(writer !== undefined);
  const three = [new Uint8Array(10), new Uint8Array(20), new Uint8Array(30)];
  assert.is(writer.write(three, 3), WRITE_DONE);
  async = true;
  assert.is(writer.write(three, 3), WRITE_QUEUED);
  async = false;
  assert.is(lists.length, 2);
  assert.is(lists[0], lists[1], 'one kept list for three chunks');
  assert.equal(
    lists[0]!.map((chunk) => chunk.length),
    [0, 0, 0],
    'nothing of the caller left in it',
  );
});

test.run();
