/*
 * shim_stall.h: the shim's injected disk stalls (csrc/shim_stall.c): once in every P of wall time, the
 * first sync at or after the moment takes S more; each one written to the stall log (stall_log.h).
 */
#ifndef VT_SHIM_STALL_H
#define VT_SHIM_STALL_H

#include <stdint.h>

/* S and P in ns, from now; the log's path from $VALKEYTRACE_STALL_LOG (none: not logged) */
void vt_stall_setup(uint64_t stall_ns, uint64_t period_ns, uint64_t max_ns);
int vt_stall_configured(void);
/* a sync is about to sleep: the stall's length if one is due (one thread wins it; *slot for its end), else 0 */
uint64_t vt_stall_take(long *slot);
void vt_stall_done(long slot); /* its sleep returned (slot < 0: none) */

#endif
