// The status page in a real browser: Debian's chromium (installed by test/firmware/deps.sh, which
// `make test` runs first) driven headless by playwright-core against a real `kbtp appliance`.
// The page loads with no console errors, shows the pool and the chart, and its numbers follow
// a burst of stores. A screenshot is kept in .cache/status-page.png.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { connect, type KbtpSession } from '../../host/kbtp/initiator.ts';
import { startDaemon, SMALL_POOL, type Daemon } from './daemon.ts';

const CHROMIUM = '/usr/bin/chromium';
const CACHE = fileURLToPath(new URL('../../.cache/', import.meta.url));

let daemon: Daemon;
let dataDir: string;
let browser: Browser;
let page: Page;
const consoleErrors: string[] = [];

test.before(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: run test/firmware/deps.sh (make test does)`);
  // With a durable tier, so the page has it to show.
  dataDir = mkdtempSync(join(tmpdir(), 'kbtp-status-page-'));
  daemon = await startDaemon({ workers: 1, dataDir });
  await daemon.kbtp;
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    timeout: 120_000,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-dev-shm-usage'],
  });
  page = await browser.newPage({ viewport: { width: 1200, height: 1100 } });
  page.setDefaultTimeout(60_000);
  page.on('console', (message) => {
    if (message.type() === 'error') consoleErrors.push(message.text());
  });
  page.on('pageerror', (error) => consoleErrors.push(error.message));
});

test.after(async () => {
  await browser?.close();
  await daemon?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

// biome-ignore lint/performance/useDomNodeTextContent: Playwright's Locator.innerText is the rendered text (table cells apart), which the assertions match; not the DOM property the rule means
const textOf = (id: string): Promise<string> => page.locator(`#${id}`).innerText();

test('the page loads and shows the state, the pool and the chart', async () => {
  await page.goto(`${daemon.management}/`);
  await page.waitForFunction(() => document.getElementById('state')?.textContent === 'ready');
  assert.match(await textOf('pool-total'), new RegExp(`^${SMALL_POOL.blockCount} blocks of 4\\.0 KiB`));
  assert.is(await textOf('pool-free'), String(SMALL_POOL.blockCount));
  assert.is(await textOf('pool-used'), '0');
  assert.match(await textOf('tenants'), /default\s+0\s+0 \/ 256/);
  assert.match(await textOf('tier'), /used · 0 blocks durable · .* recovered 0 blocks in [\d.]+ s · scrub pass 1 at 0 %/);
  assert.match(await textOf('jobs'), /poolAudit/);
  assert.ok(await page.locator('#chart').isVisible());
});

test('the numbers and the chart follow a burst of stores', async () => {
  const session: KbtpSession = await connect(await daemon.kbtp, { tenant: 'default' });
  try {
    const payload = new Uint8Array(4096).fill(3);
    for (let i = 0; i < 40; i++) await session.allocStore(BigInt(i), payload, { seal: true });
    await page.waitForFunction(() => document.getElementById('pool-used')?.textContent === '40');
    assert.is(await textOf('pool-free'), String(SMALL_POOL.blockCount - 40));
    await page.waitForFunction(() => Number(document.getElementById('requests-total')?.textContent) >= 40);
    assert.match(await textOf('tenants'), /default\s+1\s+40 \/ 256/);
    await page.waitForFunction(() => /· 40 blocks durable/.test(document.getElementById('tier')?.textContent ?? ''));
    // The rate shows the traffic of the last second: keep loading until the page has shown it.
    let loads = 0;
    const deadline = Date.now() + 60_000;
    while (Number.parseFloat(await textOf('ops-rate')) === 0) {
      if (Date.now() > deadline) assert.unreachable('ops/s never moved off 0 under load');
      for (let i = 0; i < 20; i++) await session.load(BigInt(loads++ % 40));
    }
    assert.match(await textOf('latency'), /ALLOC_STORE\s+40\s/);
    // The ops/s line is drawn: some pixels of the canvas carry its colour.
    await page.waitForFunction(() => Number((document.getElementById('chart') as HTMLCanvasElement).dataset.samples) >= 2);
    const drawn = await page.evaluate(() => {
      const canvas = document.getElementById('chart') as HTMLCanvasElement;
      const { data } = canvas.getContext('2d')!.getImageData(0, 0, canvas.width, canvas.height);
      let blue = 0;
      for (let i = 0; i < data.length; i += 4) if (data[i + 2]! > 180 && data[i]! < 90 && data[i + 3]! > 200) blue += 1;
      return blue;
    });
    mkdirSync(CACHE, { recursive: true });
    await page.screenshot({ path: `${CACHE}status-page.png`, fullPage: true });
    assert.ok(drawn > 20, `the ops/s line has ${drawn} pixels`);
    assert.equal(consoleErrors, [], 'no errors in the browser console');
  } finally {
    await session.close();
  }
});

test.run();
