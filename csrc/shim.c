/*
 * shim.c: valkeytrace's LD_PRELOAD tracer and fsync-latency emulator (built as the package's
 * valkeytrace/_shim*.so; tracers/emulation.py finds it).
 *
 * Loaded into valkey-server with LD_PRELOAD. It interposes fsync, fdatasync, read, write, pwrite,
 * pwrite64, writev, epoll_wait and epoll_ctl, and every call that can close or hand out an fd number (close,
 * close_range, fclose, dup, dup2, dup3, fcntl F_DUPFD, accept, accept4). The timing, the
 * emulated disk delay and the fd classification live in shim_io.c; with $VALKEYTRACE_OFFLOAD
 * (durable | early-ack) the virtual offload (offload.c) takes the main thread's AOF writes and
 * fdatasyncs, and follows the client connections the server accepts. With neither a region nor
 * a delay nor the offload, every wrapper is a pure pass-through.
 *
 * An fd that is closed or replaced (close, close_range, dup2/dup3 onto it, fclose) first hands
 * over what the offload holds for it: queued AOF bytes become durable, held replies leave once
 * durable. fclose closes through glibc's internal close, which no interposer sees, so it is
 * drained here before.
 *
 * Under the virtual offload, the server's own SIGTERM/SIGINT handlers are wrapped (sigaction): the
 * offload learns a shutdown is coming (it drains on the server's own path, its final fsync, not in
 * a destructor reached from a signal handler's exit()).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "offload.h"
#include "offload_bound.h"
#include "offload_links.h"
#include "replica_hold.h"
#include "shim_durable.h"
#include "shim_io.h"

static void child_after_fork(void)
{
    vt_offload_after_fork_child();
    vt_replica_after_fork_child();
    vt_io_after_fork_child();
}

__attribute__((constructor)) static void shim_init(void)
{
    vt_io_resolve();
    vt_io_init();
    vt_dur_init();
    if (vt_offload_init() + vt_replica_init() || vt_io_recording())
        pthread_atfork(NULL, NULL, child_after_fork);
}

EXPORT int fdatasync(int fd)
{
    int ret;
    if (__builtin_expect(vt_offload_enabled(), 0) && vt_offload_sync(fd, &ret))
        return ret; /* the virtual offload's: the main thread goes on */
    return vt_shim_fdatasync(fd);
}

EXPORT int fsync(int fd)
{
    int ret;
    if (__builtin_expect(vt_offload_enabled(), 0) && vt_offload_sync(fd, &ret))
        return ret;
    return vt_shim_fsync(fd);
}

/* read: only under the virtual offload, which parses what clients send */
EXPORT ssize_t read(int fd, void *buf, size_t count)
{
    ssize_t ret;
    int saved;
    VT_ENSURE(vt_real.read);
    if (__builtin_expect(!vt_offload_enabled(), 1)) {
        if (__builtin_expect(!vt_replica_enabled(), 1))
            return vt_real.read(fd, buf, count);
        ret = vt_real.read(fd, buf, count); /* a replica under replica-blocking: its link and its clients followed */
        saved = errno;
        vt_replica_read(fd, buf, ret);
        errno = saved;
        return ret;
    }
    if (vt_offload_client(fd)) { /* --offload-overflow pause: over the bound, the client is not read */
        size_t budget = vt_bound_read_budget(fd, count);
        if (!budget) {
            errno = EAGAIN;
            return -1;
        }
        count = budget;
    }
    ret = vt_real.read(fd, buf, count);
    saved = errno;
    vt_offload_read(fd, buf, ret);
    errno = saved;
    return ret;
}

EXPORT ssize_t write(int fd, const void *buf, size_t count)
{
    ssize_t ret;
    if (__builtin_expect(vt_offload_enabled(), 0) && vt_offload_write(fd, buf, count, &ret))
        return ret;
    if (__builtin_expect(vt_replica_enabled(), 0)) {
        struct iovec one = {(void *)buf, count};
        if (vt_replica_writev(fd, &one, 1, &ret))
            return ret;
    }
    return vt_io_write(fd, buf, count);
}

EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
    ssize_t ret;
    if (__builtin_expect(vt_offload_enabled(), 0) && vt_offload_writev(fd, iov, iovcnt, &ret))
        return ret;
    if (__builtin_expect(vt_replica_enabled(), 0) && vt_replica_writev(fd, iov, iovcnt, &ret))
        return ret;
    return vt_io_writev(fd, iov, iovcnt);
}

EXPORT ssize_t pwrite(int fd, const void *buf, size_t count, off_t off)
{
    VT_ENSURE(vt_real.pwrite);
    return vt_io_pwrite(vt_real.pwrite, fd, buf, count, off);
}

EXPORT ssize_t pwrite64(int fd, const void *buf, size_t count, off_t off)
{
    VT_ENSURE(vt_real.pwrite64);
    return vt_io_pwrite(vt_real.pwrite64, fd, buf, count, off);
}

EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    VT_ENSURE(vt_real.epoll_ctl);
    if (__builtin_expect(!vt_offload_enabled(), 1))
        return vt_real.epoll_ctl(epfd, op, fd, ev);
    return vt_bound_epoll_ctl(vt_real.epoll_ctl, epfd, op, fd, ev);
}

EXPORT int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
    int ret;
    if (__builtin_expect(vt_offload_enabled(), 0)) {
        vt_offload_loop_end(); /* the loop ran: its AOF bytes are queued (what a replica link's stream needs) */
        timeout = vt_bound_before_wait(vt_offload_before_wait(timeout)); /* main-write: a postponed write due */
    }
    ret = vt_io_epoll_wait(epfd, events, maxevents, timeout);
    if (__builtin_expect(vt_offload_enabled(), 0)) {
        int saved = errno;
        vt_offload_main_idle(); /* a failed offload the server never met: it ends here */
        errno = saved;
    }
    return ret;
}

