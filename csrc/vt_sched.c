/* A task's EEVDF slice (Linux 6.12+): sched_setattr(2)'s sched_runtime for SCHED_OTHER sets the
 * length of the slice the task asks for; a shorter one gives it an earlier virtual deadline, so it
 * runs first when it wakes beside a task of equal weight, without taking a larger share of the
 * CPU (that is the weight's, the nice value's). Older kernels accept the field and ignore it,
 * which vt_sched_get_slice tells (it reads 0 there, or the default slice).
 * glibc 2.36 has no wrapper and no struct sched_attr: the syscall and the structure (its first
 * version, 48 bytes) are spelled out here. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "vt_sched.h"

struct vt_sched_attr {
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime;
    uint64_t sched_deadline;
    uint64_t sched_period;
};

int vt_sched_set_slice(int tid, int nice, uint64_t slice_ns)
{
    struct vt_sched_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.sched_policy = 0; /* SCHED_OTHER */
    attr.sched_nice = nice;
    attr.sched_runtime = slice_ns;
    if (syscall(SYS_sched_setattr, tid, &attr, 0) != 0)
        return -errno;
    return 0;
}

int64_t vt_sched_get_slice(int tid)
{
    struct vt_sched_attr attr;
    memset(&attr, 0, sizeof attr);
    if (syscall(SYS_sched_getattr, tid, &attr, sizeof attr, 0) != 0)
        return -errno;
    return (int64_t)attr.sched_runtime;
}
