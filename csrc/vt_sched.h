#ifndef VT_SCHED_H
#define VT_SCHED_H
#include <stdint.h>

/* 0, or -errno */
int vt_sched_set_slice(int tid, int nice, uint64_t slice_ns);
/* the task's sched_runtime (its custom slice, ns; 0 where the kernel keeps none), or -errno */
int64_t vt_sched_get_slice(int tid);

#endif
