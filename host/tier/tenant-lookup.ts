// Handle index -> tenant, for the tier's quota accounting (store ranges are in handle-index space).
import type { TierTenant } from './tier-types.ts';

/** Handle index -> tenant index (-1 for none), by binary search over the sorted store ranges. */
export function tenantLookup(tenants: readonly TierTenant[]): (index: number) => number {
  const sorted = tenants
    .map((tenant, position) => ({ ...tenant, position }))
    .filter((t) => t.count > 0)
    .sort((a, b) => a.first - b.first);
  return (index) => {
    let low = 0;
    let high = sorted.length - 1;
    while (low <= high) {
      const middle = (low + high) >> 1;
      const tenant = sorted[middle];
      if (tenant === undefined) break;
      if (index < tenant.first) high = middle - 1;
      else if (index >= tenant.first + tenant.count) low = middle + 1;
      else return tenant.position;
    }
    return -1;
  };
}
