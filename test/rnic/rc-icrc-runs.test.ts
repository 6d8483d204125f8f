// host/rnic/rc/icrc-runs.ts: one ISA-L call checks the ICRCs of a run of equal packets back to
// back (a GRO run in the batched socket's receive area). It must say "all good" exactly when each
// packet's own check (icrcMatchesAt, the per-packet path) would, whatever the run's length, packet
// size, BTH octet 4 (masked by the ICRC) and source; a run it refuses is checked packet by packet.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { IcrcRunChecker, MAX_RUN_PACKETS } from '../../host/rnic/rc/icrc-runs.ts';
import { fillIcrcAfterUdp, icrcMatchesAt, socketIcrcHeaders } from '../../host/rnic/rc/link.ts';
import { sharedAddress } from '../../host/rnic/rc/shared-copy.ts';
import { icrcAfterUdp } from '../../host/rnic/wire/icrc.ts';
import { loadIsal } from '../../host/util/isal.ts';
import { BatchedUdpLink } from '../../host/rnic/rc/batched-udp-link.ts';
import { completions, expectSuccess, rcPair } from '../support/rc.ts';

const MiB = 1024 * 1024;

const isal = !(loadIsal() instanceof Error) && sharedAddress(new Uint8Array(new SharedArrayBuffer(8))) >= 0;
const from = { address: '127.0.0.1', port: 40000 };
const to = { address: '127.0.0.1', port: 4791 };

/** A seeded generator (xorshift32): the same octets every run. */
function octets(seed: number): () => number {
  let x = seed;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return x & 0xff;
  };
}

/** `count` Write MIDDLE packets of `length` octets (BTH, payload, ICRC) back to back in shared memory, each with a good ICRC. */
function run(count: number, length: number, octet4: number, seed: number): { area: Uint8Array; afterUdp: number } {
  const area = new Uint8Array(new SharedArrayBuffer(count * length + 64));
  const next = octets(seed);
  const ip = new Uint8Array(20);
  const udp = new Uint8Array(8);
  socketIcrcHeaders(ip, udp, from, to, length);
  const afterUdp = icrcAfterUdp(ip, udp);
  for (let i = 0; i < count; i++) {
    const at = i * length;
    const header = area.subarray(at, at + 12);
    header.set([0x07, 0, 0xff, 0xff, octet4, 0, 0x12, 0x34, 0, 0, 0x10, i]);
    const payload = area.subarray(at + 12, at + length - 4);
    for (let b = 0; b < payload.length; b++) payload[b] = next();
    fillIcrcAfterUdp(afterUdp, header, payload, area.subarray(at + length - 4, at + length));
  }
  return { area, afterUdp };
}

const eachGood = (area: Uint8Array, afterUdp: number, count: number, length: number): boolean[] =>
  Array.from({ length: count }, (_, i) => icrcMatchesAt(afterUdp, area, i * length, -1, length));

test('a run of good packets passes in one check, for every run length, packet size and octet 4', () => {
  if (!isal) return; // ISA-L or koffi missing: every packet is checked alone (allGood says false)
  const checker = new IcrcRunChecker();
  for (const length of [4112, 4128, 1040, 272, 16 + 12]) {
    for (const octet4 of [0, 0xff, 0x40, 0x3f]) {
      for (const count of [2, 3, 7, 15, MAX_RUN_PACKETS]) {
        const { area, afterUdp } = run(count, length, octet4, count * 131 + length + octet4);
        assert.ok(eachGood(area, afterUdp, count, length).every(Boolean), 'the packets are good one by one');
        assert.ok(checker.allGood(afterUdp, area, 0, sharedAddress(area), length, count), `${count} x ${length}, octet 4 ${octet4}`);
        // A sub-run from the second packet on is a run too.
        assert.ok(checker.allGood(afterUdp, area, length, sharedAddress(area) + length, length, count - 1) || count - 1 < 2);
      }
    }
  }
});

test('one damaged octet anywhere in any packet fails the run; each packet alone then tells which', () => {
  if (!isal) return;
  const checker = new IcrcRunChecker();
  const count = 12;
  const length = 4112;
  const { area, afterUdp } = run(count, length, 0, 7);
  const address = sharedAddress(area);
  const next = octets(99);
  for (let trial = 0; trial < 200; trial++) {
    const packet = next() % count;
    // Any octet but octet 4 of the BTH, which the ICRC masks (a change there is not an error).
    let offset = (next() * 256 + next()) % length;
    if (offset === 4) offset = 5;
    const at = packet * length + offset;
    const flip = 1 << (next() & 7);
    area[at]! ^= flip;
    assert.not.ok(checker.allGood(afterUdp, area, 0, address, length, count), `packet ${packet}, octet ${offset}`);
    assert.equal(
      eachGood(area, afterUdp, count, length).map((good, i) => good || i === packet),
      new Array(count).fill(true),
    );
    assert.not.ok(icrcMatchesAt(afterUdp, area, packet * length, -1, length));
    area[at]! ^= flip;
  }
  assert.ok(checker.allGood(afterUdp, area, 0, address, length, count), 'repaired');
});

