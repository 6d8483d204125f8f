// How many octets one trial of bench/rnic.ts moves: --mib-per-run for the one-thread rows and the
// plain socket pairs, --threads-mib-per-run for the rows with the responder on a thread of its own.
// Those rows need longer trials: at 128 MiB a two-thread trial lasted 35-65 ms at 16-30 Gbit/s,
// a few scheduler slices on two cores shared by two threads, and trials of one build differed by
// up to 0.3 of iWARP's figure; at 1 GiB (0.3-0.7 s) two runs agreed within 0.09 (session 11's
// quiet measurements). A --mib-per-run given for a quick run keeps the two-thread rows as quick.

/** MiB per trial when neither flag is given. */
export const DEFAULT_MIB_PER_RUN = 128;
export const DEFAULT_THREADS_MIB_PER_RUN = 1024;

export interface RunLengths {
  /** Octets per trial of the one-thread rows (and the plain TCP and UDP pairs). */
  bytesPerRun: number;
  /** Octets per trial of the two-thread rows. */
  threadsBytesPerRun: number;
}

/** The trial lengths the two flags (undefined: not given) ask for, or what is wrong with them. */
export function runLengths(mibPerRun: string | undefined, threadsMibPerRun: string | undefined): RunLengths | string {
  const mib = mibPerRun === undefined ? DEFAULT_MIB_PER_RUN : Number(mibPerRun);
  if (!(mib > 0)) return `--mib-per-run ${mibPerRun}: a positive number of MiB`;
  const threadsMib = threadsMibPerRun !== undefined ? Number(threadsMibPerRun) : mibPerRun !== undefined ? mib : DEFAULT_THREADS_MIB_PER_RUN;
  if (!(threadsMib > 0)) return `--threads-mib-per-run ${threadsMibPerRun}: a positive number of MiB`;
  return { bytesPerRun: Math.round(mib * 2 ** 20), threadsBytesPerRun: Math.round(threadsMib * 2 ** 20) };
}
