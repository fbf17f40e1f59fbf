/*
 * offload.h: the virtual offload (record --emulate-offload), part of the shim (csrc/offload.c).
 * The shim's wrappers call these first; each returns 1 when it took the call.
 */
#ifndef VT_OFFLOAD_H
#define VT_OFFLOAD_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "valkeytrace.h"

#define VT_OFFLOAD_MAGIC 0x4f465456u /* "VTFO" little-endian */
#define VT_OFFLOAD_VERSION 1
#define VT_OFFLOAD_DURABLE 1
#define VT_OFFLOAD_EARLY_ACK 2
#define VT_OFFLOAD_WAITED_MAX 8 /* replies that waited 0, 1, ..., 7 or more jobs */

/* What the emulation counted, in a file valkeytrace maps ($VALKEYTRACE_OFFLOAD_STATS): cumulative,
 * read at window edges. Written by the offload thread and the server's threads under one lock. */
struct vt_offload_stats {
    vt_u32 magic;
    vt_u32 version;
    vt_u32 mode;
    vt_u32 hist_buckets;
    vt_u64 jobs;                 /* write + fdatasync jobs done by the offload thread */
    vt_u64 job_bytes;            /* AOF bytes they wrote */
    vt_u64 offloaded_writes;     /* the main thread's AOF writes taken (returned at once) */
    vt_u64 offloaded_syncs;      /* its fdatasync/fsync calls on the AOF taken */
    vt_u64 write_commands;       /* write commands read from clients (durable: the connections held) */
    vt_u64 held_replies;         /* reply writes held until their batch was durable */
    vt_u64 held_bytes;
    vt_u64 released_replies;     /* held replies written to their socket */
    vt_u64 early_replies;        /* replies to a write sent before its batch was durable: 0 under durable */
    vt_u64 dropped_replies;      /* held replies whose connection closed or failed first */
    vt_u64 released_after_write; /* released replies that answered a write command (SETs acknowledged) */
    vt_u64 jobs_waited_sum;      /* over released replies: jobs completed between hold and release */
    vt_u64 jobs_waited[VT_OFFLOAD_WAITED_MAX];
    struct vt_hist job_ns;       /* a job: from taking the batch to its fdatasync's return (delay included) */
    struct vt_hist hold_ns;      /* a held reply: from the server's write to the real one */
};

int vt_offload_init(void);                 /* from the shim's constructor: reads $VALKEYTRACE_OFFLOAD */
int vt_offload_enabled(void);
void vt_offload_after_fork_child(void);
int vt_offload_sync(int fd);               /* fdatasync/fsync: 1 when taken (returns 0 to the caller) */
int vt_offload_write(int fd, const void *buf, size_t n, ssize_t *ret);
int vt_offload_writev(int fd, const struct iovec *iov, int iovcnt, ssize_t *ret);
void vt_offload_read(int fd, const void *buf, ssize_t n); /* after a read: notes write commands */
void vt_offload_close(int fd);             /* before a close: drains what the fd has pending */
void vt_offload_forget(int fd);
void *vt_map_shared(const char *path, size_t min_size, size_t *size); /* shim.c */            /* fd's number may name another file now: classify it again */

#endif
