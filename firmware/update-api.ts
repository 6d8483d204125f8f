// The A/B update through the management API, on the appliance image (images/appliance/), where
// `kbtp-update` does the writing:
//   GET  /api/update                       running slot and version, the operation in progress,
//                                          and the outcome of the last update (its status file)
//   POST /api/update {"url": "http://..."} fetches the bundle onto the data partition, runs
//                                          kbtp-update (inactive slot, one try), then reboots
// The POST answers 202 at once; the work goes on in the background and GET reports it. The new
// slot is marked good only by its own trial boot; a failed trial returns to this slot by itself
// and the status file then says "rolled-back".
import { execFile } from 'node:child_process';
import { createWriteStream, existsSync, readFileSync, rmSync } from 'node:fs';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { join } from 'node:path';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { sendJson, type RouteHandler } from './management-server.ts';
import { EXIT_FAILURE, KbtpError } from '../host/errors.ts';

export const KBTP_UPDATE = '/usr/bin/kbtp-update';
/** A bundle bigger than a root slot cannot be written anyway. */
export const MAX_BUNDLE_BYTES = 512 * 2 ** 20;

export interface UpdateApiOptions {
  /** The kbtp-update program (the image's /usr/bin/kbtp-update). */
  command: string;
  /** Where kbtp-update records outcomes (the config partition's update-status.json). */
  statusFile: string;
  /** Where the bundle is downloaded to (on the data partition: the root is read-only). */
  downloadDir: string;
  /** What runs now: slot and version. */
  running: { slot: string; version: string };
  /** Reboots the node into the new slot (the image's `reboot`). */
  reboot(): void;
  log(level: 'info' | 'warn' | 'error', message: string): void;
  /** How long to leave the POST's answer and GET pollers before rebooting (default 3 s). */
  rebootDelayMs?: number;
}

type OperationState = 'idle' | 'downloading' | 'writing' | 'rebooting' | 'failed';

/** The image's facts, when this daemon runs on the appliance image; undefined elsewhere. */
export function applianceImageUpdateOptions(log: UpdateApiOptions['log'], dataDir: string | null): UpdateApiOptions | undefined {
  if (!existsSync(KBTP_UPDATE) || !existsSync('/etc/kbtp-release')) return undefined;
  const release = readFileSync('/etc/kbtp-release', 'utf8');
  const slot = /(?:^| )kbtp\.slot=([ab])(?: |$)/.exec(readFileSync('/proc/cmdline', 'utf8').trim())?.[1] ?? 'unknown';
  return {
    command: KBTP_UPDATE,
    statusFile: '/config/update-status.json',
    downloadDir: dataDir ?? '/var/lib/kbtp',
    running: { slot, version: /^KBTP_VERSION=(.*)$/m.exec(release)?.[1] ?? 'unknown' },
    reboot: () =>
      execFile('reboot', (error) => {
        if (error) log('error', `update: reboot failed: ${error.message}`);
      }),
    log,
  };
}

function readStatus(file: string): unknown {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as unknown;
  } catch {
    return { state: 'idle' };
  }
}

/** Parses the POST body: {"url": "http(s)://..."}; returns an error message for anything else. */
export function parseUpdateRequest(body: Buffer): { url: URL } | { error: string } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    return { error: 'the body must be JSON: {"url": "http://host/kbtp-appliance-<arch>-<version>.kbtpupdate"}' };
  }
  const url = typeof parsed === 'object' && parsed !== null && 'url' in parsed ? (parsed as { url: unknown }).url : undefined;
  if (typeof url !== 'string') return { error: 'give the bundle\'s address as "url"' };
  let parsedUrl: URL;
  try {
    parsedUrl = new URL(url);
  } catch {
    return { error: '"url" is not a URL' };
  }
  if (parsedUrl.protocol !== 'http:' && parsedUrl.protocol !== 'https:') return { error: '"url" must be http: or https:' };
  return { url: parsedUrl };
}

/** An update bundle that could not be fetched or written (code KBTP_UPDATE); the running slot is untouched. */
export class UpdateError extends KbtpError {
  constructor(message: string) {
    super('KBTP_UPDATE', message, EXIT_FAILURE);
  }
}

export function updateRoutes(options: UpdateApiOptions): Map<string, RouteHandler> {
  let state: OperationState = 'idle';
  let detail = '';
  const bundlePath = join(options.downloadDir, '.incoming.kbtpupdate');

  const download = async (url: URL): Promise<void> => {
    const response = await fetch(url, { signal: AbortSignal.timeout(30 * 60_000) });
    if (!response.ok || response.body === null) throw new UpdateError(`fetching the bundle answered HTTP ${response.status}`);
    const declared = Number(response.headers.get('content-length') ?? 0);
    if (declared > MAX_BUNDLE_BYTES) throw new UpdateError(`the bundle is ${declared} octets; at most ${MAX_BUNDLE_BYTES} fit a slot`);
    let received = 0;
    const bounded = new Transform({
      transform(chunk: Buffer, _encoding, done) {
        received += chunk.length;
        done(received > MAX_BUNDLE_BYTES ? new UpdateError(`the bundle is over ${MAX_BUNDLE_BYTES} octets`) : null, chunk);
      },
    });
    await pipeline(Readable.fromWeb(response.body as WebReadableStream<Uint8Array>), bounded, createWriteStream(bundlePath));
  };

  const apply = (): Promise<string> =>
    new Promise((resolveApply, reject) => {
      execFile(options.command, [bundlePath], { timeout: 30 * 60_000, maxBuffer: 1 << 20 }, (error, stdout, stderr) => {
        const output = `${stdout}${stderr}`.trim().split('\n').pop() ?? '';
        if (error) reject(new UpdateError(output || error.message));
        else resolveApply(output);
      });
    });

  const run = async (url: URL): Promise<void> => {
    try {
      state = 'downloading';
      detail = `from ${url.origin}`;
      options.log('info', `update: downloading the bundle from ${url.origin}`);
      await download(url);
      state = 'writing';
      detail = 'kbtp-update is writing the inactive slot';
      detail = await apply();
      state = 'rebooting';
      options.log('info', `update: written (${detail}); rebooting into the new slot`);
      setTimeout(() => options.reboot(), options.rebootDelayMs ?? 3000);
    } catch (error) {
      state = 'failed';
      detail = error instanceof Error ? error.message : String(error);
      options.log('error', `update failed: ${detail}`);
    } finally {
      rmSync(bundlePath, { force: true });
    }
  };

  const status: RouteHandler = (_request, response) => {
    sendJson(response, 200, { running: options.running, operation: { state, detail }, last: readStatus(options.statusFile) });
  };
  const start: RouteHandler = (_request, response, body) => {
    const request = parseUpdateRequest(body);
    if ('error' in request) {
      sendJson(response, 400, { error: request.error });
      return;
    }
    if (state === 'downloading' || state === 'writing' || state === 'rebooting') {
      sendJson(response, 409, { error: `an update is already ${state}; see GET /api/update` });
      return;
    }
    void run(request.url);
    sendJson(response, 202, { accepted: true, running: options.running, see: 'GET /api/update' });
  };
  return new Map<string, RouteHandler>([
    ['/api/update', status],
    ['POST /api/update', start],
  ]);
}
