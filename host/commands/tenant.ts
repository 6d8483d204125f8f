// `kbtp tenant add|list|remove`: the appliance's tenants in its configuration file
// (firmware/tenant-file.ts). A new tenant's secret is printed once and stored only as a hash.
import type { Command } from '../cli.ts';
import { parseCommandLine } from './command-line.ts';
import { ConfigError } from '../kbtp/server/target-config.ts';
import { addTenant, listTenants, removeTenant } from '../../firmware/tenant-file.ts';

const HELP = `usage: kbtp tenant add NAME [--quota N] [--handles N] [--durable-quota N] [--trusted-direct-load] [--config FILE]
       kbtp tenant list [--config FILE]
       kbtp tenant remove NAME [--config FILE]

Edits the tenants of the appliance's configuration file (default $KBTP_CONFIG, else
/etc/kbtp/kbtp.json). The file is validated before it is replaced. Then reload the running
appliance: systemctl reload kbtp-appliance (or kill -HUP its pid); sessions of a removed
tenant end, all others go on.

add: creates the tenant with a new random secret, printed once on stdout; the file keeps only
     its salted scrypt hash. --quota: blocks it may hold (default: the pool's blocks no other
     tenant is promised); --handles: size of its store range (default 4 x quota), placed in
     the first free gap; --durable-quota: blocks it may keep on the durable tier (default:
     the tier's capacity; past it its least recently used blocks are dropped);
     --trusted-direct-load: it may read blocks one-sidedly (DIRECT_LOAD).

exit codes: 0 done, 2 usage or configuration error.`;

export const command: Command = {
  summary: 'add, list or remove tenants of the appliance configuration (secrets stored hashed)',
  async run(argv) {
    const parsed = parseCommandLine(
      'kbtp tenant',
      HELP,
      argv,
      {
        config: { type: 'string' },
        quota: { type: 'string' },
        handles: { type: 'string' },
        'durable-quota': { type: 'string' },
        'trusted-direct-load': { type: 'boolean' },
      },
      { allowPositionals: true },
    );
    if (typeof parsed === 'number') return parsed;
    const { values, positionals } = parsed;
    const [action, name, ...extra] = positionals;
    const path = values.config ?? process.env.KBTP_CONFIG ?? '/etc/kbtp/kbtp.json';
    const count = (flag: string, value: string | undefined): number | undefined => {
      if (value === undefined) return undefined;
      const n = Number(value);
      if (!Number.isSafeInteger(n) || n < 1) throw new ConfigError(`--${flag}`, `"${value}" is not a positive integer`, `e.g. --${flag} 1024`);
      return n;
    };
    try {
      if (action === 'list' && name === undefined) {
        const rows = listTenants(path);
        const cellsOf = (r: (typeof rows)[number]): Array<string | number> => [r.name, r.authentication, r.quota, r.storeRange, r.durableQuota];
        const widths = [4, 14, 5, 11, 13].map((w, i) => Math.max(w, ...rows.map((r) => String(cellsOf(r)[i]).length)));
        const line = (cells: Array<string | number>): string => cells.map((c, i) => String(c).padEnd(widths[i] ?? 0)).join('  ');
        console.log(`${line(['name', 'authentication', 'quota', 'store range', 'durable quota'])}  trust`);
        for (const r of rows) console.log(`${line(cellsOf(r))}  ${r.trust}`);
        return 0;
      }
      if (action === 'add' && name !== undefined && extra.length === 0) {
        const added = addTenant(path, {
          name,
          quota: count('quota', values.quota),
          handles: count('handles', values.handles),
          durableQuota: count('durable-quota', values['durable-quota']),
          directLoad: values['trusted-direct-load'] === true,
        });
        console.error(
          `tenant '${name}' added to ${path}: quota ${added.quota} blocks, handles ${added.storeRange.first}..${added.storeRange.first + added.storeRange.count - 1n}`,
        );
        console.error('its secret follows, shown this once (the file keeps only a hash); then reload the appliance:');
        console.log(added.secret);
        return 0;
      }
      if (action === 'remove' && name !== undefined && extra.length === 0) {
        removeTenant(path, name);
        console.error(`tenant '${name}' removed from ${path}; reload the appliance to end its sessions`);
        return 0;
      }
    } catch (error) {
      if (error instanceof ConfigError) {
        console.error(`kbtp tenant: ${error.message}`);
        return 2;
      }
      throw error;
    }
    console.error(`kbtp tenant: expected add NAME, list or remove NAME\n\n${HELP}`);
    return 2;
  },
};
