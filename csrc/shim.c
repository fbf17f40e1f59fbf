/*
 * shim.c: valkeytrace's LD_PRELOAD tracer and fsync-latency emulator (built as the package's
 * valkeytrace/_shim*.so; tracers/emulation.py finds it).
 *
 * Loaded into valkey-server with LD_PRELOAD. It interposes fsync, fdatasync, write, pwrite,
 * pwrite64, writev and epoll_wait, and every call that can close or hand out an fd number (close,
 * close_range, fclose, dup, dup2, dup3, fcntl F_DUPFD, accept, accept4), and, per thread, keeps
 * log-linear latency histograms (valkeytrace.h) in a shared-memory region valkeytrace reads live:
 *   - $VALKEYTRACE_SHM: path of the region (made by valkeytrace, mode 0600). Unset: nothing
 *     is recorded.
 *   - $VALKEYTRACE_FSYNC_DELAY: emulated slow disk, added after each real fsync/fdatasync by
 *     sleeping (never spinning): "const:NS" or "lognormal:MEDIAN_NS,SIGMA". Unset: none.
 *   The region's header may add a delay of its own while the server runs (extra_delay_ns, set by
 *   valkeytrace for record --fsync-sensitivity), with or without $VALKEYTRACE_FSYNC_DELAY.
 *   With neither variable set, every wrapper is a pure pass-through.
 *
 * With $VALKEYTRACE_OFFLOAD (durable | early-ack) it also emulates valkey#3381's AOF offload
 * (csrc/offload.c): the main thread's AOF write and fdatasync go to a thread of the shim.
 *
 * It runs inside a production server, so on the hot path: errno and return values are
 * preserved; no allocation, no locks (a thread claims its slot once with an atomic increment,
 * then is the slot's only writer; counters use relaxed atomics so a signal handler interrupting
 * a wrapper on the same thread cannot tear them); after fork() the child (the AOF rewrite)
 * records nothing, so it cannot corrupt the parent's data. Writes are told apart by fd: regular
 * files (the AOF) vs the rest (sockets, pipes), classified once per fd with fstat and cached
 * until that fd number is closed or handed out again (fclose closes through glibc's internal
 * close, which no interposer sees: an AOF rewrite's temporary FILE, say). valkeytrace can leave kinds untimed (the header's `untimed` mask): by default
 * socket writes, the bulk of the calls under a GET load (~33K/s here), pass straight through.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "offload.h"
#include "valkeytrace.h"

#define EXPORT __attribute__((visibility("default")))
#define FD_CACHE 65536
#define FD_UNKNOWN 0
#define FD_REGULAR 1
#define FD_OTHER 2

typedef int (*fsync_fn)(int);
typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*read_fn)(int, void *, size_t);
typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*writev_fn)(int, const struct iovec *, int);
typedef int (*epoll_wait_fn)(int, struct epoll_event *, int, int);
typedef int (*close_fn)(int);
typedef int (*close_range_fn)(unsigned int, unsigned int, int);
typedef int (*fclose_fn)(FILE *);
typedef int (*dup_fn)(int);
typedef int (*dup2_fn)(int, int);
typedef int (*dup3_fn)(int, int, int);
typedef int (*fcntl_fn)(int, int, ...);
typedef int (*accept_fn)(int, struct sockaddr *, socklen_t *);
typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);

static fsync_fn real_fsync, real_fdatasync;
static write_fn real_write;
static read_fn real_read;
static pwrite_fn real_pwrite, real_pwrite64;
static writev_fn real_writev;
static epoll_wait_fn real_epoll_wait;
static close_fn real_close;
static close_range_fn real_close_range;
static fclose_fn real_fclose;
static dup_fn real_dup;
static dup2_fn real_dup2;
static dup3_fn real_dup3;
static fcntl_fn real_fcntl;
static accept_fn real_accept;
static accept4_fn real_accept4;

static struct vt_shim_header *region;       /* NULL: not recording */
static struct vt_shim_thread *slots;
static volatile int recording_disabled;      /* set in a fork child */
static pid_t main_pid;

static int delay_kind; /* 0 none, 1 constant, 2 lognormal */
static uint64_t delay_ns;
static double delay_sigma;

static uint8_t fd_class[FD_CACHE];

