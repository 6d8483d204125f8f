// The QP's checks of work requests posted to it (ibv_post_send/ibv_post_recv argument errors are
// thrown synchronously, as verbs do) and the tables that turn a failed memory-access check into
// the Terminate codes of RFC 5040/5041 and the text of a work completion.
import { RnicError } from './errors.ts';
import { AccessStatus } from './memory.ts';
import {
  DDP_ECODE_TAGGED_BASE_BOUNDS,
  DDP_ECODE_TAGGED_INVALID_STAG,
  DDP_ECODE_TAGGED_STAG_NOT_ASSOCIATED,
  DDP_ECODE_TAGGED_TO_WRAP,
  DDP_ETYPE_TAGGED,
} from './wire/ddp.ts';
import {
  RDMAP_ECODE_ACCESS_RIGHTS,
  RDMAP_ECODE_BASE_BOUNDS,
  RDMAP_ECODE_INVALID_STAG,
  RDMAP_ECODE_STAG_NOT_ASSOCIATED,
  RDMAP_ECODE_TO_WRAP,
  RDMAP_ETYPE_REMOTE_PROTECTION,
  TerminateLayer,
} from './wire/rdmap.ts';
import type { SendWorkRequest, Sge } from './work.ts';

export function positive(name: string, value: number): number {
  if (!Number.isInteger(value) || value < 1) throw new RnicError('EINVAL', `${name} ${value} must be a positive integer`);
  return value;
}

export function limit(name: string, value: number): number {
  if (!Number.isInteger(value) || value < 0 || value > 0x3fff) throw new RnicError('EINVAL', `${name} ${value} must be an integer in 0..16383`);
  return value;
}

export function checkSge(sge: Sge): void {
  if (
    typeof sge !== 'object' ||
    sge === null ||
    !Number.isInteger(sge.lkey) ||
    !Number.isSafeInteger(sge.offset) ||
    sge.offset < 0 ||
    !Number.isSafeInteger(sge.length) ||
    sge.length < 0
  ) {
    throw new RnicError('EINVAL', `SGE ${JSON.stringify(sge)} needs integer lkey, offset >= 0 and length >= 0`);
  }
}

const U64_LIMIT = 1n << 64n;

/** RDMA and atomic operations name the peer's STag and a 64-bit tagged offset. */
function checkRemote(wr: SendWorkRequest): void {
  const remote = wr.remote;
  if (remote === undefined || !Number.isInteger(remote.stag)) throw new RnicError('EINVAL', `${wr.opcode} needs remote.stag and remote.taggedOffset`);
  const offset = remote.taggedOffset;
  const valid = typeof offset === 'bigint' ? offset >= 0n && offset < U64_LIMIT : Number.isSafeInteger(offset) && offset >= 0;
  if (!valid) throw new RnicError('EINVAL', `remote.taggedOffset ${String(offset)} is not a 64-bit unsigned integer`);
}

const NO_SGES: readonly Sge[] = [];

