// Reads what callgrind wrote about a node process (`--compress-strings=no --compress-pos=no`) and
// names the JIT code in it from the process's perf map (`node --perf-basic-prof`): instructions by
// function, the difference of two runs per operation, and by side of a two-sided run, where the
// side of a JavaScript function is the copy of the code it came from (bench/profile/load-loop.ts
// --initiator-root) and code that is not JavaScript (builtins, the runtime, libc) is shared out
// among its callers in proportion to what each call cost, up to the JavaScript functions that
// called it. Shares are taken on the difference of the runs, so start-up's calls weigh nothing.

/** One entry of /tmp/perf-PID.map: [start, start + size) is the code of `name`. */
interface MapEntry {
  start: number;
  end: number;
  name: string;
}

/**
 * The perf map of a run, newest entry first: V8 reuses code space, and the newest code at an
 * address is what ran there after the warm-up (the code callgrind's difference of two runs counts).
 */
export class PerfMap {
  private readonly entries: MapEntry[] = [];
  private readonly cache = new Map<number, string | undefined>();

  constructor(text: string) {
    for (const line of text.split('\n')) {
      const match = /^([0-9a-f]+) ([0-9a-f]+) (.*)$/.exec(line);
      if (match === null) continue;
      const start = Number.parseInt(match[1]!, 16);
      this.entries.push({ start, end: start + Number.parseInt(match[2]!, 16), name: match[3]! });
    }
    this.entries.reverse();
  }

  get size(): number {
    return this.entries.length;
  }

  /** The name of the newest code that held `address`, or undefined. */
  lookup(address: number): string | undefined {
    if (this.cache.has(address)) return this.cache.get(address);
    let name: string | undefined;
    for (const entry of this.entries) {
      if (address >= entry.start && address < entry.end) {
        name = entry.name;
        break;
      }
    }
    this.cache.set(address, name);
    return name;
  }
}

/** Self cost by function name, and the inclusive cost of each caller -> callee edge. */
export interface CallgrindProfile {
  /** The run's total (the file's summary line). */
  total: number;
  self: Map<string, number>;
  /** callee -> (caller -> inclusive instructions of the calls). */
  callers: Map<string, Map<string, number>>;
}

/** callgrind's context suffixes ('2 for a recursion level) are the same code. */
function baseName(name: string): string {
  const quote = name.indexOf("'");
  return quote < 0 ? name : name.slice(0, quote);
}

/** Parses a callgrind output file written with --compress-strings=no --compress-pos=no (one event, Ir). */
export function parseCallgrind(text: string): CallgrindProfile {
  const self = new Map<string, number>();
  const callers = new Map<string, Map<string, number>>();
  let total = 0;
  let fn = '';
  let callee = '';
  let callCost = false;
  for (const line of text.split('\n')) {
    if (line.length === 0) continue;
    const c = line.charCodeAt(0);
    if ((c >= 48 && c <= 57) || c === 43 || c === 45 || c === 42) {
      // A cost line: position, then Ir.
      const space = line.lastIndexOf(' ');
      const cost = space < 0 ? 0 : Number(line.slice(space + 1));
      if (!Number.isFinite(cost)) continue;
      if (callCost) {
        callCost = false;
        let edges = callers.get(callee);
        if (edges === undefined) {
          edges = new Map();
          callers.set(callee, edges);
        }
        edges.set(fn, (edges.get(fn) ?? 0) + cost);
      } else {
        self.set(fn, (self.get(fn) ?? 0) + cost);
      }
      continue;
    }
    if (line.startsWith('fn=')) fn = baseName(line.slice(3));
    else if (line.startsWith('cfn=')) callee = baseName(line.slice(4));
    else if (line.startsWith('calls=')) callCost = true;
    else if (line.startsWith('summary:')) total = Number(line.slice(8).trim());
  }
  if (total === 0) for (const v of self.values()) total += v;
  return { total, self, callers };
}

/**
 * The profile with every function under its printable name: JIT addresses through the perf map
 * (code objects of one function merge), everything else as callgrind named it. Two runs' profiles
 * compare by these names (their JIT addresses differ).
 */
