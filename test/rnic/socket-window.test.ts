// host/rnic/socket-window.ts: a listening socket widened with widenReceiveWindow hands every
// connection it accepts a receive buffer that holds the window asked for, with the low-water mark
// back at 1 (a mark left high would hold every read back until that much had arrived). Counts
// read back from the kernel (getsockopt), no timing.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import net from 'node:net';
import {
  LOOPBACK_CONGESTION_CONTROL,
  congestionControlOf,
  isLoopback,
  receiveBufferOf,
  useLoopbackCongestionControl,
  widenReceiveWindow,
} from '../../host/rnic/socket-window.ts';

const WINDOW = 2 ** 20;

function fdOf(handleOwner: net.Server | net.Socket): number {
  const fd = (handleOwner as unknown as { _handle?: { fd?: number } })._handle?.fd;
  if (typeof fd !== 'number' || fd < 0) throw new Error('no descriptor');
  return fd;
}

/** The receive buffer and low-water mark of a connection `server` accepts. */
async function acceptedBuffer(server: net.Server): Promise<{ buffer: number; lowWater: number }> {
  const accepted = new Promise<net.Socket>((resolve) => server.once('connection', resolve));
  const address = server.address() as net.AddressInfo;
  const client = net.connect(address.port, '127.0.0.1');
  const socket = await accepted;
  try {
    const options = receiveBufferOf(fdOf(socket));
    if (options instanceof Error) throw options;
    return options;
  } finally {
    socket.destroy();
    client.destroy();
  }
}

async function listening(): Promise<net.Server> {
  const server = net.createServer({ pauseOnConnect: true });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return server;
}

test('a widened listener hands its connections a buffer for the window, reads woken as before', async () => {
  const plain = await listening();
  const widened = await listening();
  try {
    const inEffect = widenReceiveWindow(fdOf(widened), WINDOW);
    if (inEffect instanceof Error) throw inEffect;
    assert.ok(inEffect >= WINDOW, `listener's buffer ${inEffect}`);
    const before = await acceptedBuffer(plain);
    const after = await acceptedBuffer(widened);
    assert.ok(after.buffer >= WINDOW, `accepted connection's buffer ${after.buffer}`);
    assert.ok(after.buffer > before.buffer, `widened ${after.buffer}, default ${before.buffer}`);
    assert.is(after.lowWater, 1);
  } finally {
    plain.close();
    widened.close();
  }
});

test("a loopback listener's congestion control (no BBR pacing timer) is what its connections get", async () => {
  const server = await listening();
  try {
    assert.is(useLoopbackCongestionControl(fdOf(server), LOOPBACK_CONGESTION_CONTROL), LOOPBACK_CONGESTION_CONTROL);
    assert.is(congestionControlOf(fdOf(server)), LOOPBACK_CONGESTION_CONTROL);
    const accepted = new Promise<net.Socket>((resolve) => server.once('connection', resolve));
    const client = net.connect((server.address() as net.AddressInfo).port, '127.0.0.1');
    const socket = await accepted;
    try {
      assert.is(congestionControlOf(fdOf(socket)), LOOPBACK_CONGESTION_CONTROL);
    } finally {
      socket.destroy();
      client.destroy();
    }
  } finally {
    server.close();
  }
});

test('loopback hosts: names and addresses, IPv4-mapped ones included', () => {
  assert.equal(
    ['127.0.0.1', '127.3.2.1', 'localhost', '::1', '::ffff:127.0.0.1', '10.0.0.1', '::ffff:10.0.0.1', 'example.org', '0.0.0.0', '1270.0.0.1'].map(isLoopback),
    [true, true, true, true, true, false, false, false, false, false],
  );
});

test('a descriptor that is no socket is refused with the reason', () => {
  const result = widenReceiveWindow(0x7ffffff0, WINDOW);
  assert.instance(result, Error);
  assert.match((result as Error).message, /errno/);
  assert.instance(useLoopbackCongestionControl(0x7ffffff0, LOOPBACK_CONGESTION_CONTROL), Error);
});

test.run();