/* fd is about to be closed or replaced: what the offload has for it goes first, then its number
 * may name another file: classify it again at its next write */
static void release_fd(int fd)
{
    if (__builtin_expect(vt_offload_enabled(), 0)) {
        vt_offload_close(fd);
        vt_bound_forget(fd);
    }
    if (__builtin_expect(vt_replica_enabled(), 0))
        vt_replica_close(fd);
    vt_io_forget_fd(fd);
}

EXPORT int close(int fd)
{
    VT_ENSURE(vt_real.close);
    release_fd(fd);
    return vt_real.close(fd);
}

EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
    VT_ENSURE(vt_real.close);
    if (!vt_real.close_range) {
        errno = ENOSYS;
        return -1;
    }
    if (!(flags & 4)) /* CLOSE_RANGE_CLOEXEC (linux/close_range.h): marks, closes nothing */
        for (unsigned int fd = first; fd <= last && fd < VT_MAX_FD; fd++)
            release_fd((int)fd);
    return vt_real.close_range(first, last, flags);
}

EXPORT int fclose(FILE *fp)
{
    VT_ENSURE(vt_real.close);
    if (fp)
        release_fd(fileno(fp)); /* before: the number may be reused as soon as it is closed */
    return vt_real.fclose(fp);
}

EXPORT int dup(int oldfd)
{
    int ret;
    VT_ENSURE(vt_real.close);
    ret = vt_real.dup(oldfd);
    if (ret >= 0)
        vt_io_forget_fd(ret);
    return ret;
}

EXPORT int dup2(int oldfd, int newfd)
{
    VT_ENSURE(vt_real.close);
    if (oldfd != newfd)
        release_fd(newfd);
    return vt_real.dup2(oldfd, newfd);
}

EXPORT int dup3(int oldfd, int newfd, int flags)
{
    VT_ENSURE(vt_real.close);
    if (oldfd != newfd)
        release_fd(newfd);
    return vt_real.dup3(oldfd, newfd, flags);
}

/* fcntl's third argument is an int or a pointer: passed on as one machine word, as glibc does */
EXPORT int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    void *arg;
    int ret;
    VT_ENSURE(vt_real.close);
    va_start(ap, cmd);
    arg = va_arg(ap, void *);
    va_end(ap);
    ret = vt_real.fcntl(fd, cmd, arg);
    if (ret >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC))
        vt_io_forget_fd(ret); /* errno untouched: forgetting makes no call */
    return ret;
}

/* glibc's fcntl64 is fcntl on LP64 (the same syscall, the same argument): one wrapper, two names */
EXPORT int fcntl64(int fd, int cmd, ...) __attribute__((alias("fcntl")));

/* accept and accept4: a client connection (the offload follows it); its number may be one closed
 * behind our back */
EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    int ret, saved;
    VT_ENSURE(vt_real.close);
    ret = flags || !vt_real.accept ? vt_real.accept4(fd, addr, len, flags) : vt_real.accept(fd, addr, len);
    if (ret >= 0) {
        saved = errno;
        vt_io_forget_fd(ret);
        if (__builtin_expect(vt_offload_enabled(), 0))
            vt_offload_accepted(ret);
        if (__builtin_expect(vt_replica_enabled(), 0))
            vt_replica_accepted(ret);
        errno = saved;
    }
    return ret;
}

EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
    return accept4(fd, addr, len, 0);
}

/* -- the server's shutdown signals, under the virtual offload ------------------------------------ */

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
static sigaction_fn real_sigaction;
static struct sigaction user_act[2]; /* SIGTERM, SIGINT: what the server installed */
static int wrapped[2];

static int sig_index(int sig) { return sig == SIGTERM ? 0 : sig == SIGINT ? 1 : -1; }

static void wrap_handler(int sig)
{
    int i = sig_index(sig);
    vt_offload_signal(sig, 1);
    if (i >= 0 && user_act[i].sa_handler != SIG_DFL && user_act[i].sa_handler != SIG_IGN)
        user_act[i].sa_handler(sig);
    vt_offload_signal(sig, 0);
}

static void wrap_action(int sig, siginfo_t *si, void *uc)
{
    int i = sig_index(sig);
    vt_offload_signal(sig, 1);
    if (i >= 0)
        user_act[i].sa_sigaction(sig, si, uc);
    vt_offload_signal(sig, 0);
}

EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    int i = sig_index(sig), r;
    if (!real_sigaction)
        real_sigaction = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
    if (!real_sigaction) {
        errno = ENOSYS;
        return -1;
    }
    if (i < 0 || !vt_offload_enabled())
        return real_sigaction(sig, act, old);
    struct sigaction prev = user_act[i];
    int had = wrapped[i];
    if (act && !(act->sa_flags & SA_SIGINFO) && (act->sa_handler == SIG_DFL || act->sa_handler == SIG_IGN)) {
        r = real_sigaction(sig, act, old);
        if (r == 0)
            wrapped[i] = 0;
    } else if (act) {
        struct sigaction mine = *act;
        if (act->sa_flags & SA_SIGINFO)
            mine.sa_sigaction = wrap_action;
        else
            mine.sa_handler = wrap_handler;
        user_act[i] = *act;
        r = real_sigaction(sig, &mine, old);
        if (r == 0)
            wrapped[i] = 1;
        else
            user_act[i] = prev;
    } else {
        r = real_sigaction(sig, act, old);
    }
    if (r == 0 && old && had)
        *old = prev; /* the server sees its own handler, not the wrapper */
    return r;
}
