/*
 * offload.c: the virtual offload, valkey#3381's mechanism emulated on a stock server (record
 * --emulate-offload durable|early-ack; $VALKEYTRACE_OFFLOAD). Part of the shim.
 *
 * The main thread's AOF write() and fdatasync()/fsync() (on an `*.incr.aof` file, the one the
 * server appends to) return at once; the bytes go, in order, to a queue. A thread of the shim,
 * `vt_offload`, takes everything queued when a sync is due (one job in flight; the queue keeps
 * filling meanwhile and the next job takes all of it; with a gather window W, a job starts W after
 * the later of its first write and the previous job's end: counted from the first write alone, one
 * straggler that missed a job would start the next at once, alone, and the clients released
 * meanwhile would form a second cohort for good), writes it (short writes completed) and fdatasyncs
 * it through the shim's timed path (shim_io.h: the emulated delay and every tracer see the calls
 * on vt_offload), then marks those bytes durable and delivers the replies that waited for them
 * (offload_conn.h decides which those are, and keeps the witness). Failures as the server would
 * meet them (offload_exit.c). No fd with queued bytes is closed or replaced before they are
 * durable; at exit (SHUTDOWN, SIGTERM) everything queued is made durable and every held reply
 * delivered (the drain), unless the offload failed. A fork child (the AOF rewrite) takes nothing.
 * How the bytes are handed off and what a job does is the design's (offload_design.h): the above is bio-write.
 */
#define _GNU_SOURCE
#include "offload.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "offload_conn.h"
#include "offload_design.h"
#include "offload_fds.h"
#include "offload_links.h"
#include "offload_state.h"
#include "shim_io.h"
#include "vt_cmds.h"
#include "vt_resp.h"

#define MAX_FD VT_MAX_FD
#define CLASS_UNKNOWN 0
#define CLASS_AOF 1
#define CLASS_OTHER 2
#define BLOCKED_MAX 256

static const struct vt_design *design = &vt_design_bio_write; /* record --offload-design (offload_design.h) */
static pthread_mutex_t flush_mu = PTHREAD_MUTEX_INITIALIZER; /* one flush at a time, in order */
static int signal_depth;                      /* atomic: inside the server's SIGTERM/SIGINT handler */
static int shutdown_asked;                    /* atomic: the server got one: its next AOF sync drains (then cleared) */
static uint64_t first_queued_ns;              /* under vt_off.mu: when the oldest queued chunk came */
static uint64_t last_end_ns;                  /* under vt_off.mu: when the last job ended */
static pthread_t thread;
static int started;
static uint8_t fd_class[MAX_FD];
static struct vt_req_parser aof_parser; /* the main thread's: the witness's view of the AOF */
static int aof_skip;
static uint64_t aof_chunk_end;

/* -- the witness's view of the AOF: each command's first key, with the position it is durable at */

static void aof_begin(void *ctx, int64_t argc) { aof_skip = 0; }
static void aof_arg(void *ctx, int64_t i, uint64_t len, uint64_t h, const char *p, size_t plen)
{
    if (i == 0)
        aof_skip = len == plen && ((plen == 6 && !strncasecmp(p, "select", 6)) ||
                                   (plen == 5 && !strncasecmp(p, "multi", 5)) || (plen == 4 && !strncasecmp(p, "exec", 4)));
    else if (i == 1 && !aof_skip && len <= 256)
        vt_wit_put(h & ~15ull, aof_chunk_end, vt_off_durable());
}
static void aof_end(void *ctx) {}
static void aof_error(void *ctx) { vt_req_init(&aof_parser, 0); } /* start again at the next chunk */
static const struct vt_req_cb AOF_CB = {aof_begin, aof_arg, aof_end, aof_error};

/* What an fd is: the file the server appends to (multi-part AOF: appendonlydir/<name>.N.incr.aof)
 * or something else; classified once until it is closed */
