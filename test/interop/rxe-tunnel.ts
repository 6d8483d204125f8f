// kbtp's RNIC as the rxe guest's layer-2 neighbour: a QEMU UDP frame tunnel on loopback, kbtp's
// EthernetLink on it at 10.0.4.2 (ARP, ICMP echo, RoCEv2 in real IPv4/UDP), and its RoCE port.
import { EthernetLink, UdpFrameTunnel } from '../../host/rnic/rc/ethernet-link.ts';
import { createRnic, type Rnic } from '../../host/rnic/verbs.ts';
import { freeLoopbackUdpPort, HOST_TUNNEL_ADDRESS, type FrameTunnelPorts } from './guest.ts';

/** kbtp's MAC on the tunnel (locally administered). */
export const HOST_TUNNEL_MAC = new Uint8Array([0x02, 0x6b, 0x62, 0x74, 0x70, 0x02]);

export interface RxeNeighbour {
  readonly rnic: Rnic;
  readonly link: EthernetLink;
  /** Pass as GuestOptions.frameTunnel. */
  readonly ports: FrameTunnelPorts;
  close(): Promise<void>;
}

export async function openRxeNeighbour(name: string): Promise<RxeNeighbour> {
  const qemuPort = await freeLoopbackUdpPort();
  const tunnel = await UdpFrameTunnel.open({ address: '127.0.0.1', port: 0 }, { address: '127.0.0.1', port: qemuPort });
  const link = new EthernetLink(tunnel, { mac: HOST_TUNNEL_MAC, address: HOST_TUNNEL_ADDRESS });
  const rnic = createRnic({ name });
  await rnic.openRoce({ link });
  return {
    rnic,
    link,
    ports: { hostPort: tunnel.localPort, qemuPort },
    close: () => rnic.close(),
  };
}
