// ibv_rc_pingpong's application protocol (rdma-core libibverbs/examples/rc_pingpong.c) on kbtp's
// RC transport, so kbtp can be either end of the tool against the Linux kernel's rxe.
//
// The tool has one buffer that is both the source of its Sends and the target of its receives,
// and it sends only after its previous Send completed and a message arrived: it echoes what it
// received. kbtp sends a distinct pattern per iteration and checks every octet that comes back:
// as client, message i must be its own pattern i; as server, message 0 is the tool's initial
// buffer (0x7b, with the first octet of each page 0 under `-c`) and message i its pattern i - 1.
// Connection setup is host/rnic/rc/pingpong-setup.ts.
import type net from 'node:net';
import { RnicError } from '../../host/rnic/errors.ts';
import { acceptPingpong, connectPingpong, type PingpongConnection, type PingpongSetupOptions } from '../../host/rnic/rc/pingpong-setup.ts';
import type { RcQueuePair } from '../../host/rnic/rc/queue-pair.ts';
import { Access, WcStatus, wcStatusName, type CompletionQueue, type MemoryRegion, type Rnic, type WorkCompletion } from '../../host/rnic/verbs.ts';

/** rc_pingpong's memset() of its buffer, and its page size for `-c`. */
export const PINGPONG_INITIAL_FILL = 0x7b;
const PAGE_SIZE = 4096;
const RECV_WRID = 1;
const SEND_WRID = 2;
const DEFAULT_STEP_TIMEOUT_MS = 60_000;

/**
 * kbtp's message for iteration `i`: varies with both position and iteration, and has 0 at every
 * page start, which is what `ibv_rc_pingpong -c` checks the received buffer for.
 */
export function pingpongPattern(iteration: number, size: number): Uint8Array {
  const bytes = new Uint8Array(size);
  for (let j = 0; j < size; j++) bytes[j] = j % PAGE_SIZE === 0 ? 0 : ((j * 31 + iteration * 7) % 255) + 1;
  return bytes;
}

/** What the tool sends first: its buffer as pp_init_ctx() filled it (with -c: 0 at page starts). */
function isInitialBuffer(bytes: Uint8Array): boolean {
  for (let j = 0; j < bytes.length; j++) {
    const octet = bytes[j]!;
    if (octet !== PINGPONG_INITIAL_FILL && !(j % PAGE_SIZE === 0 && octet === 0)) return false;
  }
  return true;
}

export interface PingpongRunOptions extends PingpongSetupOptions {
  /** An RNIC whose RoCE port is open (openRoce with the link to the peer). */
  readonly rnic: Rnic;
  /** `-s` (default 4096); both ends must use the same. */
  readonly size?: number;
  /** `-n` (default 1000). */
  readonly iterations?: number;
  /** Receives kept posted (the tool's `-r`, default here 16: kbtp never has more than one message in flight). */
  readonly rxDepth?: number;
  readonly stepTimeoutMs?: number;
}

export interface PingpongReport {
  readonly connection: PingpongConnection;
  readonly iterations: number;
  /** Every received message that was not what the echo protocol says it must be. */
  readonly mismatches: string[];
  readonly qp: RcQueuePair;
  /** Destroys the QP (call once the peer has finished: its last Send needs our ACK). */
  close(): void;
}

interface Session {
  readonly qp: RcQueuePair;
  readonly cq: CompletionQueue;
  readonly send: MemoryRegion;
  readonly recv: MemoryRegion;
  readonly size: number;
  readonly rxDepth: number;
}

function setUp(options: PingpongRunOptions): Session {
  const { rnic } = options;
  const size = options.size ?? 4096;
  const rxDepth = options.rxDepth ?? 16;
  const pd = rnic.allocPd();
  const cq = rnic.createCq({ depth: rxDepth + 4 });
  const qp = rnic.createRcQp({ pd, sendCq: cq, recvCq: cq, ird: 1, ord: 1, maxSendWr: 1, maxRecvWr: rxDepth, maxSge: 1 });
  const send = rnic.registerMemory(pd, new ArrayBuffer(Math.max(size, 1)), { access: 0 });
  const recv = rnic.registerMemory(pd, new ArrayBuffer(Math.max(size * rxDepth, 1)), { access: Access.LocalWrite });
  for (let slot = 0; slot < rxDepth; slot++) postRecv({ qp, cq, send, recv, size, rxDepth }, slot);
  return { qp, cq, send, recv, size, rxDepth };
}

function postRecv(session: Session, slot: number): void {
  session.qp.postRecv({ wrId: RECV_WRID + slot * 4, sgList: [{ lkey: session.recv.lkey, offset: slot * session.size, length: session.size }] });
}

