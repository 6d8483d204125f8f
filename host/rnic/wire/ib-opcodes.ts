// InfiniBand transport opcodes (IBA vol. 1 ch. 9; Linux include/rdma/ib_pack.h) and, for each,
// the extended transport headers that follow the BTH in the order Linux rxe_opcode.c lists them.
// One table drives both the encoder and the decoder, so the two cannot disagree about which
// headers an opcode carries.

export const IbOpcode = {
  SendFirst: 0x00,
  SendMiddle: 0x01,
  SendLast: 0x02,
  SendLastWithImmediate: 0x03,
  SendOnly: 0x04,
  SendOnlyWithImmediate: 0x05,
  RdmaWriteFirst: 0x06,
  RdmaWriteMiddle: 0x07,
  RdmaWriteLast: 0x08,
  RdmaWriteLastWithImmediate: 0x09,
  RdmaWriteOnly: 0x0a,
  RdmaWriteOnlyWithImmediate: 0x0b,
  RdmaReadRequest: 0x0c,
  RdmaReadResponseFirst: 0x0d,
  RdmaReadResponseMiddle: 0x0e,
  RdmaReadResponseLast: 0x0f,
  RdmaReadResponseOnly: 0x10,
  Acknowledge: 0x11,
  AtomicAcknowledge: 0x12,
  CompareSwap: 0x13,
  FetchAdd: 0x14,
  SendLastWithInvalidate: 0x16,
  SendOnlyWithInvalidate: 0x17,
} as const;

/** Transport class in the opcode's top three bits. */
export const IbClass = { RC: 0x00, UC: 0x20, RD: 0x40, UD: 0x60, CNP: 0x80 } as const;
export const UD_SEND_ONLY = 0x64;
export const UD_SEND_ONLY_WITH_IMMEDIATE = 0x65;
/** RoCEv2 congestion notification packet (BTH, 16 reserved octets, ICRC). */
export const CNP_OPCODE = 0x81;

// Header bits of the opcode table.
export const H_RETH = 0x01;
export const H_AETH = 0x02;
export const H_ATOMIC_ETH = 0x04;
export const H_ATOMIC_ACK_ETH = 0x08;
export const H_IMM = 0x10;
export const H_IETH = 0x20;
export const H_DETH = 0x40;
export const H_CNP_RESERVED = 0x80;
/** The opcode carries payload (possibly zero octets). */
export const H_PAYLOAD = 0x100;

/** Where a packet sits in its message. */
export const Position = { First: 1, Middle: 2, Last: 3, Only: 4 } as const;
export type Position = (typeof Position)[keyof typeof Position];

/** What a packet belongs to, independent of its position. */
export const Kind = {
  Send: 1,
  Write: 2,
  ReadRequest: 3,
  ReadResponse: 4,
  Acknowledge: 5,
  AtomicAcknowledge: 6,
  Atomic: 7,
  Cnp: 8,
} as const;
export type Kind = (typeof Kind)[keyof typeof Kind];

export interface OpcodeInfo {
  readonly name: string;
  readonly headers: number;
  readonly kind: Kind;
  readonly position: Position;
}

