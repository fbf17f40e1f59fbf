/*
 * offload.c: the virtual offload, valkey#3381's mechanism emulated on a stock server (record
 * --emulate-offload durable|early-ack; $VALKEYTRACE_OFFLOAD). Part of the shim.
 *
 * The main thread's AOF write() and fdatasync()/fsync() (on an `*.incr.aof` file, the one the
 * server appends to) return at once; the bytes go, in order, to a queue. A thread of the shim,
 * `vt_offload`, takes everything queued when a sync is due (one job in flight; the queue keeps
 * filling meanwhile and the next job takes all of it), writes it and fdatasyncs it through the
 * shim's own wrappers (so the emulated disk delay and every tracer see the call on vt_offload),
 * then marks those bytes durable.
 *
 * durable: a connection that sent a write command (RESP arrays or inline commands naming one of
 * WRITE_COMMANDS, seen in what the server read from it) has its next reply held: the bytes are
 * kept, in order per connection, until every AOF byte queued when the server wrote the reply is
 * durable; then the offload thread writes them to the socket. Any later reply on a connection
 * with held bytes waits behind them. Not emulated: a read of a key written by a batch not yet
 * durable is not held (#3381 holds it); a value that contains a write command's RESP name can
 * make a read count as a write (held, never early).
 * early-ack: nothing is held (the fsync leaves the main thread, SETs are acknowledged before it).
 *
 * Nothing the server would not lose is lost: a connection closed with held bytes gets them first
 * (the close waits up to CLOSE_WAIT_NS), an AOF fd closed with queued bytes waits for them to be
 * durable, and at exit the queue is drained; a reply socket that would block is polled. A fork
 * child (the AOF rewrite) takes nothing.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "offload.h"

#define MAX_FD 65536
#define CLOSE_WAIT_NS 1000000000ull
#define CLASS_UNKNOWN 0
#define CLASS_AOF 1
#define CLASS_SOCKET 2
#define CLASS_OTHER 3
#define AOF_CLOSE_WAIT_NS 30000000000ull

typedef ssize_t (*write_fn)(int, const void *, size_t);

struct chunk {
    struct chunk *next;
    int fd;
    int answers_write; /* a reply to a write command */
    uint64_t seq;      /* AOF: the queue position after these bytes; reply: the position it waits for */
    uint64_t held_ns;
    uint64_t jobs_at_hold;
    size_t len;
    char data[];
};

static int mode;
static pid_t main_pid;
static write_fn raw_write; /* libc's: the released replies bypass every wrapper */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER;
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;
static pthread_t thread;
static int started, stopping;
static struct chunk *aof_head, *aof_tail;   /* queued AOF bytes, not yet in a job */
static struct chunk *held_head, *held_tail; /* held replies, in hold order (their seq never decreases) */
static uint64_t queued, durable, sync_wanted;
static uint8_t fd_class[MAX_FD];
static uint8_t dirty[MAX_FD];     /* durable: a write command was read since the last reply */
static uint16_t held_count[MAX_FD];
static uint64_t held_seq[MAX_FD]; /* the seq of the fd's last held chunk */
static struct vt_offload_stats local_stats;
static struct vt_offload_stats *stats = &local_stats;
static __thread pid_t my_tid;

/* the shim's own wrappers (csrc/shim.c): the emulated delay and the tracers see these calls */
extern ssize_t write(int fd, const void *buf, size_t count);
extern int fdatasync(int fd);

static const char *WRITE_COMMANDS[] = {"SET", "SETEX", "PSETEX", "SETNX", "MSET", "MSETNX", "APPEND", "INCR",
                                       "INCRBY", "DECR", "DECRBY", "DEL", "UNLINK", "LPUSH", "RPUSH", "HSET",
                                       "HMSET", "SADD", "ZADD", "EXPIRE", "GETSET", "GETDEL", "LPOP", "RPOP",
                                       NULL};

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline int on_main_thread(void)
{
    if (!my_tid)
        my_tid = (pid_t)syscall(SYS_gettid);
    return my_tid == main_pid;
}

static void hist_add(struct vt_hist *h, uint64_t v)
{
    h->buckets[vt_hist_bucket_index(v)]++;
    h->sum_ns += v;
    if (v > h->max_ns)
        h->max_ns = v;
    if (!h->min_ns || v < h->min_ns)
        h->min_ns = v;
    __atomic_fetch_add(&h->count, 1, __ATOMIC_RELEASE);
}

