// The client side of bench/tier.ts, in a process of its own as real initiators are: SESSIONS
// sessions each store their share of sealed blocks with PIPELINE requests in flight, and the
// elapsed time is printed as one JSON line. Kept out of the target's process so that the
// clients' JavaScript does not share an event loop with the target's main thread, where the
// durable tier's group commit runs.
//
// With WARMUP N, every session first stores and frees its blocks N times, unmeasured: the measured
// pass then finds the target as a long-running cache node has it (pool memory touched, the
// tier's freed slots reused in a data file that exists, its JavaScript compiled by V8), not a
// process that touches every page or tiers up its functions for the first time. On a virtual
// machine a page's first touch costs more than the STORE itself; bench/tier.ts has fio overwrite a
// laid-out file for the same reason (docs/TIER.md). How many passes: bench/tier-store-run.ts.
//
//   node dist/bench/tier-load.js ADDRESS SIZE BLOCKS_PER_SESSION SESSIONS PIPELINE [WARMUP passes]
import { connect, type KbtpSession as Session } from '../host/kbtp/initiator.ts';

const [address = '', sizeText = '', perSessionText = '', sessionsText = '16', pipelineText = '4', warmupText = '0'] = process.argv.slice(2);
const size = Number(sizeText);
const perSession = Number(perSessionText);
const sessionCount = Number(sessionsText);
const pipeline = Number(pipelineText);
const warmup = Number(warmupText);
if (address === '' || ![size, perSession, sessionCount, pipeline].every((n) => Number.isInteger(n) && n > 0) || !Number.isInteger(warmup) || warmup < 0) {
  console.error('usage: node dist/bench/tier-load.js ADDRESS SIZE BLOCKS_PER_SESSION SESSIONS PIPELINE [WARMUP passes, 0 or more]');
  process.exit(2);
}
const sessions = await Promise.all(Array.from({ length: sessionCount }, () => connect(address, { tenant: 'default', pipeline })));
const data = new Uint8Array(size).map((_, i) => i & 0xff);
// Registered with every session, as an inference server registers the buffers it parks KV blocks
// from: the target's RDMA Reads are served from `data` itself, with no copy into a request slot
// (session.ts postStore), as fio writes from its own buffer. The buffer never changes.
for (const session of sessions) session.registerLoadBuffer(data);

/**
 * Every session runs `request` over its handles with `pipeline` requests in flight; `ended` is
 * called as each session's last request is answered.
 */
function eachHandle(request: (session: Session, handle: bigint) => Promise<unknown>, ended?: () => void): Promise<unknown> {
  return Promise.all(
    sessions.map(async (session, s) => {
      const inFlight: Array<Promise<unknown>> = [];
      for (let i = 0; i < perSession; i++) {
        inFlight.push(request(session, BigInt(s * perSession + i)));
        if (inFlight.length >= pipeline) await inFlight.shift();
      }
      await Promise.all(inFlight);
      ended?.();
    }),
  );
}

for (let pass = 0; pass < warmup; pass++) {
  await eachHandle((session, handle) => session.allocStore(handle, data, { seal: true }));
  await eachHandle((session, handle) => session.free(handle));
}
// The parent may sample the target's CPU time from here (bench/tier.ts reads the last line only).
console.log(JSON.stringify({ phase: 'measure' }));
const started = process.hrtime.bigint();
const cpuBefore = process.cpuUsage();
// When the first session is done: from then on fewer requests are in flight, until the last one is.
let firstSessionSeconds = Number.NaN;
await eachHandle(
  (session, handle) => session.allocStore(handle, data, { seal: true }),
  () => {
    if (Number.isNaN(firstSessionSeconds)) firstSessionSeconds = Number(process.hrtime.bigint() - started) / 1e9;
  },
);
const seconds = Number(process.hrtime.bigint() - started) / 1e9;
const cpuUsed = process.cpuUsage(cpuBefore);
await Promise.all(sessions.map((session) => session.close(1000).catch(() => undefined)));
// cpuMicros: the client process's CPU time (user + system) over the stores, for CPU per request.
console.log(JSON.stringify({ seconds, firstSessionSeconds, bytes: perSession * sessionCount * size, cpuMicros: cpuUsed.user + cpuUsed.system }));
