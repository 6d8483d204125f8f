// The responder end of bench/rnic.ts's two-thread rows: an RNIC with one registered region on a
// worker thread of its own, as a deployed target serves its initiators from another thread (in
// fact another process), so a Read's round trip crosses what a deployed one crosses. It answers
// RDMA Reads by itself (the responder needs no work request), so it only listens, accepts one
// connection and stays until told to close.
import { parentPort, workerData } from 'node:worker_threads';
import { Access, createRnic, openUdpLink, type UdpLinkKind } from '../host/rnic/verbs.ts';

export interface ResponderSetup {
  transport: 'iwarp' | 'roce';
  /** iWARP: the MPA CRC (RoCE always carries its ICRC). */
  crc: boolean;
  regionSize: number;
  udpLink: UdpLinkKind;
}

/** What the responder posts: where to connect and the region's key, then `closed` when asked to close. */
export type ResponderMessage = { type: 'listening'; port: number; rkey: number } | { type: 'closed' };

async function main(): Promise<void> {
  const port = parentPort;
  if (port === null) throw new Error('bench/rnic-responder runs as a worker thread');
  const setup = workerData as ResponderSetup;
  const rnic = createRnic({ name: 'target' });
  if (setup.transport === 'roce') await rnic.openRoce({ link: await openUdpLink({ udpLink: setup.udpLink }) });
  const pd = rnic.allocPd();
  const mr = rnic.registerMemory(pd, new SharedArrayBuffer(setup.regionSize), { access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead });
  const cq = rnic.createCq({ depth: 1024 });
  const qpOptions = { pd, sendCq: cq, recvCq: cq, maxSendWr: 1024, ird: 16, ord: 16 };
  let close: () => Promise<void>;
  if (setup.transport === 'roce') {
    const qp = rnic.createRcQp(qpOptions);
    const listener = await rnic.listenRc({ host: '127.0.0.1', port: 0 });
    port.postMessage({ type: 'listening', port: listener.port, rkey: mr.rkey } satisfies ResponderMessage);
    await (await listener.next()).accept(qp, { pathMtu: 4096 });
    await listener.close();
    close = () => rnic.close();
  } else {
    const qp = rnic.createQp(qpOptions);
    const listener = await rnic.listen({ host: '127.0.0.1', port: 0 });
    port.postMessage({ type: 'listening', port: listener.port, rkey: mr.rkey } satisfies ResponderMessage);
    await (await listener.next()).accept(qp, { crc: setup.crc });
    close = async () => {
      qp.destroy();
      await listener.close();
    };
  }
  port.once('message', () => {
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