int vt_offload_init(void)
{
    const char *m = getenv("VALKEYTRACE_OFFLOAD");
    if (!m)
        return 0;
    mode = strcmp(m, "durable") == 0 ? VT_OFFLOAD_DURABLE : strcmp(m, "early-ack") == 0 ? VT_OFFLOAD_EARLY_ACK : 0;
    if (!mode)
        return 0;
    main_pid = getpid();
    raw_write = (write_fn)dlsym(RTLD_NEXT, "write");
    size_t size = 0;
    void *p = vt_map_shared(getenv("VALKEYTRACE_OFFLOAD_STATS"), sizeof(struct vt_offload_stats), &size);
    if (p)
        stats = (struct vt_offload_stats *)p;
    stats->magic = VT_OFFLOAD_MAGIC;
    stats->version = VT_OFFLOAD_VERSION;
    stats->mode = (vt_u32)mode;
    stats->hist_buckets = VT_HIST_BUCKETS;
    return mode;
}

int vt_offload_enabled(void) { return mode != 0; }

void vt_offload_after_fork_child(void)
{
    mode = 0; /* the child (AOF rewrite, RDB) has no offload thread: it takes nothing */
    my_tid = 0;
}

/* What an fd is: the file the server appends to (multi-part AOF: appendonlydir/<name>.N.incr.aof),
 * a socket (a client connection), or something else; classified once until it is closed */
static int fd_kind(int fd)
{
    char link[64], path[512];
    struct stat st;
    ssize_t n;
    int c = __atomic_load_n(&fd_class[fd], __ATOMIC_RELAXED);
    if (c != CLASS_UNKNOWN)
        return c;
    c = CLASS_OTHER;
    if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) {
        c = CLASS_SOCKET;
    } else if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        n = readlink(link, path, sizeof(path) - 1);
        if (n > 9) {
            path[n] = '\0';
            if (strcmp(path + n - 9, ".incr.aof") == 0)
                c = CLASS_AOF;
        }
    }
    __atomic_store_n(&fd_class[fd], (uint8_t)c, __ATOMIC_RELAXED);
    return c;
}

static int is_aof(int fd) { return fd >= 0 && fd < MAX_FD && fd_kind(fd) == CLASS_AOF; }

static void *offload_main(void *arg);

static void start_locked(void)
{
    if (started)
        return;
    started = 1;
    pthread_create(&thread, NULL, offload_main, NULL);
}

static struct chunk *new_chunk(int fd, size_t len)
{
    struct chunk *c = malloc(sizeof(struct chunk) + len);
    if (c) {
        memset(c, 0, sizeof(*c));
        c->fd = fd;
        c->len = len;
    }
    return c;
}

/* c at the end of the list head..tail */
static void append(struct chunk **head, struct chunk **tail, struct chunk *c)
{
    if (*tail)
        (*tail)->next = c;
    else
        *head = c;
    *tail = c;
}

/* The main thread's AOF bytes: queued, the call returns their length */
static void queue_aof_locked(struct chunk *c)
{
    queued += c->len;
    c->seq = queued;
    append(&aof_head, &aof_tail, c);
    stats->offloaded_writes++;
    start_locked();
}

int vt_offload_sync(int fd)
{
    if (!mode || !on_main_thread() || !is_aof(fd))
        return 0;
    pthread_mutex_lock(&mu);
    sync_wanted = queued;
    stats->offloaded_syncs++;
    start_locked();
    pthread_cond_signal(&work);
    pthread_mutex_unlock(&mu);
    return 1;
}

/* A reply to hold: waits for every AOF byte queued now (the write command's among them: the
 * server appends a command to the AOF before it writes any reply of that loop iteration) */
static void hold_locked(struct chunk *c, int answers_write)
{
    c->answers_write = answers_write;
    c->seq = queued > held_seq[c->fd] ? queued : held_seq[c->fd];
    c->held_ns = now_ns();
    c->jobs_at_hold = stats->jobs;
    held_seq[c->fd] = c->seq;
    held_count[c->fd]++;
    append(&held_head, &held_tail, c);
    stats->held_replies++;
    stats->held_bytes += c->len;
    start_locked();
}

/* 1 when this write is the offload's: an AOF write of the main thread (queued), or a reply on a
 * connection that must wait (held); *ret is what the caller returns */
