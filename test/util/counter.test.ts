// Octet counters that pass 2^31 in a long run keep their object's shape (host/util/counter.ts):
// a count that started as a small integer changes the object's map when it passes 2^31, which
// deoptimizes every function V8 compiled against that map. %HaveSameMap tells: an object whose
// count passed 2^31 must still share the map of one that counted nothing.
import v8 from 'node:v8';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { COUNT_FROM } from '../../host/util/counter.ts';
import { TargetStats } from '../../host/kbtp/server/stats.ts';
import { OpStats } from '../../host/bench/workload.ts';
import { Transmitter, type ByteSink } from '../../host/rnic/transmit.ts';
import { FpduReceiver } from '../../host/rnic/receive.ts';

v8.setFlagsFromString('--allow-natives-syntax');
const haveSameMap = new Function('a', 'b', 'return %HaveSameMap(a, b)') as (a: object, b: object) => boolean;
const PAST_SMI = 2 ** 31 + 16384;

test('the check itself: a count from 0 changes the map past 2^31, one from COUNT_FROM does not', () => {
  class FromZero {
    octets = 0;
  }
  class FromCountZero {
    octets = COUNT_FROM;
  }
  const [idle, counted] = [new FromZero(), new FromZero()];
  counted.octets += PAST_SMI;
  assert.not.ok(haveSameMap(idle, counted));
  const [idle2, counted2] = [new FromCountZero(), new FromCountZero()];
  counted2.octets += PAST_SMI;
  assert.ok(haveSameMap(idle2, counted2));
  assert.is(counted2.octets, PAST_SMI);
});

test("the target's stats count octets in and moved past 2^31 on the same map", () => {
  const [idle, counted] = [new TargetStats(), new TargetStats()];
  counted.bytesIn(PAST_SMI);
  counted.dataMoved(PAST_SMI);
  assert.ok(haveSameMap(idle, counted));
  const snapshot = counted.snapshot();
  assert.is(snapshot.bytesIn, PAST_SMI);
  assert.is(snapshot.dataBytes, PAST_SMI);
  assert.is(idle.snapshot().bytesIn + 0, 0);
});

test("kbtp bench's per-operation octets pass 2^31 on the same map", () => {
  const [idle, counted] = [new OpStats('load'), new OpStats('load')];
  counted.bytes += PAST_SMI;
  assert.ok(haveSameMap(idle, counted));
});

test("the RNIC's transmitted and received payload octets pass 2^31 on the same map", () => {
  const sink: ByteSink = { pendingBytes: 0, write: () => undefined };
  const [idleOut, countedOut] = [
    new Transmitter(sink, { crc: false, markers: false, mulpdu: 8192 }),
    new Transmitter(sink, { crc: false, markers: false, mulpdu: 8192 }),
  ];
  countedOut.bytesSent += PAST_SMI;
  assert.ok(haveSameMap(idleOut, countedOut));
  const receiveSink = {} as ConstructorParameters<typeof FpduReceiver>[0];
  const [idleIn, countedIn] = [new FpduReceiver(receiveSink, { crc: false, markers: false }), new FpduReceiver(receiveSink, { crc: false, markers: false })];
  countedIn.payloadBytesReceived += PAST_SMI;
  assert.ok(haveSameMap(idleIn, countedIn));
});

test.run();
