// What the rest of kbtp uses from the SRAM model. The target turns the model on with
// `--sram-model <config>`: openSramModel(path) validates the file and returns the observer to
// hand to the software RNIC; at exit it logs formatSramNicReport(observer.report()).
import { createSramCache, loadSramConfig, type SramModelConfig } from './config.ts';
import { SramNicObserver } from './nic-observer.ts';

export { SramCache } from './cache.ts';
export { DEFAULT_SRAM_CONFIG, SramConfigError, loadSramConfig, parseSramConfig, createSramCache, type SramModelConfig } from './config.ts';
export { SramNicObserver, formatSramNicReport, type SramNicReport, type QueuePairReport } from './nic-observer.ts';

/** Reads the config file (throws SramConfigError naming the field to fix) and builds an observer. */
export function openSramModel(configPath: string): SramNicObserver {
  return sramObserverFor(loadSramConfig(configPath));
}

export function sramObserverFor(config: SramModelConfig): SramNicObserver {
  return new SramNicObserver(createSramCache(config));
}
