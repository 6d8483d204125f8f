// A monotonic clock in milliseconds that the hot path can read without allocating (issue 16).
// `performance.now()` and `Date.now()` come back from C++ as a boxed number (a 16-octet heap
// number per read on Node 20, whatever the caller does with it). `process.hrtime.bigint()` is a
// JavaScript function that has the runtime write the time into a BigUint64Array and reads it
// back: once TurboFan inlines it, storing that value into another BigUint64Array and reading the
// two 32-bit halves through a Uint32Array view keeps every step unboxed. Measured on Node 20.20
// (V8 11.3): 0 octets per read inlined, against 16 for performance.now(); a caller that is not
// optimized, or does not inline this, pays a BigInt and a heap number (no worse than before).
// The origin is arbitrary (the system's monotonic clock): compare readings with each other only.

const scratch = new BigUint64Array(1);
const halves = new Uint32Array(scratch.buffer);
// Which half holds the high 32 bits depends on the machine's byte order.
scratch[0] = 1n;
const LOW = halves[0] === 1 ? 0 : 1;
const HIGH = 1 - LOW;
const hrtimeNs = process.hrtime.bigint;

/**
 * The same reading written into `into[index]`. Hot paths use this form: when V8 compiles
 * monotonicMs() on its own instead of inlining it into the caller (it did in about one process in
 * three of the no-allocation test, 4-16 octets per call), its double result leaves as a heap number,
 * whereas a store into a Float64Array needs no box whichever way it is compiled.
 */
export function monotonicMsInto(into: Float64Array, index: number): void {
  scratch[0] = hrtimeNs();
  into[index] = ((halves[HIGH] as number) * 4294967296 + (halves[LOW] as number)) / 1e6;
}

/** Milliseconds since an arbitrary fixed point (nanosecond resolution while under 2^53 ns, 104 days). */
export function monotonicMs(): number {
  scratch[0] = hrtimeNs();
  return ((halves[HIGH] as number) * 4294967296 + (halves[LOW] as number)) / 1e6;
}
