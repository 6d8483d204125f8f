// The RDMA CM passive side (host/rnic/rc/cm-responder.ts) between two kbtp RNICs on Ethernet
// links joined in memory: a flood of REQs with fresh communication ids leaves it remembering at
// most its limit (oldest answers forgotten first, a repeated recent REQ still gets the same
// answer), while a real connection made before or after the flood works and its DREQ still ends it.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { connectRdmaCm } from '../../host/rnic/rc/cm-initiator.ts';
import { CmResponder } from '../../host/rnic/rc/cm-responder.ts';
import { EthernetLink } from '../../host/rnic/rc/ethernet-link.ts';
import { sendGsiMad } from '../../host/rnic/rc/gsi.ts';
import { Access, createRnic, RnicError, type RcQueuePair, type Rnic, type RoceEndpoint } from '../../host/rnic/verbs.ts';
import { CmAttribute, decodeCmIds, decodeCmReq, decodeMadHeader, encodeCmReq, RDMA_PS_TCP_SERVICE, type CmReq } from '../../host/rnic/wire/ib-cm.ts';
import { IbHeaders } from '../../host/rnic/wire/ib-headers.ts';
import { decodeIbPacket } from '../../host/rnic/wire/ib-packet.ts';
import { ipv4MappedGid, parseIpv4 } from '../../host/rnic/wire/roce-frame.ts';
import { wiredFramePorts } from '../support/frame-wire.ts';
import { REQ_IP, REQ_PACKET, REQ_UDP } from '../support/rxe-cm-req.ts';

// rxe's captured REQ is the template whose ids, port and GID the flood varies.
const bytes = (hex: string): Uint8Array => new Uint8Array(Buffer.from(hex, 'hex'));

function capturedReq(): CmReq {
  const h = new IbHeaders();
  const packet = bytes(REQ_PACKET);
  assert.is(decodeIbPacket(packet, h, bytes(REQ_IP), bytes(REQ_UDP)), undefined);
  return decodeCmReq(packet.subarray(h.payloadOffset, h.payloadOffset + h.payloadLength));
}

const A = '10.7.0.1';
const B = '10.7.0.2';
const REAL_PORT = 7174;
const FLOOD_PORT = 9999;
const LIMIT = 16;

interface Side {
  rnic: Rnic;
  endpoint: RoceEndpoint;
  qp: RcQueuePair;
  memory: Uint8Array;
  rkey: number;
  lkey: number;
}

async function sides(): Promise<[Side, Side]> {
  const [wireA, wireB] = wiredFramePorts();
  const make = async (name: string, port: typeof wireA, mac: number, address: string): Promise<Side> => {
    const rnic = createRnic({ name });
    const endpoint = await rnic.openRoce({ link: new EthernetLink(port, { mac: new Uint8Array([2, 0, 0, 0, 0, mac]), address }) });
    const pd = rnic.allocPd();
    const buffer = new SharedArrayBuffer(64 * 1024);
    const mr = rnic.registerMemory(pd, buffer, { access: Access.LocalWrite | Access.RemoteWrite });
    const cq = rnic.createCq({ depth: 64 });
    const qp = rnic.createRcQp({ pd, sendCq: cq, recvCq: cq });
    return { rnic, endpoint, qp, memory: new Uint8Array(buffer), rkey: mr.rkey, lkey: mr.lkey };
  };
  return [await make('a', wireA, 1, A), await make('b', wireB, 2, B)];
}