// Operation part (low 5 bits) of the RC/UC opcodes.
const OPERATIONS: ReadonlyArray<readonly [number, string, number, Kind, Position]> = [
  [0x00, 'SEND_FIRST', H_PAYLOAD, Kind.Send, Position.First],
  [0x01, 'SEND_MIDDLE', H_PAYLOAD, Kind.Send, Position.Middle],
  [0x02, 'SEND_LAST', H_PAYLOAD, Kind.Send, Position.Last],
  [0x03, 'SEND_LAST_WITH_IMMEDIATE', H_IMM | H_PAYLOAD, Kind.Send, Position.Last],
  [0x04, 'SEND_ONLY', H_PAYLOAD, Kind.Send, Position.Only],
  [0x05, 'SEND_ONLY_WITH_IMMEDIATE', H_IMM | H_PAYLOAD, Kind.Send, Position.Only],
  [0x06, 'RDMA_WRITE_FIRST', H_RETH | H_PAYLOAD, Kind.Write, Position.First],
  [0x07, 'RDMA_WRITE_MIDDLE', H_PAYLOAD, Kind.Write, Position.Middle],
  [0x08, 'RDMA_WRITE_LAST', H_PAYLOAD, Kind.Write, Position.Last],
  [0x09, 'RDMA_WRITE_LAST_WITH_IMMEDIATE', H_IMM | H_PAYLOAD, Kind.Write, Position.Last],
  [0x0a, 'RDMA_WRITE_ONLY', H_RETH | H_PAYLOAD, Kind.Write, Position.Only],
  [0x0b, 'RDMA_WRITE_ONLY_WITH_IMMEDIATE', H_RETH | H_IMM | H_PAYLOAD, Kind.Write, Position.Only],
  [0x0c, 'RDMA_READ_REQUEST', H_RETH, Kind.ReadRequest, Position.Only],
  [0x0d, 'RDMA_READ_RESPONSE_FIRST', H_AETH | H_PAYLOAD, Kind.ReadResponse, Position.First],
  [0x0e, 'RDMA_READ_RESPONSE_MIDDLE', H_PAYLOAD, Kind.ReadResponse, Position.Middle],
  [0x0f, 'RDMA_READ_RESPONSE_LAST', H_AETH | H_PAYLOAD, Kind.ReadResponse, Position.Last],
  [0x10, 'RDMA_READ_RESPONSE_ONLY', H_AETH | H_PAYLOAD, Kind.ReadResponse, Position.Only],
  [0x11, 'ACKNOWLEDGE', H_AETH, Kind.Acknowledge, Position.Only],
  [0x12, 'ATOMIC_ACKNOWLEDGE', H_AETH | H_ATOMIC_ACK_ETH, Kind.AtomicAcknowledge, Position.Only],
  [0x13, 'COMPARE_SWAP', H_ATOMIC_ETH, Kind.Atomic, Position.Only],
  [0x14, 'FETCH_ADD', H_ATOMIC_ETH, Kind.Atomic, Position.Only],
  [0x16, 'SEND_LAST_WITH_INVALIDATE', H_IETH | H_PAYLOAD, Kind.Send, Position.Last],
  [0x17, 'SEND_ONLY_WITH_INVALIDATE', H_IETH | H_PAYLOAD, Kind.Send, Position.Only],
];

/** Opcode info by the full 8-bit opcode; undefined for opcodes this stack does not know. */
export const OPCODES: ReadonlyArray<OpcodeInfo | undefined> = buildTable();

function buildTable(): Array<OpcodeInfo | undefined> {
  const table: Array<OpcodeInfo | undefined> = new Array(256).fill(undefined);
  for (const [operation, name, headers, kind, position] of OPERATIONS) {
    table[IbClass.RC | operation] = { name: `RC_${name}`, headers, kind, position };
    // UC has the Send and Write operations only (no acknowledgements, reads or atomics).
    if (operation <= 0x0b) table[IbClass.UC | operation] = { name: `UC_${name}`, headers, kind, position };
  }
  table[UD_SEND_ONLY] = { name: 'UD_SEND_ONLY', headers: H_DETH | H_PAYLOAD, kind: Kind.Send, position: Position.Only };
  table[UD_SEND_ONLY_WITH_IMMEDIATE] = {
    name: 'UD_SEND_ONLY_WITH_IMMEDIATE',
    headers: H_DETH | H_IMM | H_PAYLOAD,
    kind: Kind.Send,
    position: Position.Only,
  };
  table[CNP_OPCODE] = { name: 'CNP', headers: H_CNP_RESERVED, kind: Kind.Cnp, position: Position.Only };
  return table;
}

export function opcodeName(opcode: number): string {
  return OPCODES[opcode & 0xff]?.name ?? `opcode 0x${(opcode & 0xff).toString(16).padStart(2, '0')}`;
}

export const RETH_LENGTH = 16;
export const AETH_LENGTH = 4;
export const ATOMIC_ETH_LENGTH = 28;
export const ATOMIC_ACK_ETH_LENGTH = 8;
export const IMM_LENGTH = 4;
export const IETH_LENGTH = 4;
export const DETH_LENGTH = 8;
export const CNP_RESERVED_LENGTH = 16;
export const BTH_LENGTH = 12;
export const ICRC_LENGTH = 4;

/** BTH plus every extended header the opcode carries (the offset of its payload). */
export function headerLength(headers: number): number {
  let length = BTH_LENGTH;
  if ((headers & H_DETH) !== 0) length += DETH_LENGTH;
  if ((headers & H_RETH) !== 0) length += RETH_LENGTH;
  if ((headers & H_AETH) !== 0) length += AETH_LENGTH;
  if ((headers & H_ATOMIC_ETH) !== 0) length += ATOMIC_ETH_LENGTH;
  if ((headers & H_ATOMIC_ACK_ETH) !== 0) length += ATOMIC_ACK_ETH_LENGTH;
  if ((headers & H_IMM) !== 0) length += IMM_LENGTH;
  if ((headers & H_IETH) !== 0) length += IETH_LENGTH;
  if ((headers & H_CNP_RESERVED) !== 0) length += CNP_RESERVED_LENGTH;
  return length;
}
