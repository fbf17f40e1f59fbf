/*
 * offload_state.c: the virtual offload's shared state (offload_state.h).
 */
#define _GNU_SOURCE
#include "offload_state.h"
#include "shim_io.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static struct vt_offload_stats local_stats;

struct vt_off_state vt_off = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .work = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
    .stats = &local_stats,
    .wake_fd = -1,
};

static __thread pid_t my_tid;

uint64_t vt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int vt_off_on_main_thread(void)
{
    if (!my_tid)
        my_tid = (pid_t)syscall(SYS_gettid);
    return my_tid == vt_off.main_pid;
}

void vt_off_hist_add(struct vt_hist *h, uint64_t v, uint64_t n)
{
    if (!n)
        return;
    __atomic_fetch_add(&h->buckets[vt_hist_bucket_index(v)], n, __ATOMIC_RELAXED);
    __atomic_fetch_add(&h->sum_ns, v * n, __ATOMIC_RELAXED);
    if (v > __atomic_load_n(&h->max_ns, __ATOMIC_RELAXED))
        __atomic_store_n(&h->max_ns, v, __ATOMIC_RELAXED);
    uint64_t mn = __atomic_load_n(&h->min_ns, __ATOMIC_RELAXED);
    if (!mn || v < mn)
        __atomic_store_n(&h->min_ns, v, __ATOMIC_RELAXED);
    __atomic_fetch_add(&h->count, n, __ATOMIC_RELEASE); /* last: a reader that sees count sees the bucket */
}

void vt_off_register_held(struct vt_held_node *node, uint64_t need)
{
    pthread_mutex_lock(&vt_off.mu);
    if (!node->listed) {
        node->listed = 1;
        node->next = vt_off.held;
        vt_off.held = node;
    }
    if (need <= vt_off_durable()) { /* durable already (a job ended meanwhile): no job will release it */
        vt_off.release_wanted = 1;
        vt_off_kick_locked();
    }
    pthread_mutex_unlock(&vt_off.mu);
}

static struct timespec deadline(uint64_t mono_ns)
{
    struct timespec ts = {(time_t)(mono_ns / 1000000000ull), (long)(mono_ns % 1000000000ull)};
    return ts;
}

void vt_off_wait_done_locked(unsigned ms)
{
    struct timespec ts = deadline(vt_now_ns() + (uint64_t)ms * 1000000ull);
    pthread_cond_timedwait(&vt_off.done, &vt_off.mu, &ts);
}

void vt_off_wait_work_until_locked(uint64_t mono_ns)
{
    struct timespec ts = deadline(mono_ns);
    pthread_cond_timedwait(&vt_off.work, &vt_off.mu, &ts);
}

void vt_off_kick_locked(void)
{
    pthread_cond_signal(&vt_off.work);
    if (vt_off.polling && vt_off.wake_fd >= 0) {
        uint64_t one = 1;
        if (vt_off.raw_write(vt_off.wake_fd, &one, sizeof(one)) < 0)
            return; /* the counter is full: the thread is awake already */
    }
}

void vt_off_state_init(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC); /* a clock step never stretches or cuts a wait */
    pthread_cond_init(&vt_off.work, &a);
    pthread_cond_init(&vt_off.done, &a);
    pthread_condattr_destroy(&a);
    vt_off.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    const char *m = getenv("VALKEYTRACE_OFFLOAD");
    vt_off.ack_written = m && !strcmp(m, "ack-after-write"); /* held as durable's, released at the write */
}

/* ack-after-write: the job's replies have gone out; its fdatasync runs on a thread of its own (vt_syncer), as
 * a design that writes and acknowledges on one thread and syncs on another would: the offload thread goes on
 * writing and acknowledging while it syncs (a sync asked for meanwhile is one more after it). A failed sync
 * is not reported: the acknowledged bytes may be lost, which is the fault this emulates. */
static pthread_mutex_t sync_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sync_cv = PTHREAD_COND_INITIALIZER;
static int sync_fd = -1, sync_asked, syncer_started;

/* old's sync replaced by new's: closed; synced first when they are not the same file (an AOF rewrite's switch) */
static void drop_covered(int old, int new)
{
    struct stat a, b;
    if (fstat(old, &a) != 0 || fstat(new, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev)
        vt_shim_fdatasync(old);
    close(old);
}

static void *syncer_main(void *arg)
{
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    prctl(PR_SET_NAME, (unsigned long)"vt_syncer", 0, 0, 0);
    pthread_mutex_lock(&sync_mu);
    for (;;) {
        while (!sync_asked)
            pthread_cond_wait(&sync_cv, &sync_mu);
        int fd = sync_fd;
        sync_asked = 0, sync_fd = -1;
        pthread_mutex_unlock(&sync_mu);
        vt_shim_fdatasync(fd);
        close(fd); /* its own dup (vt_off_wrote) */
        pthread_mutex_lock(&sync_mu);
    }
    return NULL;
}

void vt_off_sync_written(void)
{
    pthread_t t;
    if (!vt_off.unsynced)
        return;
    vt_off.unsynced = 0;
    pthread_mutex_lock(&sync_mu);
    if (!syncer_started)
        syncer_started = pthread_create(&t, NULL, syncer_main, NULL) == 0;
    if (!syncer_started) {
        pthread_mutex_unlock(&sync_mu);
        vt_shim_fdatasync(vt_off.unsynced_fd); /* no thread: in place */
        close(vt_off.unsynced_fd);
        return;
    }
    if (sync_asked && sync_fd >= 0)
        drop_covered(sync_fd, vt_off.unsynced_fd); /* one not yet taken: this one stands for both */
    sync_fd = vt_off.unsynced_fd, sync_asked = 1;
    pthread_cond_signal(&sync_cv);
    pthread_mutex_unlock(&sync_mu);
}

/* The syncer syncs a dup of the AOF's fd, never the server's own: the durable offset advances at the write, so
 * vt_aof_release may let the server close that fd (its number then reused by another file) before the syncer
 * runs. A dup that fails (no fd left): synced here, before the replies go (the contract holds). */
int vt_off_wrote(int fd)
{
    int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0)
        return vt_shim_fdatasync(fd);
    if (vt_off.unsynced)
        drop_covered(vt_off.unsynced_fd, d); /* one written, not yet asked: this sync covers it */
    vt_off.unsynced_fd = d, vt_off.unsynced = 1;
    return 0;
}

void vt_off_log(const char *msg)
{
    char when[64], line[600];
    struct timespec ts;
    struct tm tm;
    const char *path = vt_off.control ? vt_off.control->logfile : "";
    int fd = path[0] ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644) : 1;
    if (fd < 0)
        fd = 1;
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(when, sizeof(when), "%d %b %Y %H:%M:%S", &tm);
    snprintf(when + n, sizeof(when) - n, ".%03d", (int)(ts.tv_nsec / 1000000));
    int len = snprintf(line, sizeof(line), "%d:M %s # %s\n", (int)getpid(), when, msg);
    if (len > 0 && vt_off.raw_write(fd, line, (size_t)len) < 0)
        len = 0;
    if (fd != 1)
        close(fd);
}
