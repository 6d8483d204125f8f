// HTTP to a QEMU guest's management port through its 127.0.0.1 forward, one TCP connection per
// request. Why not fetch(): fetch keeps idle connections for reuse, and the guest's server closes an
// idle one after 5 s. Behind QEMU user networking the host only learns of that close when its
// event loop runs; a request sent on such a connection meets a reset, and fetch never retries a
// POST. That is how `make image-test` once failed its update case: the POST went out on a
// connection the guest had closed while the test blocked on building a bundle. A guest reboot
// leaves the same kind of dead connection. A fresh connection per request has no such window.
import { request as httpRequest } from 'node:http';

export interface ManagementResponse {
  readonly status: number;
  readonly contentType: string;
  readonly text: string;
}

export interface ManagementRequest {
  readonly method?: 'GET' | 'POST';
  /** Sent as the bearer token; omitted: no authorization header. */
  readonly token?: string;
  /** A JSON body (POST). */
  readonly json?: unknown;
  readonly timeoutMs?: number;
}

export function management(port: number, path: string, options: ManagementRequest = {}): Promise<ManagementResponse> {
  const body = options.json === undefined ? undefined : Buffer.from(JSON.stringify(options.json));
  const headers: Record<string, string | number> = { connection: 'close' };
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  if (body !== undefined) {
    headers['content-type'] = 'application/json';
    headers['content-length'] = body.length;
  }
  return new Promise((resolveResponse, reject) => {
    const request = httpRequest(
      { host: '127.0.0.1', port, path, method: options.method ?? 'GET', headers, agent: false, timeout: options.timeoutMs ?? 60_000 },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.once('error', reject);
        response.once('end', () =>
          resolveResponse({
            status: response.statusCode ?? 0,
            contentType: response.headers['content-type'] ?? '',
            text: Buffer.concat(chunks).toString('utf8'),
          }),
        );
      },
    );
    request.once('timeout', () => request.destroy(new Error(`${options.method ?? 'GET'} ${path}: no answer within ${options.timeoutMs ?? 60_000} ms`)));
    request.once('error', reject);
    request.end(body);
  });
}
