/*
 * shim_stall.c: the shim's injected disk stalls (shim_stall.h), logged for valkeytrace (stall_log.h).
 */
#define _GNU_SOURCE
#include "shim_stall.h"

#include <linux/futex.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

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

/* -- a disk that blocks writes during its sync ---------------------------------------------------- */

#define SYNC_SLOTS 16
static int blocks_writes;
static uint64_t syncing_ino[SYNC_SLOTS]; /* atomic: the files (dev ^ ino, never 0) whose sync runs; 0: free */
static unsigned sync_gen;                /* atomic futex word: bumped when a sync ends */

void vt_blocks_writes_setup(void) { blocks_writes = 1; }
int vt_blocks_writes(void) { return blocks_writes; }

static uint64_t file_id(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    return ((uint64_t)st.st_ino << 16 ^ (uint64_t)st.st_dev) | 1;
}

long vt_sync_blocks_begin(int fd)
{
    uint64_t id = blocks_writes ? file_id(fd) : 0;
    for (long i = 0; id && i < SYNC_SLOTS; i++) {
        uint64_t free_slot = 0;
        if (__atomic_compare_exchange_n(&syncing_ino[i], &free_slot, id, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            return i;
    }
    return -1; /* every slot taken: this sync blocks nothing (more than 16 syncs at once) */
}

void vt_sync_blocks_end(long slot)
{
    if (slot < 0 || slot >= SYNC_SLOTS)
        return;
    __atomic_store_n(&syncing_ino[slot], 0, __ATOMIC_RELEASE);
    __atomic_add_fetch(&sync_gen, 1, __ATOMIC_ACQ_REL);
    syscall(SYS_futex, &sync_gen, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
}

static int syncing(uint64_t id)
{
    for (int i = 0; i < SYNC_SLOTS; i++)
        if (__atomic_load_n(&syncing_ino[i], __ATOMIC_ACQUIRE) == id)
            return 1;
    return 0;
}

void vt_write_wait_syncs(int fd)
{
    uint64_t id;
    if (!blocks_writes || !(id = file_id(fd)))
        return;
    for (;;) {
        unsigned gen = __atomic_load_n(&sync_gen, __ATOMIC_ACQUIRE);
        if (!syncing(id))
            return;
        struct timespec t = {0, 100000000}; /* woken by the sync's end; 100 ms at most between looks */
        syscall(SYS_futex, &sync_gen, FUTEX_WAIT_PRIVATE, gen, &t, NULL, 0);
    }
}
