// The responder end of bench/rnic.ts's two-thread rows: an RNIC with one registered region on a
// worker thread of its own, as a deployed target serves its initiators from another thread (in
// fact another process), so a round trip crosses what a deployed one crosses. It answers RDMA
// Reads and places RDMA Writes by itself (the responder needs no work request); for a Write run
// it posts one receive for the Send that ends the run and says when it arrived. It stays until
// told to close.
import { parentPort, workerData } from 'node:worker_threads';
import { openUdpLink, type AnyQueuePair, type UdpLinkKind } from '../host/rnic/verbs.ts';
import { osThreadId, roceSideCounters, type RoceSideCounters } from './rnic-counters.ts';
import { iwarpEndpoint, roceEndpoint, type Endpoint } from './rnic-endpoint.ts';

export interface ResponderSetup {
  transport: 'iwarp' | 'roce';
  /** iWARP: the MPA CRC (RoCE always carries its ICRC). */
  crc: boolean;
  regionSize: number;
  udpLink: UdpLinkKind;
}

/**
 * What the responder posts: where to connect, the region's key and its OS thread id (0 where
 * unknown: CPU by thread, --counters); `ready` and `received` for a Write run's closing Send;
 * its RC counters (RoCE; none over iWARP); `closed`.
 */
export type ResponderMessage =
  | { type: 'listening'; port: number; rkey: number; threadId: number }
  | { type: 'ready' }
  | { type: 'received'; status: number }
  | { type: 'counters'; counters: RoceSideCounters | undefined }
  | { type: 'closed' };

/** What the responder is told: post a receive for the Send that ends a Write run, report its counters, or close. */
export type ResponderCommand = { type: 'expect-send' } | { type: 'counters' } | { type: 'close' };

async function main(): Promise<void> {
  const port = parentPort;
  if (port === null) throw new Error('bench/rnic-responder runs as a worker thread');
  const setup = workerData as ResponderSetup;
  // The responder posts no work request but one receive per Write run: a shallow CQ serves it.
  const depth = 1024;
  let end: Endpoint<AnyQueuePair>;
  let close: () => Promise<void>;
  let counters: () => RoceSideCounters | undefined = () => undefined;
  const threadId = osThreadId();
  if (setup.transport === 'roce') {
    const link = await openUdpLink({ udpLink: setup.udpLink });
    const roce = await roceEndpoint('target', setup.regionSize, link, depth);
    const listener = await roce.rnic.listenRc({ host: '127.0.0.1', port: 0 });
    port.postMessage({ type: 'listening', port: listener.port, rkey: roce.mr.rkey, threadId } satisfies ResponderMessage);
    await (await listener.next()).accept(roce.qp, { pathMtu: 4096 });
    await listener.close();
    end = roce;
    close = () => roce.rnic.close();
    counters = () => roceSideCounters(roce.rnic, roce.qp, link);
  } else {
    const iwarp = iwarpEndpoint('target', setup.regionSize, depth);
    const listener = await iwarp.rnic.listen({ host: '127.0.0.1', port: 0 });
    port.postMessage({ type: 'listening', port: listener.port, rkey: iwarp.mr.rkey, threadId } satisfies ResponderMessage);
    await (await listener.next()).accept(iwarp.qp, { crc: setup.crc });
    end = iwarp;
    close = async () => {
      iwarp.qp.destroy();
      await listener.close();
    };
  }
  const { qp, cq } = end;
  port.on('message', (command: ResponderCommand) => {
    if (command.type === 'expect-send') {
      qp.postRecv({ wrId: 0, sgList: [] });
      port.postMessage({ type: 'ready' } satisfies ResponderMessage);
      void (async () => {
        for (;;) {
          const [completion] = cq.poll(1);
          if (completion !== undefined) {
            port.postMessage({ type: 'received', status: completion.status } satisfies ResponderMessage);
            return;
          }
          await cq.wait();
        }
      })();
      return;
    }
    if (command.type === 'counters') {
      port.postMessage({ type: 'counters', counters: counters() } satisfies ResponderMessage);
      return;
    }
    void close().then(() => {
      port.postMessage({ type: 'closed' } satisfies ResponderMessage);
      port.close();
    });
  });
}

main().catch((error: unknown) => {
  process.nextTick(() => {
    throw error;
  });
});
