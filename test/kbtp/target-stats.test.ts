// The target's request counts by opcode and status (the status page, `kbtp stats`): the opcodes
// and statuses KBTP defines are counted in a table, anything else a peer sent in a map; the
// snapshot names both alike.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import * as K from '../../assembly/kbtp-constants.ts';
import { TargetStats } from '../../host/kbtp/server/stats.ts';

test('requests are counted by opcode and status, whether KBTP defines them or not', () => {
  const stats = new TargetStats(0, 64, 4);
  for (let i = 0; i < 3; i++) stats.completed(K.OPCODE_LOAD, K.STATUS_SUCCESS, 64);
  stats.completed(K.OPCODE_LOAD, K.STATUS_NOT_VALID, 0);
  stats.completed(K.OPCODE_BIND, K.STATUS_SHUTTING_DOWN);
  stats.completed(0x7f, K.STATUS_INVALID_REQUEST);
  stats.completed(0x7f, K.STATUS_INVALID_REQUEST);
  stats.completed(K.OPCODE_FREE, 0x1234);
  const { requests, latency } = stats.snapshot();
  assert.equal(requests, {
    LOAD: { SUCCESS: 3, NOT_VALID: 1 },
    BIND: { SHUTTING_DOWN: 1 },
    '0x7f': { INVALID_REQUEST: 2 },
    FREE: { UNKNOWN_STATUS_0x1234: 1 },
  });
  // Timed are the LOADs of a known context (3 + 1); the BIND named none.
  assert.is(latency.LOAD?.count, 4);
  assert.is(latency.BIND, undefined);
});

test.run();
