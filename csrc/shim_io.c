/*
 * shim_io.c: the shim's timed I/O path (shim_io.h).
 *
 * Per thread, log-linear latency histograms (valkeytrace.h) in a shared-memory region valkeytrace
 * reads live:
 *   - $VALKEYTRACE_SHM: path of the region (made by valkeytrace, mode 0600). Unset: nothing
 *     is recorded.
 *   - $VALKEYTRACE_FSYNC_DELAY: emulated slow disk, added after each real fsync/fdatasync by
 *     sleeping (never spinning): "const:NS" or "lognormal:MEDIAN_NS,SIGMA" (a draw clamped to 8
 *     sigmas, any delay to a minute), then optionally ";stall:S_NS/P_NS" (a disk that stalls: once in
 *     every P of wall time, the first sync at or after its time takes S more), then ";blocks-writes". Unset: none.
 *   - $VALKEYTRACE_FSYNC_ERROR: "eio@N" or "enospc@N": the Nth fsync/fdatasync fails with that error
 *     (nothing synced), as a failing disk's would (record --inject-fsync-error).
 *   The region's header may add a delay of its own while the server runs (extra_delay_ns, set by
 *   valkeytrace for record --fsync-sensitivity), with or without $VALKEYTRACE_FSYNC_DELAY.
 *
 * It runs inside a production server, so on the hot path: errno and return values are
 * preserved; no allocation, no locks (a thread claims its slot once with an atomic increment,
 * then is the slot's only writer; counters use relaxed atomics so a signal handler interrupting
 * a wrapper on the same thread cannot tear them); after fork() the child (the AOF rewrite)
 * records nothing. Writes are told apart by fd: regular files (the AOF) vs the rest (sockets,
 * pipes), classified once per fd with fstat and cached until that fd number is closed or handed
 * out again. valkeytrace can leave kinds untimed (the header's `untimed` mask): by default socket
 * writes, the bulk of the calls under a GET load (~33K/s here), pass straight through.
 */
#define _GNU_SOURCE
#include "shim_io.h"
#include "shim_durable.h"
#include "shim_stall.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "valkeytrace.h"

#define FD_CACHE VT_MAX_FD
#define FD_UNKNOWN 0
#define FD_REGULAR 1
#define FD_OTHER 2

static struct vt_shim_header *region;       /* NULL: not recording */
static struct vt_shim_thread *slots;
static volatile int recording_disabled;      /* set in a fork child */
static pid_t main_pid;

static int delay_kind; /* 0 none, 1 constant, 2 lognormal */
static uint64_t delay_ns;
static double delay_sigma;
#define MAX_DELAY_NS 60000000000ull /* an injected delay is clamped to a minute */
#define MAX_Z 8.0                   /* and a log-normal draw to 8 sigmas either side */

/* --inject-fsync-error: the error_at-th fdatasync/fsync fails with error_errno instead of syncing */
static uint64_t error_at;
static int error_errno;
static uint64_t sync_calls;

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

struct vt_real vt_real;

