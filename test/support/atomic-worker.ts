// Worker for the concurrency test: hammers two words of a shared buffer with Atomics.add until
// told to stop, then reports how many adds it made. Word 0 gets whole adds, word 1 low-field adds.
import { parentPort, workerData } from 'node:worker_threads';

const { buffer } = workerData as { buffer: SharedArrayBuffer };
const words = new BigUint64Array(buffer);
const control = new Int32Array(buffer, 64, 2);
let adds = 0;
Atomics.store(control, 1, 1); // running
while (Atomics.load(control, 0) === 0) {
  Atomics.add(words, 0, 1n);
  Atomics.add(words, 1, 1n);
  adds++;
}
parentPort!.postMessage(adds);