/** The next completion, failing clearly on an error status or silence. */
async function nextCompletion(session: Session, what: string, timeoutMs: number): Promise<WorkCompletion> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const [completion] = session.cq.poll(1);
    if (completion !== undefined) {
      if (completion.status !== WcStatus.Success) {
        throw new RnicError(
          'ECONNRESET',
          `${what}: ${completion.opcode} completion ${wcStatusName(completion.status)}${completion.error ? ` (${completion.error})` : ''}`,
        );
      }
      return completion;
    }
    const remaining = deadline - Date.now();
    if (remaining <= 0) throw new RnicError('ETIMEDOUT', `${what}: no completion within ${timeoutMs} ms (QP ${session.qp.state})`);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([session.cq.wait(), new Promise<void>((resolve) => (timer = setTimeout(resolve, Math.min(remaining, 1000))))]);
    clearTimeout(timer);
  }
}

/**
 * rc_pingpong's loop: a Send is posted when the previous one completed and a message arrived
 * (the client posts its first Send at once). Returns the mismatches found in received messages.
 */
async function pingpong(session: Session, client: boolean, iterations: number, timeoutMs: number): Promise<string[]> {
  const mismatches: string[] = [];
  const sendBuffer = session.send.bytes;
  const recvBuffer = session.recv.bytes;
  let sent = 0;
  let received = 0;
  let sendOutstanding = false;
  let messageWaiting = client; // the client starts without waiting for a message
  const postSend = (): void => {
    sendBuffer.set(pingpongPattern(sent, session.size));
    session.qp.postSend({ wrId: SEND_WRID, opcode: 'SEND', sgList: [{ lkey: session.send.lkey, offset: 0, length: session.size }] });
    sendOutstanding = true;
    messageWaiting = false;
  };
  if (client) postSend();
  while (received < iterations || sent < iterations) {
    const completion = await nextCompletion(session, `iteration ${Math.min(sent, received)} of ${iterations}`, timeoutMs);
    if (completion.opcode === 'SEND') {
      sent++;
      sendOutstanding = false;
    } else if (completion.opcode === 'RECV') {
      const slot = (Number(completion.wrId) - RECV_WRID) / 4;
      const message = recvBuffer.subarray(slot * session.size, slot * session.size + completion.byteLength);
      const problem = checkMessage(message, session.size, client, received);
      if (problem !== undefined && mismatches.length < 10) mismatches.push(problem);
      received++;
      messageWaiting = true;
      postRecv(session, slot);
    } else {
      throw new RnicError('EPROTO', `unexpected ${completion.opcode} completion`);
    }
    if (sent < iterations && !sendOutstanding && messageWaiting) postSend();
  }
  return mismatches;
}

function checkMessage(message: Uint8Array, size: number, client: boolean, index: number): string | undefined {
  if (message.length !== size) return `message ${index}: ${message.length} octets, expected ${size}`;
  if (!client && index === 0) return isInitialBuffer(message) ? undefined : `message 0 is not the tool's initial buffer (0x7b)`;
  const expected = pingpongPattern(client ? index : index - 1, size);
  const at = message.findIndex((octet, j) => octet !== expected[j]);
  return at < 0 ? undefined : `message ${index}: octet ${at} is 0x${message[at]!.toString(16)}, expected 0x${expected[at]!.toString(16)}`;
}

function endpointOf(rnic: Rnic) {
  const endpoint = rnic.roceEndpoint;
  if (endpoint === undefined) throw new RnicError('EINVAL', 'open the RNIC RoCE port (openRoce) before running rc_pingpong');
  return endpoint;
}

function report(session: Session, connection: PingpongConnection, iterations: number, mismatches: string[]): PingpongReport {
  return { connection, iterations, mismatches, qp: session.qp, close: () => session.qp.destroy() };
}

/** kbtp as `ibv_rc_pingpong <server>`. */
export async function runPingpongClient(options: PingpongRunOptions & { host: string; port: number }): Promise<PingpongReport> {
  const session = setUp(options);
  const iterations = options.iterations ?? 1000;
  const connection = await connectPingpong(endpointOf(options.rnic), session.qp, { host: options.host, port: options.port }, options);
  const mismatches = await pingpong(session, true, iterations, options.stepTimeoutMs ?? DEFAULT_STEP_TIMEOUT_MS);
  return report(session, connection, iterations, mismatches);
}

/** kbtp as `ibv_rc_pingpong` (server) for a side-channel socket the caller accepted. */
export async function runPingpongServer(options: PingpongRunOptions & { socket: net.Socket }): Promise<PingpongReport> {
  const session = setUp(options);
  const iterations = options.iterations ?? 1000;
  const connection = await acceptPingpong(endpointOf(options.rnic), session.qp, options.socket, options);
  const mismatches = await pingpong(session, false, iterations, options.stepTimeoutMs ?? DEFAULT_STEP_TIMEOUT_MS);
  return report(session, connection, iterations, mismatches);
}
