import { Worker, type WorkerOptions } from 'node:worker_threads';

/**
 * Starts a worker thread from a module URL. Built JavaScript starts directly; a `.ts` module
 * (tests and tools run under tsx) goes through a one-line bootstrap that registers tsx inside
 * the worker first, because Node 20 workers cannot load TypeScript on their own.
 */
export function spawnWorker(moduleUrl: URL, options: WorkerOptions = {}): Worker {
  if (!moduleUrl.pathname.endsWith('.ts')) return new Worker(moduleUrl, options);
  const bootstrap =
    `import('tsx/esm/api').then((tsx) => { tsx.register(); return import(${JSON.stringify(moduleUrl.href)}); })` +
    `.catch((error) => { process.nextTick(() => { throw error; }); });`;
  return new Worker(bootstrap, { ...options, eval: true });
}
