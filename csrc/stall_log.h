/*
 * stall_log.h: the injected disk stalls, as they happened (--inject-fsync-delay ...,stall:S/P): a small
 * shared file ($VALKEYTRACE_STALL_LOG) the shim writes (csrc/shim_stall.c: each stall's CLOCK_MONOTONIC
 * start when a sync takes it, its end when its sleep returns) and valkeytrace reads: the open-loop client
 * (csrc/vt_load.c) to split its latencies by whether a request was due during a stall, the recorder to
 * keep the stalls of each window (tracers/memory.py mirrors the layout with numpy).
 */
#ifndef VT_STALL_LOG_H
#define VT_STALL_LOG_H

#include "valkeytrace.h"

#define VT_STALL_LOG_MAGIC 0x4c535456u /* "VTSL" */
#define VT_STALL_LOG_MAX 256           /* a ring: the latest stalls */

struct vt_stall_entry {
    vt_u64 start_ns; /* written first (0: never used) */
    vt_u64 end_ns;   /* 0 while the stall lasts */
};

struct vt_stall_log {
    vt_u32 magic;
    vt_u32 pad;
    vt_u64 n; /* stalls begun (entry n % VT_STALL_LOG_MAX is the next) */
    struct vt_stall_entry e[VT_STALL_LOG_MAX];
};

/* 1 when moment t (CLOCK_MONOTONIC ns) falls inside a stall, as far as the log says now (entries are
 * in the order they began: the latest one begun at or before t decides) */
static inline int vt_stall_covers(const struct vt_stall_log *log, vt_u64 t)
{
    vt_u64 n = log ? __atomic_load_n(&log->n, __ATOMIC_ACQUIRE) : 0;
    for (vt_u64 i = n; i > 0 && n - i < VT_STALL_LOG_MAX; i--) {
        const struct vt_stall_entry *e = &log->e[(i - 1) % VT_STALL_LOG_MAX];
        vt_u64 s = __atomic_load_n(&e->start_ns, __ATOMIC_ACQUIRE);
        if (s && s <= t) {
            vt_u64 end = __atomic_load_n(&e->end_ns, __ATOMIC_ACQUIRE);
            return !end || t <= end;
        }
    }
    return 0;
}

#endif