export function checkSendRequest(wr: SendWorkRequest, maxSge: number): void {
  const sgList = wr.sgList ?? NO_SGES;
  if (!Array.isArray(sgList)) throw new RnicError('EINVAL', 'sgList must be an array');
  if (sgList.length > maxSge) throw new RnicError('EINVAL', `${sgList.length} SGEs exceed maxSge ${maxSge}`);
  for (let i = 0; i < sgList.length; i++) checkSge(sgList[i]!);
  switch (wr.opcode) {
    case 'SEND':
    case 'SEND_WITH_SE':
      return;
    case 'SEND_WITH_INV':
    case 'SEND_WITH_SE_INV':
    case 'LOCAL_INV':
      if (!Number.isInteger(wr.invalidateStag)) throw new RnicError('EINVAL', `${wr.opcode} needs invalidateStag`);
      return;
    case 'RDMA_WRITE':
      checkRemote(wr);
      return;
    case 'RDMA_WRITE_WITH_IMM':
      checkRemote(wr);
      if (wr.immediate !== undefined && (typeof wr.immediate !== 'bigint' || wr.immediate < 0n || wr.immediate >= U64_LIMIT)) {
        throw new RnicError('EINVAL', 'immediate must be a bigint in 0..2^64-1');
      }
      return;
    case 'RDMA_READ':
      checkRemote(wr);
      if (sgList.length > 1) throw new RnicError('EINVAL', 'RDMA_READ takes one sink SGE (iWARP names one sink STag)');
      return;
    case 'ATOMIC_FETCH_ADD':
    case 'ATOMIC_CMP_SWAP':
      checkRemote(wr);
      if (sgList.length > 1 || (sgList.length === 1 && sgList[0]!.length !== 8)) {
        throw new RnicError('EINVAL', `${wr.opcode} takes at most one 8-octet SGE for the result`);
      }
      if (wr.opcode === 'ATOMIC_FETCH_ADD' && typeof wr.atomic?.add !== 'bigint') throw new RnicError('EINVAL', 'ATOMIC_FETCH_ADD needs atomic.add (bigint)');
      if (wr.opcode === 'ATOMIC_CMP_SWAP' && (typeof wr.atomic?.compare !== 'bigint' || typeof wr.atomic?.swap !== 'bigint')) {
        throw new RnicError('EINVAL', 'ATOMIC_CMP_SWAP needs atomic.compare and atomic.swap (bigint)');
      }
      return;
    default:
      throw new RnicError('EINVAL', `unknown send opcode ${String((wr as { opcode: unknown }).opcode)}`);
  }
}

/** DDP tagged-buffer error for a failed placement check; access rights are an RDMAP error. */
export function taggedErrorFor(status: AccessStatus): [number, number, number] {
  switch (status) {
    case AccessStatus.AccessRights:
      // RFC 5041 has no access-rights code; RFC 5040's remote protection error names it exactly.
      return [TerminateLayer.Rdmap, RDMAP_ETYPE_REMOTE_PROTECTION, RDMAP_ECODE_ACCESS_RIGHTS];
    case AccessStatus.PdMismatch:
      return [TerminateLayer.Ddp, DDP_ETYPE_TAGGED, DDP_ECODE_TAGGED_STAG_NOT_ASSOCIATED];
    case AccessStatus.ToWrap:
      return [TerminateLayer.Ddp, DDP_ETYPE_TAGGED, DDP_ECODE_TAGGED_TO_WRAP];
    case AccessStatus.BaseBounds:
      return [TerminateLayer.Ddp, DDP_ETYPE_TAGGED, DDP_ECODE_TAGGED_BASE_BOUNDS];
    default:
      return [TerminateLayer.Ddp, DDP_ETYPE_TAGGED, DDP_ECODE_TAGGED_INVALID_STAG];
  }
}

export function rdmapProtectionCode(status: AccessStatus): number {
  switch (status) {
    case AccessStatus.AccessRights:
      return RDMAP_ECODE_ACCESS_RIGHTS;
    case AccessStatus.PdMismatch:
      return RDMAP_ECODE_STAG_NOT_ASSOCIATED;
    case AccessStatus.ToWrap:
      return RDMAP_ECODE_TO_WRAP;
    case AccessStatus.BaseBounds:
      return RDMAP_ECODE_BASE_BOUNDS;
    default:
      return RDMAP_ECODE_INVALID_STAG;
  }
}

export function accessStatusText(status: AccessStatus): string {
  switch (status) {
    case AccessStatus.InvalidStag:
      return 'unknown, invalidated or wrong-key STag';
    case AccessStatus.PdMismatch:
      return 'STag belongs to another protection domain';
    case AccessStatus.AccessRights:
      return 'region lacks the access right';
    case AccessStatus.ToWrap:
      return 'tagged offset plus length wraps 64 bits';
    case AccessStatus.BaseBounds:
      return 'outside the registered range';
    default:
      return 'ok';
  }
}

export function localAccessText(status: AccessStatus, sge: Sge): string {
  return `lkey 0x${hex(sge.lkey)} offset ${sge.offset} length ${sge.length}: ${accessStatusText(status)}`;
}

export function hex(value: number): string {
  return (value >>> 0).toString(16).padStart(8, '0');
}
