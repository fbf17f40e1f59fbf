/*
 * offload_bound.c: the bound on the durable offload (offload_bound.h).
 *
 * Counted: replies held (waiting for their AOF bytes to be durable) plus client commands parsed and
 * not yet answered (their replies may be held next: counting only what is held would let one event
 * loop turn read every client's requests before a single reply is framed).
 *
 * pause: a client's read takes at most what the bound leaves (the requests it has room for, at the
 * mean size of the requests read so far); with no room, the read fails with EAGAIN and the fd's
 * EPOLLIN is taken out of the server's epoll set (epoll is level-triggered: left in, the event loop
 * would spin on it), then put back by the main thread before its next epoll_wait once the count is
 * under the bound. The server's own epoll_ctl calls are followed so what is put back is what it asked.
 * reject: offload_req.c asks vt_bound_reject_write() for each write it parses and, when told so,
 * renames the command in the server's read buffer so the server answers it with an error and runs
 * nothing (an emulation's error: #3381's own would have its own text).
 */
#define _GNU_SOURCE
#include "offload_bound.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "offload_state.h"

struct fdw {
    int epfd, paused;
    uint32_t events; /* what the server asked */
    uint64_t data;
};

static struct fdw *fds; /* VT_MAX_FD entries, made on first use (under mu) */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int npaused;            /* under mu */
static uint64_t paused_since;  /* under mu */
static int (*real_ctl)(int, int, int, struct epoll_event *);

static uint64_t bound(int mode)
{
    const struct vt_offload_control *c = vt_off.control;
    return c && c->overflow == (uint32_t)mode ? c->max_pending : 0;
}

static uint64_t counted(void)
{
    const struct vt_offload_stats *s = vt_off.stats;
    return __atomic_load_n(&s->held_now, __ATOMIC_RELAXED) + __atomic_load_n(&s->pending_now, __ATOMIC_RELAXED);
}

int vt_bound_reject_write(void)
{
    uint64_t n = bound(VT_OVERFLOW_REJECT);
    return n && counted() >= n;
}

static struct fdw *table(void)
{
    if (!fds)
        fds = calloc(VT_MAX_FD, sizeof(*fds));
    return fds;
}

size_t vt_bound_read_budget(int fd, size_t count)
{
    uint64_t n = bound(VT_OVERFLOW_PAUSE), c, cmds, bytes, mean;
    if (!n || fd < 0 || fd >= VT_MAX_FD)
        return count;
    c = counted();
    if (c < n) { /* room for n - c requests, at the mean size read so far */
        cmds = __atomic_load_n(&vt_off.stats->commands, __ATOMIC_RELAXED);
        bytes = __atomic_load_n(&vt_off.read_bytes, __ATOMIC_RELAXED);
        mean = cmds ? bytes / cmds + 1 : 64;
        return (n - c) * mean < count ? (size_t)((n - c) * mean) : count;
    }
    pthread_mutex_lock(&mu);
    struct fdw *t = table();
    if (t && !t[fd].paused && t[fd].epfd > 0 && real_ctl) {
        struct epoll_event ev = {.events = t[fd].events & ~(uint32_t)EPOLLIN, .data.u64 = t[fd].data};
        if (real_ctl(t[fd].epfd, EPOLL_CTL_MOD, fd, &ev) == 0) {
            t[fd].paused = 1;
            if (!npaused++)
                paused_since = vt_now_ns();
        }
    }
    pthread_mutex_unlock(&mu);
    vt_stat_add(&vt_off.stats->paused_reads, 1);
    return 0;
}

int vt_bound_epoll_ctl(int (*real)(int, int, int, struct epoll_event *), int epfd, int op, int fd,
                       struct epoll_event *ev)
{
    int ret;
    if (!bound(VT_OVERFLOW_PAUSE) || fd < 0 || fd >= VT_MAX_FD)
        return real(epfd, op, fd, ev);
    pthread_mutex_lock(&mu);
    real_ctl = real;
    struct fdw *t = table();
    if (!t) {
        pthread_mutex_unlock(&mu);
        return real(epfd, op, fd, ev);
    }
    if (op == EPOLL_CTL_DEL) {
        if (t[fd].paused)
            npaused--;
        t[fd] = (struct fdw){0, 0, 0, 0};
        ret = real(epfd, op, fd, ev);
    } else {
        struct epoll_event e = *ev;
        t[fd].epfd = epfd;
        t[fd].events = ev->events;
        t[fd].data = ev->data.u64;
        if (t[fd].paused)
            e.events &= ~(uint32_t)EPOLLIN;
        ret = real(epfd, op, fd, &e);
    }
    pthread_mutex_unlock(&mu);
    return ret;
}

int vt_bound_before_wait(int timeout)
{
    uint64_t n = bound(VT_OVERFLOW_PAUSE);
    if (!n || !__atomic_load_n(&npaused, __ATOMIC_RELAXED))
        return timeout;
    if (counted() >= n)
        return timeout < 0 || timeout > 1 ? 1 : timeout;
    pthread_mutex_lock(&mu);
    for (int fd = 0; fds && npaused && fd < VT_MAX_FD; fd++) {
        if (!fds[fd].paused)
            continue;
        struct epoll_event ev = {.events = fds[fd].events, .data.u64 = fds[fd].data};
        real_ctl(fds[fd].epfd, EPOLL_CTL_MOD, fd, &ev); /* a closed fd's fails: forgotten below */
        fds[fd].paused = 0;
        npaused--;
    }
    vt_stat_add(&vt_off.stats->paused_ns, vt_now_ns() - paused_since);
    pthread_mutex_unlock(&mu);
    return timeout;
}

void vt_bound_forget(int fd)
{
    if (!fds || fd < 0 || fd >= VT_MAX_FD || !bound(VT_OVERFLOW_PAUSE))
        return;
    pthread_mutex_lock(&mu);
    if (fds[fd].paused)
        npaused--;
    fds[fd] = (struct fdw){0, 0, 0, 0};
    pthread_mutex_unlock(&mu);
}
