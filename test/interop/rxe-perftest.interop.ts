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
import { Access } from '../../host/rnic/verbs.ts';
import { GUEST_TUNNEL_ADDRESS, Guest, HOST_ADDRESS_FROM_GUEST, HOST_TUNNEL_ADDRESS } from './guest.ts';
import { replayAgainstMemory } from './roce-replay-check.ts';
import { openRxeNeighbour, type RxeNeighbour } from './rxe-tunnel.ts';

const REGION_BYTES = 4 * 1024 * 1024;
const TAGGED_BASE = 0x7f3a_6000_0000n;
const RUNS = [
  { name: 'write', tool: 'ib_write_bw -s 16384 -n 100' },
  { name: 'read', tool: 'ib_read_bw -s 16384 -n 100' },
  { name: 'fetch-add', tool: 'ib_atomic_bw -A FETCH_AND_ADD -n 200' },
  { name: 'compare-swap', tool: 'ib_atomic_bw -A CMP_AND_SWAP -n 200' },
] as const;

interface ServedRun {
  readonly name: string;
  readonly before: Uint8Array;
  readonly after: Uint8Array;
  readonly clientVersion: string;
  readonly afterRunItems: number[];
  readonly kbtpQp: number;
  readonly clientQp: number;
}

function listen(): Promise<Server> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}

/** One perftest client connection: a fresh QP and region (filled with a known pattern) per run. */
async function serve(neighbour: RxeNeighbour, socket: Socket, name: string): Promise<ServedRun> {
  const { rnic } = neighbour;
  const pd = rnic.allocPd();
  const cq = rnic.createCq({ depth: 64 });
  const qp = rnic.createRcQp({ pd, sendCq: cq, recvCq: cq, ird: 16, ord: 16 });
  const memory = new Uint8Array(new SharedArrayBuffer(REGION_BYTES));
  for (let i = 0; i < memory.length; i++) memory[i] = (i * 7 + 3) & 0xff;
  const before = memory.slice();
  const region = rnic.registerMemory(pd, memory, {
    access: Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead | Access.RemoteAtomic,
    taggedOffsetBase: TAGGED_BASE,
  });
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
    const script = [
      'status=0',
      'g=$(rxe_gid_index)',
      ...RUNS.map(
        (run) =>
          `${run.tool} -d rxe0 -x $g -F -p ${port} ${HOST_ADDRESS_FROM_GUEST}; rc=$?; echo "KBTP-PERFTEST ${run.name} $rc"; [ $rc = 0 ] || status=1; sleep 1`,
      ),
      'exit $status',
    ].join('\n');
    const guest = await Guest.start({ name: 'rxe-perftest', frameTunnel: neighbour.ports, peerScript: script, timeoutMs: 420_000 });
    const result = await guest.exited;
    assert.is(result.guestFailure, null, result.guestFailure ?? '');
    assert.not.ok(result.timedOut, `guest timed out (log ${result.logPath})`);
    for (const run of RUNS) assert.match(result.log, new RegExp(`KBTP-PERFTEST ${run.name} 0`), `${run.name} exit status (log ${result.logPath})`);
    assert.is(result.exitStatus, 0);
    assert.is(served.length, RUNS.length, 'one side-channel connection per run');
    const runs = await Promise.all(served);
    const capture = decodeRoceCapture(new Uint8Array(readFileSync(result.tunnelPcapPath!)));
    const problems = capture.packets.filter((packet) => packet.problem !== undefined).map((packet) => `record ${packet.recordIndex}: ${packet.problem}`);
    assert.equal(problems, [], 'every RoCEv2 packet decodes, ICRC verified');
    // The four runs' QPs follow each other on the wire; each replay looks only at its own QP pair's packets.
    for (const run of runs) {
      const ofRun = capture.packets.filter((packet) =>
        packet.udp.ip.sourceAddress === GUEST_TUNNEL_ADDRESS ? packet.headers.destQp === run.kbtpQp : packet.headers.destQp === run.clientQp,
      );
      const qpPackets = { ...capture, packets: ofRun };
      const replay = replayAgainstMemory(qpPackets, GUEST_TUNNEL_ADDRESS, HOST_TUNNEL_ADDRESS, run.before, run.after, TAGGED_BASE);
      assert.equal(replay.problems, [], `${run.name}: replay`);
      const count = { write: replay.writes, read: replay.reads, 'fetch-add': replay.fetchAdds, 'compare-swap': replay.compareSwaps }[
        run.name as (typeof RUNS)[number]['name']
      ];
      assert.ok(count >= 100, `${run.name}: ${count} requests replayed`);
      assert.ok(Number.parseFloat(run.clientVersion) >= 5.7, run.clientVersion);
      // After its run the client sends: two key barriers, 5 report items, closing keys, "done".
      assert.equal(run.afterRunItems, [108, 108, 8, 8, 8, 8, 8, 108, 5], `${run.name}: perftest's closing exchange`);
      if (run.name === 'write' || run.name === 'fetch-add') assert.not.equal(run.after, run.before, `${run.name} changed kbtp memory`);
      // The check can fail: one octet of kbtp's memory off and the replay says so.
      const tampered = run.after.slice();
      tampered[tampered.length - 1]! ^= 1;
      assert.ok(replayAgainstMemory(qpPackets, GUEST_TUNNEL_ADDRESS, HOST_TUNNEL_ADDRESS, run.before, tampered, TAGGED_BASE).problems.length > 0);
    }
  } finally {
    server.close();
    await neighbour.close();
  }
});

test.run();