static __thread struct vt_shim_thread *my_slot __attribute__((tls_model("initial-exec")));
static __thread int my_slot_failed __attribute__((tls_model("initial-exec")));
static __thread uint64_t rng_state __attribute__((tls_model("initial-exec")));
static __thread uint64_t last_loop_ns __attribute__((tls_model("initial-exec")));
static __thread pid_t my_tid __attribute__((tls_model("initial-exec")));

static inline pid_t self_tid(void)
{
    if (__builtin_expect(!my_tid, 0))
        my_tid = (pid_t)syscall(SYS_gettid);
    return my_tid;
}

static void resolve(void)
{
    real_fsync = (fsync_fn)dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = (fsync_fn)dlsym(RTLD_NEXT, "fdatasync");
    real_write = (write_fn)dlsym(RTLD_NEXT, "write");
    real_read = (read_fn)dlsym(RTLD_NEXT, "read");
    real_pwrite = (pwrite_fn)dlsym(RTLD_NEXT, "pwrite");
    real_pwrite64 = (pwrite_fn)dlsym(RTLD_NEXT, "pwrite64");
    real_writev = (writev_fn)dlsym(RTLD_NEXT, "writev");
    real_epoll_wait = (epoll_wait_fn)dlsym(RTLD_NEXT, "epoll_wait");
    real_close_range = (close_range_fn)dlsym(RTLD_NEXT, "close_range");
    real_fclose = (fclose_fn)dlsym(RTLD_NEXT, "fclose");
    real_dup = (dup_fn)dlsym(RTLD_NEXT, "dup");
    real_dup2 = (dup2_fn)dlsym(RTLD_NEXT, "dup2");
    real_dup3 = (dup3_fn)dlsym(RTLD_NEXT, "dup3");
    real_fcntl = (fcntl_fn)dlsym(RTLD_NEXT, "fcntl");
    real_accept = (accept_fn)dlsym(RTLD_NEXT, "accept");
    real_accept4 = (accept4_fn)dlsym(RTLD_NEXT, "accept4");
    /* last: the constructor resolves everything once when real_close is unset */
    real_close = (close_fn)dlsym(RTLD_NEXT, "close");
}

/* Recording is on: a region is mapped, this is not a fork child, and valkeytrace has not paused
 * it (it pauses the shim for the untraced half of --measure-overhead). */
static inline int recording(void)
{
    return region != NULL && !recording_disabled && !__atomic_load_n(&region->paused, __ATOMIC_RELAXED);
}

/* A kind valkeytrace asked to pass through untimed (socket writes, unless record --socket-writes) */
static inline int untimed(int kind)
{
    return (__atomic_load_n(&region->untimed, __ATOMIC_RELAXED) >> kind) & 1;
}

/* The delay valkeytrace adds at run time (record --fsync-sensitivity), on top of the emulation */
static inline uint64_t extra_delay(void)
{
    return region ? __atomic_load_n(&region->extra_delay_ns, __ATOMIC_RELAXED) : 0;
}

static inline int timed(int kind)
{
    return recording() && !untimed(kind);
}

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void child_after_fork(void)
{
    vt_offload_after_fork_child();
    recording_disabled = 1; /* the AOF-rewrite child must not write into the parent's slots */
    my_tid = 0;             /* the child's only thread has a new tid */
}

/* "const:4000000" or "lognormal:4000000,0.3" (nanoseconds). Anything else: no injection. */
static void parse_delay(const char *spec)
{
    char *end;
    if (!spec)
        return;
    if (strncmp(spec, "const:", 6) == 0) {
        unsigned long long v = strtoull(spec + 6, &end, 10);
        if (end != spec + 6 && *end == '\0' && v > 0) {
            delay_ns = v;
            delay_kind = 1;
        }
    } else if (strncmp(spec, "lognormal:", 10) == 0) {
        unsigned long long v = strtoull(spec + 10, &end, 10);
        if (end != spec + 10 && *end == ',') {
            double sigma = strtod(end + 1, &end);
            if (*end == '\0' && v > 0 && sigma >= 0) {
                delay_ns = v;
                delay_sigma = sigma;
                delay_kind = 2;
            }
        }
    }
}

/* A file valkeytrace made, mapped shared (read-write) when it holds at least min_size bytes; NULL
 * otherwise. *size gets its size. Also the virtual offload's statistics file (offload.c). */
void *vt_map_shared(const char *path, size_t min_size, size_t *size)
{
    struct stat st;
    int fd;
    void *p = NULL;
    if (!path || !*path)
        return NULL;
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= min_size) {
        p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        *size = (size_t)st.st_size;
    }
    real_close(fd);
    return p == MAP_FAILED ? NULL : p;
}

