// The appliance's status page: polls /api/status every second (same origin, so the browser's
// credentials for a token-protected node come along) and redraws. Plain browser JavaScript,
// shipped as is: no build step, no external resources.
'use strict';

const POLL_MS = 1000;

const $ = (id) => document.getElementById(id);

function text(id, value) {
  $(id).textContent = value;
}

function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${value.toFixed(unit === 0 ? 0 : 1)} ${units[unit]}`;
}

function seconds(s) {
  if (!Number.isFinite(s)) return '-';
  if (s < 1e-3) return `${(s * 1e6).toFixed(0)} µs`;
  if (s < 1) return `${(s * 1e3).toFixed(2)} ms`;
  return `${s.toFixed(2)} s`;
}

function rate(n) {
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)} M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} k`;
  return n.toFixed(0);
}

/** Replaces a table body's rows; cells are text (never HTML: tenant names come from the config). */
function rows(tableId, data, cells) {
  const body = $(tableId).querySelector('tbody');
  body.replaceChildren(...data.map((item) => {
    const tr = document.createElement('tr');
    for (const cell of cells(item)) {
      const td = document.createElement('td');
      if (typeof cell === 'object' && cell !== null) {
        td.textContent = cell.text;
        if (cell.className) td.className = cell.className;
      } else {
        td.textContent = String(cell);
      }
      tr.append(td);
    }
    return tr;
  }));
}

function drawChart(samples) {
  const canvas = $('chart');
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 900;
  const height = canvas.clientHeight || 220;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  const g = canvas.getContext('2d');
  g.scale(ratio, ratio);
  g.clearRect(0, 0, width, height);
  const pad = { left: 56, right: 64, top: 10, bottom: 22 };
  const plotW = width - pad.left - pad.right;
  const plotH = height - pad.top - pad.bottom;
  const now = Date.now();
  const span = 5 * 60 * 1000;
  const maxOps = Math.max(1, ...samples.map((s) => s.opsPerSecond));
  const maxGB = Math.max(1e-6, ...samples.map((s) => s.bytesPerSecond / 1e9));
  g.strokeStyle = '#d9dee4';
  g.fillStyle = '#6b7480';
  g.font = '11px system-ui, sans-serif';
  g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = pad.top + (plotH * i) / 4;
    g.beginPath(); g.moveTo(pad.left, y); g.lineTo(pad.left + plotW, y); g.stroke();
    g.textAlign = 'right';
    g.fillText(rate(maxOps * (1 - i / 4)), pad.left - 6, y + 4);
    g.textAlign = 'left';
    g.fillText((maxGB * (1 - i / 4)).toPrecision(2), pad.left + plotW + 6, y + 4);
  }
  g.textAlign = 'center';
  for (let m = 0; m <= 5; m++) g.fillText(m === 0 ? 'now' : `-${m} min`, pad.left + plotW - (plotW * m) / 5, height - 6);
  const x = (time) => pad.left + plotW - ((now - time) / span) * plotW;
  const line = (color, value, max, dash) => {
    g.strokeStyle = color;
    g.lineWidth = 2;
    g.setLineDash(dash);
    g.beginPath();
    let started = false;
    for (const sample of samples) {
      if (now - sample.time > span) continue;
      const px = x(sample.time);
      const py = pad.top + plotH - (value(sample) / max) * plotH;
      if (started) g.lineTo(px, py); else { g.moveTo(px, py); started = true; }
    }
    g.stroke();
  };
  // Bytes dashed underneath: with one block size both lines have the same shape, ops/s stays visible.
  line('#e07b18', (s) => s.bytesPerSecond / 1e9, maxGB, [6, 4]);
  line('#2f6fdb', (s) => s.opsPerSecond, maxOps, []);
  canvas.dataset.samples = String(samples.length);
}

function render(status) {
  const state = $('state');
  state.textContent = status.state;
  state.className = `badge ${status.state}`;
  text('where', status.kbtp ? `KBTP ${status.kbtp.host}:${status.kbtp.port} · ${status.workers} workers · up ${status.uptimeSeconds} s` : 'starting');
  text('updated', `updated ${new Date().toLocaleTimeString()}`);
  const pool = status.pool;
  if (pool) {
    text('pool-used', pool.inUse);
    text('pool-free', pool.free);
    text('pool-total', `${pool.blockCount} blocks of ${bytes(pool.blockSize)}`);
    text('pool-bytes', `${bytes(pool.inUse * pool.blockSize)} of ${bytes(pool.blockCount * pool.blockSize)} used`);
    $('pool-bar').style.width = `${(100 * pool.inUse) / Math.max(1, pool.blockCount)}%`;
    rows('rings', pool.rings, (ring) => [ring.name, ring.free, ring.blocks]);
  }
  const tier = status.tier;
  text('tier', tier
    ? `${bytes(tier.usedBytes)} of ${bytes(tier.capacityBytes)} used · ${tier.blocks} blocks durable · ` +
      `${tier.demotions} demoted, ${tier.promotions} promoted, ${tier.drops} dropped · ${tier.checksumFailures} checksum failures · ` +
      `recovered ${tier.recoveredBlocks} blocks in ${tier.recoverySeconds.toFixed(2)} s · scrub pass ${tier.scrub.pass} at ${(100 * tier.scrub.progress).toFixed(0)} %`
    : status.state === 'recovering' ? 'recovering…' : 'no durable tier on this node (memory only)');
  const last = status.traffic[status.traffic.length - 1];
  text('ops-rate', last ? rate(last.opsPerSecond) : '0');
  text('bytes-rate', last && last.bytesPerSecond > 0 ? (last.bytesPerSecond / 1e9).toPrecision(3) : '0');
  text('requests-total', status.requests.total);
  drawChart(status.traffic);
  rows('latency', Object.entries(status.latency), ([opcode, l]) => [opcode, l.count, seconds(l.p50Seconds), seconds(l.p90Seconds), seconds(l.p99Seconds)]);
  rows('tenants', status.tenants, (t) => [t.name, t.sessions, `${t.blocks} / ${t.quota}`]);
  rows('jobs', status.jobs, (job) => [
    job.name, job.schedule ?? 'off',
    job.lastRun ? new Date(job.lastRun.startedAt).toLocaleTimeString() : '-',
    job.lastRun ? { text: job.lastRun.result, className: job.lastRun.ok ? 'ok' : 'fail' } : '-',
    `${job.runs} / ${job.failures}`,
    job.nextRun ? new Date(job.nextRun).toLocaleTimeString() : '-',
  ]);
  const list = $('warnings');
  const warnings = status.warnings.slice(0, 20);
  list.replaceChildren(...(warnings.length === 0 ? [Object.assign(document.createElement('li'), { className: 'muted', textContent: 'none' })]
    : warnings.map((w) => Object.assign(document.createElement('li'), { className: w.level, textContent: `${new Date(w.time).toLocaleTimeString()} ${w.level}: ${w.message}` }))));
}

async function poll() {
  try {
    const response = await fetch('api/status', { cache: 'no-store' });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    render(await response.json());
  } catch (error) {
    const state = $('state');
    state.textContent = `unreachable (${error.message})`;
    state.className = 'badge unreachable';
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

poll();
