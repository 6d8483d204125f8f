// The appliance as a process: starts it, turns signals into drain (SIGTERM, SIGINT), and maps
// outcomes to exit codes a supervisor acts on: 0 clean stop, 1 failure or a drain cut short,
// 2 configuration or address errors that a restart would not fix.
import { EngineConfigError } from '../host/engine/config.ts';
import { SramConfigError } from '../host/sram/index.ts';
import type { ApplianceSettings } from './appliance-config.ts';
import { Appliance, KbtpListenError } from './appliance.ts';
import type { Logger } from './logger.ts';
import type { WarningLog } from './warnings.ts';
import { ManagementListenError } from './management-server.ts';
import { ConfigError } from '../host/kbtp/server/target-config.ts';

export interface DaemonOptions {
  /** Printed lines for a person starting it by hand (`make run`): where to reach the node. */
  announce(line: string): void;
  /** Reads the configuration again (file and flags) for SIGHUP; throws ConfigError when it is wrong. */
  reread(): ApplianceSettings;
}

/** Beyond the drain bound, how long closing may take before the process exits 1 regardless. */
const EXIT_GRACE_MS = 5000;

export async function runAppliance(settings: ApplianceSettings, log: Logger, warnings: WarningLog, options: DaemonOptions): Promise<number> {
  const appliance = new Appliance(settings, log, warnings);
  let stopRequested: ((signal: NodeJS.Signals) => void) | undefined;
  const stopSignal = new Promise<NodeJS.Signals>((resolve) => {
    stopRequested = resolve;
  });
  const onStop = (signal: NodeJS.Signals): void => stopRequested?.(signal);
  process.on('SIGTERM', onStop);
  process.on('SIGINT', onStop);
  const onReload = (): void => {
    if (appliance.state !== 'ready') {
      log.warn(`SIGHUP while ${appliance.state}: nothing reloaded`);
      return;
    }
    try {
      appliance.reload(options.reread());
      appliance.metrics.reloads.inc({ result: 'success' });
    } catch (error) {
      appliance.metrics.reloads.inc({ result: 'failure' });
      const known = error instanceof ConfigError || error instanceof EngineConfigError;
      log.error(
        `reload refused, the running configuration stays: ${known ? error.message : error instanceof Error ? (error.stack ?? error.message) : String(error)}`,
      );
    }
  };
  process.on('SIGHUP', onReload);
  try {
    try {
      await appliance.startManagement();
    } catch (error) {
      if (error instanceof ManagementListenError) {
        log.error(error.message);
        return 2;
      }
      throw error;
    }
    const management = appliance.managementAddress;
    options.announce(`management on http://${management.host}:${management.port}/ (status page, /metrics, /healthz, /readyz, /api/status)`);
    const starting = appliance.startTarget(settings.listenWaitMs);
    const started = await Promise.race([starting.then(() => 'started' as const), stopSignal]).catch((error: unknown) => error);
    if (started !== 'started') {
      if (typeof started === 'string') {
        // Recovery cannot be cut short safely from here: let it finish (bounded), then stop what started.
        log.info(`${started} while ${appliance.state}; stopping once the start step in progress ends`);
        appliance.cancelStart();
        const watchdog = setTimeout(() => {
          log.error('the start step in progress did not end in time; exiting 1 (the durable tier is crash-safe)');
          process.exit(1);
        }, settings.drainTimeoutMs + EXIT_GRACE_MS);
        watchdog.unref();
        await starting.catch(() => undefined);
        await appliance.close();
        clearTimeout(watchdog);
        log.info('stopped before serving');
        return 0;
      }
      const message = started instanceof Error ? started.message : String(started);
      log.error(`cannot start: ${message}`);
      await appliance.close();
      const configuration = started instanceof KbtpListenError || started instanceof EngineConfigError || started instanceof SramConfigError;
      return configuration ? 2 : 1;
    }
    const kbtp = appliance.kbtpAddress;
    options.announce(`KBTP listening on ${kbtp?.host}:${kbtp?.port} (RDMAP/MPA over TCP, ${settings.target.workers} workers)`);
    log.info('ready', { kbtp: `${kbtp?.host}:${kbtp?.port}`, management: `${management.host}:${management.port}` });

    const ended = await Promise.race([stopSignal, appliance.failure]);
    if (ended instanceof Error) {
      log.error(`the target failed: ${ended.message}; exiting 1 for the supervisor to restart the node`);
      await appliance.close().catch(() => undefined);
      return 1;
    }
    log.info(`${ended}: draining`);
    const watchdog = setTimeout(() => {
      log.error('shutdown did not finish in time; exiting 1');
      process.exit(1);
    }, settings.drainTimeoutMs + EXIT_GRACE_MS);
    watchdog.unref();
    const drained = await appliance.drain();
    await appliance.close();
    clearTimeout(watchdog);
    log.info(drained ? 'stopped cleanly' : 'stopped; some sessions had to be cut');
    return drained ? 0 : 1;
  } finally {
    process.off('SIGTERM', onStop);
    process.off('SIGINT', onStop);
    process.off('SIGHUP', onReload);
  }
}