static void map_region(const char *path)
{
    size_t size = 0;
    void *p = vt_map_shared(path, sizeof(struct vt_shim_header) + VT_SHIM_MAX_THREADS * sizeof(struct vt_shim_thread),
                            &size);
    if (!p)
        return;
    struct vt_shim_header *h = (struct vt_shim_header *)p;
    /* valkeytrace wrote the header: refuse a region of another layout rather than corrupt it */
    if (h->magic != VT_SHIM_MAGIC || h->version != VT_SHIM_VERSION || h->max_threads != VT_SHIM_MAX_THREADS ||
        h->hist_buckets != VT_HIST_BUCKETS || h->thread_size != sizeof(struct vt_shim_thread)) {
        munmap(p, size);
        return;
    }
    h->pid = (vt_u32)getpid();
    h->inject_delay_ns = delay_ns;
    slots = (struct vt_shim_thread *)(h + 1);
    region = h;
}

__attribute__((constructor)) static void shim_init(void)
{
    if (!real_close)
        resolve();
    main_pid = getpid();
    parse_delay(getenv("VALKEYTRACE_FSYNC_DELAY"));
    map_region(getenv("VALKEYTRACE_SHM"));
    if (vt_offload_init() || region)
        pthread_atfork(NULL, NULL, child_after_fork);
}

static inline struct vt_shim_thread *slot(void)
{
    struct vt_shim_thread *s = my_slot;
    if (__builtin_expect(s != NULL, 1))
        return s;
    if (!region || recording_disabled || my_slot_failed)
        return NULL;
    uint32_t i = __atomic_fetch_add(&region->nthreads, 1, __ATOMIC_RELAXED);
    if (i >= VT_SHIM_MAX_THREADS) {
        my_slot_failed = 1;
        return NULL;
    }
    s = &slots[i];
    s->tid = (vt_u32)self_tid();
    prctl(PR_GET_NAME, (unsigned long)s->name, 0, 0, 0); /* async-signal-safe syscall */
    __atomic_store_n(&s->claimed, 1, __ATOMIC_RELEASE);
    my_slot = s;
    return s;
}

static inline void record(int kind, uint64_t dur_ns, uint64_t bytes)
{
    struct vt_shim_thread *s;
    struct vt_hist *h;
    if (__builtin_expect(!timed(kind), 0))
        return;
    s = slot();
    if (!s) {
        __atomic_fetch_add(&region->dropped_calls, 1, __ATOMIC_RELAXED);
        return;
    }
    h = &s->hist[kind];
    __atomic_fetch_add(&h->buckets[vt_hist_bucket_index(dur_ns)], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&h->sum_ns, dur_ns, __ATOMIC_RELAXED);
    if (dur_ns > __atomic_load_n(&h->max_ns, __ATOMIC_RELAXED))
        __atomic_store_n(&h->max_ns, dur_ns, __ATOMIC_RELAXED);
    /* count last: a reader that sees count sees the bucket */
    __atomic_fetch_add(&h->count, 1, __ATOMIC_RELEASE);
    if (bytes)
        __atomic_fetch_add(&s->bytes[kind], bytes, __ATOMIC_RELAXED);
}

/* xorshift64*: per-thread, no locks, no libc state */
static inline double uniform01(void)
{
    uint64_t x = rng_state;
    if (!x)
        x = 0x9E3779B97F4A7C15ull ^ ((uint64_t)self_tid() << 17) ^ now_ns();
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return ((x * 0x2545F4914F6CDD1Dull) >> 11) * (1.0 / 9007199254740992.0);
}

static void inject_delay(void)
{
    uint64_t ns = 0, extra = extra_delay();
    struct timespec req, rem;
    if (!delay_kind && !extra)
        return;
    if (delay_kind == 1)
        ns = delay_ns;
    if (delay_kind == 2) {
        double u1 = uniform01(), u2 = uniform01();
        if (u1 < 1e-300)
            u1 = 1e-300;
        double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        ns = (uint64_t)((double)delay_ns * exp(delay_sigma * z));
    }
    ns += extra;
    req.tv_sec = (time_t)(ns / 1000000000ull);
    req.tv_nsec = (long)(ns % 1000000000ull);
    while (clock_nanosleep(CLOCK_MONOTONIC, 0, &req, &rem) == EINTR)
        req = rem;
    if (recording()) {
        struct vt_shim_thread *s = slot();
        if (s)
            __atomic_fetch_add(&s->injected_ns, ns, __ATOMIC_RELAXED);
    }
}