static int take(int fd, const struct iovec *iov, int iovcnt, ssize_t *ret)
{
    size_t len = 0;
    int aof, answers;
    struct chunk *c;
    if (!mode || fd < 0 || fd >= MAX_FD)
        return 0;
    aof = on_main_thread() && is_aof(fd);
    answers = !aof && mode == VT_OFFLOAD_DURABLE && __atomic_load_n(&dirty[fd], __ATOMIC_ACQUIRE);
    if (!aof && !answers && !__atomic_load_n(&held_count[fd], __ATOMIC_ACQUIRE))
        return 0;
    if (!aof && fd_kind(fd) != CLASS_SOCKET)
        return 0; /* another thread's write to the AOF (none in valkey), or not a client: its own */
    for (int i = 0; i < iovcnt; i++)
        len += iov[i].iov_len;
    c = new_chunk(fd, len);
    if (!c)
        return 0; /* no memory: the call goes through unemulated rather than fail */
    for (int i = 0, off = 0; i < iovcnt; off += (int)iov[i].iov_len, i++)
        memcpy(c->data + off, iov[i].iov_base, iov[i].iov_len);
    pthread_mutex_lock(&mu);
    if (aof) {
        queue_aof_locked(c);
    } else if (answers && !held_count[fd] && queued <= durable) {
        /* every AOF byte, the write command's among them, is durable already: no wait */
        __atomic_store_n(&dirty[fd], 0, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&mu);
        free(c);
        return 0;
    } else if (answers || held_count[fd]) {
        if (answers)
            __atomic_store_n(&dirty[fd], 0, __ATOMIC_RELEASE);
        hold_locked(c, answers);
    } else { /* released meanwhile: straight out, in order */
        pthread_mutex_unlock(&mu);
        free(c);
        return 0;
    }
    pthread_mutex_unlock(&mu);
    *ret = (ssize_t)len;
    return 1;
}

int vt_offload_write(int fd, const void *buf, size_t n, ssize_t *ret)
{
    struct iovec v = {(void *)buf, n};
    return take(fd, &v, 1, ret);
}

int vt_offload_writev(int fd, const struct iovec *iov, int iovcnt, ssize_t *ret)
{
    return iovcnt > 0 && take(fd, iov, iovcnt, ret);
}

/* One command name at p (len bytes): a write command? */
static int names_write(const char *p, size_t len)
{
    for (const char **w = WRITE_COMMANDS; *w; w++)
        if (strlen(*w) == len && strncasecmp(p, *w, len) == 0)
            return 1;
    return 0;
}

/* The commands in a read: RESP arrays ("*N\r\n$L\r\nNAME\r\n") and inline commands ("NAME ...") */
void vt_offload_read(int fd, const void *buf, ssize_t n)
{
    const char *s = buf, *end;
    int found = 0;
    if (mode != VT_OFFLOAD_DURABLE || n <= 0 || fd < 0 || fd >= MAX_FD || fd_kind(fd) != CLASS_SOCKET)
        return;
    end = s + n;
    for (const char *p = s; p < end; p++) {
        if (*p == '*' && (p == s || p[-1] == '\n')) {
            const char *q = memchr(p, '\n', (size_t)(end - p));
            if (!q || q + 1 >= end || q[1] != '$')
                continue;
            long l = strtol(q + 2, NULL, 10);
            const char *r = memchr(q + 1, '\n', (size_t)(end - q - 1));
            if (r && l > 0 && l < 16 && r + 1 + l <= end && names_write(r + 1, (size_t)l))
                found++;
        }
    }
    if (!found && isalpha((unsigned char)s[0])) { /* an inline command */
        const char *sp = s;
        while (sp < end && isalpha((unsigned char)*sp))
            sp++;
        found = names_write(s, (size_t)(sp - s));
    }
    if (found) {
        __atomic_store_n(&dirty[fd], 1, __ATOMIC_RELEASE);
        __atomic_fetch_add(&stats->write_commands, (vt_u64)found, __ATOMIC_RELAXED);
    }
}

/* Write a released reply to its socket, polling while it would block; 0 when the connection
 * failed (its bytes are dropped: the client is gone) */
static int deliver(struct chunk *c)
{
    size_t off = 0;
    int tries = 0;
    while (off < c->len) {
        ssize_t w = raw_write(c->fd, c->data + off, c->len - off);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && tries++ < 100) {
            struct pollfd pfd = {c->fd, POLLOUT, 0};
            poll(&pfd, 1, 10);
            continue;
        }
        return 0;
    }
    return 1;
}

/* Every held reply whose batch is durable now, in hold order */
static void release_locked(void)
{
    uint64_t t = now_ns();
    while (held_head && held_head->seq <= durable) {
        struct chunk *c = held_head;
        uint64_t waited = stats->jobs - c->jobs_at_hold;
        held_head = c->next;
        if (!held_head)
            held_tail = NULL;
        if (deliver(c)) {
            stats->released_replies++;
            if (c->answers_write)
                stats->released_after_write++;
            stats->jobs_waited_sum += waited;
            stats->jobs_waited[waited < VT_OFFLOAD_WAITED_MAX ? waited : VT_OFFLOAD_WAITED_MAX - 1]++;
            hist_add(&stats->hold_ns, t - c->held_ns);
        } else {
            stats->dropped_replies++;
        }
        held_count[c->fd]--;
        free(c);
    }
}

