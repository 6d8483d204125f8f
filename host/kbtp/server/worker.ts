// A worker thread of the target: attaches to the shared engine, runs its own software RNIC,
// accepts connections on the listening socket all workers share, admits them into the node's
// session slots (or refuses them with a reason), enforces the stage timeouts, and serves them.
// A failure nobody caught is reported to the main thread with its cause, after which this
// worker ends its connections so that everything they held goes back to the engine.
import { readlinkSync } from 'node:fs';
import net from 'node:net';
import { parentPort, workerData } from 'node:worker_threads';
import { Engine, type EngineHandoff } from '../../engine/engine.ts';
import { ThreadArena } from '../../engine/arena.ts';
import { stageInSharedMemory } from '../../rnic/receive-staging.ts';
import { createRnic, RnicError, RcConnectionRequest, RcQueuePair, type AnyConnectionRequest, type AnyQueuePair } from '../../rnic/verbs.ts';
import { busyPoll } from '../../rnic/busy-poll.ts';
import { isLoopback, useLoopbackCongestionControl, widenReceiveWindow } from '../../rnic/socket-window.ts';
import { openSramModel, formatSramNicReport, type SramNicObserver } from '../../sram/index.ts';
import { initialReceiveWindow, type TargetSettings, type TenantSettings } from './target-config.ts';
import { TargetConnection, type WorkerContext } from './connection.ts';
import { LateReclaims } from './tickets.ts';
import { TargetStats, type RefusalReason } from './stats.ts';
import { SessionSlots } from './slots.ts';
import { TierClient } from './tier-client.ts';
import { Demoter } from '../../engine/demotion.ts';
import type { TierToMain, TierToWorker } from './tier-messages.ts';
import { SecretVerifier } from './secret-hash.ts';
import { InternalError } from '../../errors.ts';

export interface TargetWorkerData {
  handoff: EngineHandoff;
  settings: TargetSettings;
  thread: number;
  /** Listening fd shared by all workers; absent for the first worker, which creates it. */
  fd?: number;
  verbose: boolean;
  /** The node's session slots (SessionSlots over this buffer). */
  slots: SharedArrayBuffer;
}

export type WorkerToMain =
  /** `threadId`: the worker's OS thread id (Linux), for per-thread CPU figures (kbtp bench); 0 where unknown. */
  | { type: 'listening'; fd: number; port: number; host: string; threadId: number }
  | { type: 'ready'; threadId: number }
  | { type: 'stats'; id: number; stats: ReturnType<TargetStats['snapshot']> }
  | { type: 'log'; line: string }
  | { type: 'error'; message: string }
  /** An error nobody caught: the worker is ending its connections; the node must not go on as if nothing happened. */
  | { type: 'fatal'; message: string }
  | TierToMain;

export type MainToWorker = { type: 'stats'; id: number } | { type: 'drain' } | TierToWorker | { type: 'tenants'; tenants: TenantSettings[] };

/** This thread's OS thread id from /proc/thread-self ("PID/task/TID"), or 0 where there is none. */
function osThreadId(): number {
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
    return Number.isSafeInteger(tid) ? tid : 0;
  } catch {
    return 0;
  }
}

function send(message: WorkerToMain): void {
  parentPort?.postMessage(message);
}

function listeningFd(server: net.Server): number {
  const fd = (server as unknown as { _handle?: { fd?: number } })._handle?.fd;
  if (typeof fd !== 'number' || fd < 0) throw new InternalError('cannot share the listening socket: no file descriptor');
  return fd;
}

/** KBTP_TEST_FAULT=connection:<tenant> or worker:<tenant>, read only by the tests of the failure paths. */
function faultFromEnvironment(): WorkerContext['fault'] {
  const match = /^(connection|worker):(.+)$/.exec(process.env.KBTP_TEST_FAULT ?? '');
  return match === null ? undefined : { kind: match[1] as 'connection' | 'worker', tenant: match[2] ?? '' };
}

/** How often the idle-session and RDMA Read timeouts are looked at: a quarter of the shortest, within 10 ms..1 s. */
function sweepPeriod(settings: TargetSettings): number {
  const { idleSessionMs, rdmaReadMs } = settings.timeouts;
  const shortest = Math.min(rdmaReadMs, idleSessionMs > 0 ? idleSessionMs : rdmaReadMs);
  return Math.min(1000, Math.max(10, Math.floor(shortest / 4)));
}

