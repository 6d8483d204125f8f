// `kbtp info`: connects, prints the target's HELLO_ACK, and says GOODBYE.
import type { Command } from '../cli.ts';
import * as K from '../../assembly/kbtp-constants.ts';
import { clientCommand, openSession, TARGET_HELP, EXIT_OK } from './client-common.ts';
import type { HelloAck } from '../kbtp/wire/hello.ts';

const HELP = `usage: kbtp info [--json] [target options]

Opens a session and prints what the target granted (its HELLO_ACK).

  --json              print the HELLO_ACK as one JSON object
${TARGET_HELP}`;

function capabilityNames(bits: number): string {
  const names = [
    [K.CAP_DIRECT_LOAD, 'DIRECT_LOAD'],
    [K.CAP_DIRECT_ALLOC, 'DIRECT_ALLOC'],
    [K.CAP_RECORD_COMPLETION, 'RECORD_COMPLETION'],
    [K.CAP_PERSISTENT, 'PERSISTENT'],
  ] as const;
  const granted = names.filter(([bit]) => (bits & bit) !== 0).map(([, name]) => name);
  return granted.length === 0 ? 'none' : granted.join(', ');
}

export function describeHelloAck(ack: HelloAck): string {
  return [
    `capabilities        ${capabilityNames(ack.capabilities)}`,
    `block size          ${ack.blockSize} octets`,
    `block count (F)     ${ack.blockCount}`,
    `target credits      ${ack.targetCredits}`,
    `shared ring order   ${ack.sharedRingOrder} (N = ${2 ** ack.sharedRingOrder})`,
    `partition ring      ${ack.partitionRingOrder === 0 ? 'none' : `order ${ack.partitionRingOrder}`}`,
    `max inline          ${ack.maxInline} octets`,
    `allocation quota    ${ack.quota} blocks`,
    `ticket timeout      ${ack.ticketTimeoutMs} ms`,
    `table               handles ${ack.tableBaseHandle}..${ack.tableBaseHandle + ack.tableHandleCount - 1n}` +
      (ack.tableStag === 0 ? '' : `, STag 0x${ack.tableStag.toString(16)} at TO ${ack.tableOffset}`),
    `store range         ${ack.storeCount === 0n ? 'none' : `${ack.storeFirst}..${ack.storeFirst + ack.storeCount - 1n}`}`,
    `pool STag           ${ack.poolStag === 0 ? '-' : `0x${ack.poolStag.toString(16)}`}`,
    `partition STag      ${ack.partitionStag === 0 ? '-' : `0x${ack.partitionStag.toString(16)}`}`,
    `ring STag           ${ack.ringStag === 0 ? '-' : `0x${ack.ringStag.toString(16)} (ring at TO ${ack.ringOffset}, Head at TO ${ack.headOffset})`}`,
  ].join('\n');
}

export const command: Command = {
  summary: "print a target's HELLO_ACK (what a session is granted)",
  run: clientCommand('info', HELP, { json: { type: 'boolean' } }, async ({ values }) => {
    const session = await openSession({ ...values, direct: true }, K.CAP_DIRECT_LOAD | K.CAP_DIRECT_ALLOC | K.CAP_PERSISTENT);
    try {
      const ack = session.hello;
      console.log(
        values.json === true ? JSON.stringify(ack, (_, value: unknown) => (typeof value === 'bigint' ? value.toString() : value)) : describeHelloAck(ack),
      );
    } finally {
      await session.close();
    }
    return EXIT_OK;
  }),
};
