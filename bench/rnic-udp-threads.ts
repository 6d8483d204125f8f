// bench/rnic.ts's two-thread UDP row: the batched UDP link alone (no RC, no ICRC, no placement)
// with its receiver on a worker thread of its own (bench/rnic-udp-receiver.ts), as the RoCE
// two-thread rows run. The one-thread "udp-batched" row sends and receives on one thread, where
// the loopback path stays on one CPU; across two threads the same datagrams cost the sender
// more kernel time per GiB (session 15, docs/notes/2026-12-02/issue-15-session15.md), so the
// one-thread row is no floor for the two-thread RoCE rows: this row is. Runs go through
// udp-pairs.ts's pump (udpPairRun), which the receiver thread credits as the one-thread pairs do.
import { BatchedUdpSocket } from '../host/rnic/rc/batched-udp-socket.ts';
import { spawnWorker } from '../host/util/spawn-worker.ts';
import type { UdpReceiverCommand, UdpReceiverMessage, UdpReceiverSetup } from './rnic-udp-receiver.ts';
import { CREDIT_EVERY, type UdpPair } from './udp-pairs.ts';

/**
 * Datagrams in flight at most (2 MiB): the one-thread pump's 128 kept this pair waiting on
 * cross-thread credits at a fraction of a CPU, below the RoCE two-thread rows (16 x 256 KiB
 * Reads keep 4 MiB in flight); the socket buffers (4 MiB asked) hold it.
 */
export const TWO_THREAD_WINDOW = 512;

export interface TwoThreadUdpPair extends UdpPair {
  /** The receiver's OS thread id, where known (CPU by thread, --counters). */
  receiverThread?: number;
}

export async function twoThreadUdpPair(window = TWO_THREAD_WINDOW): Promise<TwoThreadUdpPair> {
  const extension = import.meta.url.endsWith('.ts') ? '.ts' : '.js';
  const shared = new SharedArrayBuffer(8);
  const counts = new Int32Array(shared);
  const setup: UdpReceiverSetup = { received: shared, creditEvery: CREDIT_EVERY };
  const worker = spawnWorker(new URL(`./rnic-udp-receiver${extension}`, import.meta.url), { workerData: setup });
  const failed = new Promise<never>((_, reject) => worker.once('error', reject));
  const next = (): Promise<UdpReceiverMessage> => Promise.race([new Promise<UdpReceiverMessage>((resolve) => worker.once('message', resolve)), failed]);
  const tell = (command: UdpReceiverCommand): void => worker.postMessage(command);
  const listening = await next();
  if (listening.type !== 'listening') throw new Error('bench/rnic: the UDP receiver thread did not listen');
  const sender = await BatchedUdpSocket.open();
  tell({ type: 'sender', port: sender.local.port });
  const to = { address: '127.0.0.1', port: listening.port };
  const empty = new Uint8Array(0);
  let credited = (): void => undefined;
  sender.setReceiver(() => credited());
  return {
    send: (datagram) => sender.send(to, datagram, empty, empty),
    sendCredit: () => undefined,
    onData: () => undefined,
    onCredit: (handler) => (credited = handler),
    startRun(count) {
      Atomics.store(counts, 0, 0);
      Atomics.store(counts, 1, count);
    },
    arrived: () => Atomics.load(counts, 0),
    window,
    ...(listening.threadId > 0 ? { receiverThread: listening.threadId } : {}),
    async close() {
      await sender.close();
      const closed = next();
      tell({ type: 'close' });
      await closed;
      await worker.terminate();
    },
  };
}
