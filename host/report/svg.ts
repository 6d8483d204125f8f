// A small SVG chart writer (line charts and grouped bar charts) for reports: the SRAM experiments
// and the benchmarks. Output is a self-contained SVG document with no scripts or external references.
import { UsageError } from '../errors.ts';

export interface Series {
  readonly name: string;
  readonly points: ReadonlyArray<readonly [number, number]>;
  /** Drawn dashed (e.g. reference figures beside measured ones). */
  readonly dashed?: boolean;
}

export interface LineChartSpec {
  readonly title: string;
  readonly xLabel: string;
  readonly yLabel: string;
  readonly series: readonly Series[];
  /** Logarithmic x axis (values must be positive). */
  readonly logX?: boolean;
  readonly yMin?: number;
  readonly yMax?: number;
  readonly formatX?: (value: number) => string;
  readonly formatY?: (value: number) => string;
  /** A labelled vertical marker, e.g. the cache's capacity. */
  readonly marker?: { readonly x: number; readonly label: string };
}

export interface BarChartSpec {
  readonly title: string;
  readonly yLabel: string;
  readonly groups: readonly string[];
  readonly series: ReadonlyArray<{ readonly name: string; readonly values: readonly number[] }>;
  readonly formatY?: (value: number) => string;
}

const WIDTH = 800;
const HEIGHT = 440;
const MARGIN = { top: 48, right: 210, bottom: 64, left: 78 };
const PLOT_W = WIDTH - MARGIN.left - MARGIN.right;
const PLOT_H = HEIGHT - MARGIN.top - MARGIN.bottom;
const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf'];

export function escapeXml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

function defaultFormat(value: number): string {
  if (value === 0) return '0';
  const magnitude = Math.abs(value);
  if (magnitude >= 1e6) return `${+(value / 1e6).toFixed(2)}M`;
  if (magnitude >= 1e4) return `${+(value / 1e3).toFixed(1)}k`;
  if (magnitude >= 1) return `${+value.toFixed(2)}`;
  return `${+value.toPrecision(2)}`;
}

/** Round tick values from at or below `min` to at or above `max`. */
export function niceTicks(min: number, max: number, count = 5): number[] {
  if (!(max > min)) return [min];
  const rough = (max - min) / count;
  const power = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => s >= rough) ?? 10 * power;
  const first = Math.floor(min / step + 1e-9);
  const last = Math.ceil(max / step - 1e-9);
  const ticks: number[] = [];
  for (let index = first; index <= last; index++) ticks.push(+(index * step).toPrecision(12));
  return ticks;
}

