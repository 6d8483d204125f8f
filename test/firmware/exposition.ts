// A strict reader of the Prometheus text exposition format (version 0.0.4) for the metrics
// tests: every line must be a HELP, a TYPE, a blank line or a well-formed sample of a family
// whose TYPE came first; histograms must have cumulative buckets ending in +Inf = _count.
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Exposition {
  types: Map<string, string>;
  samples: Sample[];
  /** The value of the one sample with this name and exactly these labels; undefined when absent. */
  value(name: string, labels?: Record<string, string>): number | undefined;
  /** The sum over samples of `name` whose labels include `labels`. */
  sum(name: string, labels?: Record<string, string>): number;
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

function parseValue(text: string, line: string): number {
  if (text === '+Inf') return Number.POSITIVE_INFINITY;
  if (text === '-Inf') return Number.NEGATIVE_INFINITY;
  // Prometheus parses floats with Go's strconv.ParseFloat, which takes NaN in any case; prom-client writes "Nan".
  if (/^nan$/i.test(text)) return Number.NaN;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text)) throw new Error(`bad sample value "${text}" in: ${line}`);
  return Number(text);
}

function parseLabels(text: string, line: string): Record<string, string> {
  const labels: Record<string, string> = {};
  let rest = text;
  while (rest.length > 0) {
    const match = /^([^=]+)="((?:[^"\\\n]|\\["\\n])*)"(,?)/.exec(rest);
    if (match === null || match[1] === undefined || match[2] === undefined) throw new Error(`bad labels {${text}} in: ${line}`);
    if (!LABEL_NAME.test(match[1])) throw new Error(`bad label name "${match[1]}" in: ${line}`);
    if (labels[match[1]] !== undefined) throw new Error(`label "${match[1]}" twice in: ${line}`);
    labels[match[1]] = match[2].replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\');
    rest = rest.slice(match[0].length);
    if (match[3] === '' && rest.length > 0) throw new Error(`missing comma in labels of: ${line}`);
  }
  return labels;
}

/** The family a sample name belongs to (histogram samples carry _bucket, _sum, _count). */
function familyOf(name: string, types: Map<string, string>): string | undefined {
  if (types.has(name)) return name;
  for (const suffix of ['_bucket', '_sum', '_count']) {
    if (name.endsWith(suffix)) {
      const base = name.slice(0, -suffix.length);
      if (types.get(base) === 'histogram' || types.get(base) === 'summary') return base;
    }
  }
  return undefined;
}

export function parseExposition(text: string): Exposition {
  if (!text.endsWith('\n')) throw new Error('the exposition must end with a newline');
  const types = new Map<string, string>();
  const helps = new Set<string>();
  const samples: Sample[] = [];
  const seen = new Set<string>();
  for (const line of text.split('\n')) {
    if (line === '') continue;
    if (line.startsWith('#')) {
      const comment = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line);
      if (comment === null) continue; // other comments are allowed
      const [, kind, name = '', rest = ''] = comment;
      if (!NAME.test(name)) throw new Error(`bad metric name in: ${line}`);
      if (kind === 'TYPE') {
        if (!TYPES.has(rest)) throw new Error(`unknown type in: ${line}`);
        if (types.has(name)) throw new Error(`second TYPE for ${name}`);
        types.set(name, rest);
      } else {
        if (helps.has(name)) throw new Error(`second HELP for ${name}`);
        helps.add(name);
      }
      continue;
    }
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: (-?\d+))?$/.exec(line);
    if (sample === null || sample[1] === undefined || sample[3] === undefined) throw new Error(`malformed line: ${line}`);
    const name = sample[1];
    if (familyOf(name, types) === undefined) throw new Error(`sample of ${name} without a TYPE before it`);
    const labels = parseLabels(sample[2] ?? '', line);
    const key = `${name}{${Object.entries(labels)
      .sort()
      .map(([k, v]) => `${k}=${v}`)
      .join(',')}}`;
    if (seen.has(key)) throw new Error(`duplicate sample ${key}`);
    seen.add(key);
    samples.push({ name, labels, value: parseValue(sample[3], line) });
  }
  // Histograms: cumulative buckets, +Inf present and equal to _count.
  for (const [family, type] of types) {
    if (type !== 'histogram') continue;
    const series = new Map<string, Sample[]>();
    for (const sample of samples.filter((s) => s.name === `${family}_bucket`)) {
      const { le, ...rest } = sample.labels;
      if (le === undefined) throw new Error(`${family}_bucket without le`);
      const key = JSON.stringify(Object.entries(rest).sort());
      series.set(key, [...(series.get(key) ?? []), sample]);
    }
    for (const [key, buckets] of series) {
      const ordered = buckets.map((b) => ({ le: parseValue(b.labels.le ?? '', family), value: b.value })).sort((a, b) => a.le - b.le);
      for (let i = 1; i < ordered.length; i++) {
        if ((ordered[i]?.value ?? 0) < (ordered[i - 1]?.value ?? 0)) throw new Error(`${family} ${key}: buckets not cumulative`);
      }
      const last = ordered[ordered.length - 1];
      if (last === undefined || last.le !== Number.POSITIVE_INFINITY) throw new Error(`${family} ${key}: no +Inf bucket`);
      const labels = Object.fromEntries(JSON.parse(key) as Array<[string, string]>);
      const count = samples.find(
        (s) => s.name === `${family}_count` && JSON.stringify(Object.entries(s.labels).sort()) === JSON.stringify(Object.entries(labels).sort()),
      );
      if (count === undefined || count.value !== last.value) throw new Error(`${family} ${key}: +Inf bucket ${last.value} but _count ${count?.value}`);
    }
  }
  const matches = (sample: Sample, labels: Record<string, string>): boolean => Object.entries(labels).every(([k, v]) => sample.labels[k] === v);
  return {
    types,
    samples,
    value: (name, labels = {}) =>
      samples.find((s) => s.name === name && matches(s, labels) && Object.keys(s.labels).length === Object.keys(labels).length)?.value,
    sum: (name, labels = {}) => samples.filter((s) => s.name === name && matches(s, labels)).reduce((total, s) => total + s.value, 0),
  };
}
