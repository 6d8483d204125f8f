// A target started in-process on a free loopback port, with four tenants, and a raw KBTP client
// that sends arbitrary bytes over kbtp's RNIC, for the tests of the target and the initiator.
import { resolveTargetSettings, type TargetSettings } from '../../host/kbtp/server/target-config.ts';
import { startTarget, type RunningTarget } from '../../host/kbtp/server/target.ts';
import { connect, type ConnectOptions, type KbtpSession } from '../../host/kbtp/initiator.ts';
import {
  createRnic,
  Access,
  WcStatus,
  RcQueuePair,
  type Rnic,
  type AnyQueuePair,
  type CompletionQueue,
  type MemoryRegion,
  type DisconnectInfo,
} from '../../host/rnic/verbs.ts';
import { encodeHello } from '../../host/kbtp/wire/hello.ts';

export const SECRETS = { alpha: 'alpha-secret', beta: 'beta-secret', gamma: 'gamma-secret' };

export function testSettings(overrides: Record<string, unknown> = {}): TargetSettings {
  return resolveTargetSettings({
    listen: '127.0.0.1:0',
    // KBTP_TEST_TRANSPORT=roce runs the battery over IB RC / RoCEv2 (make test does both).
    transport: process.env.KBTP_TEST_TRANSPORT ?? 'iwarp',
    workers: 2,
    pool: { blockSize: 4096, blockCount: 64, handleCount: 256, maxInline: 1024 },
    // Long enough that a ticket taken by a test is never reclaimed on a loaded CI box between its
    // take and its BIND; the test of abandonment itself sets its own short timeout.
    session: { credits: 4, ticketTimeoutMs: 5000 },
    tenants: [
      { name: 'alpha', secret: SECRETS.alpha, quota: 24, storeRange: { first: 0, count: 64 }, loadScope: { first: 0, count: 256 } },
      { name: 'beta', secret: SECRETS.beta, quota: 8, storeRange: { first: 64, count: 64 }, loadScope: { first: 64, count: 64 } },
      {
        name: 'gamma',
        secret: SECRETS.gamma,
        quota: 16,
        storeRange: { first: 128, count: 64 },
        loadScope: { first: 0, count: 256 },
        trust: { directLoad: true, directAlloc: true },
      },
      { name: 'open', open: true, quota: 8, storeRange: { first: 192, count: 8 }, loadScope: { first: 192, count: 8 } },
    ],
    ...overrides,
  } as never);
}

export interface Rig {
  target: RunningTarget;
  address: string;
  session(tenant: keyof typeof SECRETS | 'open', options?: ConnectOptions): Promise<KbtpSession>;
  stop(): Promise<void>;
}

export async function startRig(settings: TargetSettings = testSettings()): Promise<Rig> {
  const target = await startTarget(settings, {
    log: process.env.KBTP_TEST_LOG === '1' ? (line) => console.error(line) : () => undefined,
    verbose: process.env.KBTP_TEST_LOG === '1',
  });
  const address = `127.0.0.1:${target.port}`;
  const sessions: KbtpSession[] = [];
  return {
    target,
    address,
    async session(tenant, options = {}) {
      const session = await connect(address, { tenant, secret: tenant === 'open' ? '' : SECRETS[tenant], transport: settings.transport, ...options });
      sessions.push(session);
      return session;
    },
    async stop() {
      await Promise.all(sessions.map((session) => session.close(500).catch(() => undefined)));
      await target.stop(1000);
    },
  };
}

/** A KBTP peer that sends whatever bytes a test gives it and collects every message it receives. */
export class RawClient {
  private readonly received: Uint8Array[] = [];
  private readonly waiters: Array<(message: Uint8Array) => void> = [];
  private sendSlot = 0;
  readonly disconnected: Promise<DisconnectInfo>;
  private constructor(
    readonly rnic: Rnic,
    readonly qp: AnyQueuePair,
    private readonly cq: CompletionQueue,
    private readonly receiveBuffer: Uint8Array,
    private readonly receiveRegion: MemoryRegion,
    private readonly sendBuffer: Uint8Array,
    private readonly sendRegion: MemoryRegion,
    /** A registered buffer the test may name in descriptors (RemoteRead | RemoteWrite). */
    readonly data: Uint8Array,
    readonly dataRegion: MemoryRegion,
  ) {
    this.disconnected = qp.whenDisconnected();
  }

