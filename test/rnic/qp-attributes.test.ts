// ibv_create_qp's attribute checks: iWARP's QueuePair and RoCE's RcQueuePair take the same
// options, apply the same defaults and refuse the same bad values with the same error.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Rnic, RnicError } from '../../host/rnic/verbs.ts';
import type { QueuePairOptions } from '../../host/rnic/qp-attributes.ts';

const rnic = new Rnic({ name: 'attributes' });
const pd = rnic.allocPd();
const cq = rnic.createCq({ depth: 16 });
const base: QueuePairOptions = { pd, sendCq: cq, recvCq: cq };
const transports = {
  iwarp: (options: QueuePairOptions) => rnic.createQp(options),
  roce: (options: QueuePairOptions) => rnic.createRcQp(options),
};

for (const [transport, create] of Object.entries(transports)) {
  test(`${transport}: defaults are 1024 send and receive WRs, 16 SGEs, every WR signalled, IRD and ORD 16`, () => {
    const qp = create(base);
    assert.equal(
      [qp.pd, qp.sendCq, qp.recvCq, qp.maxSendWr, qp.maxRecvWr, qp.maxSge, qp.signalAll, qp.requestedIrd, qp.requestedOrd],
      [pd, cq, cq, 1024, 1024, 16, true, 16, 16],
    );
    qp.destroy();
  });

  test(`${transport}: the given limits are kept (IRD/ORD 0 and 16383 are the ends of the range)`, () => {
    const qp = create({ ...base, maxSendWr: 7, maxRecvWr: 9, maxSge: 1, signalAll: false, ird: 0, ord: 16383 });
    assert.equal([qp.maxSendWr, qp.maxRecvWr, qp.maxSge, qp.signalAll, qp.requestedIrd, qp.requestedOrd], [7, 9, 1, false, 0, 16383]);
    qp.destroy();
  });

  const refused: Array<[Partial<QueuePairOptions>, string]> = [
    [{ maxSendWr: 0 }, 'maxSendWr 0 must be a positive integer'],
    [{ maxRecvWr: 1.5 }, 'maxRecvWr 1.5 must be a positive integer'],
    [{ maxSge: -1 }, 'maxSge -1 must be a positive integer'],
    [{ ird: 16384 }, 'ird 16384 must be an integer in 0..16383'],
    [{ ord: -1 }, 'ord -1 must be an integer in 0..16383'],
  ];
  for (const [bad, message] of refused) {
    test(`${transport}: ${message} (EINVAL)`, () => {
      try {
        create({ ...base, ...bad });
        assert.unreachable('created');
      } catch (error) {
        assert.instance(error, RnicError);
        assert.is((error as RnicError).errno, 'EINVAL');
        assert.is((error as RnicError).message, message);
      }
    });
  }
}

test.run();
