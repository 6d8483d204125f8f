// Two Ethernet frame ports joined in memory (each frame delivered to the other on a later turn),
// for tests that put kbtp RNICs on EthernetLinks without a QEMU tunnel.
import type { FramePort } from '../../host/rnic/rc/ethernet-link.ts';

export class WireFramePort implements FramePort {
  peer: WireFramePort | undefined;
  private handler: ((frame: Uint8Array) => void) | undefined;

  send(frame: Uint8Array): void {
    const peer = this.peer;
    const copy = frame.slice();
    if (peer !== undefined) setImmediate(() => peer.handler?.(copy));
  }

  onFrame(handler: (frame: Uint8Array) => void): void {
    this.handler = handler;
  }

  async close(): Promise<void> {}
}

export function wiredFramePorts(): [WireFramePort, WireFramePort] {
  const a = new WireFramePort();
  const b = new WireFramePort();
  a.peer = b;
  b.peer = a;
  return [a, b];
}
