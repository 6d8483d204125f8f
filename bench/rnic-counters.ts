// What `bench/rnic.ts --counters` keeps per RoCE row: each side's RC counters (packets, ACKs,
// NAKs, retransmissions, timer expiries), its endpoint's lean path, and its batched UDP link's
// system calls and wake-ups, summed over the row's runs; and per row the CPU time of the thread
// that runs the requester, of the responder's thread (the two-thread rows) and of the rest (the
// links' send workers, V8's helpers), from /proc/self/task/TID/schedstat. Counts, not timings:
// they say why a row costs what it costs (how many packets each system call or wake-up serves,
// how many ACKs a MiB takes, how often a timer went back N).
import { readlinkSync } from 'node:fs';
import type { RcQueuePair, Rnic } from '../host/rnic/verbs.ts';
import type { BatchedUdpStatistics } from '../host/rnic/rc/batched-udp-socket.ts';
import { ThreadCpu, type ThreadCpuSample } from '../host/bench/thread-cpu.ts';

/** One side's counters (totals; a row's are the sum over its runs). */
export interface RoceSideCounters {
  packetsSent: number;
  packetsResent: number;
  packetsReceived: number;
  acksSent: number;
  acksReceived: number;
  naksSent: number;
  naksReceived: number;
  duplicatesReceived: number;
  earlyRetransmissions: number;
  tailProbes: number;
  earlyWaits: number;
  earlyTimerFires: number;
  timeouts: number;
  ackTimerFires: number;
  /** Packets the endpoint's lean path placed, and requests it dropped past a NAK'd gap. */
  leanPackets: number;
  pastGap: number;
  /** The batched link's sendmmsg calls, the messages (GSO runs) and datagrams they carried; 0 over node:dgram. */
  sendCalls: number;
  sendMessages: number;
  datagramsSent: number;
  /** Its readable events (wake-ups), recvmmsg calls (empty ones too), and datagrams received. */
  readableEvents: number;
  receiveCalls: number;
  datagramsReceived: number;
  /** Datagrams whose ICRCs one call checked with the rest of their GRO run (icrc-runs.ts). */
  datagramsInCheckedRuns: number;
}

const FIELDS = [
  'packetsSent',
  'packetsResent',
  'packetsReceived',
  'acksSent',
  'acksReceived',
  'naksSent',
  'naksReceived',
  'duplicatesReceived',
  'earlyRetransmissions',
  'tailProbes',
  'earlyWaits',
  'earlyTimerFires',
  'timeouts',
  'ackTimerFires',
  'leanPackets',
  'pastGap',
  'sendCalls',
  'sendMessages',
  'datagramsSent',
  'readableEvents',
  'receiveCalls',
  'datagramsReceived',
  'datagramsInCheckedRuns',
] as const satisfies ReadonlyArray<keyof RoceSideCounters>;

/** The counters of one RoCE end now: its QP, its RNIC's endpoint, and the UDP link under any impairment. */
export function roceSideCounters(rnic: Rnic, qp: RcQueuePair, udpLink: unknown): RoceSideCounters {
  const rc = qp.stats;
  const endpoint = rnic.roceEndpoint?.stats;
  const link = linkStats(udpLink);
  return {
    packetsSent: rc.packetsSent,
    packetsResent: rc.retransmittedPackets,
    packetsReceived: rc.packetsReceived,
    acksSent: rc.acksSent,
    acksReceived: rc.acksReceived,
    naksSent: rc.sequenceNaksSent,
    naksReceived: rc.sequenceNaksReceived,
    duplicatesReceived: rc.duplicatesReceived,
    earlyRetransmissions: rc.earlyRetransmissions,
    tailProbes: rc.tailProbes,
    earlyWaits: rc.earlyWaits,
    earlyTimerFires: rc.earlyTimerFires,
    timeouts: rc.timeouts,
    ackTimerFires: rc.ackTimerFires,
    leanPackets: endpoint?.lean ?? 0,
    pastGap: endpoint?.pastGap ?? 0,
    sendCalls: link?.sendCalls ?? 0,
    sendMessages: link?.messagesSent ?? 0,
    datagramsSent: link?.datagramsSent ?? 0,
    readableEvents: link?.readableEvents ?? 0,
    receiveCalls: link?.receiveCalls ?? 0,
    datagramsReceived: link?.datagramsReceived ?? 0,
    datagramsInCheckedRuns: link?.datagramsInPassedRuns ?? 0,
  };
}

/** The batched link's statistics, or undefined for a link without them (node:dgram's). */
function linkStats(link: unknown): BatchedUdpStatistics | undefined {
  const stats = (link as { stats?: Partial<BatchedUdpStatistics> } | undefined)?.stats;
  return stats !== undefined && typeof stats.sendCalls === 'number' ? (stats as BatchedUdpStatistics) : undefined;
}

/** later - earlier, field by field. */
export function countersBetween(earlier: RoceSideCounters, later: RoceSideCounters): RoceSideCounters {
  const difference = { ...later };
  for (const field of FIELDS) difference[field] = later[field] - earlier[field];
  return difference;
}

/** sum + more, field by field (sum undefined: more). */
export function addCounters(sum: RoceSideCounters | undefined, more: RoceSideCounters): RoceSideCounters {
  if (sum === undefined) return { ...more };
  const total = { ...sum };
  for (const field of FIELDS) total[field] = sum[field] + more[field];
  return total;
}

