// The responder end of bench/rnic.ts's two-thread rows: an RNIC with one registered region on a
// worker thread of its own, as a deployed target serves its initiators from another thread (in
// fact another process), so a round trip crosses what a deployed one crosses. It answers RDMA
// Reads and places RDMA Writes by itself (the responder needs no work request); for a Write run
// it posts one receive for the Send that ends the run and says when it arrived. It stays until
// told to close.
import { parentPort, workerData } from 'node:worker_threads';
import { openUdpLink, type CompletionQueue, type UdpLinkKind } from '../host/rnic/verbs.ts';
import { iwarpEndpoint, roceEndpoint } from './rnic-endpoint.ts';

export interface ResponderSetup {
  transport: 'iwarp' | 'roce';
  /** iWARP: the MPA CRC (RoCE always carries its ICRC). */
  crc: boolean;
  regionSize: number;
  udpLink: UdpLinkKind;
}

/** What the responder posts: where to connect and the region's key; `ready` and `received` for a Write run's closing Send; `closed`. */
export type ResponderMessage =
  | { type: 'listening'; port: number; rkey: number }
  | { type: 'ready' }
  | { type: 'received'; status: number }
  | { type: 'closed' };

/** What the responder is told: post a receive for the Send that ends a Write run, or close. */
export type ResponderCommand = { type: 'expect-send' } | { type: 'close' };

async function main(): Promise<void> {
  const port = parentPort;
  if (port === null) throw new Error('bench/rnic-responder runs as a worker thread');
  const setup = workerData as ResponderSetup;
  // The responder posts no work request but one receive per Write run: a shallow CQ serves it.
  const depth = 1024;
  let close: () => Promise<void>;
  let postReceive: () => void;
  let cq: CompletionQueue;
  if (setup.transport === 'roce') {
    const { rnic, mr, qp, cq: roceCq } = await roceEndpoint('target', setup.regionSize, await openUdpLink({ udpLink: setup.udpLink }), depth);
    cq = roceCq;
    postReceive = () => qp.postRecv({ wrId: 0, sgList: [] });
    const listener = await rnic.listenRc({ host: '127.0.0.1', port: 0 });
    port.postMessage({ type: 'listening', port: listener.port, rkey: mr.rkey } satisfies ResponderMessage);
    await (await listener.next()).accept(qp, { pathMtu: 4096 });
    await listener.close();
    close = () => rnic.close();
  } else {
    const { rnic, mr, qp, cq: iwarpCq } = iwarpEndpoint('target', setup.regionSize, depth);
    cq = iwarpCq;
    postReceive = () => qp.postRecv({ wrId: 0, sgList: [] });
    const listener = await rnic.listen({ host: '127.0.0.1', port: 0 });
    port.postMessage({ type: 'listening', port: listener.port, rkey: mr.rkey } satisfies ResponderMessage);
    await (await listener.next()).accept(qp, { crc: setup.crc });
    close = async () => {
      qp.destroy();
      await listener.close();
    };
  }
  port.on('message', (command: ResponderCommand) => {
    if (command.type === 'expect-send') {
      postReceive();
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
