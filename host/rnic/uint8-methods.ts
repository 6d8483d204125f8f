// Uint8Array methods for hot paths, called as `setBytes.call(view, ...)`: optimized code calling
// `view.set` or `view.subarray` went through the generic LoadIC to find the method on every
// message (issue 16, session 10: the RNIC's transmit and its receive copies).

export const setBytes = Uint8Array.prototype.set;
export const subarrayOf = Uint8Array.prototype.subarray;
