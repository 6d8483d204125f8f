// One end of bench/rnic.ts's RDMA pairs, on this thread or the responder's (bench/rnic-responder.ts):
// an RNIC with one region that peers may read and write, a CQ and a QP of ORD/IRD 16, the same
// on every pair so that the rows differ only in transport and placement.
import {
  Access,
  createRnic,
  type CompletionQueue,
  type MemoryRegion,
  type PacketLink,
  type QueuePair,
  type RcQueuePair,
  type Rnic,
} from '../host/rnic/verbs.ts';

export interface Endpoint<Qp> {
  rnic: Rnic;
  mr: MemoryRegion;
  cq: CompletionQueue;
  qp: Qp;
}

/** The CQ depth and send-queue size of the requester's end: deep enough for any window the bench keeps. */
export const REQUESTER_DEPTH = 65536;

function endpointOn<Qp>(rnic: Rnic, regionSize: number, depth: number, createQp: (rnic: Rnic, options: Parameters<Rnic['createQp']>[0]) => Qp): Endpoint<Qp> {
  const pd = rnic.allocPd();
  const mr = rnic.registerMemory(pd, new SharedArrayBuffer(regionSize), { access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead });
  const cq = rnic.createCq({ depth });
  const qp = createQp(rnic, { pd, sendCq: cq, recvCq: cq, maxSendWr: depth, ird: 16, ord: 16 });
  return { rnic, mr, cq, qp };
}

/** An iWARP end (RDMAP/DDP/MPA over TCP). */
export function iwarpEndpoint(name: string, regionSize: number, depth = REQUESTER_DEPTH): Endpoint<QueuePair> {
  return endpointOn(createRnic({ name }), regionSize, depth, (rnic, options) => rnic.createQp(options));
}

/** A RoCE end (IB RC) on `link`. */
export async function roceEndpoint(name: string, regionSize: number, link: PacketLink, depth = REQUESTER_DEPTH): Promise<Endpoint<RcQueuePair>> {
  const rnic = createRnic({ name });
  await rnic.openRoce({ link });
  return endpointOn(rnic, regionSize, depth, (rnic, options) => rnic.createRcQp(options));
}