function frame(title: string, xLabel: string, yLabel: string, inner: string): string {
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}" font-family="Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect width="${WIDTH}" height="${HEIGHT}" fill="white"/>`,
    `<text x="${WIDTH / 2 - MARGIN.right / 2 + MARGIN.left / 2}" y="26" text-anchor="middle" font-size="15" font-weight="bold">${escapeXml(title)}</text>`,
    `<text x="${MARGIN.left + PLOT_W / 2}" y="${HEIGHT - 16}" text-anchor="middle">${escapeXml(xLabel)}</text>`,
    `<text transform="translate(18 ${MARGIN.top + PLOT_H / 2}) rotate(-90)" text-anchor="middle">${escapeXml(yLabel)}</text>`,
    inner,
    `<rect x="${MARGIN.left}" y="${MARGIN.top}" width="${PLOT_W}" height="${PLOT_H}" fill="none" stroke="#333"/>`,
    '</svg>',
    '',
  ].join('\n');
}

function legend(names: readonly string[], shape: 'line' | 'box'): string {
  return names
    .map((name, index) => {
      const y = MARGIN.top + 10 + index * 20;
      const x = MARGIN.left + PLOT_W + 14;
      const color = COLORS[index % COLORS.length]!;
      const swatch =
        shape === 'line'
          ? `<line x1="${x}" y1="${y}" x2="${x + 22}" y2="${y}" stroke="${color}" stroke-width="2.5"/>`
          : `<rect x="${x + 4}" y="${y - 6}" width="14" height="12" fill="${color}"/>`;
      return `${swatch}<text x="${x + 28}" y="${y + 4}">${escapeXml(name)}</text>`;
    })
    .join('\n');
}

function yAxis(min: number, max: number, format: (value: number) => string): { scale: (v: number) => number; svg: string } {
  const scale = (value: number) => MARGIN.top + PLOT_H - ((value - min) / (max - min || 1)) * PLOT_H;
  const svg = niceTicks(min, max)
    .map((tick) => {
      const y = scale(tick).toFixed(1);
      return (
        `<line x1="${MARGIN.left}" y1="${y}" x2="${MARGIN.left + PLOT_W}" y2="${y}" stroke="#e4e4e4"/>` +
        `<text x="${MARGIN.left - 6}" y="${+y + 4}" text-anchor="end">${escapeXml(format(tick))}</text>`
      );
    })
    .join('\n');
  return { scale, svg };
}

export function lineChart(spec: LineChartSpec): string {
  const points = spec.series.flatMap((series) => series.points);
  const xs = points.map(([x]) => x);
  const ys = points.map(([, y]) => y);
  const formatX = spec.formatX ?? defaultFormat;
  const formatY = spec.formatY ?? defaultFormat;
  if (spec.logX && xs.some((x) => !(x > 0))) throw new UsageError('a logarithmic x axis needs positive x values');
  const transform = spec.logX ? Math.log10 : (x: number) => x;
  const xMin = Math.min(...xs.map(transform));
  const xMax = Math.max(...xs.map(transform));
  const xScale = (x: number) => MARGIN.left + ((transform(x) - xMin) / (xMax - xMin || 1)) * PLOT_W;
  const yMin = spec.yMin ?? Math.min(0, ...ys);
  const yMax = spec.yMax ?? niceTicks(yMin, Math.max(...ys, yMin + 1e-9)).at(-1)!;
  const { scale: yScale, svg: yTicks } = yAxis(yMin, yMax, formatY);
  const distinctX = [...new Set(xs)].sort((a, b) => a - b);
  const xTickValues =
    distinctX.length <= 12
      ? distinctX
      : spec.logX
        ? Array.from({ length: Math.floor(xMax) - Math.ceil(xMin) + 1 }, (_, i) => 10 ** (Math.ceil(xMin) + i))
        : niceTicks(xMin, xMax);
  const xTicks = xTickValues
    .map((tick) => {
      const x = xScale(tick).toFixed(1);
      return (
        `<line x1="${x}" y1="${MARGIN.top + PLOT_H}" x2="${x}" y2="${MARGIN.top + PLOT_H + 5}" stroke="#333"/>` +
        `<text x="${x}" y="${MARGIN.top + PLOT_H + 19}" text-anchor="middle">${escapeXml(formatX(tick))}</text>`
      );
    })
    .join('\n');
  const lines = spec.series
    .map((series, index) => {
      const color = COLORS[index % COLORS.length]!;
      const path = series.points.map(([x, y], i) => `${i === 0 ? 'M' : 'L'}${xScale(x).toFixed(1)},${yScale(y).toFixed(1)}`).join(' ');
      const dots = series.points.map(([x, y]) => `<circle cx="${xScale(x).toFixed(1)}" cy="${yScale(y).toFixed(1)}" r="3" fill="${color}"/>`).join('');
      const dash = series.dashed ? ' stroke-dasharray="7,5"' : '';
      return `<path d="${path}" fill="none" stroke="${color}" stroke-width="2.5"${dash}/>${dots}`;
    })
    .join('\n');
  let marker = '';
  if (spec.marker !== undefined) {
    const x = xScale(spec.marker.x).toFixed(1);
    marker =
      `<line x1="${x}" y1="${MARGIN.top}" x2="${x}" y2="${MARGIN.top + PLOT_H}" stroke="#777" stroke-dasharray="5,4"/>` +
      `<text x="${+x + 4}" y="${MARGIN.top + 14}" fill="#555">${escapeXml(spec.marker.label)}</text>`;
  }
  return frame(
    spec.title,
    spec.xLabel,
    spec.yLabel,
    [
      yTicks,
      xTicks,
      marker,
      lines,
      legend(
        spec.series.map((s) => s.name),
        'line',
      ),
    ].join('\n'),
  );
}

export function barChart(spec: BarChartSpec): string {
  const values = spec.series.flatMap((series) => series.values).filter(Number.isFinite);
  const formatY = spec.formatY ?? defaultFormat;
  const yMax = niceTicks(0, Math.max(...values, 1e-9)).at(-1)!;
  const { scale: yScale, svg: yTicks } = yAxis(0, yMax, formatY);
  const groupWidth = PLOT_W / spec.groups.length;
  const barWidth = (groupWidth * 0.8) / spec.series.length;
  const bars = spec.groups
    .map((group, g) => {
      const groupX = MARGIN.left + g * groupWidth + groupWidth * 0.1;
      const label = `<text x="${(MARGIN.left + (g + 0.5) * groupWidth).toFixed(1)}" y="${MARGIN.top + PLOT_H + 19}" text-anchor="middle">${escapeXml(group)}</text>`;
      const rects = spec.series
        .map((series, s) => {
          const raw = series.values[g] ?? 0;
          // An unbounded value (a ratio over zero) is drawn to the top and labelled as such.
          const value = Number.isFinite(raw) ? raw : yMax;
          const y = yScale(value);
          const x = groupX + s * barWidth;
          return (
            `<rect x="${x.toFixed(1)}" y="${y.toFixed(1)}" width="${(barWidth - 2).toFixed(1)}" height="${(MARGIN.top + PLOT_H - y).toFixed(1)}" fill="${COLORS[s % COLORS.length]}"/>` +
            `<text x="${(x + barWidth / 2 - 1).toFixed(1)}" y="${(y - 4).toFixed(1)}" text-anchor="middle" font-size="10">${escapeXml(Number.isFinite(raw) ? formatY(raw) : 'inf')}</text>`
          );
        })
        .join('');
      return label + rects;
    })
    .join('\n');
  return frame(
    spec.title,
    '',
    spec.yLabel,
    [
      yTicks,
      bars,
      legend(
        spec.series.map((s) => s.name),
        'box',
      ),
    ].join('\n'),
  );
}