async function main(): Promise<void> {
  const data = workerData as TargetWorkerData;
  const { settings } = data;
  // The configuration's budget wins over the environment variable the thread started with.
  if (settings.busyPollUs !== undefined) busyPoll.configure(settings.busyPollUs);
  const engine = Engine.attach(data.handoff);
  // What this thread receives is placed in shared memory (contexts, the pool): staged there too (issue 16).
  stageInSharedMemory(true);
  // All workers share the one arena slice; the session slots say which part is whose.
  const arena = new ThreadArena(engine, 0);
  const slots = new SessionSlots(data.slots, settings.session.maxSessions, engine.config.tenants.length);
  // One model per RNIC: an observer is not shared across threads (docs/SRAM.md).
  const observer: SramNicObserver | undefined = settings.sramModel === undefined ? undefined : openSramModel(settings.sramModel);
  const rnic = createRnic({ name: `target-w${data.thread}`, ...(observer === undefined ? {} : { observer }) });
  const stats = new TargetStats(arena.requestArea.address, engine.layout.requestSize, engine.config.requestsPerThread);
  const fault = faultFromEnvironment();
  const context: WorkerContext = {
    engine,
    arena,
    rnic,
    settings,
    stats,
    lateReclaims: new LateReclaims(engine, () => stats.ticketReclaimed()),
    slots,
    verifier: new SecretVerifier(),
    ...(fault !== undefined ? { fault } : {}),
    tier: settings.durable === undefined ? undefined : new TierClient(send, engine),
    demoter: new Demoter(engine),
    log: (line) => {
      if (data.verbose) send({ type: 'log', line: `[w${data.thread}] ${line}` });
    },
  };
  const connections = new Set<TargetConnection>();
  const credits = settings.session.credits;
  let draining = false;

  let failing = false;
  const fail = (error: unknown): void => {
    if (failing) return;
    failing = true;
    send({ type: 'fatal', message: error instanceof Error ? (error.stack ?? error.message) : String(error) });
    // The thread goes on running only to end its sessions: their engine state must not stay held.
    draining = true;
    for (const connection of connections) connection.abort('the worker failed');
  };
  process.on('uncaughtException', fail);
  process.on('unhandledRejection', fail);

  const server = net.createServer({ pauseOnConnect: true });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    if (data.fd === undefined) server.listen(settings.listen.port, settings.listen.host, () => resolve());
    else server.listen({ fd: data.fd }, () => resolve());
  });
  server.on('error', (error) => send({ type: 'error', message: `listener: ${error.message}` }));
  // The listening socket is shared: the worker that opened it sizes the window every connection starts with.
  if (data.fd === undefined) {
    // Over loopback only: paced by BBR there, segments arrive out of order (host/rnic/socket-window.ts).
    if (isLoopback(settings.listen.host) && settings.loopbackCongestionControl !== null) {
      const set = useLoopbackCongestionControl(listeningFd(server), settings.loopbackCongestionControl);
      if (set instanceof Error)
        send({ type: 'log', line: `kbtp target: loopback connections keep the host's TCP congestion control (${set.message}); with BBR they may be paced` });
    }
    const widened = widenReceiveWindow(listeningFd(server), initialReceiveWindow(settings));
    // Not fatal: connections then start with the kernel's default window, and a client's first
    // large requests may be held back and paced (host/rnic/socket-window.ts); the operator should know why.
    if (widened instanceof Error)
      send({
        type: 'log',
        line: `kbtp target: connections start with the kernel's default receive window (${widened.message}); first large STOREs may be paced`,
      });
  }

  /** An MPA Reject whose private data says why; the initiator library prints it. */
  const refuse = (request: AnyConnectionRequest, peer: string, reason: RefusalReason, text: string): void => {
    stats.refused(reason);
    context.log(`${peer}: connection refused (${text})`);
    request.reject(new TextEncoder().encode(`kbtp: ${text}`));
  };

  const accept = async (request: AnyConnectionRequest): Promise<void> => {
    const peer = `${request.remoteAddress ?? '?'}:${request.remotePort ?? '?'}`;
    if (draining || engine.draining) {
      refuse(request, peer, 'draining', 'the target is shutting down');
      return;
    }
    // Nothing is taken before the slot: a refused connection costs the node nothing.
    const slot = slots.claim(data.thread);
    if (slot < 0) {
      refuse(request, peer, 'node-full', `the node holds its limit of ${settings.session.maxSessions} sessions; try again later`);
      return;
    }
    if (connections.size >= settings.session.maxSessionsPerWorker) {
      slots.release(slot);
      refuse(request, peer, 'worker-full', `this worker holds its limit of ${settings.session.maxSessionsPerWorker} sessions; try again later`);
      return;
    }
    const pd = rnic.allocPd();
    const cq = rnic.createCq({ depth: 8 * credits + 64 });
    const queues = { pd, sendCq: cq, recvCq: cq, maxRecvWr: 2 * credits + 8, maxSendWr: 4 * credits + 8, ird: 16, ord: 16 };
    const qp: AnyQueuePair = request instanceof RcConnectionRequest ? rnic.createRcQp(queues) : rnic.createQp(queues);
    const connection = new TargetConnection(context, slot, pd, qp, cq, peer, () => connections.delete(connection));
    connections.add(connection);
    connection.start(); // receives are posted before the initiator can send HELLO
    try {
      if (request instanceof RcConnectionRequest) {
        if (!(qp instanceof RcQueuePair)) throw new InternalError('a RoCE connection request needs an RC queue pair');
        await request.accept(qp);
      } else {
        if (qp instanceof RcQueuePair) throw new InternalError('an MPA connection request needs an iWARP queue pair');
        // MPA CRC only when the initiator asks for it (RFC 5044: used unless both sides decline).
        await request.accept(qp, { crc: false, timeoutMs: settings.timeouts.rtrMs });
      }
      connection.established();
    } catch (error) {
      const timedOut = error instanceof RnicError && error.errno === 'ETIMEDOUT';
      if (timedOut) stats.timedOut('rtr');
      else stats.setupFailed('setup-error');
      context.log(`${peer}: connection setup failed: ${error instanceof Error ? error.message : String(error)}`);
      connection.close();
    }
  };
  const onSetupFailure = (error: Error, peer: string): void => {
    const code = error instanceof RnicError ? error.errno : undefined;
    if (code === 'ETIMEDOUT') stats.timedOut('mpa-request');
    else if (code === 'EPROTO') stats.setupFailed('bad-mpa');
    else if (code === 'ECONNRESET') stats.setupFailed('closed-during-setup');
    else if (code === 'ENOMEM') stats.setupFailed('evicted');
    else stats.setupFailed('setup-error');
    context.log(`${peer}: MPA setup failed: ${error.message}`);
  };
  // RoCE: this worker's RNIC has its own UDP port on the listen address; the shared TCP socket
  // only carries each connection's setup exchange (QPN, PSN, GID, UDP port) and its lifetime.
  if (settings.transport === 'roce') await rnic.openRoce({ host: settings.listen.host });
  const listener =
    settings.transport === 'roce'
      ? await rnic.listenRc(
          { server, timeoutMs: settings.timeouts.mpaRequestMs, onSetupFailure, maxPending: settings.session.maxHandshakesPerWorker },
          (request) => {
            void accept(request);
          },
        )
      : await rnic.listen(
          { server, timeoutMs: settings.timeouts.mpaRequestMs, onSetupFailure, maxPending: settings.session.maxHandshakesPerWorker },
          (request) => {
            void accept(request);
          },
        );

  const sweep = setInterval(() => {
    const now = Date.now();
    for (const connection of connections) connection.checkTimeouts(now);
  }, sweepPeriod(settings));
  sweep.unref();

  parentPort?.on('message', (message: MainToWorker) => {
    if (message.type === 'tier') {
      context.tier?.answeredAll(message.answers);
    } else if (message.type === 'stats') {
      const snapshot = stats.snapshot();
      snapshot.busyPollMs = busyPoll.polledMilliseconds;
      snapshot.busyPollReads = busyPoll.counts.directReads;
      if (observer !== undefined) {
        const report = observer.report();
        snapshot.sram = [`worker ${data.thread}: ${formatSramNicReport(report)}`];
        snapshot.sramCounters = { hits: report.total.hits, misses: report.total.misses };
      }
      send({ type: 'stats', id: message.id, stats: snapshot });
    } else if (message.type === 'tenants') {
      // A reload: new HELLOs see the new list at once; sessions it no longer allows end.
      settings.tenants = message.tenants;
      for (const connection of connections) connection.reconsiderTenant(message.tenants);
    } else if (message.type === 'drain') {
      draining = true;
      for (const connection of connections) connection.drain();
      void listener.close().then(() => server.close());
    }
  });

  if (data.fd === undefined) {
    const address = server.address();
    send({
      type: 'listening',
      fd: listeningFd(server),
      port: typeof address === 'object' && address !== null ? address.port : 0,
      host: settings.listen.host,
      threadId: osThreadId(),
    });
  } else {
    send({ type: 'ready', threadId: osThreadId() });
  }
}

main().catch((error: unknown) => send({ type: 'error', message: error instanceof Error ? error.message : String(error) }));
