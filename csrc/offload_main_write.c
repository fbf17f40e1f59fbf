/*
 * offload_main_write.c: the design main-write (offload_design.h), #3381's option 1: the main thread writes
 * the AOF in its own turn, as every valkey does, and vt_offload fdatasyncs what was written. A write due
 * while a sync runs is postponed: its bytes are kept and written at the event loop's next turn after the
 * sync (the loop sleeps at most 1 ms meanwhile, as if the sync's end woke it), or, once the postponement
 * is 2 s old (everysec's rule), written whatever the disk does. Counted: the server's writes postponed
 * (stats.postponed_writes), each postponement's length from its first write to the write that ended it
 * (stats.postpone_ns), those that ended at the 2 s limit (stats.forced_writes), the main thread's writes as
 * this file times them (stats.main_write_ns: a blocks-writes wait included). `written` (what a job makes durable)
 * covers only bytes a sync reaches: the files written are recorded for the next job, or, when more files than
 * SYNC_FDS were written between two jobs, fdatasynced by the main thread itself (outside mu); a failed write or
 * fdatasync fails the offload as bio-write's do, and a failed write is cut off the file as valkey cuts a short one.
 */
#define _GNU_SOURCE
#include "offload_design.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

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

static int has_fd(const int *set, int n, int fd)
{
    for (int i = 0; i < n; i++)
        if (set[i] == fd)
            return 1;
    return 0;
}

/* under mu: a file written, for the next job to sync; flush never records more than the free slots */
static void add_fd(int fd)
{
    if (!has_fd(fds, nfds, fd) && nfds < SYNC_FDS)
        fds[nfds++] = fd;
}

/* the files a flush wrote (for the next job to sync), and the slots it may fill: the files recorded when it began
 * (a job only takes them away meanwhile) and those it wrote fit in fds[] together */
struct batch_fds {
    int seen[SYNC_FDS], nseen;
    int had[SYNC_FDS], nhad, used;
};

/* main thread, mu not held: write one chunk. A file with no slot left to record it for a job (rotated that often
 * between two jobs) is fdatasynced here, so `written` never covers bytes no sync will reach. A failed write cuts
 * the file back to its size before the chunk, as valkey removes a short write. 0, or -1 with *err and *kind */
static int write_chunk(struct aof_chunk *c, struct batch_fds *b, int *err, int *kind)
{
    struct stat st;
    off_t start = fstat(c->fd, &st) == 0 ? st.st_size : -1;
    if (vt_design_write_all(c->fd, c->data, c->len, err) != 0) {
        if (start >= 0 && ftruncate(c->fd, start) != 0)
            start = -1;
        return -1;
    }
    if (has_fd(b->seen, b->nseen, c->fd))
        return 0;
    if (has_fd(b->had, b->nhad, c->fd) || b->used < SYNC_FDS) {
        b->used += !has_fd(b->had, b->nhad, c->fd);
        b->seen[b->nseen++] = c->fd;
        return 0;
    }
    if (vt_shim_fdatasync(c->fd) != 0)
        return *err = errno, *kind = VT_OFFLOAD_FAIL_FSYNC, -1;
    return 0;
}

static int flush(int force, int *err, int *kind)
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
    struct batch_fds b = {.nhad = nfds, .used = nfds};
    memcpy(b.had, fds, sizeof(int) * (size_t)nfds);
    head = tail = NULL;
    since = 0;
    pthread_mutex_unlock(&vt_off.mu);
    if (began)
        vt_off_hist_add(&vt_off.stats->postpone_ns, now - began, 1);
    int rc = 0;
    uint64_t t0 = vt_now_ns();
    for (struct aof_chunk *c = batch, *next; c; c = next) {
        next = c->next;
        if (rc == 0)
            rc = write_chunk(c, &b, err, kind);
        free(c);
    }
    vt_off_hist_add(&vt_off.stats->main_write_ns, vt_now_ns() - t0, 1);
    pthread_mutex_lock(&vt_off.mu);
    if (rc == 0) {
        for (int i = 0; i < b.nseen; i++)
            add_fd(b.seen[i]);
        written = end;
        vt_off.sync_wanted = end;
        vt_off_kick_locked();
    }
    pthread_mutex_unlock(&vt_off.mu);
    return rc;
}

static int wait_ms(void) { return __atomic_load_n(&head, __ATOMIC_RELAXED) ? 1 : -1; }

/* no file recorded (those written were synced by the main thread): the job syncs none and marks durable */
static int has_job(void) { return written > vt_off_durable() && vt_off.sync_wanted > vt_off_durable(); }

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