  static async connect(address: string): Promise<RawClient> {
    const [host, port] = address.split(':');
    const rnic = createRnic({ name: 'raw-client' });
    const pd = rnic.allocPd();
    const cq = rnic.createCq({ depth: 1024 });
    const roce = process.env.KBTP_TEST_TRANSPORT === 'roce';
    const qp = roce ? rnic.createRcQp({ pd, sendCq: cq, recvCq: cq }) : rnic.createQp({ pd, sendCq: cq, recvCq: cq });
    const receiveBuffer = new Uint8Array(256 * 32);
    const sendBuffer = new Uint8Array(2048 * 16);
    const data = new Uint8Array(65536);
    const client = new RawClient(
      rnic,
      qp,
      cq,
      receiveBuffer,
      rnic.registerMemory(pd, receiveBuffer, { access: Access.LocalWrite }),
      sendBuffer,
      rnic.registerMemory(pd, sendBuffer, { access: Access.LocalWrite }),
      data,
      rnic.registerMemory(pd, data, { access: Access.LocalWrite | Access.RemoteRead | Access.RemoteWrite }),
    );
    for (let i = 0; i < 32; i++) client.postReceive(i);
    void client.receiveMessages();
    if (qp instanceof RcQueuePair) await rnic.connectRc(qp, { host: host ?? '127.0.0.1', port: Number(port) });
    else await rnic.connect(qp, { host: host ?? '127.0.0.1', port: Number(port), crc: false });
    return client;
  }

  private postReceive(index: number): void {
    this.qp.postRecv({ wrId: 1000 + index, sgList: [{ lkey: this.receiveRegion.stag, offset: index * 256, length: 256 }] });
  }

  private async receiveMessages(): Promise<void> {
    for (;;) {
      await this.cq.wait();
      for (const completion of this.cq.poll(64)) {
        const id = Number(completion.wrId);
        if (id < 1000 || completion.status !== WcStatus.Success) continue;
        const index = id - 1000;
        const message = this.receiveBuffer.slice(index * 256, index * 256 + completion.byteLength);
        if (this.qp.state === 'rts') this.postReceive(index);
        const waiter = this.waiters.shift();
        if (waiter !== undefined) waiter(message);
        else this.received.push(message);
      }
      if (this.qp.state === 'error' && this.cq.size === 0) return;
    }
  }

  send(message: Uint8Array): void {
    const offset = (this.sendSlot++ % 16) * 2048;
    this.sendBuffer.set(message, offset);
    this.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [{ lkey: this.sendRegion.stag, offset, length: message.length }] });
  }

  hello(tenant: string, secret: string, version = 1, capabilities = 0): void {
    this.send(encodeHello({ version, requestId: 77n, capabilities, initiatorCredits: 8, tenant, credential: new TextEncoder().encode(secret) }));
  }

  /** The next message, or undefined when none arrives within `timeoutMs`. */
  next(timeoutMs = 2000): Promise<Uint8Array | undefined> {
    const queued = this.received.shift();
    if (queued !== undefined) return Promise.resolve(queued);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        const index = this.waiters.indexOf(waiter);
        if (index >= 0) this.waiters.splice(index, 1);
        resolve(undefined);
      }, timeoutMs);
      const waiter = (message: Uint8Array): void => {
        clearTimeout(timer);
        resolve(message);
      };
      this.waiters.push(waiter);
    });
  }

  async close(): Promise<void> {
    this.qp.disconnect();
    await this.rnic.close();
  }
}
