// The appliance image starts `kbtp appliance --default-data-dir /var/lib/kbtp`: a provisioned
// kbtp.json that names no "dataDir" must still get the durable tier on the data partition (and
// say so), while a file that asks for memory only keeps it.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { resolveApplianceSettings, storageSummary } from '../../firmware/appliance-config.ts';
import type { Json } from '../../host/util/config-reader.ts';

const DATA = '/var/lib/kbtp';
const base = { listen: '127.0.0.1:7117', tenants: [{ name: 'fleet', secret: 'a-secret-of-some-length', quota: 16 }] };
const resolve = (extra: Record<string, Json>, defaults: { dataDir?: string } = { dataDir: DATA }) => resolveApplianceSettings({ ...base, ...extra }, defaults);

test('a file without dataDir gets the default data directory, the durable tier in it, and says so', () => {
  const settings = resolve({});
  assert.is(settings.dataDir, DATA);
  assert.is(settings.dataDirDefaulted, true);
  assert.is(settings.target.durable?.dataDir, DATA);
  assert.is(settings.target.tenants[0]?.eviction, 'demote');
  assert.match(storageSummary(settings), `data directory ${DATA} (the default: the configuration names no dataDir); durable tier in ${DATA}`);
});

test("the file's own dataDir wins over the default and is not reported as a default", () => {
  const settings = resolve({ dataDir: '/srv/kbtp' });
  assert.is(settings.dataDir, '/srv/kbtp');
  assert.is(settings.dataDirDefaulted, undefined);
  assert.is(settings.target.durable?.dataDir, '/srv/kbtp');
  assert.not.match(storageSummary(settings), 'default');
});

test('"dataDir": null keeps the node memory-only despite the default', () => {
  const settings = resolve({ dataDir: null });
  assert.is(settings.dataDir, null);
  assert.is(settings.target.durable, undefined);
  assert.is(settings.target.tenants[0]?.eviction, 'none');
  assert.is(storageSummary(settings), 'memory only (no dataDir)');
});

test('"durable": {"enabled": false} keeps the tier off; the default directory still holds job outputs', () => {
  const settings = resolve({ durable: { enabled: false } });
  assert.is(settings.dataDir, DATA);
  assert.is(settings.target.durable, undefined);
  assert.match(storageSummary(settings), 'memory only: durable.enabled is false');
});

test('without a default a file with no dataDir stays memory-only (plain `kbtp appliance`)', () => {
  const settings = resolve({}, {});
  assert.is(settings.dataDir, null);
  assert.is(settings.target.durable, undefined);
  assert.is(settings.dataDirDefaulted, undefined);
});

test.run();