static int fd_kind(int fd)
{
    char link[64], path[512];
    struct stat st;
    int c = __atomic_load_n(&fd_class[fd], __ATOMIC_RELAXED);
    if (c != CLASS_UNKNOWN)
        return c;
    c = CLASS_OTHER;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, path, sizeof(path) - 1);
        if (n > 9 && strncmp(path + n - 9, ".incr.aof", 9) == 0)
            c = CLASS_AOF;
    }
    __atomic_store_n(&fd_class[fd], (uint8_t)c, __ATOMIC_RELAXED);
    return c;
}

/* -- failure -------------------------------------------------------------------------------- */

static void fail_locked(int err, int kind)
{
    vt_off.fail_errno = err ? err : EIO;
    vt_off.fail_kind = kind;
    vt_off.failed_ns = vt_now_ns();
    __atomic_store_n(&vt_off.failed, 1, __ATOMIC_RELEASE);
    vt_off.stats->fail_errno = (vt_u32)vt_off.fail_errno;
    vt_off.stats->fail_kind = (vt_u32)kind;
    __atomic_store_n(&vt_off.stats->state, VT_OFFLOAD_FAILED, __ATOMIC_RELEASE);
    design->drop(); /* never written: nothing after a failure is */
    pthread_cond_broadcast(&vt_off.done);
}

/* -- the main thread's AOF writes and syncs --------------------------------------------------- */

/* what the design keeps for the main thread to write (main-write), written: now (force), or when it is due */
static int flush_design(int force)
{
    int err = 0, kind = VT_OFFLOAD_FAIL_WRITE;
    if (design->flush == vt_design_no_flush) /* the main thread holds nothing to write: no lock taken */
        return 0;
    pthread_mutex_lock(&flush_mu);
    int rc = design->flush(force, &err, &kind);
    pthread_mutex_unlock(&flush_mu);
    if (rc != 0) {
        pthread_mutex_lock(&vt_off.mu);
        fail_locked(err, kind);
        pthread_mutex_unlock(&vt_off.mu);
    }
    return rc;
}

/* main thread, before the event loop sleeps: a postponed write that is due goes now; the sleep is capped
 * while one is kept (the design's wait_ms) */
int vt_offload_before_wait(int timeout)
{
    if (!vt_off.mode || !vt_off_on_main_thread())
        return timeout;
    flush_design(0);
    int ms = design->wait_ms();
    return ms >= 0 && (timeout < 0 || timeout > ms) ? ms : timeout;
}