void vt_io_resolve(void)
{
    struct vt_real r;
    r.fsync = (fsync_fn)dlsym(RTLD_NEXT, "fsync");
    r.fdatasync = (fsync_fn)dlsym(RTLD_NEXT, "fdatasync");
    r.write = (write_fn)dlsym(RTLD_NEXT, "write");
    r.read = (read_fn)dlsym(RTLD_NEXT, "read");
    r.pwrite = (pwrite_fn)dlsym(RTLD_NEXT, "pwrite");
    r.pwrite64 = (pwrite_fn)dlsym(RTLD_NEXT, "pwrite64");
    r.writev = (writev_fn)dlsym(RTLD_NEXT, "writev");
    r.epoll_wait = (epoll_wait_fn)dlsym(RTLD_NEXT, "epoll_wait");
    r.epoll_ctl = (epoll_ctl_fn)dlsym(RTLD_NEXT, "epoll_ctl");
    r.close_range = (close_range_fn)dlsym(RTLD_NEXT, "close_range");
    r.fclose = (fclose_fn)dlsym(RTLD_NEXT, "fclose");
    r.dup = (dup_fn)dlsym(RTLD_NEXT, "dup");
    r.dup2 = (dup2_fn)dlsym(RTLD_NEXT, "dup2");
    r.dup3 = (dup3_fn)dlsym(RTLD_NEXT, "dup3");
    r.fcntl = (fcntl_fn)dlsym(RTLD_NEXT, "fcntl");
    r.accept = (accept_fn)dlsym(RTLD_NEXT, "accept");
    r.accept4 = (accept4_fn)dlsym(RTLD_NEXT, "accept4");
    r.close = (close_fn)dlsym(RTLD_NEXT, "close");
    vt_real = r;
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

void vt_io_after_fork_child(void)
{
    recording_disabled = 1; /* the AOF-rewrite child must not write into the parent's slots */
    my_tid = 0;             /* the child's only thread has a new tid */
}

int vt_io_recording(void) { return region != NULL; }

/* "const:4000000" or "lognormal:4000000,0.3" (nanoseconds), either (or "none") followed by
 * ";stall:1000000000/2500000000": once in every 2.5 s of wall time, one sync 1 s longer (a disk that
 * stalls), then optionally ";blocks-writes" (writes to a file wait while its sync runs, shim_stall.h).
 * Anything else: no injection. */
static void parse_delay(const char *env)
{
    char *end, spec[160];
    const char *stall;
    if (!env || strlen(env) >= sizeof(spec))
        return;
    strcpy(spec, env);
    if ((stall = strstr(spec, ";blocks-writes")) != NULL && stall[14] == '\0') {
        spec[stall - spec] = '\0'; /* last: a disk that blocks writes during its sync (shim_stall.h) */
        vt_blocks_writes_setup();
    }
    if ((stall = strstr(spec, ";stall:")) != NULL) {
        spec[stall - spec] = '\0';
        unsigned long long s = strtoull(stall + 7, &end, 10), p = 0;
        if (end != stall + 7 && *end == '/')
            p = strtoull(end + 1, &end, 10);
        if (*end == '\0' && s > 0 && p > 0)
            vt_stall_setup(s, p, MAX_DELAY_NS); /* shim_stall.c: once in every p of wall time, a sync s longer */
    }
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

/* "eio@100" or "enospc@100": the 100th sync call fails with EIO (ENOSPC). Anything else: none. */
static void parse_error(const char *spec)
{
    char *end;
    const char *at;
    if (!spec || !(at = strchr(spec, '@')))
        return;
    unsigned long long n = strtoull(at + 1, &end, 10);
    if (end == at + 1 || *end != '\0' || n == 0)
        return;
    if (at - spec == 3 && strncmp(spec, "eio", 3) == 0)
        error_errno = EIO;
    else if (at - spec == 6 && strncmp(spec, "enospc", 6) == 0)
        error_errno = ENOSPC;
    else
        return;
    error_at = n;
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
    vt_real.close(fd);
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

void vt_io_init(void)
{
    VT_ENSURE(vt_real.close);
    main_pid = getpid();
    parse_delay(getenv("VALKEYTRACE_FSYNC_DELAY"));
    parse_error(getenv("VALKEYTRACE_FSYNC_ERROR"));
    map_region(getenv("VALKEYTRACE_SHM"));
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
    long stall;
    uint64_t ns = 0, extra = extra_delay() + vt_stall_take(&stall);
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
        z = z > MAX_Z ? MAX_Z : z < -MAX_Z ? -MAX_Z : z;
        double v = (double)delay_ns * exp(delay_sigma * z);
        ns = v >= (double)MAX_DELAY_NS ? MAX_DELAY_NS : (uint64_t)v; /* no cast of a value past the range */
    }
    ns = ns + extra > MAX_DELAY_NS || ns + extra < ns ? MAX_DELAY_NS : ns + extra;
    req.tv_sec = (time_t)(ns / 1000000000ull);
    req.tv_nsec = (long)(ns % 1000000000ull);
    while (clock_nanosleep(CLOCK_MONOTONIC, 0, &req, &rem) == EINTR)
        req = rem;
    vt_stall_done(stall);
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

/* ;blocks-writes: a write to a regular file waits while a sync of that file runs (shim_stall.h) */
#define BLOCKED_BY_SYNC(fd) (vt_blocks_writes() && classify(fd) == FD_REGULAR ? vt_write_wait_syncs(fd) : (void)0)

static inline int write_kind(int fd)
{
    return classify(fd) == FD_REGULAR ? VT_CALL_AOF_WRITE : VT_CALL_SOCKET_WRITE;
}

static int timed_sync(fsync_fn fn, int fd, int kind)
{
    uint64_t t0;
    int ret, saved;
    if (!delay_kind && !vt_stall_configured() && !timed(kind) && !extra_delay() && !error_at)
        return fn(fd);
    long blocking = vt_sync_blocks_begin(fd); /* ;blocks-writes: writes to its file wait until it ends */
    t0 = now_ns();
    if (error_at && __atomic_add_fetch(&sync_calls, 1, __ATOMIC_RELAXED) == error_at) {
        errno = error_errno; /* the disk said no: the call fails, nothing was synced */
        ret = -1;
    } else {
        ret = fn(fd);
    }
    saved = errno;
    inject_delay();
    vt_sync_blocks_end(blocking);
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
    VT_ENSURE(vt_real.fdatasync);
    uint64_t ino = vt_dur_sync_begin(fd); /* record --verify-durability power-cut (shim_durable.c) */
    int ret = timed_sync(vt_real.fdatasync, fd, VT_CALL_FDATASYNC);
    vt_dur_sync_end(ino, ret);
    return ret;
}

EXPORT __attribute__((noinline)) int vt_shim_fsync(int fd)
{
    VT_ENSURE(vt_real.fsync);
    uint64_t ino = vt_dur_sync_begin(fd);
    int ret = timed_sync(vt_real.fsync, fd, VT_CALL_FSYNC);
    vt_dur_sync_end(ino, ret);
    return ret;
}

ssize_t vt_io_write(int fd, const void *buf, size_t count)
{
    uint64_t t0;
    ssize_t ret;
    int saved, kind;
    VT_ENSURE(vt_real.write);
    if (!recording() || untimed(kind = write_kind(fd)))
        return BLOCKED_BY_SYNC(fd), vt_real.write(fd, buf, count);
    t0 = now_ns();
    BLOCKED_BY_SYNC(fd);
    ret = vt_real.write(fd, buf, count);
    saved = errno;
    record(kind, now_ns() - t0, ret > 0 ? (uint64_t)ret : 0);
    errno = saved;
    return ret;
}

ssize_t vt_io_pwrite(pwrite_fn fn, int fd, const void *buf, size_t count, off_t off)
{
    uint64_t t0;
    ssize_t ret;
    int saved, kind;
    if (!recording() || untimed(kind = write_kind(fd)))
        return BLOCKED_BY_SYNC(fd), fn(fd, buf, count, off);
    t0 = now_ns();
    BLOCKED_BY_SYNC(fd);
    ret = fn(fd, buf, count, off);
    saved = errno;
    record(kind, now_ns() - t0, ret > 0 ? (uint64_t)ret : 0);
    errno = saved;
    return ret;
}

ssize_t vt_io_writev(int fd, const struct iovec *iov, int iovcnt)
{
    uint64_t t0;
    ssize_t ret;
    int saved, kind;
    VT_ENSURE(vt_real.writev);
    if (!recording() || untimed(kind = write_kind(fd)))
        return BLOCKED_BY_SYNC(fd), vt_real.writev(fd, iov, iovcnt);
    t0 = now_ns();
    BLOCKED_BY_SYNC(fd);
    ret = vt_real.writev(fd, iov, iovcnt);
    saved = errno;
    record(kind, now_ns() - t0, ret > 0 ? (uint64_t)ret : 0);
    errno = saved;
    return ret;
}

/* epoll_wait on the main thread: idle time, and event-loop iterations (return -> return) */
int vt_io_epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
    uint64_t t0, t1;
    int ret, saved;
    VT_ENSURE(vt_real.epoll_wait);
    if (!timed(VT_CALL_EPOLL_WAIT))
        return vt_real.epoll_wait(epfd, events, maxevents, timeout);
    t0 = now_ns();
    ret = vt_real.epoll_wait(epfd, events, maxevents, timeout);
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

void vt_io_forget_fd(int fd)
{
    if (fd >= 0 && fd < FD_CACHE)
        __atomic_store_n(&fd_class[fd], FD_UNKNOWN, __ATOMIC_RELAXED);
}
