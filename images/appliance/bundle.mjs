// bundle.mjs DIST OUT: bundles the appliance's programs (the kbtp command, the target's worker
// thread, the demo's worker, the update self-test) from the compiled DIST folder into OUT with
// esbuild, for the image's root.
//
// Why: under QEMU TCG (and on a DPU's small cores) Node spends most of the daemon's start-up
// resolving, reading and compiling ~150 ES modules, once in the main thread and again in every
// worker thread. One file per program and a few shared chunks read and link in a fraction of that
// time (see docs/IMAGE.md, "Boot time").
//
// OUT sits two levels below the application folder (usr/lib/kbtp/dist/bundle), the depth of the
// compiled modules, so the paths the code finds beside itself still resolve: build/engine.wasm
// two levels up, ./worker.js for the target's threads, ./status-page/ for the status page.
// Native add-ons stay outside the bundle and load from node_modules as before.
import { build } from 'esbuild';
import { cpSync, existsSync } from 'node:fs';
import { join } from 'node:path';

const [dist, out] = process.argv.slice(2);
if (dist === undefined || out === undefined) {
  console.error('usage: bundle.mjs DIST OUT');
  process.exit(2);
}
const entryPoints = {
  cli: join(dist, 'host/cli.js'),
  worker: join(dist, 'host/kbtp/server/worker.js'),
  'demo-worker': join(dist, 'host/commands/demo-worker.js'),
  'self-test': join(dist, 'firmware/self-test.js'),
};
for (const [name, path] of Object.entries(entryPoints)) {
  if (!existsSync(path)) {
    console.error(`bundle.mjs: ${path} (${name}) does not exist: run make build first`);
    process.exit(1);
  }
}
await build({
  entryPoints,
  outdir: out,
  bundle: true,
  // Shared code goes into chunks both programs import, so the main thread and the workers load
  // one copy each of what they share instead of a bundle each holding everything.
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  // Native add-ons (and the packages that locate them) resolve from node_modules at run time.
  external: ['@node-rs/crc32', 'msgpackr-extract'],
  // CommonJS packages inside an ES module bundle call require() for Node's built-ins.
  banner: { js: "import { createRequire as __bundleRequire } from 'node:module'; const require = __bundleRequire(import.meta.url);" },
  legalComments: 'none',
  logLevel: 'warning',
});
cpSync(join(dist, 'firmware/status-page'), join(out, 'status-page'), { recursive: true });
