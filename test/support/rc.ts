// Two RNICs joined by RC over loopback UDP (optionally through an ImpairedLink each way), with a
// registered buffer on each side: the rig of the RC transport tests and the RoCE benchmark rows.
import {
  Access,
  createRnic,
  ImpairedLink,
  openUdpLink,
  WcStatus,
  type CompletionQueue,
  type Impairments,
  type MemoryRegion,
  type PacketLink,
  type PathMtu,
  type ProtectionDomain,
  type RcQueuePair,
  type Rnic,
  type WorkCompletion,
} from '../../host/rnic/verbs.ts';
import type { RcSetupOptions } from '../../host/rnic/rc/setup.ts';
import { packetsFitting } from '../../host/rnic/rc/send-queue.ts';

export interface RcSide {
  rnic: Rnic;
  qp: RcQueuePair;
  cq: CompletionQueue;
  mr: MemoryRegion;
  /** The protection domain of `qp` and `mr` (a test registers more memory in it). */
  pd: ProtectionDomain;
  memory: Uint8Array;
  /** The kernel UDP link ($KBTP_ROCE_UDP picks batched or dgram; default batched where koffi loads), maybe impaired. */
  link: PacketLink;
}

export interface RcPair {
  client: RcSide;
  server: RcSide;
  close(): Promise<void>;
}

export interface RcPairOptions extends RcSetupOptions {
  /** Setup options of the accepting (server) side instead of these (the connecting side keeps these). */
  acceptOptions?: RcSetupOptions;
  bytes?: number;
  impairments?: Impairments;
  pathMtu?: PathMtu;
  ird?: number;
  ord?: number;
  /** Receives posted on each side before connecting. */
  receives?: number;
  /** Receive buffer each side's UDP socket asks for (UdpLinkOptions.receiveBufferBytes; default the link's 4 MiB). */
  udpReceiveBufferBytes?: number;
  receiveLength?: number;
}

async function side(name: string, bytes: number, options: RcPairOptions, seed: number): Promise<RcSide> {
  const rnic = createRnic({ name });
  const udp = await openUdpLink(options.udpReceiveBufferBytes === undefined ? {} : { receiveBufferBytes: options.udpReceiveBufferBytes });
  const link = options.impairments === undefined ? udp : new ImpairedLink(udp, { ...options.impairments, seed });
  await rnic.openRoce({ link });
  const pd = rnic.allocPd();
  const memory = new Uint8Array(new SharedArrayBuffer(bytes));
  const mr = rnic.registerMemory(pd, memory, { access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead | Access.RemoteAtomic });
  const cq = rnic.createCq({ depth: 65536 });
  const qp = rnic.createRcQp({ pd, sendCq: cq, recvCq: cq, ird: options.ird ?? 16, ord: options.ord ?? 16, maxSendWr: 4096, maxRecvWr: 4096 });
  const receiveLength = options.receiveLength ?? 4096;
  for (let i = 0; i < (options.receives ?? 0); i++) {
    qp.postRecv({ wrId: 1_000_000 + i, sgList: [{ lkey: mr.lkey, offset: bytes - receiveLength * ((i % 4) + 1), length: receiveLength }] });
  }
  return { rnic, qp, cq, mr, pd, memory, link };
}

export async function rcPair(options: RcPairOptions = {}): Promise<RcPair> {
  const bytes = options.bytes ?? 4 * 1024 * 1024;
  const server = await side('rc-server', bytes, options, 7);
  const client = await side('rc-client', bytes, options, 11);
  const listener = await server.rnic.listenRc({ pathMtu: options.pathMtu ?? 4096 });
  const accepted = listener.next().then((request) => request.accept(server.qp, options.acceptOptions ?? options));
  await client.rnic.connectRc(client.qp, { host: '127.0.0.1', port: listener.port, ...options, pathMtu: options.pathMtu ?? 4096 });
  await accepted;
  await listener.close();
  return {
    client,
    server,
    async close() {
      await client.rnic.close();
      await server.rnic.close();
    },
  };
}

/**
 * Read requests a requester on `link` keeps outstanding at path MTU 4096 while no response comes:
 * chunks of 64 response packets (fewer where the link's receive buffer holds fewer, send-queue.ts
 * packetsFitting) inside a Read window of `window` PSNs bounded the same way, at most `ord`, at
 * least one (a chunk goes when nothing else is unacknowledged).
 */
export function readRequestsInWindow(link: PacketLink, window: number, ord: number): number {
  const fit = packetsFitting(link.receiveBufferBytes, 4096);
  return Math.min(ord, Math.max(1, Math.floor(Math.min(window, fit) / Math.min(64, fit))));
}

/** Opens a pair with `options`, runs `body` on its two sides and closes it, whatever happens. */
export async function withRcPair(options: RcPairOptions, body: (pair: RcPair) => Promise<void>): Promise<void> {
  const pair = await rcPair(options);
  try {
    await body(pair);
  } finally {
    await pair.close();
  }
}

/** Waits for `count` completions on `cq` (bounded by `timeoutMs`, generous for a loaded box). */
export async function completions(cq: CompletionQueue, count: number, timeoutMs = 60_000): Promise<WorkCompletion[]> {
  const out: WorkCompletion[] = [];
  const deadline = Date.now() + timeoutMs;
  while (out.length < count) {
    out.push(...cq.poll(count - out.length));
    if (out.length >= count) break;
    if (Date.now() > deadline) throw new Error(`only ${out.length} of ${count} completions within ${timeoutMs} ms`);
    await Promise.race([cq.wait(), new Promise((resolve) => setTimeout(resolve, 50))]);
  }
  return out;
}

export function expectSuccess(list: WorkCompletion[]): void {
  for (const wc of list)
    if (wc.status !== WcStatus.Success) throw new Error(`completion ${String(wc.wrId)} ${wc.opcode}: status ${wc.status} ${wc.error ?? ''}`);
}
