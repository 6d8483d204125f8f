// kbtp's RC transport against the Linux kernel's Soft-RoCE (rxe) with rdma-core's ibv_rc_pingpong,
// both ways. The guest's rxe0 sits on eth1, a layer-2 UDP tunnel whose other end is kbtp's
// EthernetLink (ARP, IPv4/UDP built by kbtp, ICRC over the real headers); the tool's TCP side
// channel runs over QEMU user networking (the guest reaches the host's 127.0.0.1 as 10.0.2.2).
//   1. kbtp as server: the guest runs `ibv_rc_pingpong -c ... 10.0.2.2`;
//   2. kbtp as client: the guest runs `ibv_rc_pingpong -c` (server), reached through hostfwd;
// every octet kbtp receives is checked (the tool echoes what it received), `-c` has the guest check
// what kbtp sent, and the tunnel's capture decodes completely with kbtp's RoCE decoder.
import { readFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { decodeRoceCapture, type RoceCapture } from '../../host/capture/roce.ts';
import { IbOpcode } from '../../host/rnic/wire/ib-opcodes.ts';
import { rxeSourcePort } from '../../host/rnic/wire/roce-frame.ts';
import { GUEST_TUNNEL_ADDRESS, Guest, HOST_ADDRESS_FROM_GUEST, HOST_TUNNEL_ADDRESS, type GuestResult } from './guest.ts';
import { runPingpongClient, runPingpongServer, type PingpongReport } from './rc-pingpong-peer.ts';
import { openRxeNeighbour } from './rxe-tunnel.ts';

const PINGPONG_PORT = 18515;
const ITERATIONS = 100;
// Not a multiple of the path MTU (1024): every message is FIRST, MIDDLE x3, LAST with a short tail.
const SIZE = 4500;
const tool = `ibv_rc_pingpong -d rxe0 -g $(rxe_gid_index) -s ${SIZE} -n ${ITERATIONS} -m 1024 -c`;

function listen(): Promise<Server> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}

function checkCapture(result: GuestResult, report: PingpongReport): RoceCapture {
  assert.ok(result.tunnelPcapPath, 'the tunnel was captured');
  const capture = decodeRoceCapture(new Uint8Array(readFileSync(result.tunnelPcapPath)));
  const problems = capture.packets.filter((packet) => packet.problem !== undefined).map((packet) => `record ${packet.recordIndex}: ${packet.problem}`);
  assert.equal(problems, [], 'every RoCEv2 packet decodes, ICRC verified');
  const sends = (from: string) =>
    capture.packets.filter((packet) => packet.udp.ip.sourceAddress === from && packet.headers.opcode === IbOpcode.SendLast).length;
  // Retransmissions add packets under TCG; every message's LAST is there at least once.
  assert.ok(sends(HOST_TUNNEL_ADDRESS) >= ITERATIONS, `kbtp's ${ITERATIONS} Sends on the wire`);
  assert.ok(sends(GUEST_TUNNEL_ADDRESS) >= ITERATIONS, `rxe's ${ITERATIONS} Sends on the wire`);
  // rxe derives its UDP source port from both QP numbers (docs/INTEROP.md), live as in the captures.
  const guestQp = report.connection.remote.qpNumber;
  const rxePorts = new Set(capture.packets.filter((packet) => packet.udp.ip.sourceAddress === GUEST_TUNNEL_ADDRESS).map((packet) => packet.udp.sourcePort));
  assert.equal([...rxePorts], [rxeSourcePort(guestQp, report.qp.qpNumber)]);
  return capture;
}

function checkGuest(result: GuestResult): void {
  assert.is(result.guestFailure, null, result.guestFailure ?? '');
  assert.not.ok(result.timedOut, `guest timed out (log ${result.logPath})`);
  assert.is(result.exitStatus, 0, `ibv_rc_pingpong exit status (log ${result.logPath})`);
  assert.match(result.log, new RegExp(`${ITERATIONS} iters in [0-9.]+ seconds`));
  assert.not.match(result.log, /invalid data/, "the guest's -c check of what kbtp sent");
}

function checkReport(report: PingpongReport): void {
  assert.equal(report.mismatches, [], 'every octet kbtp received');
  assert.is(report.iterations, ITERATIONS);
}

test('kbtp as rc_pingpong server, rxe guest as client: 100 echoed Sends of 4500 octets, data exact both ways', async () => {
  const neighbour = await openRxeNeighbour('pingpong-server');
  const server = await listen();
  const port = (server.address() as { port: number }).port;
  let report: PingpongReport | undefined;
  try {
    const served = new Promise<PingpongReport>((resolve, reject) => {
      server.once('connection', (socket: Socket) => {
        runPingpongServer({ rnic: neighbour.rnic, socket, size: SIZE, iterations: ITERATIONS }).then(resolve, reject);
      });
    });
    const guest = await Guest.start({
      name: 'rxe-pingpong-client',
      frameTunnel: neighbour.ports,
      peerScript: `${tool} -p ${port} ${HOST_ADDRESS_FROM_GUEST}`,
      timeoutMs: 240_000,
    });
    const outcome = await Promise.race([served, guest.exited.then((result) => ({ guestEnded: result }))]);
    const result = await guest.exited;
    if ('guestEnded' in outcome) assert.unreachable(`the guest ended before kbtp's side finished (log ${result.logPath})`);
    report = outcome as PingpongReport;
    checkGuest(result);
    checkReport(report);
    assert.match(result.log, new RegExp(`remote address: LID 0x0000, QPN 0x${report.qp.qpNumber.toString(16).padStart(6, '0')}`));
    checkCapture(result, report);
  } finally {
    report?.close();
    server.close();
    await neighbour.close();
  }
});

test('kbtp as rc_pingpong client, rxe guest as server: 100 echoed Sends of 4500 octets, data exact both ways', async () => {
  const neighbour = await openRxeNeighbour('pingpong-client');
  let report: PingpongReport | undefined;
  try {
    const guest = await Guest.start({
      name: 'rxe-pingpong-server',
      frameTunnel: neighbour.ports,
      forwardGuestPorts: [PINGPONG_PORT],
      peerScript: [`${tool} -p ${PINGPONG_PORT} & pid=$!`, `wait_tcp_listen ${PINGPONG_PORT} || exit 10`, 'echo KBTP-READY', 'wait $pid'].join('\n'),
      timeoutMs: 240_000,
    });
    await guest.waitForLine(/KBTP-READY/, 180_000);
    report = await runPingpongClient({ rnic: neighbour.rnic, host: '127.0.0.1', port: guest.hostPort(PINGPONG_PORT), size: SIZE, iterations: ITERATIONS });
    const result = await guest.exited;
    checkGuest(result);
    checkReport(report);
    checkCapture(result, report);
  } finally {
    report?.close();
    await neighbour.close();
  }
});

test.run();
