// The status page's files (firmware/status-page/: HTML, CSS, plain browser JavaScript; no build
// step). They sit next to this module in the source tree and are copied next to its compiled
// form by `make build`, so the page ships with the package and is read once at start.
import { readFileSync } from 'node:fs';
import type { RouteHandler } from './management-server.ts';
import { FileError } from '../host/errors.ts';

const FILES: ReadonlyArray<[route: string, file: string, contentType: string]> = [
  ['/', 'index.html', 'text/html; charset=utf-8'],
  ['/status.js', 'status.js', 'text/javascript; charset=utf-8'],
  ['/status.css', 'status.css', 'text/css; charset=utf-8'],
  ['/favicon.svg', 'favicon.svg', 'image/svg+xml'],
  // Browsers ask for it whatever the page says.
  ['/favicon.ico', 'favicon.svg', 'image/svg+xml'],
];

/** Nothing from elsewhere: scripts, styles, images and fetches come from the appliance itself. */
const CONTENT_SECURITY_POLICY =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

export function statusPageRoutes(): Array<[string, RouteHandler]> {
  const directory = new URL('./status-page/', import.meta.url);
  return FILES.map(([route, file, contentType]) => {
    let body: Buffer;
    try {
      body = readFileSync(new URL(file, directory));
    } catch (error) {
      throw new FileError(`the status page file ${new URL(file, directory).pathname} is missing (${(error as NodeJS.ErrnoException).code}); run make build`, {
        cause: error,
      });
    }
    const handler: RouteHandler = (_request, response) => {
      response.writeHead(200, { 'content-type': contentType, 'content-length': body.length, 'content-security-policy': CONTENT_SECURITY_POLICY });
      response.end(body);
    };
    return [route, handler];
  });
}
