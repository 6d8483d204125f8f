// QP1 (the General Services Interface) as kbtp uses it for connection management over RoCEv2:
// one MAD per UD Send-only packet with the GSI's Q_Key, from QP1 to the peer's QP1.

import { GSI_QKEY } from '../wire/ib-cm.ts';
import { encodeHeaders, IbHeaders } from '../wire/ib-headers.ts';
import { headerLength, ICRC_LENGTH, OPCODES, UD_SEND_ONLY } from '../wire/ib-opcodes.ts';
import { ROCE_UDP_PORT } from '../wire/roce-frame.ts';
import type { RoceEndpoint } from './endpoint.ts';

/** Sends one MAD as a UD Send from QP1 to the peer's QP1. */
export function sendGsiMad(endpoint: RoceEndpoint, address: string, mad: Uint8Array, psn: number): void {
  const h = new IbHeaders();
  h.opcode = UD_SEND_ONLY;
  h.destQp = 1;
  h.psn = psn & 0xffffff;
  h.pkey = 0xffff;
  h.qkey = GSI_QKEY;
  h.sourceQp = 1;
  const length = headerLength(OPCODES[UD_SEND_ONLY]!.headers);
  const buffer = new Uint8Array(length + ICRC_LENGTH);
  encodeHeaders(buffer, 0, h);
  endpoint.link.send({ address, port: ROCE_UDP_PORT }, buffer.subarray(0, length), mad, buffer.subarray(length));
}
