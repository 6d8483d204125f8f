// What a cache event costs in modelled time. No vendor publishes ConnectX SRAM timings, so every
// default below is an assumption of the right order of magnitude, named with where it comes
// from; all of them are configurable (the `costs` object of a --sram-model config).

export interface SramCosts {
  /**
   * A lookup that hits on-chip. Default 20 ns: on-chip SRAM answers in a few cycles of a NIC
   * pipeline clocked around 1 GHz, plus tag compare and arbitration; "tens of ns" is the usual
   * order for a hit, and 20 ns is an assumption inside it, not a measured ConnectX figure.
   */
  readonly sramHitNs: number;
  /**
   * A miss: one PCIe read round trip to the context/translation table in host memory (ICM),
   * paid on top of the lookup. Default 1000 ns: Neugebauer et al. (SIGCOMM 2018, "Understanding
   * PCIe performance for end host networking") measured small DMA reads at roughly 0.5-0.9 us
   * on Xeon hosts, more with an IOMMU or a loaded root complex, and ~1 us is the figure commonly
   * used for a ConnectX-class NIC fetching a context over PCIe. An assumption, rounded up.
   */
  readonly pcieReadNs: number;
  /**
   * Writing a dirty line back before its line is reused. Default 500 ns: a posted PCIe write
   * needs no completion, but the line stays reserved until the write has left the device; half
   * a read round trip (one traversal) is the assumption.
   */
  readonly pcieWriteNs: number;
}

export const DEFAULT_COSTS: SramCosts = Object.freeze({
  sramHitNs: 20,
  pcieReadNs: 1000,
  pcieWriteNs: 500,
});

/**
 * Link rate used to turn payload bytes into wire time when experiments report throughput.
 * Default 100 Gbit/s: a ConnectX-5 port, the NIC Kong et al. (NSDI 2023) measured.
 */
export const DEFAULT_LINK_GBPS = 100;

/** Nanoseconds `bytes` of payload occupy a link of `gbps` (headers ignored). */
export function wireNs(bytes: number, gbps: number): number {
  return (bytes * 8) / gbps;
}
