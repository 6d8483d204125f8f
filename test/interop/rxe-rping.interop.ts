// RDMA CM over RoCEv2 against rxe: the guest's `rping -c -V` connects to kbtp through IB CM MADs on
// QP1 (REQ, REP, RTU, DREQ, DREP as UD Sends; host/rnic/rc/cm-responder.ts) and runs rping's
// protocol over the resulting RC connection with kbtp as `rping -s` (rping-peer.ts on an RC QP).
import { readFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { decodeRoceCapture } from '../../host/capture/roce.ts';
import { connectRdmaCm } from '../../host/rnic/rc/cm-initiator.ts';
import { CmResponder, type CmConnectionRequest } from '../../host/rnic/rc/cm-responder.ts';
import { decodeMadHeader } from '../../host/rnic/wire/ib-cm.ts';
import { GUEST_TUNNEL_ADDRESS, Guest, HOST_TUNNEL_ADDRESS } from './guest.ts';
import { rpingResources, runRpingClientIterations, serveRpingIterations } from './rping-peer.ts';
import { openRxeNeighbour } from './rxe-tunnel.ts';

const RPING_PORT = 7174;
const COUNT = 5;

/** The run's tunnel capture decodes without a problem; its QP1 MADs as 'side:attribute id'. */
function capturedMads(pcapPath: string): string[] {
  const capture = decodeRoceCapture(new Uint8Array(readFileSync(pcapPath)));
  assert.equal(
    capture.packets.filter((p) => p.problem !== undefined).map((p) => `${p.recordIndex}: ${p.problem}`),
    [],
  );
  return capture.packets
    .filter((p) => p.headers.destQp === 1)
    .map((p) => `${p.udp.ip.sourceAddress === HOST_TUNNEL_ADDRESS ? 'kbtp' : 'rxe'}:${decodeMadHeader(p.payload)?.attributeId.toString(16)}`);
}

test('rping -c -V over RDMA CM on rxe against kbtp as rping server: CM REQ/REP/RTU/DREQ/DREP on QP1, 5 validated iterations', async () => {
  const neighbour = await openRxeNeighbour('rping-server');
  const lines: string[] = [];
  let cm: CmResponder | undefined;
  const served = new Promise<{ iterations: number; request: CmConnectionRequest }>((resolve, reject) => {
    cm = new CmResponder(neighbour.rnic.roceEndpoint!, (request) => {
      try {
        if (request.servicePort !== RPING_PORT) throw new Error(`REQ for port ${request.servicePort}`);
        const { qp, cq, buffers } = rpingResources(neighbour.rnic, 64, (options) => neighbour.rnic.createRcQp(options));
        request.accept(qp);
        serveRpingIterations(qp, cq, buffers, { log: (line) => lines.push(line) }).then(({ iterations }) => resolve({ iterations, request }), reject);
      } catch (error) {
        reject(error);
      }
    });
  });
  try {
    const guest = await Guest.start({
      name: 'rxe-rping-client',
      frameTunnel: neighbour.ports,
      peerScript: `rping -c -a ${HOST_TUNNEL_ADDRESS} -p ${RPING_PORT} -C ${COUNT} -V -v`,
      timeoutMs: 240_000,
    });
    const result = await guest.exited;
    // rping exits right after its DREQ; kbtp's server ends when the DREQ arrives (bounded wait).
    let timer: ReturnType<typeof setTimeout> | undefined;
    const outcome = await Promise.race([
      served,
      new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), 30_000);
      }),
    ]);
    clearTimeout(timer);
    if (outcome === undefined) throw new Error(`kbtp's rping server did not finish after the guest ended (log ${result.logPath})`);
    const { iterations, request } = outcome;
    assert.is(result.exitStatus, 0, `rping exit status (log ${result.logPath})`);
    assert.is(iterations, COUNT);
    assert.is(request.cma?.sourceAddress, GUEST_TUNNEL_ADDRESS);
    assert.is(request.cma?.destinationAddress, HOST_TUNNEL_ADDRESS);
    assert.is(lines.length, COUNT);
    assert.match(lines[0]!, /^server ping data: rdma-ping-0: /);
    assert.match(result.log, /ping data: rdma-ping-4: /);
    const mads = capturedMads(result.tunnelPcapPath!);
    assert.equal(mads.slice(0, 3), ['rxe:10', 'kbtp:13', 'rxe:14'], 'REQ, REP, RTU');
    assert.ok(mads.includes('rxe:15') && mads.includes('kbtp:16'), `DREQ answered by DREP: ${mads.join(' ')}`);
    assert.is(cm!.stats.rtus, 1);
    assert.is(cm!.stats.dreqs >= 1, true);
  } finally {
    cm?.close();
    await neighbour.close();
  }
});