test('two packets with errors that cancel in neither alone still fail; a different octet 4 in one packet is refused, not passed', () => {
  if (!isal) return;
  const checker = new IcrcRunChecker();
  const length = 1040;
  const { area, afterUdp } = run(4, length, 0, 3);
  const address = sharedAddress(area);
  // The same flip in two packets: the CRC of each changes alike, so the run's must not cancel.
  area[length + 100]! ^= 1;
  area[2 * length + 100]! ^= 1;
  assert.not.ok(checker.allGood(afterUdp, area, 0, address, length, 4));
  area[length + 100]! ^= 1;
  area[2 * length + 100]! ^= 1;
  // Octet 4 is masked by the ICRC, so a packet with another value there is still good; the run
  // check needs one value throughout and declines (the packets are then checked one by one).
  area[2 * length + 4] = 0x40;
  assert.ok(eachGood(area, afterUdp, 4, length).every(Boolean));
  assert.not.ok(checker.allGood(afterUdp, area, 0, address, length, 4));
});

test('a run from another source or of another length is judged by its own headers', () => {
  if (!isal) return;
  const checker = new IcrcRunChecker();
  const length = 4112;
  const { area, afterUdp } = run(5, length, 0, 11);
  const address = sharedAddress(area);
  assert.ok(checker.allGood(afterUdp, area, 0, address, length, 5));
  const ip = new Uint8Array(20);
  const udp = new Uint8Array(8);
  socketIcrcHeaders(ip, udp, { address: '127.0.0.2', port: 40000 }, to, length);
  assert.not.ok(checker.allGood(icrcAfterUdp(ip, udp), area, 0, address, length, 5), 'another source address');
  assert.not.ok(checker.allGood(afterUdp, area, 0, address, length, 1), 'one packet: checked alone');
  assert.not.ok(checker.allGood(afterUdp, area, 0, -1, length, 5), 'no address: checked alone');
  assert.ok(checker.allGood(afterUdp, area, 0, address, length, 5), 'and back');
});

test('a 1 MiB Write over the batched link: the responder checks its GRO runs with a call each, and places every packet', async () => {
  const pair = await rcPair({ pathMtu: 4096, bytes: 2 * MiB });
  try {
    const { client, server } = pair;
    assert.instance(server.link, BatchedUdpLink, 'the batched link (koffi loads here)');
    const received = (server.link as BatchedUdpLink).socket.stats;
    for (let i = 0; i < MiB; i++) client.memory[i] = (i * 7 + (i >>> 12)) & 0xff;
    const before = { ...received };
    client.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [{ lkey: client.mr.lkey, offset: 0, length: MiB }],
      remote: { stag: server.mr.rkey, taggedOffset: 0 },
    });
    expectSuccess(await completions(client.cq, 1, 20_000));
    assert.equal(server.memory.subarray(0, MiB), client.memory.subarray(0, MiB), 'written data');
    assert.is(server.rnic.roceEndpoint!.stats.icrcErrors, 0);
    const checks = received.runChecks - before.runChecks;
    const passed = received.runChecksPassed - before.runChecksPassed;
    const covered = received.datagramsInPassedRuns - before.datagramsInPassedRuns;
    if (!isal) {
      assert.is(passed, 0, 'without ISA-L every packet is checked alone');
      return;
    }
    // 256 packets sent as GSO messages of up to 15 equal datagrams, each a GRO run at the
    // responder: every run of two or more passes its one check (none was damaged).
    assert.ok(checks > 0 && passed === checks, `${passed} of ${checks} run checks passed`);
    assert.ok(covered >= 200 && covered <= 257, `${covered} packets checked in runs`);
  } finally {
    await pair.close();
  }
});

test('ISA-L at an address answers signed 32-bit CRCs (no heap number per call), the same 32 bits as zlib; a packet checked through it reads its ICRC right', async () => {
  if (!isal) return;
  const library = loadIsal();
  if (library instanceof Error) return;
  const { crc32 } = await import('@node-rs/crc32');
  const data = new Uint8Array(new SharedArrayBuffer(4096));
  const next = octets(77);
  let negative = 0;
  for (const length of [1, 100, 1024, 4096]) {
    for (let trial = 0; trial < 8; trial++) {
      for (let i = 0; i < length; i++) data[i] = next();
      const view = data.subarray(0, length);
      const running = crc32(new Uint8Array([trial, length & 0xff]));
      const crc = library.crc32AtAddress(running | 0, sharedAddress(view), length);
      assert.is(crc, crc | 0, `a signed 32-bit result (${crc})`);
      assert.is(crc >>> 0, crc32(view, running), `length ${length}, trial ${trial}: the CRC zlib computes`);
      if (crc < 0) negative++;
    }
  }
  assert.ok(negative > 0, 'some CRCs have their top bit set (so signed and unsigned differ)');
  // The per-packet check in place (ISA-L at the packet's address) against the ICRC's unsigned octets.
  const count = 16;
  const length = 4112;
  const { area, afterUdp } = run(count, length, 0xff, 991);
  const base = sharedAddress(area);
  const inPlace = (): boolean[] => Array.from({ length: count }, (_, i) => icrcMatchesAt(afterUdp, area, i * length, base + i * length, length));
  assert.equal(inPlace(), new Array<boolean>(count).fill(true), 'every good packet passes');
  area[5 * length + 2000]! ^= 0x10;
  assert.equal(
    inPlace().flatMap((good, i) => (good ? [] : [i])),
    [5],
    'the damaged packet alone fails',
  );
});

test.run();
