// What the software RNIC tells an observer each time a hardware RNIC would touch one of its
// on-chip structures. The SRAM cache model (host/sram) implements it; with no observer set the
// RNIC skips every call, so the data path pays nothing when the model is off.

export interface NicObserver {
  /** A QP context is read (and, when `dirty`, modified: e.g. its next PSN/MSN moved). Once per message sent or received. */
  queuePairContext(qpNumber: number, dirty: boolean): void;
  /**
   * An STag was resolved for an access of `length` octets at byte `offset` into its region:
   * one MPT entry lookup plus one MTT entry per page touched (`pageSize` is the region's page size).
   */
  memoryTranslation(stag: number, offset: number, length: number, pageSize: number): void;
  /** A completion was written to completion queue `cqNumber`. */
  completionQueue(cqNumber: number): void;
  /** An event (e.g. a completion notification) was raised on event queue `eqNumber`. */
  eventQueue(eqNumber: number): void;
  /** A memory region was registered (`bytes` long, in pages of `pageSize`). */
  registerRegion(stag: number, bytes: number, pageSize: number): void;
  /** A memory region or STag was deregistered or invalidated. */
  deregisterRegion(stag: number): void;
  queuePairCreated(qpNumber: number): void;
  queuePairDestroyed(qpNumber: number): void;
}
