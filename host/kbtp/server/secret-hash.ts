// Tenant secrets at rest: the configuration keeps only a salted scrypt hash (node:crypto), so a
// leaked configuration file does not give away the credentials. Verification runs scrypt on
// libuv's thread pool (crypto.scrypt), never on a worker's event loop, and compares the derived
// keys in constant time. Format: scrypt$N$r$p$<salt, base64>$<key, base64>.
import { randomBytes, scrypt, scryptSync, timingSafeEqual, createHash } from 'node:crypto';

const PREFIX = 'scrypt';
/** Node's default cost: 16 MiB and tens of milliseconds per verification. */
const DEFAULT_PARAMS = { N: 16384, r: 8, p: 1 };
const KEY_LENGTH = 32;
const SALT_LENGTH = 16;

export interface SecretHash {
  N: number;
  r: number;
  p: number;
  salt: Buffer;
  key: Buffer;
}

/** Parses an encoded hash; undefined when it is not one (the caller names the field). */
export function parseSecretHash(encoded: string): SecretHash | undefined {
  const parts = encoded.split('$');
  if (parts.length !== 6 || parts[0] !== PREFIX) return undefined;
  const [N, r, p] = [Number(parts[1]), Number(parts[2]), Number(parts[3])];
  const salt = Buffer.from(parts[4] ?? '', 'base64');
  const key = Buffer.from(parts[5] ?? '', 'base64');
  const powerOfTwo = Number.isSafeInteger(N) && N > 1 && (N & (N - 1)) === 0;
  if (!powerOfTwo || N > 2 ** 20 || !Number.isSafeInteger(r) || r < 1 || r > 32 || !Number.isSafeInteger(p) || p < 1 || p > 16) return undefined;
  if (salt.length < 8 || key.length !== KEY_LENGTH) return undefined;
  return { N, r, p, salt, key };
}

function maxmem(hash: { N: number; r: number }): number {
  return 256 * hash.N * hash.r + 1024 * 1024;
}

export function hashSecret(secret: string): string {
  const salt = randomBytes(SALT_LENGTH);
  const { N, r, p } = DEFAULT_PARAMS;
  const key = scryptSync(secret, salt, KEY_LENGTH, { N, r, p, maxmem: maxmem({ N, r }) });
  return [PREFIX, N, r, p, salt.toString('base64'), key.toString('base64')].join('$');
}

/** A new random secret for `kbtp tenant add`: 32 random octets, 43 characters of base64url. */
export function newSecret(): string {
  return randomBytes(32).toString('base64url');
}

function derive(credential: Uint8Array, hash: SecretHash): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    scrypt(credential, hash.salt, KEY_LENGTH, { N: hash.N, r: hash.r, p: hash.p, maxmem: maxmem(hash) }, (error, key) =>
      error === null ? resolve(key) : reject(error),
    );
  });
}

/** Verifications that succeeded, so a tenant's reconnections cost a SHA-256, not a scrypt. Bounded. */
const CACHE_LIMIT = 1024;

export class SecretVerifier {
  private readonly verified = new Set<string>();
  private readonly parsed = new Map<string, SecretHash>();
  /**
   * Used for unknown tenants, so that they cost as much as known ones (names cannot be probed by
   * timing). A random key under the default parameters costs the same scrypt to check as a real
   * hash and matches nothing, without running scrypt when every worker thread starts (a blocking
   * ~75 ms per thread on a PC, over a second under emulation: it delayed the node's readiness).
   */
  private readonly decoy: SecretHash = { ...DEFAULT_PARAMS, salt: randomBytes(SALT_LENGTH), key: randomBytes(KEY_LENGTH) };

  async verify(credential: Uint8Array, encoded: string | null): Promise<boolean> {
    const hash = encoded === null ? this.decoy : this.parse(encoded);
    if (hash === undefined) return false;
    const cacheKey = encoded === null ? undefined : `${encoded}\0${createHash('sha256').update(credential).digest('base64')}`;
    if (cacheKey !== undefined && this.verified.has(cacheKey)) return true;
    const key = await derive(credential, hash);
    const ok = timingSafeEqual(key, hash.key) && encoded !== null;
    if (ok && cacheKey !== undefined) {
      if (this.verified.size >= CACHE_LIMIT) this.verified.clear();
      this.verified.add(cacheKey);
    }
    return ok;
  }

  private parse(encoded: string): SecretHash | undefined {
    let hash = this.parsed.get(encoded);
    if (hash === undefined) {
      hash = parseSecretHash(encoded);
      if (hash !== undefined) this.parsed.set(encoded, hash);
    }
    return hash;
  }
}
