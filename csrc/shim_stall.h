/*
 * shim_stall.h: the shim's injected disk stalls (csrc/shim_stall.c): once in every P of wall time, the
 * first sync at or after the moment takes S more; each one written to the stall log (stall_log.h); and a
 * disk that blocks writes to a file while its sync runs.
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

/* ;blocks-writes (--inject-fsync-delay 4ms,blocks-writes): a write to a file whose sync (the real call and its
 * emulated delay) is under way waits for that sync to end, as buffered writes can on ext4 */
void vt_blocks_writes_setup(void);
int vt_blocks_writes(void);
long vt_sync_blocks_begin(int fd); /* a sync of fd begins: its slot (or -1) for vt_sync_blocks_end */
void vt_sync_blocks_end(long slot);
void vt_write_wait_syncs(int fd);  /* a write to fd (a regular file): wait while a sync of its file runs */

#endif
