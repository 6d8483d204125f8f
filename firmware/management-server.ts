// The management HTTP server: a small router over node:http with the defences every route needs:
// the bearer token (compared in constant time, required whenever one is configured), bounded
// request bodies and headers, timeouts, and errors that never echo what the client sent.
import http from 'node:http';
import { createHash, timingSafeEqual } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { ListenError } from '../host/errors.ts';

/** Management requests carry no payload; anything bigger than this is refused unread. */
export const MAX_BODY_BYTES = 16 * 1024;

/**
 * Routes are keyed by path for GET (and HEAD), or by "METHOD /path" for any other method; such a
 * handler gets the request's body (bounded by MAX_BODY_BYTES) as its third argument.
 */
export type RouteHandler = (request: http.IncomingMessage, response: http.ServerResponse, body: Buffer) => void | Promise<void>;

export interface ManagementServerOptions {
  host: string;
  port: number;
  token: string | null;
  routes: ReadonlyMap<string, RouteHandler>;
  onError(message: string): void;
}

export interface ManagementServer {
  readonly host: string;
  readonly port: number;
  close(): Promise<void>;
}

/** The management address cannot be listened on (code KBTP_LISTEN, exit 2). */
export class ManagementListenError extends ListenError {}

const digest = (value: string): Buffer => createHash('sha256').update(value, 'utf8').digest();

/** Equal-length digests: the comparison takes the same time whatever was sent. */
export function tokenMatches(presented: string, expected: string): boolean {
  return timingSafeEqual(digest(presented), digest(expected));
}

/** The token from `Authorization: Bearer T`, or the password of Basic auth (what a browser prompts for). */
function presentedToken(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  const bearer = /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (bearer !== null) return bearer[1];
  const basic = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header);
  if (basic?.[1] !== undefined) {
    const decoded = Buffer.from(basic[1], 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    return colon < 0 ? undefined : decoded.slice(colon + 1);
  }
  return undefined;
}

export function sendJson(response: http.ServerResponse, status: number, body: unknown, headers: http.OutgoingHttpHeaders = {}): void {
  const text = `${JSON.stringify(body, null, 2)}\n`;
  response.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text), ...headers });
  response.end(text);
}

export function sendText(response: http.ServerResponse, status: number, contentType: string, text: string | Buffer): void {
  response.writeHead(status, { 'content-type': contentType, 'content-length': Buffer.byteLength(text) });
  response.end(text);
}

function refuseBody(request: http.IncomingMessage, response: http.ServerResponse): boolean {
  const declared = Number(request.headers['content-length'] ?? 0);
  if (Number.isFinite(declared) && declared <= MAX_BODY_BYTES && request.headers['transfer-encoding'] === undefined) return false;
  // Answer at once and close the connection: the rest of the body is never read.
  response.shouldKeepAlive = false;
  sendJson(response, 413, { error: `request body over ${MAX_BODY_BYTES} octets; management requests carry no body` }, { connection: 'close' });
  return true;
}

export async function startManagementServer(options: ManagementServerOptions): Promise<ManagementServer> {
  const handle = (request: http.IncomingMessage, response: http.ServerResponse): void => {
    response.setHeader('cache-control', 'no-store');
    response.setHeader('x-content-type-options', 'nosniff');
    if (refuseBody(request, response)) return;
    if (options.token !== null) {
      const presented = presentedToken(request.headers.authorization);
      if (presented === undefined || !tokenMatches(presented, options.token)) {
        // The same answer for a missing and a wrong token; nothing of either is echoed.
        sendJson(
          response,
          401,
          { error: 'unauthorized: send Authorization: Bearer <management token>' },
          { 'www-authenticate': 'Basic realm="kbtp appliance", charset="UTF-8"' },
        );
        request.resume();
        return;
      }
    }
    const path = new URL(request.url ?? '/', 'http://management').pathname;
    const bodyMethod = request.method !== 'GET' && request.method !== 'HEAD';
    const handler = options.routes.get(bodyMethod ? `${request.method ?? ''} ${path}` : path);
    if (handler === undefined) {
      request.resume(); // a small body is read and ignored so keep-alive keeps working
      const methods = [...options.routes.keys()].flatMap((key) => (key === path ? ['GET', 'HEAD'] : key.endsWith(` ${path}`) ? [key.split(' ')[0] ?? ''] : []));
      if (methods.length === 0) sendJson(response, 404, { error: 'no such route', routes: [...options.routes.keys()] });
      else sendJson(response, 405, { error: `method not allowed; ${path} answers ${methods.join(', ')}` }, { allow: methods.join(', ') });
      return;
    }
    const chunks: Buffer[] = [];
    if (bodyMethod) request.on('data', (chunk: Buffer) => chunks.push(chunk));
    else request.resume();
    const body = bodyMethod
      ? new Promise<Buffer>((resolveBody, rejectBody) => {
          request.once('end', () => resolveBody(Buffer.concat(chunks)));
          request.once('error', rejectBody);
        })
      : Promise.resolve(Buffer.alloc(0));
    body
      .then((bytes) => handler(request, response, bytes))
      .catch((error: unknown) => {
        options.onError(`management ${path}: ${error instanceof Error ? error.message : String(error)}`);
        if (!response.headersSent) sendJson(response, 500, { error: 'internal error; see the appliance log' });
        else response.destroy();
      });
  };
  const server = http.createServer({ maxHeaderSize: 16 * 1024, requestTimeout: 30_000, headersTimeout: 10_000 }, handle);
  // A client that asks before sending a body (Expect: 100-continue) is refused before it sends it.
  server.on('checkContinue', (request: http.IncomingMessage, response: http.ServerResponse) => {
    if (!refuseBody(request, response)) {
      response.writeContinue();
      handle(request, response);
    }
  });
  server.on('clientError', (_error, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
    else socket.destroy();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (error: NodeJS.ErrnoException) => {
      const where = `${options.host}:${options.port}`;
      if (error.code === 'EADDRINUSE')
        reject(new ManagementListenError(`management address ${where} is in use; stop what holds it or pick another with --http HOST:PORT`));
      else if (error.code === 'EADDRNOTAVAIL')
        reject(new ManagementListenError(`management address ${where} is not an address of this host; fix --http or management.listen`));
      else if (error.code === 'EACCES')
        reject(new ManagementListenError(`management address ${where}: permission denied; use a port above 1023 or grant CAP_NET_BIND_SERVICE`));
      else reject(new ManagementListenError(`management server cannot listen on ${where}: ${error.message}`));
    });
    server.listen(options.port, options.host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  return {
    host: options.host,
    port: address.port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
