import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { DEFAULT_PORT, parseHostPort } from '../../host/kbtp/address.ts';

test('client spellings: host, host:port, kbtp://, bracketed IPv6', () => {
  const client = { defaultPort: DEFAULT_PORT };
  assert.equal(parseHostPort('10.0.0.5', client), { host: '10.0.0.5', port: 7117 });
  assert.equal(parseHostPort('cache-1:9000', client), { host: 'cache-1', port: 9000 });
  assert.equal(parseHostPort('kbtp://127.0.0.1:7200', client), { host: '127.0.0.1', port: 7200 });
  assert.equal(parseHostPort('[::1]:7300', client), { host: '::1', port: 7300 });
  assert.is(parseHostPort('127.0.0.1:0', client), undefined, 'a client cannot reach port 0');
});

test('listening: a port is required and 0 picks a free one', () => {
  const listen = { allowPortZero: true };
  assert.equal(parseHostPort('127.0.0.1:0', listen), { host: '127.0.0.1', port: 0 });
  assert.is(parseHostPort('127.0.0.1', listen), undefined);
});

test('not addresses', () => {
  for (const text of ['', ':7117', 'a:b', 'host:65536', 'host:-1', '::1:7117', 'everywhere:', 'http://host:1']) {
    assert.is(parseHostPort(text, { defaultPort: DEFAULT_PORT }), undefined, text);
  }
});

test.run();
