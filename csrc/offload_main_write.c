/*
 * offload_main_write.c: the design main-write (offload_design.h), #3381's option 1: the main thread writes
 * the AOF in its own turn, as every valkey does, and vt_offload fdatasyncs what was written. A write due
 * while a sync runs is postponed: its bytes are kept and written at the event loop's next turn after the
 * sync (the loop sleeps at most 1 ms meanwhile, as if the sync's end woke it), or, once the postponement
 * is 2 s old (everysec's rule), written whatever the disk does. Counted: the server's writes postponed
 * (stats.postponed_writes), each postponement's length from its first write to the write that ended it
 * (stats.postpone_ns), those that ended at the 2 s limit (stats.forced_writes), the main thread's writes as
 * this file times them (stats.main_write_ns: a blocks-writes wait included).
 */
#define _GNU_SOURCE
#include "offload_design.h"

#include <errno.h>
#include <stdlib.h>

#include "offload_state.h"
#include "shim_io.h"

#define POSTPONE_MAX_NS 2000000000ull
#define SYNC_FDS 8

static struct aof_chunk *head, *tail; /* under vt_off.mu: handed off, not yet written */
static uint64_t written;              /* under mu: the position written to the file */
static uint64_t since;                /* under mu: when the postponement began (0: none) */
static int syncing;                   /* atomic (written under mu): a job's fdatasync runs */
static int fds[SYNC_FDS], nfds;       /* under mu: the files written since the last job took them */
static int job_fds[SYNC_FDS], job_n;  /* the job's (vt_offload thread) */

static void handoff(struct aof_chunk *c)
{
    if (tail)
        tail->next = c;
    else
        head = c;
    tail = c;
    if (syncing || since) {
        vt_stat_add(&vt_off.stats->postponed_writes, 1);
        if (!since)
            since = vt_now_ns();
    }
}

static void add_fd(int fd)
{
    for (int i = 0; i < nfds; i++)
        if (fds[i] == fd)
            return;
    if (nfds == SYNC_FDS) { /* rotated that often before a sync: those files synced here, their bytes covered */
        for (int i = 0; i < nfds; i++)
            vt_shim_fdatasync(fds[i]);
        nfds = 0;
    }
    fds[nfds++] = fd;
}

static int flush(int force, int *err)
{
    if (!force && !vt_off_on_main_thread())
        return 0;
    pthread_mutex_lock(&vt_off.mu);
    uint64_t now = vt_now_ns();
    if (!head || vt_off_failed()) {
        pthread_mutex_unlock(&vt_off.mu);
        return 0;
    }
    if (__atomic_load_n(&syncing, __ATOMIC_ACQUIRE) && !force) {
        if (!since)
            since = now, vt_stat_add(&vt_off.stats->postponed_writes, 1);
        if (now - since < POSTPONE_MAX_NS) {
            pthread_mutex_unlock(&vt_off.mu);
            return 0;
        }
        vt_stat_add(&vt_off.stats->forced_writes, 1);
    }
    struct aof_chunk *batch = head;
    uint64_t end = vt_off.queued, began = since;
    head = tail = NULL;
    since = 0;
    pthread_mutex_unlock(&vt_off.mu);
    if (began)
        vt_off_hist_add(&vt_off.stats->postpone_ns, now - began, 1);
    int rc = 0, seen[SYNC_FDS], nseen = 0;
    uint64_t t0 = vt_now_ns();
    for (struct aof_chunk *c = batch, *next; c; c = next) {
        next = c->next;
        if (rc == 0)
            rc = vt_design_write_all(c->fd, c->data, c->len, err);
        if (rc == 0 && (!nseen || seen[nseen - 1] != c->fd) && nseen < SYNC_FDS)
            seen[nseen++] = c->fd;
        free(c);
    }
    vt_off_hist_add(&vt_off.stats->main_write_ns, vt_now_ns() - t0, 1);
    pthread_mutex_lock(&vt_off.mu);
    if (rc == 0) {
        for (int i = 0; i < nseen; i++)
            add_fd(seen[i]);
        written = end;
        vt_off.sync_wanted = end;
        vt_off_kick_locked();
    }
    pthread_mutex_unlock(&vt_off.mu);
    return rc;
}

static int wait_ms(void) { return __atomic_load_n(&head, __ATOMIC_RELAXED) ? 1 : -1; }

static int has_job(void) { return nfds && written > vt_off_durable() && vt_off.sync_wanted > vt_off_durable(); }

static void *take(uint64_t *end)
{
    for (job_n = 0; job_n < nfds; job_n++)
        job_fds[job_n] = fds[job_n];
    nfds = 0;
    *end = written;
    __atomic_store_n(&syncing, 1, __ATOMIC_RELEASE);
    return job_fds;
}

static int run(void *job, int *err, int *kind)
{
    for (int i = 0; i < job_n; i++)
        if (vt_shim_fdatasync(job_fds[i]) != 0)
            return *err = errno, *kind = VT_OFFLOAD_FAIL_FSYNC, -1;
    return 0;
}

static void ended(void) { __atomic_store_n(&syncing, 0, __ATOMIC_RELEASE); }

static void drop(void)
{
    while (head) {
        struct aof_chunk *c = head;
        head = c->next;
        free(c);
    }
    tail = NULL;
}

static int pending(void) { return head != NULL; }

const struct vt_design vt_design_main_write = {
    "main-write", VT_DESIGN_MAIN_WRITE, handoff, flush, wait_ms, has_job, take, run, ended, drop, pending,
};
