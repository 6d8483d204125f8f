// perftest's bandwidth tests on the rxe guest against kbtp's memory: the guest runs ib_write_bw,
// ib_read_bw and ib_atomic_bw (FetchAdd and CmpSwap) as clients; kbtp is the server end through
// host/rnic/rc/perftest-setup.ts (perftest's own side-channel exchange over QEMU user networking,
// RoCEv2 over the guest's layer-2 tunnel to kbtp's EthernetLink). The tools check nothing
// themselves, so the data check is the capture: every Write, Read Response and atomic in the
// tunnel's capture is replayed against kbtp's memory as it was before the run
// (roce-replay-check.ts), and the replay must end exactly where kbtp's memory is.
import { readFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { decodeRoceCapture } from '../../host/capture/roce.ts';
import { acceptPerftest } from '../../host/rnic/rc/perftest-setup.ts';
import { PerftestCmServer } from '../../host/rnic/rc/perftest-cm.ts';
import { CmResponder } from '../../host/rnic/rc/cm-responder.ts';
import { Access, type MemoryRegion, type ProtectionDomain } from '../../host/rnic/verbs.ts';
import { GUEST_TUNNEL_ADDRESS, Guest, HOST_ADDRESS_FROM_GUEST, HOST_TUNNEL_ADDRESS } from './guest.ts';
import { replayPerftestRuns, type ServedPerftestRun } from './roce-replay-check.ts';
import { openRxeNeighbour, type RxeNeighbour } from './rxe-tunnel.ts';

const REGION_BYTES = 4 * 1024 * 1024;
const TAGGED_BASE = 0x7f3a_6000_0000n;
const RUNS = [
  { name: 'write', tool: 'ib_write_bw -s 16384 -n 100' },
  { name: 'read', tool: 'ib_read_bw -s 16384 -n 100' },
  { name: 'fetch-add', tool: 'ib_atomic_bw -A FETCH_AND_ADD -n 200' },
  { name: 'compare-swap', tool: 'ib_atomic_bw -A CMP_AND_SWAP -n 200' },
] as const;

interface ServedRun extends ServedPerftestRun {
  readonly clientVersion: string;
  readonly afterRunItems: number[];
}

/** kbtp memory before the run, filled with a known pattern, registered for every remote access. */
function runMemory(neighbour: RxeNeighbour, pd: ProtectionDomain): { memory: Uint8Array; before: Uint8Array; region: MemoryRegion } {
  const memory = new Uint8Array(new SharedArrayBuffer(REGION_BYTES));
  for (let i = 0; i < memory.length; i++) memory[i] = (i * 7 + 3) & 0xff;
  const region = neighbour.rnic.registerMemory(pd, memory, {
    access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead | Access.RemoteAtomic,
    taggedOffsetBase: TAGGED_BASE,
  });
  return { memory, before: memory.slice(), region };
}

/** Boots a guest that runs every perftest client of RUNS with `args` (after the tool), one after the other; each must exit 0. */
async function runClients(neighbour: RxeNeighbour, name: string, args: string) {
  const script = [
    'status=0',
    'g=$(rxe_gid_index)',
    ...RUNS.map((run) => `${run.tool} ${args}; rc=$?; echo "KBTP-PERFTEST ${run.name} $rc"; [ $rc = 0 ] || status=1; sleep 1`),
    'exit $status',
  ].join('\n');
  const guest = await Guest.start({ name, frameTunnel: neighbour.ports, peerScript: script, timeoutMs: 420_000 });
  const result = await guest.exited;
  assert.is(result.guestFailure, null, result.guestFailure ?? '');
  assert.not.ok(result.timedOut, `guest timed out (log ${result.logPath})`);
  for (const run of RUNS) assert.match(result.log, new RegExp(`KBTP-PERFTEST ${run.name} 0`), `${run.name} exit status (log ${result.logPath})`);
  return result;
}

/** Every packet of the capture decodes, and each run's requests replay to kbtp's memory after it. */
function checkRuns(pcapPath: string, runs: readonly ServedRun[]): void {
  const capture = decodeRoceCapture(new Uint8Array(readFileSync(pcapPath)));
  const problems = capture.packets.filter((packet) => packet.problem !== undefined).map((packet) => `record ${packet.recordIndex}: ${packet.problem}`);
  assert.equal(problems, [], 'every RoCEv2 packet decodes, ICRC verified');
  const replay = replayPerftestRuns(capture, runs, GUEST_TUNNEL_ADDRESS, HOST_TUNNEL_ADDRESS, TAGGED_BASE);
  assert.equal(replay.problems, [], 'replay');
  assert.equal(
    replay.tamperNoticed,
    runs.map(() => true),
    'the replay check notices one octet off',
  );
  for (const run of runs) {
    assert.ok(replay.requests[run.name]! >= 100, `${run.name}: ${replay.requests[run.name]} requests replayed`);
    assert.ok(Number.parseFloat(run.clientVersion) >= 5.7, run.clientVersion);
    if (run.name === 'write' || run.name === 'fetch-add') assert.not.equal(run.after, run.before, `${run.name} changed kbtp memory`);
  }
}

function listen(): Promise<Server> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}

