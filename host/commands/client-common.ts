// What the client commands (info, put, get, free) share: target options, handle parsing, exit
// codes, and turning failures into one clear line.
import type { ParseArgsConfig } from 'node:util';
import { parseCommandLine, type CommandLine } from './command-line.ts';
import { connect, TargetAddressError, type KbtpSession } from '../kbtp/initiator.ts';
import { DEFAULT_PORT } from '../kbtp/address.ts';
import { EXIT_FAILURE, EXIT_USAGE, KbtpError, UsageError } from '../kbtp/errors.ts';

export { EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_STATUS, UsageError } from '../kbtp/errors.ts';
/** A local file that cannot be read or written: which file and why (exit 1). */
export { LocalFileError } from '../errors.ts';

export const TARGET_HELP = `target options:
  --target HOST:PORT  the target (default 127.0.0.1:${DEFAULT_PORT}, or $KBTP_TARGET)
  --tenant NAME       tenant (default "default", or $KBTP_TENANT)
  --secret SECRET     the tenant's secret (default $KBTP_SECRET; prefer the variable: arguments are visible to other users)
  --direct            use the one-sided direct mode (trusted tenants only)
  --transport T       iwarp (default, or $KBTP_TRANSPORT) or roce: must match the target's --transport
                      (roce's UDP socket: $KBTP_ROCE_UDP=batched|dgram|auto, default auto = batched
                      where koffi loads)
  -h, --help          show this help

exit codes: 0 success, 1 target unreachable, transport failure or a local file error, 2 usage error,
3 the target answered with a KBTP status (printed), e.g. NOT_VALID or ACCESS_DENIED`;

export const TARGET_OPTIONS = {
  target: { type: 'string' },
  tenant: { type: 'string' },
  secret: { type: 'string' },
  direct: { type: 'boolean' },
  transport: { type: 'string' },
} as const satisfies ParseArgsConfig['options'];

/** Input the command cannot use, e.g. data larger than a block: the message alone (exit 2). */
export class InputError extends UsageError {}

/** The RDMA binding a client command uses: `--transport`, else $KBTP_TRANSPORT, else iwarp. */
export function transportOption(value: string | undefined): 'iwarp' | 'roce' {
  const transport = value ?? process.env.KBTP_TRANSPORT ?? 'iwarp';
  if (transport !== 'iwarp' && transport !== 'roce')
    throw new UsageError(`--transport ${transport}: use iwarp or roce${value === undefined ? ' (from $KBTP_TRANSPORT)' : ''}`);
  return transport;
}

export function parseHandle(text: string | undefined): bigint {
  if (text === undefined) throw new UsageError('a handle is required (a decimal or 0x-hex number)');
  if (!/^(0x[0-9a-fA-F]+|[0-9]+)$/.test(text)) throw new UsageError(`"${text}" is not a handle; give a decimal or 0x-hex number`);
  const handle = BigInt(text);
  if (handle >= 2n ** 64n) throw new UsageError(`handle ${text} does not fit in 64 bits`);
  return handle;
}

/**
 * A client command's run(): its options and the target options parsed (--help and option errors
 * answered as every command does), then `body` under guarded().
 */
export function clientCommand<T extends NonNullable<ParseArgsConfig['options']>>(
  name: string,
  help: string,
  options: T,
  body: (parsed: CommandLine<typeof TARGET_OPTIONS & T>) => Promise<number>,
): (argv: string[]) => Promise<number> {
  return async (argv) => {
    const parsed = parseCommandLine(`kbtp ${name}`, help, argv, { ...TARGET_OPTIONS, ...options }, { allowPositionals: true });
    return typeof parsed === 'number' ? parsed : guarded(name, help, () => body(parsed));
  };
}

export async function openSession(
  values: { target?: string; tenant?: string; secret?: string; direct?: boolean; transport?: string },
  capabilities = 0,
): Promise<KbtpSession> {
  const wanted = values.direct === true ? capabilities : 0;
  const transport = transportOption(values.transport);
  return connect(values.target ?? process.env.KBTP_TARGET ?? `127.0.0.1:${DEFAULT_PORT}`, {
    tenant: values.tenant ?? process.env.KBTP_TENANT ?? 'default',
    secret: values.secret ?? process.env.KBTP_SECRET ?? '',
    capabilities: wanted,
    pipeline: 2,
    transport,
  });
}

/** Runs a client command body, mapping failures to a message and an exit code. */
export async function guarded(name: string, help: string, body: () => Promise<number>): Promise<number> {
  try {
    return await body();
  } catch (error) {
    // A bad address or unusable input: the message says it all (the usage would hide it).
    if (error instanceof TargetAddressError || error instanceof InputError) {
      console.error(`kbtp ${name}: ${error.message}`);
      return EXIT_USAGE;
    }
    if (error instanceof UsageError) {
      console.error(`kbtp ${name}: ${error.message}\n\n${help}`);
      return EXIT_USAGE;
    }
    if (error instanceof KbtpError) {
      console.error(`kbtp ${name}: ${error.message}`);
      return error.exitCode;
    }
    console.error(`kbtp ${name}: ${error instanceof Error ? error.message : String(error)}`);
    return EXIT_FAILURE;
  }
}
