// The package as a user gets it: `npm pack` (of the build `make test` just made), installed
// into an empty project from the tarball, then, there: the docs/CLIENT.md example runs against
// a target started from the installed package's own `kbtp` command, TypeScript resolves the
// declarations, `npx kbtp --help` works, and the tarball holds no tests or benchmarks.
// Dependencies come from npm's cache when it has them (--prefer-offline), the registry otherwise.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'kbtp-pack-'));
const project = join(scratch, 'consumer');
let target: ChildProcess | undefined;

test.after(() => {
  target?.kill('SIGKILL');
  rmSync(scratch, { recursive: true, force: true });
});

/** The ```js example block of docs/CLIENT.md. */
function clientExample(): string {
  const doc = readFileSync(join(ROOT, 'docs/CLIENT.md'), 'utf8');
  const match = /```js example\n([\s\S]*?)```/.exec(doc);
  if (match?.[1] === undefined) throw new Error('docs/CLIENT.md has no ```js example block');
  return match[1];
}

/** Starts the installed package's target on a free port; resolves to its address. */
function startTarget(): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [join(project, 'node_modules/kbtp/dist/host/cli.js'), 'target', '--listen', '127.0.0.1:0', '--workers', '1', '--blocks', '64', '--block-size', '4096'],
      { cwd: project, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    target = child;
    let output = '';
    const timer = setTimeout(() => reject(new Error(`the target did not start within 60 s:\n${output}`)), 60_000);
    const onData = (chunk: Buffer): void => {
      output += chunk.toString();
      const match = /listening on (\S+:\d+)/.exec(output);
      if (match?.[1] !== undefined) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the target exited (${code}):\n${output}`));
    });
  });
}

let files: string[] = [];

test('npm pack: the built client, CLI, engine and firmware; no tests, benchmarks or sources', async () => {
  // --ignore-scripts: `make test` built dist/ and build/engine.wasm already (prepack would rebuild).
  const { stdout } = await run('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', scratch], { cwd: ROOT, timeout: 120_000 });
  const [packed] = JSON.parse(stdout) as Array<{ filename: string; files: Array<{ path: string }> }>;
  assert.ok(packed !== undefined);
  files = packed.files.map((file) => file.path);
  for (const needed of [
    'package.json',
    'dist/host/kbtp/index.js',
    'dist/host/kbtp/index.d.ts',
    'dist/host/cli.js',
    'dist/host/kbtp/server/worker.js',
    'dist/firmware/appliance.js',
    'build/engine.wasm',
    'docs/CLIENT.md',
  ]) {
    assert.ok(files.includes(needed), `${needed} is missing from the tarball`);
  }
  const stray = files.filter((path) => /^(dist\/)?(test|bench)\//.test(path) || (path.endsWith('.ts') && !path.endsWith('.d.ts')));
  assert.equal(stray, [], 'tests, benchmarks or TypeScript sources in the tarball');
  writeFileSync(join(scratch, 'tarball'), join(scratch, packed.filename));
});

test('installs into an empty project', async () => {
  const tarball = readFileSync(join(scratch, 'tarball'), 'utf8');
  await run('mkdir', ['-p', project]);
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'kbtp-consumer', version: '1.0.0', private: true, type: 'module' }));
  await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--no-package-lock', tarball], { cwd: project, timeout: 300_000 });
});

test('npx kbtp --help runs the installed command', async () => {
  const { stdout } = await run('npx', ['--no-install', 'kbtp', '--help'], { cwd: project, timeout: 60_000 });
  assert.match(stdout, /usage: kbtp <command>/);
  assert.match(stdout, /target/);
});

test('the docs/CLIENT.md example stores and loads a block against a target of the installed package', async () => {
  const address = await startTarget();
  writeFileSync(join(project, 'example.mjs'), clientExample());
  const { stdout } = await run(process.execPath, ['example.mjs'], { cwd: project, timeout: 60_000, env: { ...process.env, KBTP_TARGET: address } });
  assert.match(stdout, /stored 30 octets/);
  assert.match(stdout, /loaded generation \d+: 30 octets/);
  assert.match(stdout, /NOT_VALID/);
});

test("TypeScript resolves the package's declarations", async () => {
  writeFileSync(
    join(project, 'check.ts'),
    [
      "import { connect, KbtpError, type KbtpSession, type LoadResult } from 'kbtp';",
      'export async function first(address: string): Promise<LoadResult> {',
      "  const session: KbtpSession = await connect(address, { tenant: 'default', callTimeoutMs: 1000 });",
      '  try { return await session.load(1n, { timeoutMs: 100 }); } catch (error) { if (error instanceof KbtpError) console.log(error.code); throw error; }',
      '}',
      '',
    ].join('\n'),
  );
  writeFileSync(
    join(project, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        module: 'nodenext',
        moduleResolution: 'nodenext',
        target: 'es2022',
        strict: true,
        noEmit: true,
        skipLibCheck: false,
        types: ['node'],
        typeRoots: [join(ROOT, 'node_modules/@types')],
      },
      files: ['check.ts'],
    }),
  );
  await run(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json'], { cwd: project, timeout: 120_000 });
});

test.run();