static inline int classify(int fd)
{
    struct stat st;
    int c;
    if (fd < 0 || fd >= FD_CACHE)
        return (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) ? FD_REGULAR : FD_OTHER;
    c = __atomic_load_n(&fd_class[fd], __ATOMIC_RELAXED);
    if (c != FD_UNKNOWN)
        return c;
    c = (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) ? FD_REGULAR : FD_OTHER;
    __atomic_store_n(&fd_class[fd], (uint8_t)c, __ATOMIC_RELAXED);
    return c;
}

static inline int write_kind(int fd)
{
    return classify(fd) == FD_REGULAR ? VT_CALL_AOF_WRITE : VT_CALL_SOCKET_WRITE;
}

#define ENSURE(fn)              \
    do {                        \
        if (__builtin_expect(!(fn), 0)) \
            resolve();          \
    } while (0)

static int timed_sync(fsync_fn fn, int fd, int kind)
{
    uint64_t t0;
    int ret, saved;
    if (!delay_kind && !timed(kind) && !extra_delay())
        return fn(fd);
    t0 = now_ns();
    ret = fn(fd);
    saved = errno;
    inject_delay();
    record(kind, now_ns() - t0, 0);
    errno = saved;
    return ret;
}

/* The real call and the emulated delay: what the eBPF backend probes as the call (its uprobes
 * are on these two symbols, tracers/ebpf_plan.py SHIM_SYMBOLS), so that a call the virtual
 * offload takes from the main thread (in fdatasync/fsync below) is no call at all to it, and the
 * offload thread's, made through here, is timed whole. noinline: the uprobe is at the entry. */
EXPORT __attribute__((noinline)) int vt_shim_fdatasync(int fd)
{
    ENSURE(real_fdatasync);
    return timed_sync(real_fdatasync, fd, VT_CALL_FDATASYNC);
}

EXPORT __attribute__((noinline)) int vt_shim_fsync(int fd)
{
    ENSURE(real_fsync);
    return timed_sync(real_fsync, fd, VT_CALL_FSYNC);
}

EXPORT int fdatasync(int fd)
{
    if (__builtin_expect(vt_offload_enabled(), 0) && vt_offload_sync(fd))
        return 0; /* the virtual offload's: the main thread goes on */
    return vt_shim_fdatasync(fd);
}

EXPORT int fsync(int fd)
{
    if (__builtin_expect(vt_offload_enabled(), 0) && vt_offload_sync(fd))
        return 0;
    return vt_shim_fsync(fd);
}

/* read: only under the durable virtual offload, which notes the write commands clients send */
EXPORT ssize_t read(int fd, void *buf, size_t count)
{
    ssize_t ret;
    int saved;
    ENSURE(real_read);
    if (__builtin_expect(!vt_offload_enabled(), 1))
        return real_read(fd, buf, count);
    ret = real_read(fd, buf, count);
    saved = errno;
    vt_offload_read(fd, buf, ret);
    errno = saved;
    return ret;
}

EXPORT ssize_t write(int fd, const void *buf, size_t count)
{
    uint64_t t0;
    ssize_t ret;
    int saved, kind;
    ENSURE(real_write);
    if (__builtin_expect(vt_offload_enabled(), 0) && vt_offload_write(fd, buf, count, &ret))
        return ret;
    if (!recording() || untimed(kind = write_kind(fd)))
        return real_write(fd, buf, count);
    t0 = now_ns();
    ret = real_write(fd, buf, count);
    saved = errno;
    record(kind, now_ns() - t0, ret > 0 ? (uint64_t)ret : 0);
    errno = saved;
    return ret;
}

static ssize_t timed_pwrite(pwrite_fn fn, int fd, const void *buf, size_t count, off_t off)
{
    uint64_t t0;
    ssize_t ret;
    int saved, kind;
    if (!recording() || untimed(kind = write_kind(fd)))
        return fn(fd, buf, count, off);
    t0 = now_ns();
    ret = fn(fd, buf, count, off);
    saved = errno;
    record(kind, now_ns() - t0, ret > 0 ? (uint64_t)ret : 0);
    errno = saved;
    return ret;
}

EXPORT ssize_t pwrite(int fd, const void *buf, size_t count, off_t off)
{
    ENSURE(real_pwrite);
    return timed_pwrite(real_pwrite, fd, buf, count, off);
}