/** Thread CPU of a row, nanoseconds summed over its runs: the requester's thread, the responder's (two-thread rows), the rest. */
export interface RowThreadCpu {
  requesterNs: number;
  responderNs?: number;
  otherNs: number;
}

/** The calling thread's OS thread id (Linux /proc/thread-self), 0 where unknown. */
export function osThreadId(): number {
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
    return Number.isSafeInteger(tid) ? tid : 0;
  } catch {
    return 0;
  }
}

/** A sampler of this process's threads with the responder's thread (if any) told apart; undefined without /proc. */
export function threadSampler(responderThread: number | undefined): ThreadCpu | undefined {
  return ThreadCpu.open(responderThread === undefined ? [] : [responderThread]);
}

export function threadCpuBetween(first: ThreadCpuSample, last: ThreadCpuSample, twoThreads: boolean): RowThreadCpu {
  return {
    requesterNs: last.clientNs - first.clientNs,
    ...(twoThreads ? { responderNs: last.targetNs - first.targetNs } : {}),
    otherNs: Math.max(0, last.otherNs - first.otherNs),
  };
}

export function addThreadCpu(sum: RowThreadCpu | undefined, more: RowThreadCpu): RowThreadCpu {
  if (sum === undefined) return { ...more };
  return {
    requesterNs: sum.requesterNs + more.requesterNs,
    ...(sum.responderNs !== undefined || more.responderNs !== undefined ? { responderNs: (sum.responderNs ?? 0) + (more.responderNs ?? 0) } : {}),
    otherNs: sum.otherNs + more.otherNs,
  };
}

/** What a row's JSON keeps under `counters`: totals over `bytes` moved in its runs. */
export interface RowCounters {
  bytes: number;
  requester?: RoceSideCounters;
  responder?: RoceSideCounters;
  /** CPU milliseconds per GiB by thread. */
  cpuMsPerGiB?: { requesterThread: number; responderThread?: number; otherThreads: number };
}

export function rowCounters(
  bytes: number,
  requester: RoceSideCounters | undefined,
  responder: RoceSideCounters | undefined,
  cpu: RowThreadCpu | undefined,
): RowCounters {
  const perGiB = (ns: number): number => Math.round(ns / 1e6 / (bytes / 2 ** 30));
  return {
    bytes,
    ...(requester === undefined ? {} : { requester }),
    ...(responder === undefined ? {} : { responder }),
    ...(cpu === undefined
      ? {}
      : {
          cpuMsPerGiB: {
            requesterThread: perGiB(cpu.requesterNs),
            ...(cpu.responderNs === undefined ? {} : { responderThread: perGiB(cpu.responderNs) }),
            otherThreads: perGiB(cpu.otherNs),
          },
        }),
  };
}

/**
 * The row's counters as printed lines: CPU by thread per GiB, then per side packets, ACKs and
 * system calls per MiB, datagrams per recvmmsg call and per wake-up, and the retransmission
 * events as counts over the row.
 */
export function counterLines(counters: RowCounters): string[] {
  const mib = counters.bytes / 2 ** 20;
  const per = (value: number): string => (value / mib).toFixed(1);
  const ratio = (a: number, b: number): string => (b === 0 ? '-' : (a / b).toFixed(1));
  const lines: string[] = [];
  const cpu = counters.cpuMsPerGiB;
  if (cpu !== undefined) {
    lines.push(
      `    CPU ms/GiB by thread: requester ${cpu.requesterThread}${cpu.responderThread === undefined ? ' (responder on it too)' : `, responder ${cpu.responderThread}`}, other ${cpu.otherThreads}`,
    );
  }
  for (const [side, c] of [
    ['requester', counters.requester],
    ['responder', counters.responder],
  ] as const) {
    if (c === undefined) continue;
    lines.push(
      `    ${side.padEnd(9)} per MiB: packets out ${per(c.packetsSent)} (resent ${per(c.packetsResent)}), in ${per(c.packetsReceived)} (lean ${per(c.leanPackets)}); ` +
        `ACKs out ${per(c.acksSent)}, in ${per(c.acksReceived)}; sendmmsg ${per(c.sendCalls)} (${ratio(c.datagramsSent, c.sendCalls)} datagrams, ${ratio(c.datagramsSent, c.sendMessages)} per GSO message), ` +
        `recvmmsg ${per(c.receiveCalls)} (${ratio(c.datagramsReceived, c.receiveCalls)} datagrams), wake-ups ${per(c.readableEvents)} (${ratio(c.datagramsReceived, c.readableEvents)} datagrams), ` +
        `ICRC checked in runs ${per(c.datagramsInCheckedRuns)}`,
    );
    lines.push(
      `    ${side.padEnd(9)} in the row: NAKs out ${c.naksSent}, in ${c.naksReceived}; duplicates ${c.duplicatesReceived}; past a gap ${c.pastGap}; ` +
        `early timer ${c.earlyTimerFires} (probed ${c.tailProbes}, waited ${c.earlyWaits}, went back N ${c.earlyRetransmissions}); ACK timer ${c.ackTimerFires} (timeouts ${c.timeouts})`,
    );
  }
  return lines;
}
