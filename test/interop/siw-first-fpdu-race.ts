// Reproduces a lost wake-up in Linux 6.1 siw as MPA responder (run by hand, not part of the suite:
// its outcome is timing-dependent by nature):
//   node --import tsx test/interop/siw-first-fpdu-race.ts [connections] [delayMs]
// siw_accept() sends the MPA Reply and only then hooks the socket's data_ready callback to the QP.
// An FPDU that lands in between is left in the socket buffer; nothing reads it until more bytes
// arrive, so an initiator that sends its first FPDU right after the Reply and then waits (rping's
// client does) may wait forever. With `delayMs` the first FPDU is held back that long after the Reply.
import { GUEST_ADDRESS, Guest } from './guest.ts';
import { encodeFpdu, encodeMpaFrame, encodeUntagged, MPA_REQUEST_KEY, MpaStreamReader, OP_SEND } from './raw-iwarp.ts';
import { encodeRpingInfo, openLoopback } from './raw-rping.ts';

const connections = Number(process.argv[2] ?? 20);
const delayMs = Number(process.argv[3] ?? 0);
const PORT = 7174;

const guest = await Guest.start({
  name: 'siw-first-fpdu-race',
  forwardGuestPorts: [PORT],
  timeoutMs: 600_000,
  peerScript: `rping -s -P -a ${GUEST_ADDRESS} -p ${PORT} &\nwait_tcp_listen ${PORT} || exit 10\necho KBTP-READY\nread -r line\ncat /proc/net/tcp\nexit 0\n`,
});
await guest.waitForLine(/^KBTP-READY/);
let stalled = 0;
const stalledSockets: import('node:net').Socket[] = [];
for (let i = 0; i < connections; i++) {
  const socket = await openLoopback(guest.hostPort(PORT));
  const reader = new MpaStreamReader(socket);
  socket.write(encodeMpaFrame({ key: MPA_REQUEST_KEY, revision: 2, irdWord: 1, ordWord: 1 }));
  await reader.readMpaFrame();
  if (delayMs) await new Promise((r) => setTimeout(r, delayMs));
  socket.write(encodeFpdu(encodeUntagged(OP_SEND, 0, 1, 0, encodeRpingInfo(0x1000n, 0x1234, 64)), false));
  try {
    await reader.readFpdu(3000);
    socket.destroy();
  } catch {
    stalled++;
    stalledSockets.push(socket); // kept open so the guest's socket table shows the unread bytes
  }
}
// In the guest's /proc/net/tcp, a stalled connection shows rx_queue > 0: siw never read its FPDU.
guest.send('done');
const result = await guest.exited;
for (const socket of stalledSockets) socket.destroy();
const unread = result.log.split('\n').filter((line) => {
  const fields = line.trim().split(/\s+/); // sl local remote st tx_queue:rx_queue ...
  return fields[1]?.endsWith(`:${PORT.toString(16).toUpperCase().padStart(4, '0')}`) && fields[3] === '01' && !fields[4]?.endsWith(':00000000');
});
console.log(`guest sockets holding unread bytes:\n${unread.join('\n')}`);
console.log(`${stalled} of ${connections} first FPDUs were never processed (delay ${delayMs} ms); log ${result.logPath}`);
