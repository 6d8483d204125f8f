// Shared setup for the RNIC tests: two RNIC instances (two "hosts") connected over loopback TCP.
import {
  Access,
  createRnic,
  type CompletionQueue,
  type ConnectionSummary,
  type InitiatorOptions,
  type Listener,
  type MemoryRegion,
  type ProtectionDomain,
  type QueuePair,
  type ResponderOptions,
  type Rnic,
  type WorkCompletion,
} from '../../host/rnic/verbs.ts';

export interface Side {
  rnic: Rnic;
  pd: ProtectionDomain;
  cq: CompletionQueue;
  qp: QueuePair;
  memory: Uint8Array;
  mr: MemoryRegion;
}

export interface Pair {
  client: Side;
  server: Side;
  listener: Listener;
  clientSummary: ConnectionSummary;
  serverSummary: ConnectionSummary;
  close(): Promise<void>;
}

export interface PairOptions {
  size?: number;
  shared?: boolean;
  access?: number;
  connect?: InitiatorOptions;
  accept?: ResponderOptions;
  ird?: number;
  ord?: number;
  /** Receives each side posts before connecting. */
  preposted?: number;
  recvSize?: number;
}

export function makeSide(rnic: Rnic, options: PairOptions): Side {
  const pd = rnic.allocPd();
  const size = options.size ?? 1 << 20;
  const memory = new Uint8Array(options.shared === false ? new ArrayBuffer(size) : new SharedArrayBuffer(size));
  const mr = rnic.registerMemory(pd, memory, { access: options.access ?? Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead | Access.RemoteAtomic });
  const cq = rnic.createCq({ depth: 8192 });
  const qp = rnic.createQp({ pd, sendCq: cq, recvCq: cq, ird: options.ird ?? 16, ord: options.ord ?? 16, maxSendWr: 4096, maxRecvWr: 4096 });
  return { rnic, pd, cq, qp, memory, mr };
}

export async function connectedPair(options: PairOptions = {}): Promise<Pair> {
  const server = makeSide(createRnic({ name: 'server' }), options);
  const client = makeSide(createRnic({ name: 'client' }), options);
  const recvSize = options.recvSize ?? 4096;
  for (let i = 0; i < (options.preposted ?? 0); i++) {
    // Receives live in the upper half of memory, one slot each.
    const offset = (server.memory.length >> 1) + ((i * recvSize) % (server.memory.length >> 1));
    server.qp.postRecv({ wrId: 1000 + i, sgList: [{ lkey: server.mr.lkey, offset, length: recvSize }] });
    client.qp.postRecv({ wrId: 1000 + i, sgList: [{ lkey: client.mr.lkey, offset, length: recvSize }] });
  }
  const listener = await server.rnic.listen({ host: '127.0.0.1', port: 0 });
  const accepted = listener.next().then((request) => request.accept(server.qp, options.accept ?? {}));
  const clientSummary = await client.rnic.connect(client.qp, { host: '127.0.0.1', port: listener.port, ...(options.connect ?? {}) });
  const serverSummary = await accepted;
  return {
    client,
    server,
    listener,
    clientSummary,
    serverSummary,
    async close() {
      client.qp.destroy();
      server.qp.destroy();
      await listener.close();
    },
  };
}

/** Waits for `count` completions on `cq` (or fails after `timeoutMs`). */
export async function completions(cq: CompletionQueue, count: number, timeoutMs = 5000): Promise<WorkCompletion[]> {
  const out: WorkCompletion[] = [];
  const deadline = Date.now() + timeoutMs;
  while (out.length < count) {
    out.push(...cq.poll(count - out.length));
    if (out.length >= count) break;
    if (Date.now() > deadline) throw new Error(`timed out with ${out.length} of ${count} completions: ${JSON.stringify(out, replacer)}`);
    await Promise.race([cq.wait(), new Promise((resolve) => setTimeout(resolve, 20))]);
  }
  return out;
}

export function replacer(_key: string, value: unknown): unknown {
  return typeof value === 'bigint' ? `${value}n` : value instanceof Uint8Array ? Buffer.from(value).toString('hex') : value;
}

export function pattern(length: number, seed: number): Uint8Array {
  const out = new Uint8Array(length);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff;
  }
  return out;
}

export const delay = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
