/*
 * offload_fds.h: the virtual offload's own descriptors of the AOF files it writes (csrc/offload_fds.c).
 * The offload thread writes and fdatasyncs queued bytes through a duplicate of the server's fd, so the
 * server may close its fd (the AOF's rotation, CONFIG SET appendonly no) at once, as with #3381: the
 * duplicate is closed by the offload thread once the bytes queued before the close are durable. The main
 * thread never waits for a job there (a stalled disk would stall it).
 */
#ifndef VT_OFFLOAD_FDS_H
#define VT_OFFLOAD_FDS_H

#include <stdint.h>

/* (vt_off.mu held) the offload's duplicate of the server's AOF fd, made on first use; -1 when none can be
 * made (then the queue writes through fd itself and a close of fd waits for its bytes) */
int vt_aof_own(int fd);
/* (vt_off.mu held) the server closes fd: its duplicate retires once `at` is durable. 1: it had one */
int vt_aof_release(int fd, uint64_t at);
/* (vt_off.mu held) durable reached: the duplicates retired at or before it are closed */
void vt_aof_retire(uint64_t durable);

#endif