static void *offload_main(void *arg)
{
    prctl(PR_SET_NAME, (unsigned long)"vt_offload", 0, 0, 0);
    pthread_mutex_lock(&mu);
    for (;;) {
        /* a held reply always waits for bytes not yet durable (take() writes the others straight
         * out), so only a sync request starts a job, and every job ends with a release */
        while (!stopping && sync_wanted <= durable)
            pthread_cond_wait(&work, &mu);
        if (stopping && sync_wanted <= durable && queued <= durable)
            break;
        struct chunk *batch = aof_head;
        uint64_t end = queued, t0 = now_ns();
        aof_head = aof_tail = NULL;
        pthread_mutex_unlock(&mu);
        int last_fd = -1;
        uint64_t bytes = 0;
        for (struct chunk *c = batch; c;) {
            struct chunk *next = c->next;
            size_t off = 0;
            if (last_fd >= 0 && c->fd != last_fd)
                fdatasync(last_fd); /* the file changed (AOF rotation): the old one first */
            while (off < c->len) {
                ssize_t w = write(c->fd, c->data + off, c->len - off);
                if (w > 0)
                    off += (size_t)w;
                else if (!(w < 0 && errno == EINTR))
                    break; /* the server would have seen this error; its bytes are lost as its write's */
            }
            bytes += c->len;
            last_fd = c->fd;
            free(c);
            c = next;
        }
        if (last_fd >= 0)
            fdatasync(last_fd);
        pthread_mutex_lock(&mu);
        durable = end;
        stats->jobs++;
        stats->job_bytes += bytes;
        hist_add(&stats->job_ns, now_ns() - t0);
        release_locked();
        pthread_cond_broadcast(&done);
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

/* Wait (lock held) for a job to complete, or until the deadline passes */
static void wait_done_locked(uint64_t deadline_ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t left = deadline_ns > now_ns() ? deadline_ns - now_ns() : 0;
    if (left > 50000000ull)
        left = 50000000ull; /* re-check at least every 50 ms */
    ts.tv_sec += (time_t)((ts.tv_nsec + left) / 1000000000ull);
    ts.tv_nsec = (long)((ts.tv_nsec + left) % 1000000000ull);
    pthread_cond_timedwait(&done, &mu, &ts);
}

void vt_offload_close(int fd)
{
    uint64_t deadline;
    if (!mode || fd < 0 || fd >= MAX_FD)
        return;
    pthread_mutex_lock(&mu);
    deadline = now_ns() + CLOSE_WAIT_NS;
    if (started && fd_class[fd] == CLASS_AOF && queued > durable) {
        uint64_t aof_deadline = now_ns() + AOF_CLOSE_WAIT_NS;
        sync_wanted = queued; /* its bytes reach the file before it closes */
        pthread_cond_signal(&work);
        while (queued > durable && now_ns() < aof_deadline)
            wait_done_locked(aof_deadline);
    }
    while (held_count[fd] && now_ns() < deadline)
        wait_done_locked(deadline);
    if (held_count[fd]) { /* still not durable after CLOSE_WAIT_NS: the connection is going anyway */
        struct chunk **pp = &held_head, *prev = NULL;
        while (*pp) {
            struct chunk *c = *pp;
            if (c->fd == fd) {
                *pp = c->next;
                if (held_tail == c)
                    held_tail = prev;
                stats->dropped_replies++;
                free(c);
            } else {
                prev = c;
                pp = &c->next;
            }
        }
        held_count[fd] = 0;
    }
    dirty[fd] = 0;
    held_seq[fd] = 0;
    fd_class[fd] = CLASS_UNKNOWN;
    pthread_mutex_unlock(&mu);
}

void vt_offload_forget(int fd)
{
    if (fd >= 0 && fd < MAX_FD)
        __atomic_store_n(&fd_class[fd], CLASS_UNKNOWN, __ATOMIC_RELAXED);
}

/* At exit: what was queued reaches the file, what was held reaches its client */
__attribute__((destructor)) static void offload_drain(void)
{
    if (!mode || !started || getpid() != main_pid)
        return;
    pthread_mutex_lock(&mu);
    sync_wanted = queued;
    stopping = 1;
    pthread_cond_signal(&work);
    pthread_mutex_unlock(&mu);
    pthread_join(thread, NULL);
}
