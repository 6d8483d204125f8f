// The checkout's root, whether a benchmark runs from source (bench/, under tsx) or built
// (dist/bench/): results, caches and asconfig.json live in the source tree either way.
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const checkoutRoot = here.endsWith(join('dist', 'bench')) ? join(here, '..', '..') : join(here, '..');