export function named(profile: CallgrindProfile, map: PerfMap): CallgrindProfile {
  const names = new Map<string, string>();
  const nameOf = (fn: string): string => {
    let name = names.get(fn);
    if (name === undefined) {
      name = /^0x[0-9a-f]+$/.test(fn) ? (map.lookup(Number.parseInt(fn.slice(2), 16)) ?? 'JIT code not in the perf map') : fn;
      names.set(fn, name);
    }
    return name;
  };
  const self = new Map<string, number>();
  for (const [fn, cost] of profile.self) self.set(nameOf(fn), (self.get(nameOf(fn)) ?? 0) + cost);
  const callers = new Map<string, Map<string, number>>();
  for (const [callee, edges] of profile.callers) {
    const key = nameOf(callee);
    let into = callers.get(key);
    if (into === undefined) {
      into = new Map();
      callers.set(key, into);
    }
    for (const [caller, cost] of edges) into.set(nameOf(caller), (into.get(nameOf(caller)) ?? 0) + cost);
  }
  return { total: profile.total, self, callers };
}

/** (b - a) / n for every cost of two named profiles: what each of the n operations between them cost. */
export function perOperation(a: CallgrindProfile, b: CallgrindProfile, n: number): CallgrindProfile {
  const difference = (x: Map<string, number>, y: Map<string, number>): Map<string, number> => {
    const out = new Map<string, number>();
    for (const key of new Set([...x.keys(), ...y.keys()])) out.set(key, ((y.get(key) ?? 0) - (x.get(key) ?? 0)) / n);
    return out;
  };
  const callers = new Map<string, Map<string, number>>();
  const none = new Map<string, number>();
  for (const callee of new Set([...a.callers.keys(), ...b.callers.keys()])) {
    callers.set(callee, difference(a.callers.get(callee) ?? none, b.callers.get(callee) ?? none));
  }
  return { total: (b.total - a.total) / n, self: difference(a.self, b.self), callers };
}

/** How a function's code is told apart: its side. */
export interface Labeller {
  /** The side of a JavaScript function by its name, or undefined for code that is not JavaScript. */
  sideOf(name: string): string | undefined;
}

export interface Attribution {
  total: number;
  /** Instructions by side ('no JavaScript caller' for what no JavaScript function called). */
  bySide: Map<string, number>;
  /** Of bySide, the JavaScript functions' own instructions. */
  jsBySide: Map<string, number>;
  /** Own instructions by function, the side (or 'shared') in front of the name. */
  byFunction: Map<string, number>;
}

export const NO_JS_CALLER = 'no JavaScript caller';

/**
 * Gives each side its JavaScript functions' own instructions plus its share of everything they
 * called that is not JavaScript (a named profile: see named()).
 */
export function attribute(profile: CallgrindProfile, labeller: Labeller): Attribution {
  const sides = new Map<string, string | undefined>();
  const sideOf = (fn: string): string | undefined => {
    if (!sides.has(fn)) sides.set(fn, labeller.sideOf(fn));
    return sides.get(fn);
  };
  // Shares of a function that is not JavaScript among sides, from its callers' inclusive costs.
  const shares = new Map<string, Map<string, number>>();
  const visiting = new Set<string>();
  const shareOf = (fn: string): Map<string, number> => {
    const side = sideOf(fn);
    if (side !== undefined) return new Map([[side, 1]]);
    const done = shares.get(fn);
    if (done !== undefined) return done;
    const out = new Map<string, number>();
    const edges = profile.callers.get(fn);
    if (edges !== undefined && !visiting.has(fn)) {
      visiting.add(fn);
      let sum = 0;
      for (const [caller, cost] of edges) if (caller !== fn && cost > 0) sum += cost;
      for (const [caller, cost] of edges) {
        if (caller === fn || cost <= 0) continue;
        for (const [s, part] of shareOf(caller)) out.set(s, (out.get(s) ?? 0) + (part * cost) / sum);
      }
      visiting.delete(fn);
    }
    if (out.size === 0) out.set(NO_JS_CALLER, 1);
    shares.set(fn, out);
    return out;
  };
  const bySide = new Map<string, number>();
  const jsBySide = new Map<string, number>();
  const byFunction = new Map<string, number>();
  for (const [fn, cost] of profile.self) {
    const side = sideOf(fn);
    const label = `${side ?? 'shared'}  ${fn}`;
    byFunction.set(label, (byFunction.get(label) ?? 0) + cost);
    if (side !== undefined) jsBySide.set(side, (jsBySide.get(side) ?? 0) + cost);
    for (const [s, part] of shareOf(fn)) bySide.set(s, (bySide.get(s) ?? 0) + part * cost);
  }
  return { total: profile.total, bySide, jsBySide, byFunction };
}