/** Lets the in-memory wire deliver until `done` holds; fails after `limitMs`. */
async function until(done: () => boolean, what: string, limitMs = 30_000): Promise<void> {
  const deadline = Date.now() + limitMs;
  while (!done()) {
    if (Date.now() > deadline) assert.unreachable(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

test('CmResponder: a REQ flood with fresh comm ids stays bounded; real connections before and after it work', async () => {
  const [a, b] = await sides();
  const base = capturedReq();
  const offered: number[] = [];
  const responder = new CmResponder(
    b.endpoint,
    (request) => {
      offered.push(request.req.localCommId);
      if (request.servicePort === REAL_PORT) request.accept(b.qp);
      else request.reject();
    },
    { maxRemembered: LIMIT },
  );
  try {
    // REJs that reach A, by the comm id they answer.
    const rejected = new Map<number, number>();
    const listenForRejects = (): void => {
      a.endpoint.addGsiReceiver((_h, mad) => {
        if (decodeMadHeader(mad)?.attributeId !== CmAttribute.Rej) return;
        const id = decodeCmIds(mad).remoteCommId;
        rejected.set(id, (rejected.get(id) ?? 0) + 1);
      });
    };
    const flood = async (first: number, count: number): Promise<void> => {
      const before = responder.stats.reqs;
      for (let i = 0; i < count; i++) {
        const id = first + i;
        const req = { ...base, localCommId: id, serviceId: RDMA_PS_TCP_SERVICE + BigInt(FLOOD_PORT), primaryLocalGid: ipv4MappedGid(parseIpv4(A)) };
        sendGsiMad(a.endpoint, B, encodeCmReq(req, BigInt(id)), id);
        // The first frame waits for ARP: let it resolve before the rest.
        if (i === 0) await until(() => responder.stats.reqs > before, 'the first REQ');
      }
      await until(() => responder.stats.reqs === before + count, `${count} REQs`);
    };

    // A real connection first, then the flood: its entry survives (a DREQ must still find it).
    const connected = connectRdmaCm(a.endpoint, a.qp, { address: B, port: REAL_PORT, retryMs: 2000 });
    await connected;
    await b.qp.whenEstablished();
    listenForRejects();
    await flood(1000, 300);
    assert.is(responder.stats.reqs, 301);
    assert.ok(responder.remembered <= LIMIT + 1, `remembers ${responder.remembered} REQs (limit ${LIMIT} + 1 connection at RTS)`);
    assert.is(responder.stats.forgotten, 301 - LIMIT);
    await until(() => rejected.size === 300, 'every flood REQ rejected');

    // A repeated recent REQ gets the same answer again; a repeated forgotten one is a new request.
    const offeredBefore = offered.length;
    await flood(1299, 1);
    assert.is(responder.stats.duplicateReqs, 1);
    assert.is(offered.length, offeredBefore, 'the recent one was not offered again');
    await until(() => rejected.get(1299) === 2, 'the repeated REJ');
    await flood(1000, 1);
    assert.is(offered.length, offeredBefore + 1, 'the forgotten one is offered as new');
    assert.ok(responder.remembered <= LIMIT + 1);

    // The connection made before the flood carries data and its DREQ still ends the responder's QP.
    a.memory.fill(0x5c, 0, 4096);
    a.qp.postSend({ wrId: 1, opcode: 'RDMA_WRITE', sgList: [{ lkey: a.lkey, offset: 0, length: 4096 }], remote: { stag: b.rkey, taggedOffset: 0 } });
    await until(() => b.memory[4095] === 0x5c, 'the Write landing');
    assert.ok(b.memory.subarray(0, 4096).every((octet) => octet === 0x5c));
    a.qp.disconnect();
    const info = await b.qp.whenDisconnected();
    assert.is(info.reason, 'peer-closed', 'the DREQ found the connection after the flood');

    // And a new connection after the flood works too.
    const qpA = a.rnic.createRcQp({ pd: a.qp.pd, sendCq: a.qp.sendCq, recvCq: a.qp.recvCq });
    const qpB = b.rnic.createRcQp({ pd: b.qp.pd, sendCq: b.qp.sendCq, recvCq: b.qp.recvCq });
    b.qp = qpB;
    await connectRdmaCm(a.endpoint, qpA, { address: B, port: REAL_PORT, retryMs: 2000 });
    await qpB.whenEstablished();
    assert.is(qpA.state, 'rts');
    qpA.disconnect();
  } finally {
    responder.close();
    await a.rnic.close();
    await b.rnic.close();
  }
});

test('CmResponder: maxRemembered must be a positive integer', async () => {
  const [a, b] = await sides();
  try {
    assert.throws(
      () => new CmResponder(b.endpoint, () => undefined, { maxRemembered: 0 }),
      (error: unknown) => error instanceof RnicError && /maxRemembered/.test(error.message),
    );
  } finally {
    await a.rnic.close();
    await b.rnic.close();
  }
});

test.run();
