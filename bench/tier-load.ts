// The client side of bench/tier.ts, in a process of its own as real initiators are: SESSIONS
// sessions each store their share of sealed blocks with PIPELINE requests in flight, and the
// elapsed time is printed as one JSON line. Kept out of the target's process so that the
// clients' JavaScript does not share an event loop with the target's main thread, where the
// durable tier's group commit runs.
//
//   node dist/bench/tier-load.js ADDRESS SIZE BLOCKS_PER_SESSION SESSIONS PIPELINE
import { connect } from '../host/kbtp/initiator.ts';

const [address = '', sizeText = '', perSessionText = '', sessionsText = '16', pipelineText = '4'] = process.argv.slice(2);
const size = Number(sizeText);
const perSession = Number(perSessionText);
const sessionCount = Number(sessionsText);
const pipeline = Number(pipelineText);
if (address === '' || ![size, perSession, sessionCount, pipeline].every((n) => Number.isInteger(n) && n > 0)) {
  console.error('usage: node dist/bench/tier-load.js ADDRESS SIZE BLOCKS_PER_SESSION SESSIONS PIPELINE');
  process.exit(2);
}
const sessions = await Promise.all(Array.from({ length: sessionCount }, () => connect(address, { tenant: 'default', pipeline })));
const data = new Uint8Array(size).map((_, i) => i & 0xff);
const started = process.hrtime.bigint();
await Promise.all(
  sessions.map(async (session, s) => {
    const inFlight: Array<Promise<unknown>> = [];
    for (let i = 0; i < perSession; i++) {
      inFlight.push(session.allocStore(BigInt(s * perSession + i), data, { seal: true }));
      if (inFlight.length >= pipeline) await inFlight.shift();
    }
    await Promise.all(inFlight);
  }),
);
const seconds = Number(process.hrtime.bigint() - started) / 1e9;
await Promise.all(sessions.map((session) => session.close(1000).catch(() => undefined)));
console.log(JSON.stringify({ seconds, bytes: perSession * sessionCount * size }));