EXPORT ssize_t pwrite64(int fd, const void *buf, size_t count, off_t off)
{
    ENSURE(real_pwrite64);
    return timed_pwrite(real_pwrite64, fd, buf, count, off);
}

EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
    uint64_t t0;
    ssize_t ret;
    int saved, kind;
    ENSURE(real_writev);
    if (__builtin_expect(vt_offload_enabled(), 0) && vt_offload_writev(fd, iov, iovcnt, &ret))
        return ret;
    if (!recording() || untimed(kind = write_kind(fd)))
        return real_writev(fd, iov, iovcnt);
    t0 = now_ns();
    ret = real_writev(fd, iov, iovcnt);
    saved = errno;
    record(kind, now_ns() - t0, ret > 0 ? (uint64_t)ret : 0);
    errno = saved;
    return ret;
}

/* epoll_wait on the main thread: idle time, and event-loop iterations (return -> return) */
EXPORT int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
    uint64_t t0, t1;
    int ret, saved;
    ENSURE(real_epoll_wait);
    if (!timed(VT_CALL_EPOLL_WAIT))
        return real_epoll_wait(epfd, events, maxevents, timeout);
    t0 = now_ns();
    ret = real_epoll_wait(epfd, events, maxevents, timeout);
    saved = errno;
    t1 = now_ns();
    record(VT_CALL_EPOLL_WAIT, t1 - t0, 0);
    if (self_tid() == main_pid) {
        if (last_loop_ns)
            record(VT_CALL_LOOP_ITERATION, t1 - last_loop_ns, 0);
        last_loop_ns = t1;
    }
    errno = saved;
    return ret;
}

/* fd's number may now name another file: classify it again at its next write */
static inline void forget_fd(int fd)
{
    if (fd >= 0 && fd < FD_CACHE)
        __atomic_store_n(&fd_class[fd], FD_UNKNOWN, __ATOMIC_RELAXED);
    vt_offload_forget(fd); /* the virtual offload's own classes too (offload.c) */
}

EXPORT int close(int fd)
{
    ENSURE(real_close);
    if (__builtin_expect(vt_offload_enabled(), 0))
        vt_offload_close(fd); /* what it has queued or held goes first */
    forget_fd(fd);
    return real_close(fd);
}

EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
    int ret, saved;
    ENSURE(real_close);
    if (!real_close_range) {
        errno = ENOSYS;
        return -1;
    }
    ret = real_close_range(first, last, flags);
    saved = errno;
    if (ret == 0)
        for (unsigned int fd = first; fd <= last && fd < FD_CACHE; fd++)
            forget_fd((int)fd);
    errno = saved;
    return ret;
}

EXPORT int fclose(FILE *fp)
{
    ENSURE(real_close);
    if (fp)
        forget_fd(fileno(fp)); /* before: the number may be reused as soon as it is closed */
    return real_fclose(fp);
}

EXPORT int dup(int oldfd)
{
    int ret;
    ENSURE(real_close);
    ret = real_dup(oldfd);
    forget_fd(ret);
    return ret;
}

EXPORT int dup2(int oldfd, int newfd)
{
    ENSURE(real_close);
    if (oldfd != newfd)
        forget_fd(newfd);
    return real_dup2(oldfd, newfd);
}

EXPORT int dup3(int oldfd, int newfd, int flags)
{
    ENSURE(real_close);
    forget_fd(newfd);
    return real_dup3(oldfd, newfd, flags);
}

static int fcntl_with(fcntl_fn fn, int fd, int cmd, void *arg)
{
    int ret = fn(fd, cmd, arg);
    if (ret >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC))
        forget_fd(ret); /* errno untouched: forget_fd makes no call */
    return ret;
}

/* fcntl's third argument is an int or a pointer: passed on as one machine word, as glibc does */
EXPORT int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    void *arg;
    ENSURE(real_close);
    va_start(ap, cmd);
    arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl_with(real_fcntl, fd, cmd, arg);
}

/* glibc's fcntl64 is fcntl on LP64 (the same syscall, the same argument): one wrapper, two names */
EXPORT int fcntl64(int fd, int cmd, ...) __attribute__((alias("fcntl")));

/* accept and accept4: the new connection's number may be one closed behind our back */
EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    int ret;
    ENSURE(real_close);
    ret = flags || !real_accept ? real_accept4(fd, addr, len, flags) : real_accept(fd, addr, len);
    forget_fd(ret);
    return ret;
}

EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
    return accept4(fd, addr, len, 0);
}