test('a REQ for a port kbtp does not serve is rejected: rping -c sees RDMA_CM_EVENT_REJECTED at once', async () => {
  const neighbour = await openRxeNeighbour('rping-reject');
  const cm = new CmResponder(neighbour.rnic.roceEndpoint!, (request) => request.reject());
  try {
    const result = await (
      await Guest.start({
        name: 'rxe-rping-reject',
        frameTunnel: neighbour.ports,
        peerScript: `rping -c -a ${HOST_TUNNEL_ADDRESS} -p ${RPING_PORT + 1} -C 1 -v; echo "KBTP-RPING-EXIT $?"`,
        timeoutMs: 240_000,
      })
    ).exited;
    assert.is(result.exitStatus, 0, `the script ran (log ${result.logPath})`);
    assert.match(result.log, /RDMA_CM_EVENT_REJECTED/);
    assert.not.match(result.log, /KBTP-RPING-EXIT 0/, 'rping fails');
    assert.is(cm.stats.reqs >= 1, true);
    const capture = decodeRoceCapture(new Uint8Array(readFileSync(result.tunnelPcapPath!)));
    const mads = capture.packets
      .filter((p) => p.headers.destQp === 1)
      .map((p) => `${p.udp.ip.sourceAddress === HOST_TUNNEL_ADDRESS ? 'kbtp' : 'rxe'}:${decodeMadHeader(p.payload)?.attributeId.toString(16)}`);
    assert.equal(mads.slice(0, 2), ['rxe:10', 'kbtp:12'], 'REQ answered by REJ');
  } finally {
    cm.close();
    await neighbour.close();
  }
});

test('kbtp as rping client over RDMA CM against rping -s -V on rxe: REQ/REP/RTU, 5 validated iterations, DREQ/DREP', async () => {
  const neighbour = await openRxeNeighbour('rping-client');
  try {
    const guest = await Guest.start({
      name: 'rxe-rping-server',
      frameTunnel: neighbour.ports,
      peerScript: `rping -s -a ${GUEST_TUNNEL_ADDRESS} -p ${RPING_PORT} -V -v & pid=$!\nsleep 1\necho KBTP-READY\nwait $pid`,
      timeoutMs: 240_000,
    });
    await guest.waitForLine(/KBTP-READY/, 180_000);
    const lines: string[] = [];
    const { qp, cq, buffers } = rpingResources(neighbour.rnic, 64, (options) => neighbour.rnic.createRcQp(options));
    await connectRdmaCm(neighbour.rnic.roceEndpoint!, qp, { address: GUEST_TUNNEL_ADDRESS, port: RPING_PORT });
    await runRpingClientIterations(qp, cq, buffers, { count: COUNT, log: (line) => lines.push(line) });
    qp.disconnect(); // sends DREQ: rping -s sees DISCONNECTED and exits 0
    const result = await guest.exited;
    assert.is(result.exitStatus, 0, `rping -s exit status (log ${result.logPath})`);
    assert.is(lines.length, COUNT);
    assert.match(result.log, /server ping data: rdma-ping-4: /);
    const mads = capturedMads(result.tunnelPcapPath!);
    assert.ok(mads.includes('kbtp:10') && mads.includes('rxe:13') && mads.includes('kbtp:14'), `REQ, REP, RTU: ${mads.join(' ')}`);
    assert.ok(mads.includes('kbtp:15') && mads.includes('rxe:16'), `DREQ answered by DREP: ${mads.join(' ')}`);
    qp.destroy();
  } finally {
    await neighbour.close();
  }
});

test.run();
