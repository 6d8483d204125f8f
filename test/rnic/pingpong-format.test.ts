// rc_pingpong's out-of-band message (roce.md §8.1): the worked example byte for byte, parsing,
// and refusal of anything else.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { decodePingpong, encodePingpong, PINGPONG_DONE, PINGPONG_MESSAGE_LENGTH } from '../../host/rnic/rc/pingpong-format.ts';
import { ipv4MappedGid, parseIpv4 } from '../../host/rnic/wire/roce-frame.ts';

test('the roce.md example: QPN 0x11, PSN 0xA1B2C3, GID ::ffff:192.0.2.1', () => {
  const bytes = encodePingpong({ lid: 0, qpNumber: 0x11, psn: 0xa1b2c3, gid: ipv4MappedGid(parseIpv4('192.0.2.1')) });
  assert.is(bytes.length, PINGPONG_MESSAGE_LENGTH);
  assert.is(new TextDecoder().decode(bytes), '0000:000011:a1b2c3:00000000000000000000ffffc0000201\0');
  const back = decodePingpong(bytes);
  assert.is(back.qpNumber, 0x11);
  assert.is(back.psn, 0xa1b2c3);
  assert.is(Buffer.from(back.gid).toString('hex'), '00000000000000000000ffffc0000201');
  assert.is(new TextDecoder().decode(PINGPONG_DONE), 'done\0');
});

test('malformed rc_pingpong messages are refused', () => {
  assert.throws(() => decodePingpong(new Uint8Array(51)), /expected 52/);
  const garbage = new Uint8Array(52).fill(0x41);
  assert.throws(() => decodePingpong(garbage), /not an rc_pingpong message/);
  const shortGid = new Uint8Array(52);
  shortGid.set(new TextEncoder().encode('0000:000011:a1b2c3:00ff'));
  assert.throws(() => decodePingpong(shortGid), /not an rc_pingpong message/);
});

test.run();