/* no memory to queue it: wait for the queue to be durable, then write and fdatasync in place */
static int write_through(int fd, const struct iovec *iov, int iovcnt, size_t len, ssize_t *ret)
{
    int rc = 0;
    flush_design(1);
    pthread_mutex_lock(&vt_off.mu);
    vt_off.sync_wanted = vt_off.queued;
    vt_off_kick_locked();
    while (!vt_off_failed() && vt_off_durable() < vt_off.queued)
        vt_off_wait_done_locked(50);
    for (int i = 0; i < iovcnt && !vt_off_failed() && rc == 0; i++) {
        for (size_t off = 0; off < iov[i].iov_len && rc == 0;) {
            ssize_t w = vt_io_write(fd, (const char *)iov[i].iov_base + off, iov[i].iov_len - off);
            if (w > 0)
                off += (size_t)w;
            else if (!(w < 0 && errno == EINTR))
                rc = -1, fail_locked(w < 0 ? errno : ENOSPC, VT_OFFLOAD_FAIL_WRITE);
        }
    }
    if (rc == 0 && !vt_off_failed() && vt_shim_fdatasync(fd) != 0)
        fail_locked(errno, VT_OFFLOAD_FAIL_FSYNC);
    if (!vt_off_failed()) {
        __atomic_store_n(&vt_off.queued, vt_off.queued + len, __ATOMIC_RELEASE);
        __atomic_store_n(&vt_off.durable, vt_off.queued, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&vt_off.mu);
    if (vt_off_failed()) {
        *ret = -1;
        errno = vt_off.fail_errno;
    } else {
        *ret = (ssize_t)len;
    }
    return 1;
}

static int take_aof(int fd, const struct iovec *iov, int iovcnt, ssize_t *ret)
{
    size_t len = 0;
    for (int i = 0; i < iovcnt; i++)
        len += iov[i].iov_len;
    if (vt_off_failed()) {
        /* a failed fdatasync met at the server's fdatasync that follows (its fsync error, as valkey
         * without the offload); a failed write met now, as on its own write. Nothing queued after. */
        *ret = vt_off.fail_kind == VT_OFFLOAD_FAIL_FSYNC ? (ssize_t)len : (errno = vt_off.fail_errno, -1);
        return 1;
    }
    struct aof_chunk *c = malloc(sizeof(struct aof_chunk) + len);
    if (!c)
        return write_through(fd, iov, iovcnt, len, ret);
    c->next = NULL;
    c->fd = fd;
    c->len = len;
    for (size_t off = 0, i = 0; i < (size_t)iovcnt; off += iov[i].iov_len, i++)
        memcpy(c->data + off, iov[i].iov_base, iov[i].iov_len);
    pthread_mutex_lock(&vt_off.mu);
    int mine = vt_aof_own(fd); /* the offload writes through its own duplicate: the server may close fd */
    c->fd = mine >= 0 ? mine : fd;
    if (!design->pending())
        first_queued_ns = vt_now_ns();
    design->handoff(c); /* bio-write-block: may wait for a job to end */
    uint64_t end = vt_off.queued + len;
    __atomic_store_n(&vt_off.queued, end, __ATOMIC_RELEASE);
    vt_stat_add(&vt_off.stats->offloaded_writes, 1);
    __atomic_store_n(&vt_off.stats->queued_bytes, end, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&vt_off.mu);
    aof_chunk_end = end;
    for (int i = 0; i < iovcnt; i++)
        vt_req_feed(&aof_parser, iov[i].iov_base, iov[i].iov_len, &AOF_CB, NULL);
    vt_flush_tick(end);
    if (flush_design(0) != 0 && vt_off.fail_kind == VT_OFFLOAD_FAIL_WRITE) { /* main-write's own write failed (a sync: met at the next fdatasync) */
        *ret = -1;
        errno = vt_off.fail_errno;
        return 1;
    }
    *ret = (ssize_t)len;
    return 1;
}

/* Around the server's own SIGTERM/SIGINT handler (shim.c wraps it): async-signal-safe (atomics only) */
void vt_offload_signal(int sig, int entering)
{
    if (!entering) {
        __atomic_sub_fetch(&signal_depth, 1, __ATOMIC_ACQ_REL);
        return;
    }
    __atomic_add_fetch(&signal_depth, 1, __ATOMIC_ACQ_REL);
    __atomic_store_n(&shutdown_asked, 1, __ATOMIC_RELEASE);
    vt_stat_add(&vt_off.stats->signals, 1);
    __atomic_store_n(&vt_off.stats->last_signal, (vt_u32)sig, __ATOMIC_RELAXED);
}

void vt_offload_shutdown_aborted(void) { __atomic_store_n(&shutdown_asked, 0, __ATOMIC_RELEASE); }

int vt_offload_sync(int fd, int *ret)
{
    if (!vt_off.mode || fd < 0 || fd >= MAX_FD || !vt_off_on_main_thread() || fd_kind(fd) != CLASS_AOF)
        return 0;
    if (vt_off_failed()) {
        *ret = -1;
        errno = vt_off.fail_errno;
        return 1;
    }
    if (__atomic_load_n(&shutdown_asked, __ATOMIC_ACQUIRE) && !__atomic_load_n(&signal_depth, __ATOMIC_ACQUIRE)) {
        /* drained once: a shutdown that then fails goes back to serving, its syncs offloaded again */
        __atomic_store_n(&shutdown_asked, 0, __ATOMIC_RELEASE);
        flush_design(1);
        vt_off_drain_on_shutdown();
        *ret = vt_off_failed() ? -1 : 0;
        if (*ret)
            errno = vt_off.fail_errno;
        return 1;
    }
    pthread_mutex_lock(&vt_off.mu);
    vt_off.sync_wanted = vt_off.queued;
    vt_stat_add(&vt_off.stats->offloaded_syncs, 1);
    vt_off_kick_locked();
    pthread_mutex_unlock(&vt_off.mu);
    *ret = 0;
    return 1;
}

int vt_offload_writev(int fd, const struct iovec *iov, int iovcnt, ssize_t *ret)
{
    if (!vt_off.mode || fd < 0 || fd >= MAX_FD || iovcnt <= 0)
        return 0;
    if (vt_conn_is_client(fd))
        return vt_conn_take(fd, iov, iovcnt, ret, vt_io_writev);
    if (vt_off_on_main_thread() && fd_kind(fd) == CLASS_AOF)
        return take_aof(fd, iov, iovcnt, ret);
    return 0;
}

int vt_offload_write(int fd, const void *buf, size_t n, ssize_t *ret)
{
    struct iovec v = {(void *)buf, n};
    return vt_offload_writev(fd, &v, 1, ret);
}

void vt_offload_close(int fd)
{
    if (!vt_off.mode || fd < 0 || fd >= MAX_FD)
        return;
    if (!vt_conn_close(fd) && __atomic_load_n(&fd_class[fd], __ATOMIC_RELAXED) == CLASS_AOF) {
        flush_design(1);
        pthread_mutex_lock(&vt_off.mu);
        uint64_t target = vt_off.queued;
        vt_off.sync_wanted = target;
        vt_off_kick_locked();
        /* its queued bytes go through the offload's duplicate, closed once durable; without one (none could
         * be made) they reach the file through fd before its number can be reused */
        while (!vt_aof_release(fd, target) && !vt_off_failed() && !__atomic_load_n(&vt_off.thread_done, __ATOMIC_ACQUIRE)
               && vt_off_durable() < target)
            vt_off_wait_done_locked(50);
        pthread_mutex_unlock(&vt_off.mu);
    }
    __atomic_store_n(&fd_class[fd], CLASS_UNKNOWN, __ATOMIC_RELAXED);
}

/* -- the offload thread --------------------------------------------------------------------- */

struct blocked {
    struct vt_held_node *node;
    int fd;
};

/* deliver one connection; keep it for polling when its socket would block */
static void deliver_one(struct vt_held_node *n, struct blocked *b, int *nb)
{
    int fd, st = vt_conn_deliver(n, &fd);
    if (st == 1)
        vt_off_register_held(n, UINT64_MAX); /* still waiting for a later job */
    else if (st == 2 && *nb < BLOCKED_MAX)
        b[(*nb)++] = (struct blocked){n, fd};
    else if (st == 2)
        vt_off_register_held(n, 0); /* no room to poll it: the next pass tries again */
}

static void *offload_main(void *arg)
{
    static struct blocked blocked[BLOCKED_MAX];
    static struct vt_held_node *ready[MAX_FD]; /* the held list, copied: registering may relink it */
    int nb = 0;
    uint64_t stop_deadline = 0;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* the server's signals go to its own threads */
    prctl(PR_SET_NAME, (unsigned long)"vt_offload", 0, 0, 0);
    pthread_mutex_lock(&vt_off.mu);
    for (;;) {
        uint64_t gather = vt_off.control ? __atomic_load_n(&vt_off.control->gather_ns, __ATOMIC_RELAXED) : 0;
        int job = !vt_off_failed() && design->has_job();
        if (!job && !vt_off.release_wanted && !vt_off.stopping && !nb) {
            pthread_cond_wait(&vt_off.work, &vt_off.mu);
            continue;
        }
        uint64_t from = first_queued_ns > last_end_ns ? first_queued_ns : last_end_ns;
        if (job && gather && !vt_off.stopping && vt_now_ns() < from + gather) {
            vt_off_wait_work_until_locked(from + gather);
            continue;
        }
        if (job) {
            uint64_t end = 0, t0 = vt_now_ns();
            int err = 0, kind = 0;
            void *batch = design->take(&end);
            pthread_mutex_unlock(&vt_off.mu);
            int rc = design->run(batch, &err, &kind);
            pthread_mutex_lock(&vt_off.mu);
            design->ended();
            if (rc == 0) {
                __atomic_store_n(&vt_off.durable, end, __ATOMIC_RELEASE);
                vt_keys_settle(end);
                vt_links_settle(end);
                vt_aof_retire(end);
                vt_stat_add(&vt_off.stats->jobs, 1);
                vt_stat_add(&vt_off.stats->job_bytes, end - vt_off.stats->durable_bytes);
                __atomic_store_n(&vt_off.stats->durable_bytes, end, __ATOMIC_RELAXED);
                vt_off_hist_add(&vt_off.stats->job_ns, vt_now_ns() - t0, 1);
                last_end_ns = vt_now_ns();
            } else {
                fail_locked(err, kind);
            }
        }
        vt_off.release_wanted = 0;
        size_t nready = 0;
        for (struct vt_held_node *n = vt_off.held; n && nready < MAX_FD; n = n->next) {
            n->listed = 0;
            ready[nready++] = n;
        }
        vt_off.held = NULL;
        /* sockets that would block and nothing else to do: sleep until one takes bytes or a job or a
         * release is asked for (the eventfd: vt_off_kick_locked), not on a timer */
        int idle = nb > 0 && !nready && !job && (!vt_off.stopping || (!design->pending() && vt_off_durable() >= vt_off.queued));
        int wait_ms = !idle ? 0 : vt_off.stopping ? 10 : 1000; /* stopping: the 1 s a slow reader gets, not spun */
        vt_off.polling = idle;
        pthread_mutex_unlock(&vt_off.mu); /* replies are written outside the lock */
        if (nb > 0 && nb <= BLOCKED_MAX) {
            struct pollfd p[BLOCKED_MAX + 1];
            struct blocked again[BLOCKED_MAX];
            int na = 0;
            for (int i = 0; i < nb; i++)
                p[i] = (struct pollfd){blocked[i].fd, POLLOUT, 0};
            p[nb] = (struct pollfd){vt_off.wake_fd, POLLIN, 0};
            if (poll(p, (nfds_t)nb + (vt_off.wake_fd >= 0), wait_ms) > 0 && p[nb].revents) {
                uint64_t n;
                if (read(vt_off.wake_fd, &n, sizeof(n)) < 0)
                    n = 0;
            }
            pthread_mutex_lock(&vt_off.mu);
            vt_off.polling = 0;
            pthread_mutex_unlock(&vt_off.mu);
            for (int i = 0; i < nb; i++) {
                if (p[i].revents)
                    deliver_one(blocked[i].node, again, &na);
                else
                    again[na++] = blocked[i];
            }
            memcpy(blocked, again, sizeof(struct blocked) * (size_t)na);
            nb = na;
        }
        for (size_t i = 0; i < nready && !vt_off_failed(); i++)
            deliver_one(ready[i], blocked, &nb);
        vt_off_sync_written();
        pthread_mutex_lock(&vt_off.mu);
        pthread_cond_broadcast(&vt_off.done);
        if (vt_off.stopping && vt_off_failed())
            break;
        if (vt_off.stopping && !design->pending() && vt_off_durable() >= vt_off.queued) {
            if (!stop_deadline)
                stop_deadline = vt_now_ns() + 1000000000ull; /* a client that reads nothing gets 1 s */
            if (!vt_off.held && (!nb || vt_now_ns() > stop_deadline))
                break;
        }
    }
    __atomic_store_n(&vt_off.thread_done, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&vt_off.done);
    pthread_mutex_unlock(&vt_off.mu);
    return NULL;
}

/* -- start, fork, exit ---------------------------------------------------------------------- */

int vt_offload_init(void)
{
    const char *m = getenv("VALKEYTRACE_OFFLOAD");
    int mode = !m ? 0 : !strcmp(m, "durable") || !strcmp(m, "ack-after-write") ? VT_OFFLOAD_DURABLE : !strcmp(m, "early-ack") ? VT_OFFLOAD_EARLY_ACK : 0;
    size_t size = 0;
    if (!mode)
        return 0;
    VT_ENSURE(vt_real.close);
    vt_off.main_pid = getpid();
    vt_off.raw_write = vt_real.write;
    struct vt_offload_shared *shm = vt_map_shared(getenv("VALKEYTRACE_OFFLOAD_STATS"), sizeof(*shm), &size);
    if (shm) {
        vt_off.stats = &shm->stats;
        vt_off.control = &shm->control;
        vt_links_attach(shm->links);
    } /* else: no table ever (every command unknown, so held), counters kept locally */
    struct vt_offload_stats *st = vt_off.stats;
    st->magic = VT_OFFLOAD_MAGIC;
    st->version = VT_OFFLOAD_VERSION;
    st->mode = (vt_u32)mode;
    st->hist_buckets = VT_HIST_BUCKETS;
    __atomic_store_n(&st->state, VT_OFFLOAD_RUNNING, __ATOMIC_RELEASE);
    vt_cmds_attach(vt_off.control, st);
    const char *d = getenv("VALKEYTRACE_OFFLOAD_DESIGN");
    if (d && !(design = vt_design_named(d))) {
        dprintf(2, "valkeytrace: --offload-design %s: no such design\n", d);
        _exit(1);
    }
    st->design = design->id;
    vt_req_init(&aof_parser, 0);
    vt_off_state_init();
    int err = pthread_create(&thread, NULL, offload_main, NULL);
    if (err) {
        dprintf(2, "valkeytrace: --emulate-offload: cannot start the offload thread: %s\n", strerror(err));
        _exit(1);
    }
    started = 1;
    vt_off.mode = mode; /* last: the hooks take calls from now on */
    return mode;
}

int vt_offload_enabled(void) { return vt_off.mode != 0; }

void vt_offload_after_fork_child(void)
{
    vt_off.mode = 0; /* the child (AOF rewrite, RDB) has no offload thread: it takes nothing */
    started = 0;
}

/* At exit: what was queued reaches the file, what was held reaches its client; what is still held
 * after that (a failure, a client that read nothing) is counted as dropped with its connection.
 * Reached through exit() inside the server's signal handler (valkey's second SIGINT), it takes no
 * lock: it counts and leaves (nothing held was acknowledged, nothing acknowledged is lost). */
__attribute__((destructor)) static void offload_drain(void)
{
    if (!vt_off.mode || !started || getpid() != vt_off.main_pid)
        return;
    if (__atomic_load_n(&signal_depth, __ATOMIC_ACQUIRE) || vt_off_failed()) {
        vt_stat_add(&vt_off.stats->exit_held_replies, vt_off_held());
        return; /* failed: what it holds was never durable, and is lost with the process */
    }
    __atomic_store_n(&vt_off.stats->state, VT_OFFLOAD_DRAINING, __ATOMIC_RELEASE);
    flush_design(2); /* main-write: what it postponed is written first, from whichever thread exits */
    pthread_mutex_lock(&vt_off.mu);
    vt_off.stopping = 1;
    vt_off.sync_wanted = vt_off.queued;
    vt_off_kick_locked();
    pthread_mutex_unlock(&vt_off.mu);
    pthread_join(thread, NULL);
    vt_stat_add(&vt_off.stats->exit_held_replies, vt_off_held());
    __atomic_store_n(&vt_off.stats->state, vt_off_failed() ? VT_OFFLOAD_FAILED : VT_OFFLOAD_DRAINED,
                     __ATOMIC_RELEASE);
}
