// A worker thread of the target: attaches to the shared engine, runs its own software RNIC,
// accepts connections on the listening socket all workers share, and serves them.
import net from 'node:net';
import { parentPort, workerData } from 'node:worker_threads';
import { Engine, type EngineHandoff } from '../../engine/engine.ts';
import { ThreadArena } from '../../engine/arena.ts';
import { createRnic, type ConnectionRequest } from '../../rnic/verbs.ts';
import { openSramModel, formatSramNicReport, type SramNicObserver } from '../../sram/index.ts';
import type { TargetSettings } from '../../../firmware/config.ts';
import { TargetConnection, type WorkerContext } from './connection.ts';
import { LateReclaims } from './tickets.ts';
import { TargetStats } from './stats.ts';

export interface TargetWorkerData {
  handoff: EngineHandoff;
  settings: TargetSettings;
  thread: number;
  /** Listening fd shared by all workers; absent for the first worker, which creates it. */
  fd?: number;
  verbose: boolean;
}

export type WorkerToMain =
  | { type: 'listening'; fd: number; port: number; host: string }
  | { type: 'ready' }
  | { type: 'stats'; id: number; stats: ReturnType<TargetStats['snapshot']> }
  | { type: 'log'; line: string }
  | { type: 'error'; message: string };

export type MainToWorker = { type: 'stats'; id: number } | { type: 'drain' };

function send(message: WorkerToMain): void {
  parentPort?.postMessage(message);
}

function listeningFd(server: net.Server): number {
  const fd = (server as unknown as { _handle?: { fd?: number } })._handle?.fd;
  if (typeof fd !== 'number' || fd < 0) throw new Error('cannot share the listening socket: no file descriptor');
  return fd;
}

async function main(): Promise<void> {
  const data = workerData as TargetWorkerData;
  const engine = Engine.attach(data.handoff);
  const arena = new ThreadArena(engine, data.thread);
  // One model per RNIC: an observer is not shared across threads (docs/SRAM.md).
  const observer: SramNicObserver | undefined = data.settings.sramModel === undefined ? undefined : openSramModel(data.settings.sramModel);
  const rnic = createRnic({ name: `target-w${data.thread}`, ...(observer === undefined ? {} : { observer }) });
  const stats = new TargetStats(arena.requestArea.address, engine.layout.requestSize, engine.config.requestsPerThread);
  const context: WorkerContext = {
    engine, arena, rnic, settings: data.settings, stats, lateReclaims: new LateReclaims(engine, () => stats.ticketReclaimed()),
    log: (line) => { if (data.verbose) send({ type: 'log', line: `[w${data.thread}] ${line}` }); },
  };
  const connections = new Set<TargetConnection>();
  const credits = data.settings.session.credits;

  const server = net.createServer({ pauseOnConnect: true });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    if (data.fd === undefined) server.listen(data.settings.listen.port, data.settings.listen.host, () => resolve());
    else server.listen({ fd: data.fd }, () => resolve());
  });
  server.on('error', (error) => send({ type: 'error', message: `listener: ${error.message}` }));

  const accept = async (request: ConnectionRequest): Promise<void> => {
    const peer = `${request.remoteAddress ?? '?'}:${request.remotePort ?? '?'}`;
    const pd = rnic.allocPd();
    const cq = rnic.createCq({ depth: 8 * credits + 64 });
    const qp = rnic.createQp({ pd, sendCq: cq, recvCq: cq, maxRecvWr: 2 * credits + 8, maxSendWr: 4 * credits + 8, ird: 16, ord: 16 });
    const connection = new TargetConnection(context, pd, qp, cq, peer);
    connections.add(connection);
    void qp.whenDisconnected().then(() => setTimeout(() => connections.delete(connection), 0));
    connection.start(); // receives are posted before the initiator can send HELLO
    try {
      // MPA CRC only when the initiator asks for it (RFC 5044: used unless both sides decline).
      await request.accept(qp, { crc: false });
    } catch (error) {
      context.log(`${peer}: connection setup failed: ${error instanceof Error ? error.message : String(error)}`);
      qp.disconnect();
    }
  };
  const listener = await rnic.listen({ server }, (request) => { void accept(request); });

  parentPort?.on('message', (message: MainToWorker) => {
    if (message.type === 'stats') {
      const snapshot = stats.snapshot();
      if (observer !== undefined) {
        const report = observer.report();
        snapshot.sram = [`worker ${data.thread}: ${formatSramNicReport(report)}`];
        snapshot.sramCounters = { hits: report.total.hits, misses: report.total.misses };
      }
      send({ type: 'stats', id: message.id, stats: snapshot });
    }
    else if (message.type === 'drain') {
      for (const connection of connections) connection.drain();
      void listener.close().then(() => server.close());
    }
  });

  if (data.fd === undefined) {
    const address = server.address();
    send({ type: 'listening', fd: listeningFd(server), port: typeof address === 'object' && address !== null ? address.port : 0,
      host: data.settings.listen.host });
  } else {
    send({ type: 'ready' });
  }
}

main().catch((error: unknown) => send({ type: 'error', message: error instanceof Error ? error.message : String(error) }));
