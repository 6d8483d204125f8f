// A KBTP session to a target served in this process over an in-memory LinkedChannel pair: no
// sockets, no worker threads (the batch and allocation tests).
import { resolveTargetSettings } from '../../host/kbtp/server/target-config.ts';
import { connectChannel, type KbtpSession } from '../../host/kbtp/initiator.ts';
import { InProcessTarget } from '../../host/kbtp/server/in-process.ts';
import { LinkedChannel } from '../../host/rnic/linked-channel.ts';
import type { StreamChannel } from '../../host/rnic/verbs.ts';

export interface InProcessSession {
  session: KbtpSession;
  target: InProcessTarget;
  /** The initiator's end of the stream. */
  channel: LinkedChannel;
}

/** `wrap` may stand between the initiator and its end of the stream (a test that drops what it sends). */
export async function openInProcessSession(
  blockSize: number,
  blocks: number,
  credits: number,
  wrap: (channel: LinkedChannel) => StreamChannel = (channel) => channel,
  maxInline = 64,
): Promise<InProcessSession> {
  const settings = resolveTargetSettings({
    listen: '127.0.0.1:0',
    workers: 1,
    pool: { blockSize, blockCount: blocks, handleCount: 4 * blocks, maxInline },
    session: { credits },
    tenants: [{ name: 'local', open: true, quota: blocks }],
  } as never);
  const target = new InProcessTarget(settings);
  const [targetEnd, initiatorEnd] = LinkedChannel.pair();
  const served = target.serve(targetEnd);
  const session = await connectChannel(wrap(initiatorEnd), { tenant: 'local', pipeline: credits });
  await served;
  return { session, target, channel: initiatorEnd };
}
