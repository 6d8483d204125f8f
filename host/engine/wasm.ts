// Loads the compiled engine (build/engine.wasm) and instantiates it over a shared memory.
import { readFileSync, existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';
import { FileError } from '../errors.ts';

/** The engine's exports (assembly/index.ts). Addresses are numbers; u64 values are bigints. */
export interface EngineExports {
  heapBase(): number;
  maskedFetchAdd(address: number, addend: bigint, mask: bigint): bigint;
  fetchAdd(address: number, addend: bigint): bigint;
  maskedCompareSwap(address: number, compare: bigint, compareMask: bigint, swap: bigint, swapMask: bigint): bigint;
  ringAddMask(order: number): bigint;
  ringCounterFetchAdd(ring: number, counter: number): bigint;
  ringSlotOffset(ring: number, counter: bigint): number;
  ringTakeTicket(ring: number): bigint;
  ringTryTake(ring: number, ticket: number, slotOffset: number, spins: number): bigint;
  ringReturn(ring: number, blockOffset: bigint): void;
  ringAbandon(ring: number, ticket: number): bigint;
  ringClaimTicket(ring: number, ticket: number, blockOffset: bigint): number;
  ringTicketAbandoned(ring: number, ticket: number): number;
  ringTicketTaken(ring: number, ticket: number): number;
  ringSlotHolds(ring: number, ticket: number, blockOffset: bigint): number;
  entryAddress(engine: number, handle: bigint): number;
  entryBind(entry: number, blockOffset: bigint, dataLength: number, seal: number): void;
  entryUnbind(entry: number): void;
  entryUpdateStore(entry: number, dataLength: number, seal: number): void;
  copyIntoBlock(engine: number, blockOffset: bigint, source: number, length: number): void;
  copyFromBlock(engine: number, blockOffset: bigint, destination: number, length: number): void;
  clearBlock(engine: number, blockOffset: bigint): void;
  homeRing(engine: number, blockOffset: bigint): number;
  releaseBlock(engine: number, blockOffset: bigint): void;
  run(engine: number, request: number): number;
  placeInline(engine: number, request: number, received: number): number;
  complete(engine: number, request: number, ok: number): number;
  quotaAdjust(tenant: number, delta: number): number;
  persisted(engine: number, request: number, ok: number): number;
  fetched(engine: number, request: number, outcome: number): number;
  demote(engine: number, entry: number): number;
  dropClaim(engine: number, entry: number): number;
  dropSettle(engine: number, entry: number, commit: number): void;
  fail(engine: number, request: number, status: number): number;
  lookup(engine: number, tenant: number, opcode: number, flags: number, handle: bigint, expectedGeneration: number, length: number, entry: number): number;
}

/** build/engine.wasm, found from the source tree (host/engine) or the built one (dist/host/engine). */
export function engineWasmPath(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  for (const candidate of [join(here, '../../build/engine.wasm'), join(here, '../../../build/engine.wasm')]) {
    if (existsSync(candidate)) return candidate;
  }
  throw new FileError("build/engine.wasm not found: run 'make build' first");
}

let compiled: WebAssembly.Module | undefined;

/** The compiled module, compiled once per thread (a Module can also be sent to workers). */
export function engineModule(path: string = engineWasmPath()): WebAssembly.Module {
  compiled ??= new WebAssembly.Module(readFileSync(path));
  return compiled;
}

export function instantiateEngine(module: WebAssembly.Module, memory: WebAssembly.Memory): EngineExports {
  const instance = new WebAssembly.Instance(module, { env: { memory } });
  return instance.exports as unknown as EngineExports;
}
