// This process's descriptors of a TCP listening socket or of a file, found through /proc (the
// target's workers are threads of the test's process, so their descriptors are ours).
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

const TCP_LISTEN = '0A';

/** Every descriptor of this process that refers to the TCP socket listening on `port`, in number order. */
export function listeningDescriptors(port: number): number[] {
  const inodes = new Set<string>();
  for (const line of readFileSync('/proc/net/tcp', 'utf8').split('\n').slice(1)) {
    const fields = line.trim().split(/\s+/);
    if (fields.length < 10) continue;
    const localPort = Number.parseInt(fields[1]!.split(':')[1]!, 16);
    if (localPort === port && fields[3] === TCP_LISTEN) inodes.add(fields[9]!);
  }
  const found: number[] = [];
  for (const entry of readdirSync('/proc/self/fd')) {
    let link: string;
    try {
      link = readlinkSync(`/proc/self/fd/${entry}`);
    } catch {
      continue; // closed meanwhile
    }
    const inode = /^socket:\[(\d+)\]$/.exec(link)?.[1];
    if (inode !== undefined && inodes.has(inode)) found.push(Number(entry));
  }
  return found.sort((a, b) => a - b);
}

/** How many descriptors of this process are open on the file at `path`. */
export function descriptorsOpenOn(path: string): number {
  return readdirSync('/proc/self/fd').filter((entry) => {
    try {
      return readlinkSync(`/proc/self/fd/${entry}`) === path;
    } catch {
      return false; // closed meanwhile
    }
  }).length;
}
