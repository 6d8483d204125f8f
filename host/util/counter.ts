// The start of a count that can pass 2^31 in a long run: octets over one connection, by one thread.
/**
 * Zero as a double (-0), not as a small integer. V8 gives a field first set to a small integer
 * the small-integer representation, and TurboFan adds to it with an overflow check; when the count
 * passes 2^31 the check fails, the function deoptimizes, the field is generalized to a double and
 * every function compiled against the object's shape deoptimizes with it ("overflow", then "wrong
 * map"), to be compiled again. On kbtp bench's 16 KiB LOAD x1 that was both sides at the
 * 131,072nd request of a connection, inside make compare's window: about 14 functions of the
 * receive path on the initiator, the transmit path and the stats on the target, and ~140 ms of
 * TurboFan on V8's helper threads (issue 16, session 15). A field set to -0 is a double from the
 * start, updated in place (no allocation per add), and adds as 0: the first octet counted makes it
 * positive. Only Object.is and util.inspect tell -0 from 0; reports and JSON show 0.
 */
export const COUNT_FROM = -0;
