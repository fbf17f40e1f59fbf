/*
 * offload_bound.c: the bound on the durable offload (offload_bound.h).
 *
 * Counted: replies held (waiting for their AOF bytes to be durable), replies queued behind them on
 * their connection (they leave in order: a rejected write's error too), plus client commands parsed
 * and not yet answered (their replies may be held next: counting only what is held would let one
 * event loop turn read every client's requests before a single reply is framed). Not counted: a
 * command the server blocks on (BLPOP, WAIT, WAITAOF) and what its connection sent after it, until
 * its reply: another client's write may be what releases it, so it must not stop that client's reads.
 *
 * Under the bound, a client's read takes at most what the bound leaves: the requests it has room for,
 * at the size of the smallest request read so far (at a mean size, a read of small requests among
 * large ones passed the bound many times over). Over it, pause: the read fails with EAGAIN and the fd's
 * EPOLLIN is taken out of the server's epoll set (epoll is level-triggered: left in, the event loop
 * would spin on it), then put back by the main thread before its next epoll_wait once the count is
 * under the bound. The server's own epoll_ctl calls are followed so what is put back is what it asked.
 * reject: offload_req.c asks vt_bound_reject_write() for each write it parses and, when told so,
 * renames the command in the server's read buffer so the server answers it with an error and runs
 * nothing (an emulation's error: #3381's own would have its own text); a client whose replies are
 * held, or may be (commands not answered yet, one read in part and not rejected), is paused as above
 * (what it would be answered could only wait behind them, in memory), the others are read and their
 * writes rejected.
 */
#define _GNU_SOURCE
#include "offload_bound.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "offload_conn.h"
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
static uint64_t uncounted;     /* atomic: pending commands blocked in the server, or behind one */
static uint64_t min_request;   /* atomic: the smallest multibulk request read so far (0: none yet) */

#define FIRST_REQUEST 14 /* "*1\r\n$4\r\nPING\r\n": before any request was seen */

/* the bound, when one is set (*mode: VT_OVERFLOW_*) */
static uint64_t bound(uint32_t *mode)
{
    const struct vt_offload_control *c = vt_off.control;
    *mode = c ? c->overflow : VT_OVERFLOW_NONE;
    return c && *mode != VT_OVERFLOW_NONE ? c->max_pending : 0;
}

static uint64_t counted(void)
{
    const struct vt_offload_stats *s = vt_off.stats;
    uint64_t n = vt_off_held() + __atomic_load_n(&s->pending_now, __ATOMIC_RELAXED),
             u = __atomic_load_n(&uncounted, __ATOMIC_RELAXED);
    return n > u ? n - u : 0;
}

void vt_bound_uncounted(int64_t delta) { __atomic_add_fetch(&uncounted, (uint64_t)delta, __ATOMIC_RELAXED); }

void vt_bound_request_size(uint64_t bytes)
{
    uint64_t m = __atomic_load_n(&min_request, __ATOMIC_RELAXED);
    while (bytes && (!m || bytes < m) &&
           !__atomic_compare_exchange_n(&min_request, &m, bytes, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

int vt_bound_reject_write(void)
{
    uint32_t mode;
    uint64_t n = bound(&mode);
    return n && mode == VT_OVERFLOW_REJECT && counted() >= n;
}

static struct fdw *table(void)
{
    if (!fds)
        fds = calloc(VT_MAX_FD, sizeof(*fds));
    return fds;
}

size_t vt_bound_read_budget(int fd, size_t count)
{
    uint32_t mode;
    uint64_t n = bound(&mode), c, size;
    if (!n || fd < 0 || fd >= VT_MAX_FD)
        return count;
    c = counted();
    if (c < n) { /* room for n - c requests, each at least the smallest read so far, after the rest of the
                  * argument being read (a large value's bytes are not more requests) */
        uint64_t left = vt_conn_bulk_left(fd);
        size = __atomic_load_n(&min_request, __ATOMIC_RELAXED);
        size = size ? size : FIRST_REQUEST;
        if (left >= count || (n - c) >= (count - left) / size + 1)
            return count;
        return (size_t)(left + (n - c) * size);
    }
    if (mode == VT_OVERFLOW_REJECT && !vt_conn_may_hold(fd))
        return count; /* its writes are rejected, its replies leave at once */
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
    uint32_t mode;
    if (!bound(&mode) || fd < 0 || fd >= VT_MAX_FD)
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
    uint32_t mode;
    uint64_t n = bound(&mode);
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
    uint32_t mode;
    if (!fds || fd < 0 || fd >= VT_MAX_FD || !bound(&mode))
        return;
    pthread_mutex_lock(&mu);
    if (fds[fd].paused)
        npaused--;
    fds[fd] = (struct fdw){0, 0, 0, 0};
    pthread_mutex_unlock(&mu);
}
