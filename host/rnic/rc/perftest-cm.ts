// kbtp as the server end of perftest's bandwidth tests when the client runs with -R (perftest
// 6.06 as Debian 12 ships it): both of its QPs come over RDMA CM and its setup exchange runs over
// the first connection's Sends instead of a TCP side channel. As seen against ib_write_bw -R on
// rxe (docs/INTEROP.md), the client:
//   1. connects an exchange QP through RDMA CM to the test port; then, each item one Send answered
//      by one Send: its version (16 octets), cycle-buffer and cache-line sizes (4 each), the MTU
//      (2, ASCII ibv_mtu code), and one all-zero 56-octet key message;
//   2. connects its test QP through RDMA CM to the same port, and sends another all-zero key
//      message, then its keys (perftest-format.ts: the binary struct), then the keys again after
//      RTR as a barrier;
//   3. after its run: two key barriers, five 8-octet report items, the closing keys, and then it
//      disconnects both QPs (no "done" over RDMA CM).
// kbtp answers as perftest-setup.ts does over TCP: the client's own version and sizes, the smaller
// MTU, zeros to zeros and report items, and its own keys (the test QP, the region's rkey and start).
// connectPerftestCm is the same sequence from the client's side, for a perftest -R server.

import { RnicError } from '../errors.ts';
import type { MemoryRegion, ProtectionDomain } from '../memory.ts';
import { connectRdmaCm } from './cm-initiator.ts';
import type { CmConnectionRequest } from './cm-responder.ts';
import type { RoceEndpoint } from './endpoint.ts';
import { RcMessageChannel, type MessageChannelVerbs } from './message-channel.ts';
import { decodePerftestCmKeys, encodePerftestCmKeys, PERFTEST_CM_KEY_MESSAGE_LENGTH, type PerftestCmKeys } from './perftest-format.ts';
import { exchangePerftestClosing, exchangePerftestPreamble } from './perftest-client.ts';
import {
  answerAfterRun,
  answerPerftestPreamble,
  answerPerftestRun,
  DEFAULT_RUN_TIMEOUT_MS,
  DEFAULT_STEP_TIMEOUT_MS,
  perftestDestination,
} from './perftest-setup.ts';
import type { PathMtu, RcQueuePair } from './queue-pair.ts';

export interface PerftestCmServerOptions {
  verbs: MessageChannelVerbs;
  endpoint: RoceEndpoint;
  pd: ProtectionDomain;
  /** The memory the client's Writes, Reads and atomics address (its rkey and start are advertised). */
  region: MemoryRegion;
  /** The QP the client's test QP connects to (its ird bounds the client's Reads and atomics). */
  testQp: RcQueuePair;
  /** Largest path MTU kbtp states (default 4096; the smaller of the two ends wins). */
  pathMtu?: PathMtu;
  /** Each setup exchange gives up after this long (default 30 s). */
  stepTimeoutMs?: number;
}

export interface PerftestCmServerSession {
  readonly clientVersion: string;
  readonly client: PerftestCmKeys;
  readonly local: PerftestCmKeys;
  readonly pathMtu: PathMtu;
  /**
   * Answers the client's exchanges after its run until it disconnects; resolves with the size of
   * each item it sent after the run.
   */
  finish(runTimeoutMs?: number): Promise<number[]>;
}

/**
 * One perftest -R client: hand it the CM connection requests for perftest's port (the first is
 * the exchange QP, the second the test QP; more are rejected). `session` settles once the client's
 * keys were exchanged twice, or fails with what went wrong.
 */
export class PerftestCmServer {
  readonly session: Promise<PerftestCmServerSession>;
  private channel: RcMessageChannel | undefined;
  private requests = 0;
  private testQpAccepted = false;
  private readonly timeoutMs: number;
  private startExchange!: (channel: RcMessageChannel) => void;

  constructor(private readonly options: PerftestCmServerOptions) {
    this.timeoutMs = options.stepTimeoutMs ?? DEFAULT_STEP_TIMEOUT_MS;
    const exchange = new Promise<RcMessageChannel>((resolve) => {
      this.startExchange = resolve;
    });
    this.session = exchange.then((channel) => this.setUp(channel));
    // A client that never connects leaves an unobserved rejection otherwise.
    this.session.catch(() => undefined);
  }

  /** CM connection requests handed to this server so far. */
  get connections(): number {
    return this.requests;
  }

  onRequest(request: CmConnectionRequest): void {
    const index = this.requests++;
    if (index === 0) {
      this.channel = new RcMessageChannel(this.options.verbs, this.options.pd);
      request.accept(this.channel.qp);
      this.startExchange(this.channel);
    } else if (index === 1) {
      request.accept(this.options.testQp);
      this.testQpAccepted = true;
    } else {
      request.reject();
    }
  }

  /** Ends the exchange connection (the test QP is the caller's). */
  async close(): Promise<void> {
    await this.channel?.close();
  }