/** One perftest client connection: a fresh QP and region (filled with a known pattern) per run. */
async function serve(neighbour: RxeNeighbour, socket: Socket, name: ServedRun['name']): Promise<ServedRun> {
  const { rnic } = neighbour;
  const pd = rnic.allocPd();
  const cq = rnic.createCq({ depth: 64 });
  const qp = rnic.createRcQp({ pd, sendCq: cq, recvCq: cq, ird: 16, ord: 16 });
  const { memory, before, region } = runMemory(neighbour, pd);
  try {
    const session = await acceptPerftest(rnic.roceEndpoint!, qp, socket, { region });
    const afterRunItems = await session.finish(180_000);
    return { name, before, after: memory.slice(), clientVersion: session.clientVersion, afterRunItems, kbtpQp: qp.qpNumber, clientQp: session.client.qpNumber };
  } finally {
    qp.destroy();
    rnic.deregisterMemory(region);
  }
}

test('ib_write_bw, ib_read_bw, ib_atomic_bw (FetchAdd, CmpSwap) on rxe against kbtp: every request replayed from the capture matches kbtp memory', async () => {
  const neighbour = await openRxeNeighbour('perftest-server');
  const server = await listen();
  const port = (server.address() as { port: number }).port;
  const served: Array<Promise<ServedRun>> = [];
  server.on('connection', (socket: Socket) => {
    const run = RUNS[served.length];
    if (run === undefined) socket.destroy();
    else served.push(serve(neighbour, socket, run.name));
  });
  try {
    const result = await runClients(neighbour, 'rxe-perftest', `-d rxe0 -x $g -F -p ${port} ${HOST_ADDRESS_FROM_GUEST}`);
    assert.is(result.exitStatus, 0);
    assert.is(served.length, RUNS.length, 'one side-channel connection per run');
    const runs = await Promise.all(served);
    checkRuns(result.tunnelPcapPath!, runs);
    // After its run the client sends: two key barriers, 5 report items, closing keys, "done".
    for (const run of runs) assert.equal(run.afterRunItems, [108, 108, 8, 8, 8, 8, 8, 108, 5], `${run.name}: perftest's closing exchange`);
  } finally {
    server.close();
    await neighbour.close();
  }
});

const CM_PORT = 18515;

test('perftest -R (RDMA CM: both QPs over CM, the exchange over Sends) on rxe against kbtp: Write, Read, FetchAdd, CmpSwap replayed from the capture', async () => {
  const neighbour = await openRxeNeighbour('perftest-cm-server');
  const served: Array<Promise<ServedRun>> = [];
  let current: PerftestCmServer | undefined;
  // Each run's client connects twice (exchange QP, then test QP): a new run starts at an
  // exchange request once the previous server has seen both of its connections.
  const cm = new CmResponder(neighbour.rnic.roceEndpoint!, (request) => {
    if (request.servicePort !== CM_PORT) return request.reject();
    if (current === undefined || current.connections >= 2) {
      const run = RUNS[served.length];
      if (run === undefined) return request.reject();
      const started = serveCm(neighbour, run.name);
      current = started.server;
      served.push(started.done);
    }
    current.onRequest(request);
  });
  try {
    const result = await runClients(neighbour, 'rxe-perftest-cm', `-R -d rxe0 -x $g -F -p ${CM_PORT} ${HOST_TUNNEL_ADDRESS}`);
    assert.match(result.log, /Data ex\. method : rdma_cm/, 'the client exchanged over RDMA CM');
    assert.is(served.length, RUNS.length, 'one exchange connection per run');
    const runs = await Promise.all(served);
    checkRuns(result.tunnelPcapPath!, runs);
    // After its run the client sends: two key barriers, 5 report items, the closing keys; then it disconnects.
    for (const run of runs) assert.equal(run.afterRunItems, [56, 56, 8, 8, 8, 8, 8, 56], `${run.name}: perftest's closing exchange over RDMA CM`);
    assert.is(cm.stats.reqs, 2 * RUNS.length, 'two CM connections per run');
  } finally {
    cm.close();
    await neighbour.close();
  }
});

/** One perftest -R client: its two CM connections go to `server`; `done` settles after its run. */
function serveCm(neighbour: RxeNeighbour, name: ServedRun['name']): { server: PerftestCmServer; done: Promise<ServedRun> } {
  const { rnic } = neighbour;
  const pd = rnic.allocPd();
  const cq = rnic.createCq({ depth: 64 });
  const testQp = rnic.createRcQp({ pd, sendCq: cq, recvCq: cq, ird: 16, ord: 16 });
  const { memory, before, region } = runMemory(neighbour, pd);
  const server = new PerftestCmServer({ verbs: rnic, endpoint: rnic.roceEndpoint!, pd, region, testQp });
  const done = (async () => {
    try {
      const session = await server.session;
      const afterRunItems = await session.finish(180_000);
      return {
        name,
        before,
        after: memory.slice(),
        clientVersion: session.clientVersion,
        afterRunItems,
        kbtpQp: testQp.qpNumber,
        clientQp: session.client.qpNumber,
      };
    } finally {
      await server.close();
      testQp.destroy();
      rnic.deregisterMemory(region);
    }
  })();
  return { server, done };
}

test.run();
