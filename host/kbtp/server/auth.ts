// Session admission (kbtp-v1 sections 7 and 11): tenant lookup, the credential checked against
// the tenant's scrypt hash (off the event loop) or compared in constant time with a secret kept in
// the clear, and the capabilities a session is granted. Credentials are never logged.
import { timingSafeEqual, createHash } from 'node:crypto';
import * as K from '../../../assembly/kbtp-constants.ts';
import type { TenantSettings } from './target-config.ts';
import type { SecretVerifier } from './secret-hash.ts';

export type Admission = { ok: true; tenantIndex: number; tenant: TenantSettings; capabilities: number } | { ok: false; status: number; reason: string };

/** Equal-length digests make the comparison take the same time whatever the lengths. */
function sameSecret(credential: Uint8Array, secret: string): boolean {
  const a = createHash('sha256').update(credential).digest();
  const b = createHash('sha256').update(secret, 'utf8').digest();
  return timingSafeEqual(a, b);
}

export async function admit(
  tenants: readonly TenantSettings[],
  name: string,
  credential: Uint8Array,
  requested: number,
  verifier: SecretVerifier,
  durable = false,
): Promise<Admission> {
  const tenantIndex = tenants.findIndex((tenant) => tenant.name === name);
  const tenant = tenants[tenantIndex];
  if (tenant === undefined) {
    // The same work as a tenant with a hashed secret, so names cannot be probed by timing.
    await verifier.verify(credential, null);
    return { ok: false, status: K.STATUS_AUTH_FAILED, reason: `unknown tenant '${name}'` };
  }
  const wrong =
    tenant.secretHash !== null ? !(await verifier.verify(credential, tenant.secretHash)) : tenant.secret !== null && !sameSecret(credential, tenant.secret);
  if (wrong) return { ok: false, status: K.STATUS_AUTH_FAILED, reason: `wrong credential for tenant '${name}'` };
  // RECORD_COMPLETION is never offered on the RDMAP binding (draft 6.5, 9.1); PERSISTENT needs a durable tier.
  let capabilities = 0;
  if ((requested & K.CAP_DIRECT_LOAD) !== 0 && tenant.trust.directLoad) capabilities |= K.CAP_DIRECT_LOAD;
  if ((requested & K.CAP_DIRECT_ALLOC) !== 0 && tenant.trust.directAlloc) capabilities |= K.CAP_DIRECT_ALLOC;
  // kbtp-v1 section 12: granted whenever the target has a durable tier (informational).
  if ((requested & K.CAP_PERSISTENT) !== 0 && durable) capabilities |= K.CAP_PERSISTENT;
  return { ok: true, tenantIndex: tenant.slot ?? tenantIndex, tenant, capabilities };
}
