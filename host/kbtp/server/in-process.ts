// A target served on the calling thread, without sockets or worker threads: the engine, one
// worker's context, and connections over channels the caller hands in (an in-memory
// LinkedChannel). What the allocation tests and in-process measurements drive: the same
// TargetConnection, RNIC and engine calls as a worker thread runs, minus the kernel. Admission
// is the worker's in short (a session slot, or the connection is refused); no stage timeouts.
import { Engine } from '../../engine/engine.ts';
import { ThreadArena } from '../../engine/arena.ts';
import { createRnic, type StreamChannel } from '../../rnic/verbs.ts';
import { engineConfigFor, type TargetSettings } from './target-config.ts';
import { TargetConnection, type WorkerContext } from './connection.ts';
import { SessionSlots } from './slots.ts';
import { TargetStats } from './stats.ts';
import { LateReclaims } from './tickets.ts';
import { Demoter } from '../../engine/demotion.ts';
import { SecretVerifier } from './secret-hash.ts';
import { TransportError, UsageError } from '../errors.ts';

/** The thread number this target's slots are claimed for (worker threads count from 1). */
const THREAD = 1;

export class InProcessTarget {
  readonly engine: Engine;
  readonly context: WorkerContext;
  private readonly connections = new Set<TargetConnection>();

  constructor(
    readonly settings: TargetSettings,
    log: (line: string) => void = () => undefined,
  ) {
    // The durable tier lives in a target's main thread (tier-host.ts), which this one does not have.
    if (settings.durable !== undefined) throw new UsageError('the in-process target runs without a durable tier; leave durable unset');
    this.engine = Engine.create(engineConfigFor(settings));
    const arena = new ThreadArena(this.engine, 0);
    const stats = new TargetStats(arena.requestArea.address, this.engine.layout.requestSize, this.engine.config.requestsPerThread);
    this.context = {
      engine: this.engine,
      arena,
      rnic: createRnic({ name: 'target-in-process' }),
      settings,
      stats,
      lateReclaims: new LateReclaims(this.engine, () => stats.ticketReclaimed()),
      slots: SessionSlots.create(settings.session.maxSessions, this.engine.config.tenants.length),
      verifier: new SecretVerifier(),
      log,
      tier: undefined,
      demoter: new Demoter(this.engine),
    };
  }

  /** Reads the MPA Request on `channel`, accepts it and serves the session. */
  async serve(channel: StreamChannel): Promise<TargetConnection> {
    const { rnic, slots } = this.context;
    const request = await rnic.acceptChannel(channel);
    const slot = slots.claim(THREAD);
    if (slot < 0) {
      request.reject(new TextEncoder().encode('kbtp: the node holds its limit of sessions'));
      throw new TransportError('the in-process target holds its limit of sessions');
    }
    const credits = this.settings.session.credits;
    const pd = rnic.allocPd();
    const cq = rnic.createCq({ depth: 8 * credits + 64 });
    const qp = rnic.createQp({ pd, sendCq: cq, recvCq: cq, maxRecvWr: 2 * credits + 8, maxSendWr: 4 * credits + 8, ird: 16, ord: 16 });
    const connection = new TargetConnection(this.context, slot, pd, qp, cq, 'in-process', () => this.connections.delete(connection));
    this.connections.add(connection);
    connection.start(); // receives are posted before the initiator can send HELLO
    try {
      await request.accept(qp, { crc: false });
      connection.established();
    } catch (error) {
      connection.close();
      throw error;
    }
    return connection;
  }

  async stop(): Promise<void> {
    await this.context.rnic.close();
  }
}