  private async setUp(channel: RcMessageChannel): Promise<PerftestCmServerSession> {
    const { clientVersion, pathMtu } = await answerPerftestPreamble(
      (length, what) => this.expect(channel, length, what),
      (item) => channel.send(item),
      this.options.pathMtu ?? 4096,
    );
    // Key messages: all-zero ones (before and after the test QP's connection) are answered with
    // zeros; the first real one is the client's keys, and the one after it the barrier after RTR.
    let client: PerftestCmKeys | undefined;
    let local: PerftestCmKeys | undefined;
    for (let barrier = false; !barrier; ) {
      const item = await this.expect(channel, PERFTEST_CM_KEY_MESSAGE_LENGTH, 'the client did not send its keys');
      if (isAllZero(item)) {
        channel.send(item);
        continue;
      }
      if (!this.testQpAccepted) throw new RnicError('EPROTO', 'perftest client sent its keys before connecting its test QP through RDMA CM');
      if (client === undefined) {
        client = decodePerftestCmKeys(item);
        const destination = perftestDestination(this.options.endpoint, this.options.testQp, this.options.region, this.options.testQp.requestedIrd);
        local = { ...destination, gidIndex: client.gidIndex };
      } else {
        barrier = true;
      }
      channel.send(encodePerftestCmKeys(local!));
    }
    const keys = encodePerftestCmKeys(local!);
    return {
      clientVersion,
      client: client!,
      local: local!,
      pathMtu,
      finish: (runTimeoutMs = DEFAULT_RUN_TIMEOUT_MS) =>
        answerPerftestRun(
          (wait) => channel.receive(wait, 'the client did not finish its run'),
          // Over RDMA CM the client also sends all-zero key messages; they are answered with zeros.
          (item) => channel.send(isAllZero(item) ? item : answerAfterRun(item, keys)),
          runTimeoutMs,
          this.timeoutMs,
        ),
    };
  }

  private async expect(channel: RcMessageChannel, length: number, what: string): Promise<Uint8Array> {
    const item = await channel.receive(this.timeoutMs, what);
    if (item === undefined) throw new RnicError('ECONNRESET', `${what}: the client disconnected`);
    if (item.length !== length) throw new RnicError('EPROTO', `${what}: a message of ${item.length} octets, expected ${length}`);
    return item;
  }
}

function isAllZero(item: Uint8Array): boolean {
  return item.every((octet) => octet === 0);
}

export interface PerftestCmClientOptions {
  verbs: MessageChannelVerbs;
  endpoint: RoceEndpoint;
  pd: ProtectionDomain;
  /** The server's IPv4 address and perftest port (-p). */
  address: string;
  port: number;
  /** kbtp's own memory (advertised in the keys, as perftest does; the server does not use it). */
  region: MemoryRegion;
  /** kbtp's QP for the test; it connects through RDMA CM as the second connection. */
  testQp: RcQueuePair;
  pathMtu?: PathMtu;
  stepTimeoutMs?: number;
}

export interface PerftestCmClientSession {
  readonly serverVersion: string;
  /** The server's keys: the rkey and address of the buffer kbtp's operations target. */
  readonly server: PerftestCmKeys;
  readonly pathMtu: PathMtu;
  /** The closing exchanges, then the exchange QP's disconnect (the test QP stays the caller's). */
  finish(): Promise<void>;
}

/** kbtp as a perftest -R client: the sequence PerftestCmServer answers, from the other side. */
export async function connectPerftestCm(options: PerftestCmClientOptions): Promise<PerftestCmClientSession> {
  const timeoutMs = options.stepTimeoutMs ?? DEFAULT_STEP_TIMEOUT_MS;
  const channel = new RcMessageChannel(options.verbs, options.pd);
  try {
    // The server listens again only after its side of the first exchanges (and not at all until it
    // has started): a REJ "invalid service ID" in between means "not yet".
    const connectTo = { address: options.address, port: options.port, pathMtu: options.pathMtu, retriesWhileNotListening: 40, retryMs: 500 };
    await connectRdmaCm(options.endpoint, channel.qp, connectTo);
    const exchange = async (item: Uint8Array, what: string): Promise<Uint8Array> => {
      channel.send(item);
      const answer = await channel.receive(timeoutMs, `the server did not answer ${what}`);
      if (answer === undefined) throw new RnicError('ECONNRESET', `the server disconnected instead of answering ${what}`);
      if (answer.length !== item.length) throw new RnicError('EPROTO', `the server answered ${what} with ${answer.length} octets, expected ${item.length}`);
      return answer;
    };
    const { serverVersion, pathMtu } = await exchangePerftestPreamble(exchange, options.pathMtu ?? 1024);
    const zeros = new Uint8Array(PERFTEST_CM_KEY_MESSAGE_LENGTH);
    await exchange(zeros, 'the first (empty) key message');
    await connectRdmaCm(options.endpoint, options.testQp, connectTo);
    await exchange(zeros, 'the second (empty) key message');
    const local: PerftestCmKeys = { ...perftestDestination(options.endpoint, options.testQp, options.region, options.testQp.requestedIrd), gidIndex: 0 };
    const keys = encodePerftestCmKeys(local);
    const server = decodePerftestCmKeys(await exchange(keys, 'the keys'));
    await exchange(keys, 'the keys after RTR');
    return {
      serverVersion,
      server,
      pathMtu,
      finish: async () => {
        try {
          await exchangePerftestClosing(exchange, keys);
        } finally {
          await channel.close();
        }
      },
    };
  } catch (error) {
    await channel.close();
    throw error;
  }
}
