/*
 * shim_stall.c: the shim's injected disk stalls (shim_stall.h), logged for valkeytrace (stall_log.h).
 */
#define _GNU_SOURCE
#include "shim_stall.h"

#include <stdlib.h>
#include <time.h>

#include "shim_io.h"
#include "stall_log.h"

static uint64_t stall_ns, stall_period_ns; /* once in every period of wall time, one sync stall_ns longer */
static uint64_t stall_next;                /* atomic: the monotonic time the next stall is due from */
static struct vt_stall_log *stall_log;     /* the shared log, or NULL */

static uint64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

void vt_stall_setup(uint64_t s, uint64_t p, uint64_t max_ns)
{
    size_t size = 0;
    stall_ns = s < max_ns ? s : max_ns;
    stall_period_ns = p;
    __atomic_store_n(&stall_next, mono_ns() + p, __ATOMIC_RELAXED);
    stall_log = vt_map_shared(getenv("VALKEYTRACE_STALL_LOG"), sizeof(struct vt_stall_log), &size);
    if (stall_log)
        __atomic_store_n(&stall_log->magic, VT_STALL_LOG_MAGIC, __ATOMIC_RELEASE);
}

int vt_stall_configured(void) { return stall_period_ns != 0; }

uint64_t vt_stall_take(long *slot)
{
    uint64_t due = __atomic_load_n(&stall_next, __ATOMIC_RELAXED), now;
    *slot = -1;
    if (!stall_period_ns || (now = mono_ns()) < due)
        return 0;
    uint64_t next = due + stall_period_ns * (1 + (now - due) / stall_period_ns);
    if (!__atomic_compare_exchange_n(&stall_next, &due, next, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        return 0;
    if (stall_log) { /* only the winner writes: one stall at a time */
        uint64_t n = __atomic_load_n(&stall_log->n, __ATOMIC_RELAXED);
        struct vt_stall_entry *e = &stall_log->e[n % VT_STALL_LOG_MAX];
        __atomic_store_n(&e->start_ns, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&e->end_ns, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&e->start_ns, now, __ATOMIC_RELEASE);
        __atomic_store_n(&stall_log->n, n + 1, __ATOMIC_RELEASE);
        *slot = (long)(n % VT_STALL_LOG_MAX);
    }
    return stall_ns;
}

void vt_stall_done(long slot)
{
    if (stall_log && slot >= 0 && slot < VT_STALL_LOG_MAX)
        __atomic_store_n(&stall_log->e[slot].end_ns, mono_ns(), __ATOMIC_RELEASE);
}
