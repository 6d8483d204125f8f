// `kbtp appliance`: the cache node as a daemon (firmware/). This file only turns flags into
// settings; the daemon itself lives in firmware/ (the CLI is the one layer that may import it).
import type { Command } from '../cli.ts';
import { parseCommandLine } from './command-line.ts';
import { ConfigError, parseListen, setDurable } from '../kbtp/server/target-config.ts';
import {
  loadApplianceSettings,
  checkManagementExposure,
  storageSummary,
  LOG_LEVELS,
  type ApplianceSettings,
  type LogLevel,
} from '../../firmware/appliance-config.ts';
import { createLogger } from '../../firmware/logger.ts';
import { runAppliance } from '../../firmware/daemon.ts';
import { WarningLog } from '../../firmware/warnings.ts';

const HELP = `usage: kbtp appliance [options]

Runs the cache node as an appliance daemon: the KBTP target workers, a management HTTP server
(status page, Prometheus /metrics, /healthz, /readyz, /api/status), scheduled maintenance jobs.
With no options: KBTP on 127.0.0.1:7117, management on 127.0.0.1:7118, memory only.

options:
  --config FILE        JSON configuration (docs/APPLIANCE.md); the flags below override it
  --listen HOST:PORT   KBTP address (default 127.0.0.1:7117)
  --http HOST:PORT     management address (default 127.0.0.1:7118; beyond loopback it needs
                       management.token in the configuration)
  --data-dir DIR       where the durable tier and job outputs live (recovered before the node
                       turns ready; scrubbed and checkpointed on a schedule)
  --default-data-dir DIR
                       the data directory when the configuration file names no "dataDir" (the
                       appliance image passes its data partition); "dataDir": null in the file
                       keeps the node memory-only, "durable": {"enabled": false} keeps the tier off
  --log-format F       text (default) or json (one JSON object per line)
  --log-level L        error, warn, info (default) or debug
  -v, --verbose        also log every session open and close
  -h, --help           show this help

signals: SIGTERM/SIGINT drain (new requests get SHUTTING_DOWN, outstanding ones finish, the
durable tier is checkpointed and closed) and exit; SIGHUP reloads the configuration file.
exit codes: 0 after a clean shutdown, 2 for a configuration error or an address in use,
1 otherwise (including a drain that had to cut sessions).`;

function applyFlags(settings: ApplianceSettings, values: Record<string, string | boolean | undefined>): void {
  if (typeof values.listen === 'string') settings.target.listen = parseListen(values.listen, '--listen');
  if (typeof values.http === 'string') {
    settings.management.listen = parseListen(values.http, '--http');
    checkManagementExposure(settings.management, '--http');
  }
  if (typeof values['data-dir'] === 'string') {
    if (values['data-dir'] === '') throw new ConfigError('--data-dir', 'is empty', 'give a directory path');
    settings.dataDir = values['data-dir'];
    settings.dataDirDefaulted = false;
    // The durable tier lives in the data directory (in its tier/ folder).
    setDurable(settings.target, values['data-dir']);
  }
  const format = values['log-format'];
  if (format !== undefined && format !== 'text' && format !== 'json')
    throw new ConfigError('--log-format', `"${String(format)}" is not a log format`, 'use text or json');
  if (format !== undefined) settings.log.format = format;
  const level = values['log-level'];
  if (typeof level === 'string' && !(LOG_LEVELS as readonly string[]).includes(level)) {
    throw new ConfigError('--log-level', `"${level}" is not a level`, `use one of ${LOG_LEVELS.join(', ')}`);
  }
  if (typeof level === 'string') settings.log.level = level as LogLevel;
  if (values.verbose === true) settings.log.sessions = true;
}

/** What the configuration file falls back to when it leaves a setting out (--default-data-dir). */
function fileDefaults(values: Record<string, string | boolean | undefined>): { dataDir?: string } {
  const dataDir = values['default-data-dir'];
  if (dataDir === undefined || typeof dataDir !== 'string') return {};
  if (dataDir === '') throw new ConfigError('--default-data-dir', 'is empty', 'give a directory path');
  return { dataDir };
}

export const command: Command = {
  summary: 'run the cache node as an appliance daemon (KBTP 127.0.0.1:7117, management 127.0.0.1:7118)',
  async run(argv) {
    const parsed = parseCommandLine('kbtp appliance', HELP, argv, {
      config: { type: 'string' },
      listen: { type: 'string' },
      http: { type: 'string' },
      'data-dir': { type: 'string' },
      'default-data-dir': { type: 'string' },
      'log-format': { type: 'string' },
      'log-level': { type: 'string' },
      verbose: { type: 'boolean', short: 'v' },
    });
    if (typeof parsed === 'number') return parsed;
    const { values } = parsed;
    let settings: ApplianceSettings;
    try {
      settings = loadApplianceSettings(values.config, fileDefaults(values));
      applyFlags(settings, values);
    } catch (error) {
      if (error instanceof ConfigError) {
        console.error(`kbtp appliance: configuration error: ${error.message}`);
        return 2;
      }
      throw error;
    }
    const warnings = new WarningLog();
    const log = createLogger({ level: settings.log.level, format: settings.log.format, onWarning: (level, message) => warnings.add(level, message) });
    log.info(`storage: ${storageSummary(settings)}`);
    const reread = (): ApplianceSettings => {
      const next = loadApplianceSettings(values.config, fileDefaults(values));
      applyFlags(next, values);
      return next;
    };
    return runAppliance(settings, log, warnings, { announce: (line) => console.log(line), reread });
  },
};
